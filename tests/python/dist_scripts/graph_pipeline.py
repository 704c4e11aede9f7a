"""Run under mpirun (2 or 4 ranks): pipelined graphs (GraphModule.set_stage,
config.set_pipeline_schedule) give the losses, parameters and buffers of
one process training on the whole batch, in float64 (rtol 1e-10): every
schedule kind, m = p, 2p and a count that is not a multiple of p where the
kind takes it, uneven stages, two stages per rank (interleaved, ZBV), a
weight tied across stages, dropout (the masks of one process), BatchNorm in
a stage, and two steps with the optimizer between; and each rank's plan
runs its actions in the schedule's order (1F1B plans less memory than
GPipe)."""
import os
import sys

import numpy as np

import meshflow as mf
import meshflow.nn as nn
import meshflow.nn.functional as F
from layouts import Embed

rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
RTOL, ATOL = 1e-10, 1e-13
B = mf.sbp.broadcast
rng = np.random.default_rng(0)


def stage_ranks(kind, p):
    """The rank of each stage, as the schedule lays them out."""
    if kind == "interleaved_1f1b":
        return [s % p for s in range(2 * p)]
    if kind == "zbv":
        return [s if s < p else 2 * p - 1 - s for s in range(2 * p)]
    return list(range(p))


class TiedHead(nn.Module):
    """The LM head that reuses the embedding's weight: the weight stays one
    parameter (on stage 0); this stage takes it with to_global."""

    def __init__(self, embed, placement=None):
        super().__init__()
        self._embed = [embed]  # not a submodule: the weight belongs to stage 0
        self.placement = placement

    def forward(self, h):
        w = self._embed[0].emb.weight
        if self.placement is not None:
            w = w.to_global(placement=self.placement, sbp=B)
        return h @ w.t()


def local_stages(num_stages, *, dropout=False, bn=False, tied=False):
    """One process's model as a list of stage modules: uneven (stage 0 has
    two layers), with dropout / BatchNorm / a tied embedding when asked."""
    mf.manual_seed(7)
    stages = []
    width = 6
    for s in range(num_stages):
        mods = [Embed()] if tied and s == 0 else []
        layers = 2 if s == 0 else 1
        for _ in range(layers):
            mods += [nn.Linear(width, 5 + s % 3), nn.Tanh()]
            width = 5 + s % 3
            if bn:
                mods.append(nn.BatchNorm1d(width))
            if dropout:
                mods.append(nn.Dropout(0.3))
        if s == num_stages - 1:
            mods.append(nn.Linear(width, 6 if tied else 3))
        stages.append(nn.Sequential(*mods).double())
    if tied:
        stages[-1].add_module("head", TiedHead(stages[0][0]))
    return stages


def data(tied, n=120):
    x = rng.integers(0, 11, size=n) if tied else rng.standard_normal((n, 6))
    y = rng.integers(0, 11 if tied else 3, size=n)
    return x, y


def reference(stages, x, y, m, steps, lr, seed, clip=None):
    """One process: the micro-batches accumulated, as the graph does."""
    params = [p for s in stages for p in s.parameters()]
    opt = mf.optim.SGD(params, lr=lr)
    mf.manual_seed(seed)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        per_micro = []
        for xi, yi in zip(x.chunk(m, 0), y.chunk(m, 0)):
            h = xi
            for s in stages:
                h = s(h)
            loss = F.cross_entropy(h, yi)
            (loss / m).backward()
            per_micro.append(loss.item())
        losses.append(np.mean(per_micro))
        if clip is not None:
            mf.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
    return losses


class Pipelined(nn.Module):
    def __init__(self, stages, placements):
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.placements = placements

    def forward(self, x):
        for s, stage in enumerate(self.stages):
            x = stage(x.to_global(placement=self.placements[s], sbp=B))
        return x


class Train(mf.nn.Graph):
    """With a scaler: a grad scaler over the stages, and build()'s third
    input multiplies the last stage's head weight gradient (inf: only that
    stage sees an inf)."""

    def __init__(self, model, opt, kind, m, placements, scaler=None):
        super().__init__()
        self.model = model
        for s, p in enumerate(placements):
            self.model.stages[s].to(mf.nn.graph.GraphModule).set_stage(s, p)
        self.config.set_gradient_accumulation_steps(m)
        self.config.set_pipeline_schedule(kind)
        self.add_optimizer(opt)
        if scaler is not None:
            self.set_grad_scaler(scaler)
        self.last = placements[-1]

    def build(self, x, y, *factor):
        handles = [self.model.stages[-1][-1].weight.register_hook(lambda g: g * factor[0])] if factor else []
        loss = F.cross_entropy(self.model(x), y.to_global(placement=self.last, sbp=B))
        loss.backward()
        for h in handles:
            h.remove()
        return loss


def run(kind, m, *, steps=2, lr=0.1, clip=None, **model_kw):
    ranks_of = stage_ranks(kind, world)
    num_stages = len(ranks_of)
    placements = [mf.placement("cpu", [r]) for r in ranks_of]
    tied = model_kw.get("tied", False)
    xs, ys = data(tied)
    to_tensor = (lambda a: mf.tensor(a)) if tied else (lambda a: mf.tensor(a, dtype=mf.float64))
    seed = 11

    ref = local_stages(num_stages, **model_kw)
    ref_losses = reference(ref, to_tensor(xs), mf.tensor(ys), m, steps, lr, seed, clip)

    stages = local_stages(num_stages, **model_kw)
    if tied:
        stages[-1].head.placement = placements[-1]
    stages = [s.to_global(placements[i], B) for i, s in enumerate(stages)]
    model = Pipelined(stages, placements)
    group = {"params": list(model.parameters())}
    if clip is not None:  # OneFlow's graph clipping: after the last micro-batch, over all stages
        group.update(clip_grad_max_norm=clip, clip_grad_norm_type=2.0)
    opt = mf.optim.SGD([group], lr=lr)
    g = Train(model, opt, kind, m, placements)
    x = mf.tensor(xs, placement=placements[0], sbp=B) if tied else \
        mf.tensor(xs, dtype=mf.float64, placement=placements[0], sbp=B)
    y = mf.tensor(ys, placement=placements[0], sbp=B)
    mf.manual_seed(seed)
    for step in range(steps):
        loss = g(x, y)
        assert loss.is_global and loss.placement == placements[-1]
        if rank == ranks_of[-1]:
            np.testing.assert_allclose(loss.to_local().item(), ref_losses[step], rtol=RTOL, atol=ATOL,
                                       err_msg=f"{kind} m={m} {model_kw} step {step}")
    for s in range(num_stages):
        if ranks_of[s] != rank:
            continue
        got = stages[s].state_dict()
        for name, want in ref[s].state_dict().items():
            np.testing.assert_allclose(got[name].to_local().numpy(), want.numpy(), rtol=RTOL, atol=ATOL,
                                       err_msg=f"{kind} m={m} {model_kw} stage {s} {name}")
    return g


def planned_bytes(kind, m):
    """The memory plan of a wide 1-layer-per-stage model's step."""
    placements = [mf.placement("cpu", [r]) for r in range(world)]
    mf.manual_seed(0)
    stages = [nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 16)).to_global(placements[s], B)
              for s in range(world)]
    model = Pipelined(stages, placements)

    class Step(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            for s in range(world):
                self.model.stages[s].to(mf.nn.graph.GraphModule).set_stage(s, placements[s])
            self.config.set_gradient_accumulation_steps(m)
            self.config.set_pipeline_schedule(kind)
            self.add_optimizer(mf.optim.SGD(model.parameters(), lr=0.01))

        def build(self, x):
            out = self.model(x)
            loss = (out * out).mean()
            loss.backward()
            return loss

    g = Step()
    g(mf.randn(8 * m, 16, placement=placements[0], sbp=B))
    return g.planned_peak_bytes


def run_scaled(kind, m, lr=0.1):
    """Step 1 equals one process's step; step 2 has an inf in the last
    stage's gradient only and is skipped on every stage."""
    ranks_of = stage_ranks(kind, world)
    placements = [mf.placement("cpu", [r]) for r in ranks_of]
    xs, ys = data(False)
    ref = local_stages(len(ranks_of))
    reference(ref, mf.tensor(xs, dtype=mf.float64), mf.tensor(ys), m, 1, lr, 0)
    stages = [s.to_global(placements[i], B) for i, s in enumerate(local_stages(len(ranks_of)))]
    model = Pipelined(stages, placements)
    g = Train(model, mf.optim.SGD(model.parameters(), lr=lr), kind, m, placements, mf.amp.GradScaler(init_scale=1024.0))
    x = mf.tensor(xs, dtype=mf.float64, placement=placements[0], sbp=B)
    y = mf.tensor(ys, placement=placements[0], sbp=B)
    for value in (1.0, float("inf")):
        g(x, y, mf.tensor(value, dtype=mf.float64, placement=placements[-1], sbp=B))
        assert g._grad_scaler.get_scale() == (1024.0 if value == 1.0 else 512.0), g._grad_scaler.get_scale()
    for s in range(len(ranks_of)):
        if ranks_of[s] != rank:
            continue
        got = stages[s].state_dict()
        for name, want in ref[s].state_dict().items():
            np.testing.assert_allclose(got[name].to_local().numpy(), want.numpy(), rtol=RTOL, atol=ATOL,
                                       err_msg=f"scaled {kind} stage {s} {name}")


def layered(num_layers=4):
    """A Sequential of blocks plus a head: each block is marked with its
    stage (OneFlow marks each layer), so the split changes no names."""
    mf.manual_seed(9)
    mods = []
    for _ in range(num_layers):
        mods.append(nn.Sequential(nn.Linear(6, 6), nn.Tanh()))
    mods.append(nn.Linear(6, 3))
    return nn.Sequential(*mods).double()


class LayerTrain(mf.nn.Graph):
    """Stage of each child: stage_of[i]; the child's input moves to its
    stage's placement (a no-op within a stage)."""

    def __init__(self, model, stage_of, placements, m=2):
        super().__init__()
        self.model = model
        self.where = [placements[s] for s in stage_of]
        for i, s in enumerate(stage_of):
            model[i].to(mf.nn.graph.GraphModule).set_stage(s, placements[s])
        self.config.set_gradient_accumulation_steps(m)
        self.add_optimizer(mf.optim.SGD(model.parameters(), lr=0.1))

    def build(self, x, y):
        for child, placement in zip(self.model, self.where):
            x = child(x.to_global(placement=placement, sbp=B))
        loss = F.cross_entropy(x, y.to_global(placement=self.where[-1], sbp=B))
        loss.backward()
        return loss


def pipelined_layers(stage_of):
    placements = [mf.placement("cpu", [r]) for r in range(max(stage_of) + 1)]
    model = layered()
    for i, s in enumerate(stage_of):
        model[i].to_global(placements[s], B)
    return model, LayerTrain(model, stage_of, placements), placements


def checkpoints(directory):
    """A pipelined model saved after a step loads in one process, and into
    another stage split that trains on: both equal one process."""
    xs, ys = data(False)
    ref = layered()
    reference([ref], mf.tensor(xs, dtype=mf.float64), mf.tensor(ys), 2, 2, 0.1, 0)
    after_one = layered()
    reference([after_one], mf.tensor(xs, dtype=mf.float64), mf.tensor(ys), 2, 1, 0.1, 0)

    split_a = [min(i * world // 5, world - 1) for i in range(5)]  # first stages take fewer layers
    split_b = [min((i + 1) * world // 5, world - 1) for i in range(5)]
    model, g, placements = pipelined_layers(split_a)
    g(mf.tensor(xs, dtype=mf.float64, placement=placements[0], sbp=B), mf.tensor(ys, placement=placements[0], sbp=B))
    path = os.path.join(directory, "pipelined.safetensors")
    mf.save(model.state_dict(), path)

    whole = layered()  # one process
    whole.load_state_dict(mf.load(path))
    for name, want in after_one.state_dict().items():
        np.testing.assert_allclose(whole.state_dict()[name].numpy(), want.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=f"checkpoint {name}")
    if rank == 0:  # one process's checkpoint, for the reverse direction
        mf.save(whole.state_dict(), os.path.join(directory, "whole.safetensors"))
    mf.distributed.barrier()

    model_b, g_b, placements_b = pipelined_layers(split_b)
    model_b.load_state_dict(mf.load(os.path.join(directory, "whole.safetensors")))
    g_b(mf.tensor(xs, dtype=mf.float64, placement=placements_b[0], sbp=B),
        mf.tensor(ys, placement=placements_b[0], sbp=B))
    for name, value in model_b.state_dict().items():
        if rank in _ranks_of(value.placement):
            np.testing.assert_allclose(value.to_local().numpy(), ref.state_dict()[name].numpy(), rtol=RTOL, atol=ATOL,
                                       err_msg=f"reloaded {name}")


def _ranks_of(placement):
    return np.array(placement.ranks).ravel().tolist()


p = world
if len(sys.argv) > 1:
    checkpoints(sys.argv[1])
counts = sorted({p, 2 * p, p + 1})
for kind in ("gpipe", "1f1b", "zero_bubble"):
    for m in counts:
        run(kind, m)
run("interleaved_1f1b", p)
run("interleaved_1f1b", 2 * p)
run("zbv", p)
run("zbv", p + 1)
for kind in ("1f1b", "zbv"):
    run(kind, 2 * p, tied=True)
    run(kind, p, dropout=True)
    run(kind, p, bn=True)
g = run("zero_bubble", 2 * p, dropout=True, bn=True)
run("1f1b", 2 * p, clip=0.05)
run("zbv", p, clip=0.05, tied=True)
run_scaled("1f1b", p)
run_scaled("zbv", 2 * p)
assert "zero_bubble" in g.pipeline_schedule() and "rank 0" in g.pipeline_schedule()

if p > 1:
    # 1F1B's first stage holds at most p micro-batches' activations, GPipe's all m.
    gpipe, one_f_one_b = planned_bytes("gpipe", 4 * p), planned_bytes("1f1b", 4 * p)
    if rank == 0:
        assert one_f_one_b < 0.75 * gpipe, (one_f_one_b, gpipe)


def expect_error(match, make, *args, error=ValueError):
    """Every rank raises the same error (they all trace the same program)."""
    try:
        make()(*args)
    except error as e:
        assert match in str(e), (match, str(e))
        return
    raise AssertionError(f"no {error.__name__} matching {match!r}")


def bad_graph(assign, kind="1f1b", m=2, forward=None):
    def make():
        placements = [mf.placement("cpu", [r]) for r in range(world)]
        stages = [nn.Linear(6, 6).double().to_global(placements[s], B) for s in range(world)]
        model = Pipelined(stages, placements)
        if forward is not None:
            model.forward = forward.__get__(model)
        g = Train(model, mf.optim.SGD(model.parameters(), lr=0.1), kind, m, placements)
        assign(model, placements)
        return g
    return make


if p > 1:
    P0, P1 = mf.placement("cpu", [0]), mf.placement("cpu", [1])
    xb = mf.tensor(rng.standard_normal((8, 6)), dtype=mf.float64, placement=P0, sbp=B)
    yb = mf.tensor(rng.integers(0, 3, size=8), placement=P0, sbp=B)

    def twice(model, placements):
        model.stages[1].to(mf.nn.graph.GraphModule).set_stage(0, placements[1])
    expect_error("pipeline stage id 0 is used twice", bad_graph(twice), xb, yb)

    def shared(model, placements):
        model.stages[1].to(mf.nn.graph.GraphModule).set_stage(1, placements[0])
    expect_error("are on one placement", bad_graph(shared), xb, yb)
    expect_error("needs every input's dim 0 to divide into 3 equal micro-batches", bad_graph(lambda *a: None, m=3),
                 xb, yb)

    def skip_to_global(self, x):  # stage 1 gets stage 0's output as it is
        for stage in self.stages:
            x = stage(x)
        return x
    expect_error("got an input on", bad_graph(lambda *a: None, forward=skip_to_global), xb, yb)

    def overlapping(model, placements):
        model.stages[1].to(mf.nn.graph.GraphModule).set_stage(1, mf.placement("cpu", [0, 1]))
    expect_error("must be equal or disjoint", bad_graph(overlapping), xb, yb)

    # Fewer micro-batches than the interleaved schedule needs.
    placements2 = [mf.placement("cpu", [s % world]) for s in range(2 * world)]

    def make_few():
        stages = [nn.Linear(6, 6).double().to_global(placements2[s], B) for s in range(2 * world)]
        model = Pipelined(stages, placements2)
        return Train(model, mf.optim.SGD(model.parameters(), lr=0.1), "interleaved_1f1b", 1, placements2)
    expect_error("multiple of", make_few, xb, yb)

print(f"rank {rank}/{world}: graph pipeline OK", flush=True)
