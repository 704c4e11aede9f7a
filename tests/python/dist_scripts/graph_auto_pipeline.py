"""Run under mpirun (1, 2 or 4 ranks): graph mode's automatic parallelism with
stages (graph.config.enable_auto_parallel_pipeline, Note [Searched stages
in graph mode] in python/meshflow/distributed/auto.py). The model is
written for one device and the inputs arrive split over every rank.

* On a machine whose collectives have a high latency, the search cuts an
  MLP into one stage per rank (each child on one rank, set_stage), picks
  the micro-batch count and schedule, and the step trains (float64, 3
  steps of SGD with momentum) to the losses and parameters of one process.
* On a machine with fast collectives and a tall batch, it keeps the plan
  without stages (the SBP search's), which trains the same way."""
import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from meshflow.distributed import auto
from meshflow.distributed.simulate import described_machine
from layouts import step_alongside

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S = mf.sbp.broadcast, mf.sbp.split
line = mf.placement("cpu", list(range(world)))


def make(width, depth):
    layers = []
    for _ in range(depth):
        layers += [mf.nn.Linear(width, width), mf.nn.Tanh()]
    return mf.nn.Sequential(*layers, mf.nn.Linear(width, 4)).to(mf.float64)


class Step(mf.nn.Graph):
    def __init__(self, model, opt, num_stages=None):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.config.enable_auto_parallel(True)
        self.config.enable_auto_parallel_pipeline(True, num_stages=num_stages)

    def build(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        return loss


def whole(t):
    return t.detach().to_global(placement=line, sbp=B).to_local().numpy()


def train(width, depth, batch, seed, num_stages=None):
    mf.manual_seed(seed)
    local = make(width, depth)
    mf.manual_seed(seed)
    model = make(width, depth)
    local_opt = mf.optim.SGD(local.parameters(), lr=0.05, momentum=0.9)
    g = Step(model, mf.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), num_stages)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        step_alongside(local, local_opt, g, rng.standard_normal((batch, width)), rng.standard_normal((batch, 4)), line)
    assert g.num_compiled == 1
    for (name, p), q in zip(local.named_parameters(), model.parameters()):
        np.testing.assert_allclose(whole(q), p.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
    return g, model


if world > 1:
    # Collectives of 1 ms latency: the SBP plans' many collectives cost more
    # than a pipeline's few messages.
    auto.set_cost_model(described_machine(0.05, 10, 1, 1000, [2, 4]))
    def check_stages(g, model, stages=None):
        report = auto.cost_report(g)
        pipe = report["pipeline"]
        assert report["step_time"] < report["unpipelined_step_time"], report
        assert stages is None or pipe["num_stages"] == stages, pipe
        assert pipe["schedule"] in ("1f1b", "gpipe", "zero_bubble") and 32 % pipe["n_microbatches"] == 0, pipe
        # The stages cover the layers in order and the ranks in order, and each
        # child's parameters are broadcast on its stage's ranks.
        names = [n for st in pipe["stages"] for n in st["layers"]]
        assert names == [str(i) for i in range(9)], names
        per_stage = world // pipe["num_stages"]
        assert [st["ranks"] for st in pipe["stages"]] == [list(range(s * per_stage, (s + 1) * per_stage))
                                                          for s in range(pipe["num_stages"])], pipe["stages"]
        for st in pipe["stages"]:
            for n in st["layers"]:
                for p in model[int(n)].parameters():
                    assert p.is_global and p.placement == mf.placement("cpu", st["ranks"]), (n, p.placement)
                    assert all(x == B for x in p.sbp), p.sbp
        text = g.auto_parallel_report()
        assert f"{pipe['num_stages']} stages" in text and "without stages" in text, text
        if rank == 0:
            print(text, flush=True)

    g, model = train(512, 4, 32, seed=0)
    check_stages(g, model)
    if world == 4:
        # Two stages of two ranks each, data parallel within a stage.
        g, model = train(512, 4, 32, seed=2, num_stages=2)
        check_stages(g, model, stages=2)

    # Fast collectives and a tall batch of narrow rows: no stages.
    auto.set_cost_model(described_machine(0.05, 10, 50, 2, [2, 4]))
    g, model = train(32, 4, 512, seed=1)
    report = auto.cost_report(g)
    assert "pipeline" not in report and g._auto_stage_search["unpipelined_step_time"] <= \
        g._auto_stage_search["plan"]["step_time"], g._auto_stage_search
    assert all(p.placement == line for p in model.parameters())

# Bad input: the stages cut one module with children.
class Two(mf.nn.Graph):
    def __init__(self):
        super().__init__()
        self.a, self.b = make(8, 2), make(4, 2)
        self.add_optimizer(mf.optim.SGD(list(self.a.parameters()) + list(self.b.parameters()), lr=0.1))
        self.config.enable_auto_parallel(True)
        self.config.enable_auto_parallel_pipeline(True)

    def build(self, x):
        loss = self.b(self.a(x)).sum()
        loss.backward()
        return loss


x = mf.randn(8, 8, dtype=mf.float64).to_global(placement=line, sbp=S(0))
if world == 1:
    # One rank: nothing to cut, the plan without stages.
    g = Two()
    g(x)
    assert "pipeline" not in auto.cost_report(g)
else:
    try:
        Two()(x)
        raise AssertionError("two modules with children were cut")
    except ValueError as e:
        assert "one module whose children run one after another" in str(e), e
print("graph auto pipeline OK", flush=True)
