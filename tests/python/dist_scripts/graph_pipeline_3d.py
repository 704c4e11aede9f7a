"""Run under mpirun on 4 or 8 ranks: a pipelined graph whose stages are
data parallel (4 ranks: 2 stages of 2 ranks each, the batch split) or data
and tensor parallel (8 ranks: 2 stages on 2x2 meshes, the batch split over
mesh axis 0 and each transformer block Megatron-sharded over axis 1) gives
the losses and parameters of one process on the whole batch (float64,
rtol 1e-10), with 1F1B, GPipe and zero-bubble over two steps, also when
the batch arrives split over every rank of the job."""
import numpy as np

import meshflow as mf
import meshflow.nn as nn
from layouts import whole

rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
assert world in (4, 8), "run on 4 or 8 ranks"
B, S = mf.sbp.broadcast, mf.sbp.split
E, SEQ, BLOCKS = 8, 5, 2  # per stage
RTOL, ATOL = 1e-10, 1e-12
if world == 8:
    placements = [mf.placement("cpu", [[4 * s, 4 * s + 1], [4 * s + 2, 4 * s + 3]]) for s in range(2)]
    act_sbp, lead, tensor_parallel = (S(0), B), (B,), True
else:
    placements = [mf.placement("cpu", [2 * s, 2 * s + 1]) for s in range(2)]
    act_sbp, lead, tensor_parallel = (S(0),), (), False
nd = len(act_sbp)


class Block(nn.Module):
    """A GPT block: causal self-attention and an MLP, pre-norm."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0, activation="gelu", batch_first=True,
                                                norm_first=True)
        self.register_buffer("mask", mf.triu(mf.full((SEQ, SEQ), float("-inf")), 1))

    def forward(self, x):
        return self.layer(x, src_mask=self.mask)


def stage_modules():
    mf.manual_seed(5)
    stages = [nn.Sequential(*[Block() for _ in range(BLOCKS)]) for _ in range(2)]
    stages[-1].add_module("head", nn.Linear(E, 3))
    return [s.double() for s in stages]


def shard(module, name, sbp):
    setattr(module, name, nn.Parameter(getattr(module, name).detach().to_global(sbp=sbp)))


def megatron(block):
    """Attention's input projection and the first MLP layer column-parallel,
    the output projection and the second MLP layer row-parallel, over the
    last mesh axis."""
    layer = block.layer
    shard(layer.self_attn, "in_proj_weight", lead + (S(0),))
    shard(layer.self_attn, "in_proj_bias", lead + (S(0),))
    shard(layer.self_attn.out_proj, "weight", lead + (S(1),))
    shard(layer.linear1, "weight", lead + (S(0),))
    shard(layer.linear1, "bias", lead + (S(0),))
    shard(layer.linear2, "weight", lead + (S(1),))


class Pipelined(nn.Module):
    def __init__(self, stages):
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def forward(self, x):
        for s, stage in enumerate(self.stages):
            x = stage(x.to_global(placement=placements[s], sbp=act_sbp))
        return x


class Train(mf.nn.Graph):
    def __init__(self, model, opt, kind, m):
        super().__init__()
        self.model = model
        for s, p in enumerate(placements):
            model.stages[s].to(mf.nn.graph.GraphModule).set_stage(s, p)
        self.config.set_gradient_accumulation_steps(m)
        self.config.set_pipeline_schedule(kind)
        self.add_optimizer(opt)

    def build(self, x, y):
        out = self.model(x)
        loss = ((out - y.to_global(placement=placements[-1], sbp=act_sbp)) ** 2).mean()
        loss.backward()
        return loss


rng = np.random.default_rng(3)
xs, ys = rng.standard_normal((16, SEQ, E)), rng.standard_normal((16, SEQ, 3))


def reference(m, steps, lr):
    stages = stage_modules()
    params = [p for s in stages for p in s.parameters()]
    opt = mf.optim.SGD(params, lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        per_micro = []
        for xi, yi in zip(mf.tensor(xs).chunk(m, 0), mf.tensor(ys).chunk(m, 0)):
            h = xi
            for s in stages:
                h = s(h)
            loss = ((h - yi) ** 2).mean()
            (loss / m).backward()
            per_micro.append(loss.item())
        losses.append(np.mean(per_micro))
        opt.step()
    return stages, losses


def run(kind, m, steps=2, lr=0.05, inputs_on_all=False):
    ref, ref_losses = reference(m, steps, lr)
    stages = [s.to_global(placements[i], (B,) * nd) for i, s in enumerate(stage_modules())]
    if tensor_parallel:
        for s in stages:
            for module in s:
                if isinstance(module, Block):
                    megatron(module)
    if tensor_parallel:
        assert stages[1][0].layer.linear1.weight.sbp == (B, S(0))
    model = Pipelined(stages)
    g = Train(model, mf.optim.SGD(model.parameters(), lr=lr), kind, m)
    if inputs_on_all:
        # The batch arrives split over every rank of the job: build() boxes it
        # onto the first stage and the targets onto the last (Note [Pipeline
        # schedules in graph mode]: boxing that reads no stage's value runs in
        # every rank's prologue).
        everyone = mf.placement("cpu", list(range(world)))
        x = mf.tensor(xs, placement=everyone, sbp=S(0))
        y = mf.tensor(ys, placement=everyone, sbp=S(0))
    else:
        x = mf.tensor(xs, placement=placements[0], sbp=act_sbp)
        y = mf.tensor(ys, placement=placements[0], sbp=act_sbp)
    for step in range(steps):
        loss = g(x, y)
        if placements[-1].ranks and rank in np.array(placements[-1].ranks).ravel():
            np.testing.assert_allclose(whole(loss), ref_losses[step], rtol=RTOL, atol=ATOL, err_msg=f"{kind} {step}")
    for s in range(2):
        if rank not in np.array(placements[s].ranks).ravel():
            continue
        want = dict(ref[s].named_parameters())
        for name, p in stages[s].named_parameters():
            np.testing.assert_allclose(whole(p), want[name].detach().numpy(), rtol=RTOL, atol=ATOL,
                                       err_msg=f"{kind} stage {s} {name}")


run("1f1b", 4)
run("gpipe", 2)
run("1f1b", 2, inputs_on_all=True)
run("zero_bubble", 4, inputs_on_all=True)
print(f"rank {rank}/{world}: graph pipeline 3d OK", flush=True)
