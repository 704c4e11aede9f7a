"""Run under mpirun (1, 2 or 4 ranks): every eager pipeline schedule gives the
losses and every parameter's gradient of one process on the whole batch, in
float64 (rtol 1e-10): uneven stages, m = p, 2p and a count that is not a
multiple of p, two stages per rank (interleaved, ZBV), tied weights across
stages, dropout (the masks of one process), BatchNorm in a stage, and two
steps with an optimizer between; and a ShardedGradScaler that skips a step
with an inf on every stage."""
import numpy as np

import meshflow as mf
import meshflow.nn as nn
import meshflow.nn.functional as F
from meshflow.distributed import pipelining as pp
from layouts import Embed

rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
RTOL, ATOL = 1e-10, 1e-13
rng = np.random.default_rng(0)


def mlp(layers, dropout=0.0):
    """layers + 1 Linear layers of uneven widths with Tanh between (and
    Dropout(dropout) after each Tanh when asked: one child per layer
    either way, so the same split points cut it)."""
    mf.manual_seed(1)
    widths = [6] + [5 + (k % 3) for k in range(layers)] + [3]
    mods = []
    for k in range(len(widths) - 1):
        mods.append(nn.Linear(widths[k], widths[k + 1]))
        if k < len(widths) - 2:
            mods.append(nn.Sequential(nn.Tanh(), nn.Dropout(dropout)) if dropout else nn.Tanh())
    return nn.Sequential(*mods).double()


class Head(nn.Module):
    """The LM head that reuses the embedding's weight (tied)."""

    def __init__(self, emb):
        super().__init__()
        self.weight = emb.weight

    def forward(self, h):
        return h @ self.weight.t()


def tied_model(blocks):
    mf.manual_seed(2)
    embed = Embed()
    mods = [("embed", embed)]
    for k in range(blocks):
        mods.append((f"block{k}", nn.Sequential(nn.Linear(6, 6), nn.Tanh())))
    mods.append(("head", Head(embed.emb)))
    model = nn.Sequential()
    for name, m in mods:
        model.add_module(name, m)
    return model.double()


def bn_model(stages):
    mf.manual_seed(3)
    mods = []
    for k in range(stages):
        mods += [nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Tanh()]
    mods.append(nn.Linear(4, 2))
    return nn.Sequential(*mods).double()


def reference(build, x, y, loss_fn, m, steps, lr):
    """One process: m micro-batches accumulated (as the pipeline does:
    equal to the whole batch for models without batch statistics)."""
    model = build()
    opt = mf.optim.SGD(model.parameters(), lr=lr)
    all_losses, grads = [], None
    for _ in range(steps):
        opt.zero_grad()
        losses = []
        for xi, yi in zip(x.chunk(m, 0), y.chunk(m, 0)):
            loss = loss_fn(model(xi), yi)
            (loss / m).backward()
            losses.append(loss.item())
        by_storage = {p.data_ptr(): p.grad.numpy().copy() for p in model.parameters()}
        # Every name of a parameter, tied ones included (head.weight).
        grads = {k: by_storage[v.data_ptr()] for k, v in model.state_dict().items() if v.data_ptr() in by_storage}
        all_losses.append(losses)
        opt.step()
    return model, all_losses, grads


def whole_batch_loss(build, x, y, loss_fn):
    return loss_fn(build()(x), y).item()


def run(kind, build, split_points, x, y, loss_fn, m, steps=2, lr=0.1, check_whole=True):
    p = world
    multi = kind in ("interleaved_1f1b", "zbv")
    ref_model, ref_losses, ref_grads = reference(build, x, y, loss_fn, m, steps, lr)
    if check_whole:  # accumulation over micro-batches is the whole batch's step
        np.testing.assert_allclose(np.mean(ref_losses[0]), whole_batch_loss(build, x, y, loss_fn), rtol=RTOL)

    model = build()
    pipe = pp.pipeline(model, split_points=split_points)
    schedule_cls = pp.get_schedule_class(kind)
    layout = pp.make_schedule(kind, p, p if kind == "interleaved_1f1b" else 1, pipe.num_stages // p).stage_rank
    mine = [s for s in range(pipe.num_stages) if layout[s] == rank]
    stages = [pipe.build_stage(s) for s in mine]
    schedule = schedule_cls(stages if multi else stages[0], m, loss_fn=loss_fn)
    params = {}
    for s in mine:
        params.update(dict(pipe.get_stage_module(s).named_parameters()))
    unique = {}
    for param in params.values():  # a tied weight of two stages on this rank once
        unique.setdefault(param.data_ptr(), param)
    opt = mf.optim.SGD(list(unique.values()), lr=lr)
    holds_first, holds_last = 0 in mine, pipe.num_stages - 1 in mine
    for step in range(steps):
        opt.zero_grad()
        losses = []
        if holds_first and holds_last:
            out = schedule.step(x, target=y, losses=losses)
        elif holds_first:
            out = schedule.step(x)
        elif holds_last:
            out = schedule.step(target=y, losses=losses)
        else:
            out = schedule.step()
        if holds_last:
            np.testing.assert_allclose([l.item() for l in losses], ref_losses[step], rtol=RTOL,
                                       err_msg=f"{kind} m={m} losses")
            assert tuple(out.shape)[0] == x.shape[0]
        else:
            assert out is None and losses == []
        if step == steps - 1:
            for name, param in params.items():
                np.testing.assert_allclose(param.grad.numpy(), ref_grads[name], rtol=RTOL, atol=ATOL,
                                           err_msg=f"{kind} m={m} grad {name}")
        opt.step()
    ref_state = ref_model.state_dict()
    for s in mine:
        for key, value in pipe.get_stage_module(s).state_dict().items():
            np.testing.assert_allclose(value.numpy(), ref_state[key].numpy(), rtol=RTOL, atol=ATOL,
                                       err_msg=f"{kind} m={m} state {key}")
    return schedule


def regression_batch(rows):
    return (mf.tensor(rng.standard_normal((rows, 6))), mf.tensor(rng.standard_normal((rows, 3))))


p = world
# Uneven stages: the MLP's 2p+1 Linear layers (4p+1 children) cut at uneven places.
for kind in ("gpipe", "1f1b", "zero_bubble"):
    for m in sorted({p, 2 * p, p + 1}):
        x, y = regression_batch(4 * m)
        children = 4 * p + 1
        cuts = [4 * k - 2 * (k % 2) for k in range(1, p)]  # begins of stages 1..p-1
        assert all(0 < c < children for c in cuts) and len(set(cuts)) == p - 1
        run(kind, lambda: mlp(2 * p), cuts, x, y, F.mse_loss, m)
for kind in ("interleaved_1f1b", "zbv"):
    for m in ([p, 2 * p] if kind == "interleaved_1f1b" else [p, 2 * p, p + 1]):
        x, y = regression_batch(2 * m)
        # 2p stages: the MLP's 2p Linear layers, one per stage.
        run(kind, lambda: mlp(2 * p - 1), [2 * k for k in range(1, 2 * p)], x, y, F.mse_loss, m)

# Dropout: every schedule draws the masks of one process (Note [Random
# counters of a pipelined step]).
for kind in ("gpipe", "1f1b", "zero_bubble", "interleaved_1f1b", "zbv"):
    stages = 2 * p if kind in ("interleaved_1f1b", "zbv") else p
    x, y = regression_batch(4 * p)
    run(kind, lambda: mlp(stages - 1, dropout=0.4), [2 * k for k in range(1, stages)], x, y, F.mse_loss, 2 * p,
        check_whole=False)

# Tied embedding and head on the first and last stage.
ids = mf.tensor(rng.integers(0, 11, (8, 5)))
labels = mf.tensor(rng.integers(0, 11, (8, 5)))


def lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


for kind in ("1f1b", "zero_bubble", "zbv"):
    stages = 2 * p if kind == "zbv" else p
    blocks = stages
    names = ["embed"] + [f"block{k}" for k in range(blocks)] + ["head"]
    # stage 0: embed + block0; stage s: block s; the last: its block + head.
    cuts = [f"block{k}" for k in range(1, stages)]
    pipe = pp.pipeline(tied_model(blocks), split_points=cuts)
    assert pipe.num_stages == stages and (pipe._ties or stages == 1), "the embedding and the head share a weight"
    run(kind, lambda: tied_model(blocks), cuts, ids, labels, lm_loss, p)

# BatchNorm: running statistics as micro-batch accumulation gives them.
for kind in ("gpipe", "1f1b"):
    x = mf.tensor(rng.standard_normal((4 * p, 4)))
    y = mf.tensor(rng.standard_normal((4 * p, 2)))
    run(kind, lambda: bn_model(p), [3 * k for k in range(1, p)], x, y, F.mse_loss, 2 * p, check_whole=False)

# AMP: a ShardedGradScaler agrees on found_inf over the ranks, so an inf in
# the last stage's gradient only skips the step on every stage.
def amp_case():
    from meshflow.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    x, y = regression_batch(4 * p)
    cuts = [2 * k for k in range(1, p)]
    ref_model, _, _ = reference(lambda: mlp(p - 1), x, y, F.mse_loss, p, 1, 0.1)
    pipe = pp.pipeline(mlp(p - 1), split_points=cuts)
    stage = pipe.build_stage(rank)
    scaler = ShardedGradScaler(init_scale=1024.0)
    schedule = pp.Schedule1F1B(stage, p, loss_fn=lambda out, target: scaler.scale(F.mse_loss(out, target)))
    opt = mf.optim.SGD(stage.submod.parameters(), lr=0.1)
    factor = [1.0]
    if rank == p - 1:  # the last Linear's weight gradient times factor
        list(stage.submod.parameters())[-2].register_hook(lambda g: g * factor[0])
    for value in (1.0, float("inf")):
        factor[0] = value
        opt.zero_grad()
        args = [x] if rank == 0 else []
        kwargs = {"target": y} if rank == p - 1 else {}
        schedule.step(*args, **kwargs)
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == (1024.0 if value == 1.0 else 512.0), scaler.get_scale()
    ref_state = ref_model.state_dict()
    for key, value in pipe.get_stage_module(rank).state_dict().items():
        np.testing.assert_allclose(value.numpy(), ref_state[key].numpy(), rtol=RTOL, atol=ATOL, err_msg=f"amp {key}")


amp_case()

# describe() names every rank.
text = pp.Schedule1F1B(pp.pipeline(mlp(p - 1), split_points=[2 * k for k in range(1, p)]).build_stage(rank), p,
                       loss_fn=F.mse_loss).describe()
assert f"rank {p - 1}:" in text and "bubble" in text
print(f"rank {rank}/{world}: pipeline eager OK", flush=True)
