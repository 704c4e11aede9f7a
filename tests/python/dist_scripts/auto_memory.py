"""Run under mpirun: the auto-parallel memory prediction against the
graph's own memory plan (Note [Predicted memory] in
src/distributed/auto_parallel/memory.cpp). For an MLP, a small GPT, a CNN
and a BERT-style encoder (float32, SGD with momentum) searched on every
rank of the job, the predicted bytes per rank are within 10% of what the
compiled step keeps: its parameters' and optimizer state's shards plus the
planned arena of its values.

Then ZeRO-3 by hand (weights kept split along dim 1, gathered by the
model's forward): backward gathers each weight again rather than holding
it from forward (recompute_elementwise in graph/passes.cpp), and the step
trains to the values of one process (float64)."""
import os
import sys

import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from layouts import MACHINE, LossStep, kept_bytes, shard, step_alongside, whole

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
import models  # noqa: E402

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S = mf.sbp.broadcast, mf.sbp.split
mf.distributed.auto.set_cost_model(MACHINE)
line = mf.placement("cpu", list(range(world)))


def Step(name, model, opt, auto=True):
    return LossStep(model, opt, lambda out, y: models.loss_fn(name, mf, out, y), auto)


def check_memory(name, make, batch):
    mf.manual_seed(0)
    model = make()
    x_np, y_np = batch
    opt = mf.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = Step(name, model, opt)
    x = mf.tensor(x_np).to_global(placement=line, sbp=B).to_global(sbp=S(0))
    y = mf.tensor(y_np).to_global(placement=line, sbp=B).to_global(sbp=S(0))
    for _ in range(2):
        g(x, y)
    predicted = mf.distributed.auto.cost_report(g)["memory"]
    planned = kept_bytes(model, opt) + g.planned_peak_bytes
    error = abs(predicted - planned) / planned
    assert error <= 0.10, (name, world, predicted, planned)
    if rank == 0:
        print(f"{name} on {world}: predicted {predicted / 2**20:.3f} MiB, planned {planned / 2**20:.3f} MiB "
              f"({100 * error:.1f}%)", flush=True)


rng = np.random.default_rng(0)
check_memory("mlp", lambda: models.mlp(mf, in_features=64, hidden=256, classes=10),
             (rng.standard_normal((64, 64)).astype(np.float32), rng.integers(0, 10, size=64)))
check_memory("gpt", lambda: models.gpt(mf, vocab=128, d_model=64, heads=4, layers=2, seq=32),
             models.random_batch("gpt", 8, rng, vocab=128, seq=32))
check_memory("fashion_cnn", lambda: models.fashion_cnn(mf), models.random_batch("fashion_cnn", 8, rng))
check_memory("bert", lambda: models.bert(mf, vocab=128, dim=64, heads=4, layers=2, mlp=128, seq=32),
             models.random_batch("bert", 8, rng, vocab=128, seq=32))

# ZeRO-3 by hand: each weight is kept split along dim 1 and gathered in
# forward (its gather permutes, copies, gathers, permutes back and copies).
# Backward reads the gathered weight again; the graph gathers it anew there
# instead of holding it from forward to backward.
class GatheredLinear(mf.nn.Module):
    def __init__(self, din, dout):
        super().__init__()
        self.weight = mf.nn.Parameter(mf.randn(dout, din, dtype=mf.float64) / din ** 0.5)
        self.bias = mf.nn.Parameter(mf.zeros(dout, dtype=mf.float64))

    def forward(self, x):
        w = self.weight.to_global(sbp=(B,) * len(self.weight.sbp)) if self.weight.is_global else self.weight
        return x @ w.t() + self.bias


if world > 1:
    def make():
        return mf.nn.Sequential(GatheredLinear(16, 32), mf.nn.ReLU(), GatheredLinear(32, 32), mf.nn.ReLU(),
                                GatheredLinear(32, 8))

    mf.manual_seed(1)
    local = make()
    mf.manual_seed(1)
    model = make()
    model.to_global(placement=line, sbp=B)
    for i in (0, 2, 4):
        shard(model[i], "weight", (S(1),))
    local_opt = mf.optim.SGD(local.parameters(), lr=0.05, momentum=0.9)
    opt = mf.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    class Plain(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = F.mse_loss(self.model(x), y)
            loss.backward()
            return loss

    g = Plain()
    data = [(rng.standard_normal((64, 16)), rng.standard_normal((64, 8))) for _ in range(3)]
    for x, y in data:
        step_alongside(local, local_opt, g, x, y, line)
    for (name, p), (_, q) in zip(local.named_parameters(), model.named_parameters()):
        np.testing.assert_allclose(whole(q), p.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
    # The three weights gathered for forward, and the two later ones again
    # for backward (their input gradients; the first layer's is not needed).
    text = str(g._last.executable)
    gathers = text.count("= comm_all_gather(")
    assert gathers == 5, (gathers, text)

print("auto memory OK", flush=True)
