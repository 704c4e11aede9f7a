"""Run under mpirun: graph mode's automatic parallelism
(graph.config.enable_auto_parallel). On hand-built models whose best plan
is known the search returns it: a tall, narrow MLP trains data parallel; a
wide MLP under a memory limit keeps its weights split; on a 2x2 mesh a
model trains data parallel along one axis and tensor parallel along the
other. Each searched plan trains (float64, 3 steps of SGD with momentum and
of Adam) to the values of the same model in one process."""
import os
import sys

import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from layouts import MACHINE, shard, whole

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S, P = mf.sbp.broadcast, mf.sbp.split, mf.sbp.partial_sum
STEPS = 3
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))


# The plans below are checked under a described machine (layouts.MACHINE),
# so that they do not hang on this machine's timing noise; calibrate() is
# checked on its own.
mf.distributed.auto.set_cost_model(MACHINE)


class TrainGraph(mf.nn.Graph):
    def __init__(self, model, opt, memory_limit=0):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.config.enable_auto_parallel(True)
        if memory_limit:
            self.config.set_auto_parallel_memory_limit(memory_limit)

    def build(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        return loss


def mlp(din, dh, dout):
    return mf.nn.Sequential(mf.nn.Linear(din, dh), mf.nn.GELU(), mf.nn.Linear(dh, dout)).to(mf.float64)


def train(make_model, make_opt, batches, mesh, memory_limit=0, input_sbp=None, lay_out=None):
    """Trains the model in one process and as an auto-parallel graph on mesh
    (after lay_out(model), if given); both must give the same losses and
    parameters. Returns the graph."""
    mf.manual_seed(1)
    local = make_model()
    mf.manual_seed(1)
    model = make_model()
    if lay_out is not None:
        lay_out(model)
    local_opt, opt = make_opt(local), make_opt(model)
    local_losses = []
    for x, y in batches:
        local_opt.zero_grad()
        loss = F.mse_loss(local(x), y)
        loss.backward()
        local_opt.step()
        local_losses.append(loss.item())
    g = TrainGraph(model, opt, memory_limit)
    nd = len(mesh.hierarchy)
    sbp = input_sbp or (S(0),) * nd
    losses = []
    for x, y in batches:
        gx = x.to_global(placement=mesh, sbp=(B,) * nd).to_global(sbp=sbp)
        gy = y.to_global(placement=mesh, sbp=(B,) * nd).to_global(sbp=sbp)
        losses.append(float(whole(g(gx, gy))))
    assert g.num_compiled == 1
    np.testing.assert_allclose(losses, local_losses, rtol=1e-12, atol=1e-12)
    for (name, p), (name2, q) in zip(local.named_parameters(), model.named_parameters()):
        assert name == name2 and q.is_global
        np.testing.assert_allclose(whole(q), p.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
    return g


def layouts(g):
    return {p["name"]: p["sbp"] for p in mf.distributed.auto.cost_report(g)["parameters"]}


def batches(n, din, dout, seed=0):
    rng = np.random.default_rng(seed)
    return [(mf.tensor(rng.standard_normal((n, din))), mf.tensor(rng.standard_normal((n, dout))))
            for _ in range(STEPS)]


sgd = lambda m: mf.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)  # noqa: E731
adam = lambda m: mf.optim.Adam(m.parameters(), lr=1e-3)  # noqa: E731
line = mf.placement("cpu", list(range(world)))

# A tall, narrow MLP: the batch is large and the weights small, so data
# parallelism (weights broadcast, the batch split, the gradients all-reduced)
# is the best plan.
for make_opt in (sgd, adam):
    g = train(lambda: mlp(32, 64, 32), make_opt, batches(1024, 32, 32), line)
    if world > 1:
        chosen = layouts(g)
        assert all(s == (B,) for s in chosen.values()), chosen
        report = mf.distributed.auto.cost_report(g)
        matmuls = [c for c in report["calls"] if c["op"] == "addmm"]
        assert all(c["outputs"][0] == (S(0),) for c in matmuls), [c["outputs"] for c in matmuls]
        text = g.auto_parallel_report()
        assert "addmm" in text and "predicted step" in text, text

# A wide MLP with a small batch: its weights are what costs. Under a memory
# limit below a replica of the weights, their gradients and momentum, every
# weight is kept split and used split (tensor parallel: the GEMMs read
# weight shards, none is gathered).
wide = lambda: mlp(64, 1024, 64)  # noqa: E731
replica = 3 * 8 * (64 * 1024 * 2 + 1024 + 64)
g = train(wide, sgd, batches(8, 64, 64, seed=1), line, memory_limit=0.75 * replica if world > 1 else 0)
if world > 1:
    report = mf.distributed.auto.cost_report(g)
    assert report["memory_limit_met"] and report["memory"] <= 0.75 * replica, (report["memory"], replica)
    chosen = layouts(g)
    assert chosen["model.0.weight"] == (S(0),) and chosen["model.2.weight"] == (S(1),), chosen
    weights = [c["inputs"][2] for c in report["calls"] if c["op"] == "addmm"]
    assert all(w[0] != B for w in weights), weights

# A 2x2 mesh and a model with both a large batch and wide weights: the
# batch splits along mesh axis 0 (data parallel) and the weights along axis
# 1, column- then row-parallel (tensor parallel). The search's plan is
# predicted no slower than that hand-written DP x TP plan, which it may
# refine (it may also shard the weights along the data-parallel axis).
if world == 4:
    mesh = mf.placement("cpu", [[0, 1], [2, 3]])
    data = batches(256, 64, 64, seed=2)
    g = train(lambda: mlp(64, 2048, 64), sgd, data, mesh, input_sbp=(S(0), B))
    chosen = layouts(g)
    assert chosen["model.0.weight"][1] == S(0) and chosen["model.2.weight"][1] == S(1), chosen
    report = mf.distributed.auto.cost_report(g)
    outputs = [c["outputs"][0] for c in report["calls"] if c["op"] == "addmm"]
    assert all(o[0] == S(0) for o in outputs), outputs

    def hand_dp_tp(m):
        m.to_global(placement=mesh, sbp=(B, B))
        shard(m[0], "weight", (B, S(0)))
        shard(m[0], "bias", (B, S(0)))
        shard(m[2], "weight", (B, S(1)))

    # Parameters laid out other than broadcast are the user's: kept.
    hand = train(lambda: mlp(64, 2048, 64), sgd, data, mesh, input_sbp=(S(0), B), lay_out=hand_dp_tp)
    assert layouts(hand)["model.0.weight"] == (B, S(0)), layouts(hand)
    hand_report = mf.distributed.auto.cost_report(hand)
    assert report["step_time"] <= hand_report["step_time"] * (1 + 1e-9), (report["step_time"], hand_report["step_time"])

# A small GPT (embeddings, LayerNorm, causal attention, GELU MLP, a
# cross-entropy loss) trains with Adam to the values of one process.
class LMGraph(TrainGraph):
    def build(self, x, y):
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        return loss


def train_gpt():
    import models
    rng = np.random.default_rng(3)
    data = [models.random_batch("gpt", 8, rng, vocab=64, seq=16) for _ in range(STEPS)]
    make = lambda: models.gpt(mf, vocab=64, d_model=32, heads=2, layers=1, seq=16).to(mf.float64)  # noqa: E731
    mf.manual_seed(4)
    local = make()
    mf.manual_seed(4)
    model = make()
    local_opt, opt = adam(local), adam(model)
    local_losses = []
    for x, y in data:
        local_opt.zero_grad()
        logits = local(mf.tensor(x))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), mf.tensor(y).reshape(-1))
        loss.backward()
        local_opt.step()
        local_losses.append(loss.item())
    g = LMGraph(model, opt)
    losses = [float(whole(g(mf.tensor(x).to_global(placement=line, sbp=B).to_global(sbp=S(0)),
                            mf.tensor(y).to_global(placement=line, sbp=B).to_global(sbp=S(0)))))
              for x, y in data]
    np.testing.assert_allclose(losses, local_losses, rtol=1e-12, atol=1e-12)
    for (name, p), (_, q) in zip(local.named_parameters(), model.named_parameters()):
        np.testing.assert_allclose(whole(q), p.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


train_gpt()

# The search is fast: a 24-layer GPT's step (about 2,800 op calls) in
# well under 5 s.
if world == 2:
    import models
    mf.manual_seed(5)
    deep = models.gpt(mf, vocab=64, d_model=32, heads=2, layers=24, seq=16)
    x, y = models.random_batch("gpt", 4, np.random.default_rng(5), vocab=64, seq=16)
    g = LMGraph(deep, adam(deep))
    g(mf.tensor(x).to_global(placement=line, sbp=B).to_global(sbp=S(0)),
      mf.tensor(y).to_global(placement=line, sbp=B).to_global(sbp=S(0)))
    report = mf.distributed.auto.cost_report(g)
    assert len(report["calls"]) > 2000 and report["search_seconds"] < 5, (len(report["calls"]), report["search_seconds"])

# calibrate() measures this machine: its collectives fitted per kind over
# the world, the same numbers on every rank, cached.
if world == 2:
    model = mf.distributed.auto.calibrate(force=True)
    fits = model.collectives()
    for kind in mf.distributed.auto.COLLECTIVES:
        points = fits[kind][2]
        assert len(points) >= 4 and all(t > 0 for _, t in points), (kind, points)
        assert abs(model.collective(kind, 2, points[2][0]) - points[2][1]) <= 1e-12, kind
    mine = mf.distributed.auto.to_dict(model)
    every = [None] * world
    mf.distributed.all_gather_object(every, mine)
    assert all(d == mine for d in every)
    assert mf.distributed.auto.to_dict(mf.distributed.auto.calibrate()) == mine  # from the cache

print(f"rank {rank}: auto parallel OK")
