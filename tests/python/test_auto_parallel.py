"""Automatic parallelism (graph.config.enable_auto_parallel): the searched
plans on 1, 2 and 4 processes (mpirun), the cost model, calibration and
its cache, the reports and the errors."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import meshflow as mf
import meshflow.nn.functional as F
from meshflow.distributed import auto
from test_global import SCRIPTS, mpirun, needs_mpi

B, S = mf.sbp.broadcast, mf.sbp.split


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_searched_plans_are_the_known_best_and_train_equal_to_one_process(ranks, tmp_path):
    out = mpirun(ranks, "auto_parallel.py", env={"MESHFLOW_CACHE_DIR": str(tmp_path)})
    assert out.count("auto parallel OK") == ranks


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_predicted_memory_follows_the_graphs_memory_plan(ranks, tmp_path):
    out = mpirun(ranks, "auto_memory.py", env={"MESHFLOW_CACHE_DIR": str(tmp_path)})
    assert out.count("auto memory OK") == ranks
    # rank 0 reports each model's prediction (checked within 10% on every rank)
    assert len(re.findall(r"on %d: predicted [0-9.]+ MiB, planned [0-9.]+ MiB" % ranks, out)) == 4, out


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_collective_predictions_are_within_a_quarter_of_measured_times(ranks):
    out = mpirun(ranks, "collective_accuracy.py", timeout=600)
    assert out.count("collective accuracy OK") == ranks
    assert len(re.findall(r"over %d at [0-9.]+ MiB: predicted" % ranks, out)) == 20, out


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_simulator_predicts_the_measured_step_within_a_quarter(ranks, tmp_path):
    out = mpirun(ranks, "step_time.py", env={"MESHFLOW_CACHE_DIR": str(tmp_path)}, timeout=600)
    assert out.count("step time OK") == ranks
    # one line per attempt; every workload reports at least one
    assert set(re.findall(r"(mlp|gpt) on %d: predicted [0-9.]+ ms, measured [0-9.]+ ms" % ranks, out)) == \
        {"mlp", "gpt"}, out


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_graph_mode_places_searched_stages_and_trains_equal_to_one_process(ranks):
    out = mpirun(ranks, "graph_auto_pipeline.py")
    assert out.count("graph auto pipeline OK") == ranks
    assert ranks == 1 or f"{ranks} stages" in out, out


def test_measure_step_times_the_calls_to_their_values():
    calls = []

    def step(x):
        calls.append(x)
        return (x * 2, "not a tensor")
    x = mf.ones(3)
    seconds = auto.measure_step(step, x, steps=4, warmup=2)
    assert len(calls) == 6 and 0 < seconds < 1
    for bad in ({"steps": 0}, {"warmup": -1}, {"steps": "3"}, {"steps": True}, {"warmup": 1.5}):
        with pytest.raises(ValueError, match="measure_step: expected steps >= 1 and warmup >= 0"):
            auto.measure_step(step, x, **bad)


def test_collective_validation_needs_two_ranks():
    with pytest.raises(ValueError, match="needs a group of 2 or more ranks, got 1"):
        auto.validate_collectives()


def test_auto_parallel_pipeline_checks_its_stage_count():
    config = mf.nn.Graph().config
    for bad in (1, 0, True, 2.0, "2"):
        with pytest.raises(ValueError, match="num_stages must be an int >= 2 or None"):
            config.enable_auto_parallel_pipeline(True, num_stages=bad)
    config.enable_auto_parallel_pipeline(True, num_stages=2)
    assert config.auto_parallel_pipeline and config.auto_parallel_pipeline_stages == 2


def described(points=((4096, 20e-6), (1 << 20, 120e-6), (1 << 24, 1.7e-3))):
    model = auto.CostModel()
    for kind in auto.COLLECTIVES:
        model.set_collective(kind, 2, list(points))
    return model


def test_collective_model_interpolates_its_points():
    model = described()
    for b, t in ((4096, 20e-6), (1 << 20, 120e-6), (1 << 24, 1.7e-3)):
        assert model.collective("all_reduce", 2, b) == pytest.approx(t, rel=1e-12)
    # Between two points a power law through both; past the last, its line;
    # before the first, the first's time.
    mid = model.collective("all_gather", 2, 1 << 22)
    k = np.log(1.7e-3 / 120e-6) / np.log(16)
    assert mid == pytest.approx(120e-6 * 4 ** k, rel=1e-12)
    beta = (1.7e-3 - 120e-6) / ((1 << 24) - (1 << 20))
    assert model.collective("all_gather", 2, 1 << 25) == pytest.approx(1.7e-3 + beta * (1 << 24), rel=1e-12)
    assert model.collective("all_gather", 2, 16) == pytest.approx(20e-6, rel=1e-12)
    assert model.collective("all_gather", 1, 1 << 24) == 0
    # A group size without points scales the nearest fit: bytes per rank
    # by the ring's factor, the latency by its steps.
    four = model.collective("all_reduce", 4, 1 << 20)
    assert four == pytest.approx(model.collective("all_reduce", 2, (1 << 20) * 1.5) + 20e-6 * 2, rel=1e-12)
    # Undescribed collectives: 20 us per ring step and 10 GB/s.
    assert auto.CostModel().collective("all_to_all", 4, 1e9) == pytest.approx(60e-6 + 0.75 * 1e9 / 10e9)


def test_cost_model_round_trips_and_rejects_bad_descriptions():
    model = described()
    model.gemm_flops = 123e9
    again = auto.from_dict(json.loads(json.dumps(auto.to_dict(model))))
    assert auto.to_dict(again) == auto.to_dict(model)
    with pytest.raises(ValueError, match="kind must be"):
        model.set_collective("broadcast", 2, [(1, 1e-6)])
    with pytest.raises(ValueError, match="ranks must be >= 2"):
        model.set_collective("all_reduce", 1, [(1, 1e-6)])
    with pytest.raises(ValueError, match="bytes increasing"):
        model.set_collective("all_reduce", 2, [(10, 1e-6), (5, 2e-6)])
    with pytest.raises(ValueError, match="at least one"):
        model.set_collective("all_reduce", 2, [])
    with pytest.raises(ValueError, match="gemm_flops must be > 0"):
        auto.from_dict({"gemm_flops": 0})
    assert auto.from_dict({"sync_latency": 2e-4}).sync_latency == 2e-4
    with pytest.raises(ValueError, match="sync_latency must be >= 0"):
        auto.from_dict({"sync_latency": -1e-6})


def test_calibration_is_cached_atomically_and_remeasured_when_damaged(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHFLOW_CACHE_DIR", str(tmp_path))
    first = auto.calibrate(force=True)
    data = auto.to_dict(first)
    for key in ("gemm_flops", "gemm_flops_f64", "gemm_flops_16", "memory_bandwidth", "transpose_bandwidth",
                "op_overhead", "conv_efficiency", "attention_efficiency"):
        assert data[key] > 0, key
    assert data["gemm_half_intensity"] >= 0
    assert data["collectives"] == {} and data["sync_latency"] == 0  # one process: nothing to measure
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].startswith("cost_model_") and files[0].endswith(".json")
    assert auto.to_dict(auto.calibrate()) == data  # read back
    with open(tmp_path / files[0], "w") as f:
        f.write("{not json")
    assert auto.calibrate().gemm_flops > 0  # measured again, and cached again
    with open(tmp_path / files[0]) as f:
        json.load(f)


class Step(mf.nn.Graph):
    def __init__(self, model, opt, auto_parallel=True):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.config.enable_auto_parallel(auto_parallel)

    def build(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        return loss


def one_rank():
    return mf.placement("cpu", [0])


def test_one_process_auto_parallel_trains_as_eager_and_reports_its_plan():
    mf.distributed.auto.set_cost_model(described())
    rng = np.random.default_rng(0)
    data = [(mf.tensor(rng.standard_normal((16, 8))), mf.tensor(rng.standard_normal((16, 4)))) for _ in range(3)]
    mf.manual_seed(0)
    eager = mf.nn.Sequential(mf.nn.Linear(8, 16), mf.nn.Tanh(), mf.nn.Linear(16, 4)).to(mf.float64)
    mf.manual_seed(0)
    model = mf.nn.Sequential(mf.nn.Linear(8, 16), mf.nn.Tanh(), mf.nn.Linear(16, 4)).to(mf.float64)
    eager_opt = mf.optim.Adam(eager.parameters(), lr=0.01)
    g = Step(model, mf.optim.Adam(model.parameters(), lr=0.01))
    with pytest.raises(ValueError, match="no auto-parallel plan"):
        auto.cost_report(g)
    p = one_rank()
    for x, y in data:
        eager_opt.zero_grad()
        loss = F.mse_loss(eager(x), y)
        loss.backward()
        eager_opt.step()
        got = g(x.to_global(placement=p, sbp=S(0)), y.to_global(placement=p, sbp=S(0)))
        np.testing.assert_allclose(got.to_local().numpy(), loss.detach().numpy(), rtol=1e-13)
    for (name, a), b in zip(eager.named_parameters(), model.parameters()):
        assert b.is_global and b.placement == p
        np.testing.assert_allclose(b.detach().to_local().numpy(), a.detach().numpy(), rtol=1e-12, err_msg=name)
    report = auto.cost_report(g)
    assert [c["op"] for c in report["calls"]].count("addmm") == 2
    names = [q["name"] for q in report["parameters"]]
    assert names == ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
    # FLOPs from the op's trait at the described rate: 2 * 16 * 16 * 8.
    first = next(c for c in report["calls"] if c["op"] == "addmm")
    assert first["compute"] == pytest.approx(5e-6 + max(2 * 16 * 16 * 8 / 25e9, first_bytes(first) / 10e9))
    # The values live at the predicted peak make up its bytes (one rank:
    # every value whole).
    peak = report["peak_values"]
    assert peak and all(set(v) == {"value", "op", "call", "shape", "dtype", "sbp"} for v in peak)
    assert all(v["op"] == report["calls"][v["call"]]["op"] for v in peak if v["call"] is not None)
    assert sum(int(np.prod(v["shape"])) * 8 for v in peak) == report["memory"] - report["parameter_memory"]
    text = g.auto_parallel_report()
    assert "addmm" in text and "model.2.weight" in text and "predicted step" in text
    # On one rank a shard is the whole value under every layout: whatever
    # the plan's layouts, no collective runs and none is predicted.
    assert "comm_" not in str(g._last.executable)
    assert report["communication_bytes"] == 0 and report["communication_time"] == 0


def first_bytes(call):
    return sum(int(np.prod(s)) * 8 for s in call["input_shapes"] if s is not None) + 16 * 16 * 8


class Transposing(mf.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = mf.nn.Parameter(mf.randn(32, 48, dtype=mf.float64))

    def forward(self, x):
        return (self.w.t() * x).sum() + (self.w * 2).sum()


def test_memory_bound_calls_on_transposed_operands_are_priced_at_the_transpose_bandwidth():
    model = described()
    model.transpose_bandwidth = 1e9
    mf.distributed.auto.set_cost_model(model)
    module = Transposing()

    class Loss(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.module = module
            self.add_optimizer(mf.optim.SGD(module.parameters(), lr=0.1))
            self.config.enable_auto_parallel(True)

        def build(self, x):
            loss = self.module(x)
            loss.backward()
            return loss
    g = Loss()
    g(mf.randn(48, 32, dtype=mf.float64).to_global(placement=one_rank(), sbp=B))
    report = auto.cost_report(g)
    calls = [(c["op"], [list(x) if x is not None else None for x in c["input_shapes"]], c["compute"])
             for c in report["calls"]]
    # w.t() * x reads a transposed operand: 48 * 32 float64s read twice and
    # written once at the transpose bandwidth; the backward's gradient * x
    # reads none, at the memory bandwidth. 2 * w and the update read w as it is.
    products = [t for op, shapes, t in calls if op == "mul" and shapes == [[48, 32], [48, 32]]]
    assert len(products) == 2, calls
    assert products[0] == pytest.approx(5e-6 + 3 * 48 * 32 * 8 / 1e9)
    assert products[1] == pytest.approx(5e-6 + 3 * 48 * 32 * 8 / 10e9)
    scaled = [t for op, shapes, t in calls if op == "mul" and shapes == [[32, 48], []]]
    assert scaled == [pytest.approx(5e-6 + 2 * 48 * 32 * 8 / 10e9 + 8 / 10e9)], calls
    # Unset (0), the transpose bandwidth is the memory bandwidth.
    assert auto.CostModel().transpose_bandwidth == 0
    with pytest.raises(ValueError, match="transpose_bandwidth must be >= 0"):
        auto.from_dict({"transpose_bandwidth": -1})


class NormHeads(mf.nn.Module):
    """A linear layer, a layer norm, a GELU and a copy of a permuted view
    (attention's heads)."""

    def __init__(self):
        super().__init__()
        self.lin = mf.nn.Linear(256, 256)
        self.norm = mf.nn.LayerNorm(256)

    def forward(self, x):
        h = F.gelu(self.norm(self.lin(x)))
        return h.view(64, 16, 16).permute(1, 0, 2).contiguous().view(64, 256)


def test_memory_bound_ops_are_priced_at_their_measured_rates(tmp_path, monkeypatch):
    # Note [Measured op rates]: planning under calibrate()'s model measures
    # each memory-bound call key of the step once (the op's name, and
    # ":strided" or ":transposed" for a call reading such an operand), at
    # most the memory bandwidth; a described machine (set_cost_model) is
    # left as given.
    monkeypatch.setenv("MESHFLOW_CACHE_DIR", str(tmp_path))
    x, y = (mf.randn(64, 256).to_global(placement=one_rank(), sbp=B) for _ in range(2))

    def compile_step(model):
        mf.manual_seed(0)
        net = NormHeads()
        auto.set_cost_model(model)
        g = Step(net, mf.optim.SGD(net.parameters(), lr=0.1))
        g(x, y)
        return auto.cost_report(g)

    machine = described()
    compile_step(machine)
    assert machine.op_bandwidth == {}
    model = auto.calibrate(force=True)
    assert model.op_bandwidth == {}  # nothing measured before a step is planned
    report = compile_step(model)
    rates = model.op_bandwidth
    ops = {k.split("@")[0] for k in rates}
    assert {"gelu", "gelu_backward", "layer_norm", "layer_norm_backward"} <= ops, rates
    assert all(0 < r < float("inf") for r in rates.values()), rates
    gelu = [c for c in report["calls"] if c["op"] == "gelu"]
    # keyed by op, layout and the size class of its inputs (64 KiB)
    assert len(gelu) == 1 and gelu[0]["rate_key"] == "gelu@64KiB"
    nbytes = 2 * 64 * 256 * 4
    assert gelu[0]["compute"] == pytest.approx(model.op_overhead + nbytes / rates["gelu@64KiB"], rel=1e-9)
    # Viewing the permuted heads copies their shard (a view that copied,
    # forward and backward): priced at a rate of its own; the permutes
    # themselves alias and are free.
    copies = [c for c in report["calls"] if c["rate_key"] == "view:strided@64KiB"]
    assert len(copies) == 2 and "view:strided@64KiB" in rates, (copies, rates)
    for c in copies:
        assert c["compute"] == pytest.approx(model.op_overhead + nbytes / rates["view:strided@64KiB"], rel=1e-9)
    permutes = [c for c in report["calls"] if c["op"] == "permute"]
    assert permutes and all(c["compute"] == model.op_overhead for c in permutes)
    # measured once: a second plan reuses the rates
    before = dict(rates)
    compile_step(model)
    assert model.op_bandwidth == before
    again = auto.from_dict(json.loads(json.dumps(auto.to_dict(model))))
    assert again.op_bandwidth == before
    with pytest.raises(ValueError, match="op_bandwidth must map op names to bytes/s > 0"):
        auto.from_dict({"op_bandwidth": {"gelu": 0}})


def test_measuring_op_rates_draws_no_random_numbers(tmp_path, monkeypatch):
    # A step with dropout: planning it (and measuring its ops) leaves the
    # default generator where it was.
    monkeypatch.setenv("MESHFLOW_CACHE_DIR", str(tmp_path))
    x, y = (mf.randn(16, 32).to_global(placement=one_rank(), sbp=B) for _ in range(2))
    net = mf.nn.Sequential(mf.nn.Linear(32, 32), mf.nn.Dropout(0.5))
    model = auto.calibrate(force=True)
    auto.set_cost_model(model)
    log, placement, *_ = auto._log_step(Step(net, mf.optim.SGD(net.parameters(), lr=0.1)), (x, y))
    mf.manual_seed(3)
    expected = mf.rand(4).numpy()
    mf.manual_seed(3)
    auto._search(log, model, 0)
    assert any(k.startswith("dropout") for k in model.op_bandwidth), model.op_bandwidth
    np.testing.assert_array_equal(mf.rand(4).numpy(), expected)


class CloneKept(mf.nn.Module):
    """A clone whose source is read again after it."""

    def __init__(self):
        super().__init__()
        self.lin = mf.nn.Linear(32, 32)

    def forward(self, x):
        h = self.lin(x)
        return h.clone() * 2 + h


def test_clones_that_graph_mode_forwards_are_free():
    # Note [Forwarded clones in the cost model]: autograd clones each
    # parameter's first gradient, a buffer that dies at the clone, which
    # graph mode forwards; a clone whose source is read later is a copy.
    model = described()
    auto.set_cost_model(model)
    x, y = (mf.randn(16, 32).to_global(placement=one_rank(), sbp=B) for _ in range(2))
    mf.manual_seed(0)
    net = CloneKept()
    g = Step(net, mf.optim.SGD(net.parameters(), lr=0.1))
    g(x, y)
    clones = [c for c in auto.cost_report(g)["calls"] if c["op"] == "clone"]
    forwarded = [c for c in clones if c["forwarded"]]
    kept = [c for c in clones if not c["forwarded"]]
    # the weight's and the bias's gradients; the model's own clone
    assert len(forwarded) == 2 and len(kept) == 1, clones
    assert all(c["compute"] == pytest.approx(model.op_overhead, rel=1e-12) for c in forwarded)
    nbytes = 2 * 16 * 32 * 4
    assert kept[0]["input_shapes"] == [[16, 32]]
    assert kept[0]["compute"] == pytest.approx(model.op_overhead + nbytes / model.memory_bandwidth, rel=1e-9)


class ConvAttention(mf.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = mf.nn.Conv2d(16, 16, 3, padding=1, dtype=mf.float64)
        self.proj = mf.nn.Linear(32, 32, dtype=mf.float64)

    def forward(self, x, q):
        q = self.proj(q)
        return self.conv(x).sum() + F.scaled_dot_product_attention(q, q, q).sum()


def test_convolutions_and_attention_are_priced_at_their_fractions_of_the_gemm_rate():
    # Note [Op kinds in the cost model]: these calls are compute-bound here,
    # so their time past the op overhead scales with 1 / efficiency; the
    # linear layer's GEMMs keep the GEMM rate.
    from meshflow.distributed import simulate
    inputs = (mf.randn(2, 16, 16, 16, dtype=mf.float64), mf.randn(2, 2, 64, 32, dtype=mf.float64))

    def compute_times(conv, attention):
        model = described()
        model.conv_efficiency, model.attention_efficiency = conv, attention
        mf.manual_seed(0)
        net = ConvAttention()
        report = simulate.simulate(net, mf.optim.SGD(net.parameters(), lr=0.1), lambda m, x, q: m(x, q), inputs,
                                   (1,), model)
        return {c["op"]: c["compute"] - model.op_overhead for c in report["calls"]
                if c["op"] in ("conv2d", "conv2d_backward", "fused_attention", "fused_attention_backward", "addmm")}

    base, slow = compute_times(1.0, 1.0), compute_times(0.25, 0.5)
    assert set(base) == {"conv2d", "conv2d_backward", "fused_attention", "fused_attention_backward", "addmm"}, base
    for op, factor in (("conv2d", 4), ("conv2d_backward", 4), ("fused_attention", 2),
                       ("fused_attention_backward", 2), ("addmm", 1)):
        assert slow[op] == pytest.approx(factor * base[op], rel=1e-9), (op, base, slow)
    assert auto.CostModel().conv_efficiency == 1 and auto.CostModel().attention_efficiency == 1
    for key in ("conv_efficiency", "attention_efficiency"):
        with pytest.raises(ValueError, match=f"{key} must be > 0"):
            auto.from_dict({key: 0})


def test_auto_parallel_errors():
    model = mf.nn.Linear(4, 2)
    g = Step(model, mf.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="expected a number of bytes >= 0"):
        g.config.set_auto_parallel_memory_limit(-1)
    with pytest.raises(ValueError, match="needs a placement"):
        g(mf.randn(3, 4), mf.randn(3, 2))
    g.config.enable_zero(True)
    x = mf.randn(3, 4).to_global(placement=one_rank(), sbp=B)
    with pytest.raises(ValueError, match="turn enable_zero off"):
        g(x, mf.randn(3, 2).to_global(placement=one_rank(), sbp=B))
    with pytest.raises(ValueError, match="no auto-parallel plan"):
        g.auto_parallel_report()


def test_global_means_are_sums_over_the_count():
    # Note [Global means]: forward and backward as the local ops.
    rng = np.random.default_rng(1)
    p = one_rank()
    x = rng.standard_normal((6, 5))
    t = rng.standard_normal((6, 5))
    labels = rng.integers(0, 5, size=6)
    weight = rng.random(5) + 0.5
    cases = [
        lambda a: a.mean(),
        lambda a: a.mean(dim=1),
        lambda a: a.mean(dim=(0, 1), keepdim=True),
        lambda a: F.mse_loss(a, mf.tensor(t).to_global(placement=p, sbp=B) if a.is_global else mf.tensor(t)),
        lambda a: F.cross_entropy(a, mf.tensor(labels).to_global(placement=p, sbp=B) if a.is_global
                                  else mf.tensor(labels), weight=mf.tensor(weight), label_smoothing=0.1),
        lambda a: F.nll_loss(F.log_softmax(a, dim=1), mf.tensor(labels).to_global(placement=p, sbp=B) if a.is_global
                             else mf.tensor(labels), ignore_index=2),
    ]
    for fn in cases:
        local = mf.tensor(x, requires_grad=True)
        expected = fn(local)
        expected.sum().backward()
        glob = mf.tensor(x).to_global(placement=p, sbp=S(0)).requires_grad_()
        got = fn(glob)
        got.sum().backward()
        np.testing.assert_allclose(got.detach().to_local().numpy(), expected.detach().numpy(), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(glob.grad.to_local().numpy(), local.grad.numpy(), rtol=1e-13, atol=1e-15)


def simulated_step_module():
    sys.path.insert(0, SCRIPTS)
    try:
        import layouts
        import simulated_step
    finally:
        sys.path.remove(SCRIPTS)
    return layouts, simulated_step


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_simulator_predicts_the_plan_the_search_makes_on_that_many_ranks(ranks):
    from meshflow.distributed import simulate
    layouts, simulated_step = simulated_step_module()
    machine = auto.from_dict(layouts.MACHINE)
    model, opt, loss_fn, inputs = simulated_step.step()
    predicted = simulate.simulate(model, opt, loss_fn, inputs, (ranks,), machine)
    out = mpirun(ranks, "auto_parallel_simulated.py")
    assert out.count("simulated OK") == ranks
    # mpirun may interleave the ranks' lines: find rank 0's report anywhere.
    found = re.search(r'\{"step_time".*?\]\}', out)
    assert found, out
    real = json.loads(found.group(0))
    assert real["layouts"] == [str(q["sbp"]) for q in predicted["parameters"]]
    for key in ("step_time", "memory", "communication_bytes"):
        assert predicted[key] == pytest.approx(real[key], rel=1e-9), key


def test_simulator_plans_meshes_larger_than_the_machine(tmp_path):
    from meshflow.distributed import simulate
    _, simulated_step = simulated_step_module()
    model, opt, loss_fn, inputs = simulated_step.step()
    machine = simulate.described_machine(300, 2000, 100, 5, [8])
    report = simulate.simulate(model, opt, loss_fn, inputs, (8, 8), machine)
    assert report["mesh"] == (8, 8) and len(report["parameters"]) == 4
    assert all(len(q["sbp"]) == 2 for q in report["parameters"])
    assert report["step_time"] > 0 and report["memory"] > 0
    # A ring all-reduce of 1 GiB over 8 at 100 GB/s with 5 us per step.
    assert machine.collective("all_reduce", 8, 1 << 30) == pytest.approx(14 * 5e-6 + (1 << 30) * 1.75 / 100e9)
    # The command line.
    cmd = [sys.executable, "-m", "meshflow.distributed.simulate", os.path.join(SCRIPTS, "simulated_step.py"),
           "--mesh", "4x2", "--gemm-tflops", "300", "--memory-bandwidth", "2000", "--interconnect", "100,5"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__))))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("mesh 4x2: predicted step") and "model.0.weight" in run.stdout
    machine_file = tmp_path / "machine.json"
    machine_file.write_text(json.dumps(auto.to_dict(machine)))
    run = subprocess.run(cmd[:6] + ["--machine", str(machine_file), "--json"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["mesh"] == [4, 2]
    bad = subprocess.run(cmd[:6], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "describe the machine" in bad.stderr
    bad = subprocess.run(cmd[:4] + ["--mesh", "0x2"] + cmd[6:], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "--mesh: expected sizes >= 1" in bad.stderr
    bad = subprocess.run(cmd[:3] + [str(machine_file)] + cmd[4:], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "is not a Python file" in bad.stderr
    with pytest.raises(ValueError, match="must be > 0"):
        simulate.described_machine(0, 1, 1, 1, [2])


# --- the stage search (Note [Stage search]) -----------------------------------------------------

def brute_force_partition(n, stages, time, memory=None, limit=0.0, m=1):
    best = (float("inf"), None)
    import itertools
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = [0, *cuts, n]
        ranges = list(zip(bounds, bounds[1:]))
        if limit and memory and any(memory(s, i, j) > limit for s, (i, j) in enumerate(ranges)):
            continue
        ts = [time(i, j) for i, j in ranges]
        cost = sum(ts) + (m - 1) * max(ts)
        if cost < best[0]:
            best = (cost, ranges)
    return best


def test_best_partition_is_the_brute_force_optimum():
    rng = np.random.default_rng(0)
    for trial in range(60):
        n = int(rng.integers(1, 8))
        stages = int(rng.integers(1, n + 1))
        m = int(rng.integers(1, 6))
        layer = rng.uniform(0.1, 3.0, n)
        extra = {(i, j): rng.uniform(0, 0.5) for i in range(n) for j in range(i + 1, n + 1)}
        mem = {(i, j): rng.uniform(0, 10) for i in range(n) for j in range(i + 1, n + 1)}

        def time(i, j):
            return float(layer[i:j].sum()) + extra[(i, j)]

        def memory(s, i, j):
            return mem[(i, j)] * (stages - s)

        limit = float(rng.uniform(5, 40)) if trial % 2 else 0.0
        want = brute_force_partition(n, stages, time, memory, limit, m)
        got = auto.best_partition(n, stages, time, memory, limit, m)
        if want[1] is None:
            assert got == (float("inf"), None)
        else:
            assert got[0] == pytest.approx(want[0], rel=1e-12), (trial, got, want)
            bounds = [i for i, _ in got[1]] + [n]
            assert bounds[0] == 0 and all(a < b for a, b in zip(bounds, bounds[1:]))
    assert auto.best_partition(3, 4, lambda i, j: 1.0) == (float("inf"), None)


def pipeline_model():
    sys.path.insert(0, SCRIPTS)
    try:
        import pipeline_model
    finally:
        sys.path.remove(SCRIPTS)
    return pipeline_model


def plan_two_stages(schedules=("1f1b", "gpipe", "zero_bubble")):
    from meshflow.distributed import simulate
    pm = pipeline_model()
    machine = simulate.described_machine(0.05, 20, 10, 5, [2])
    return pm, auto.plan_pipeline(pm.build(), F.mse_loss, pm.batch(), 2, cost_model=machine, num_stages=2,
                                  microbatches=[2, 4], schedules=schedules)


def test_stage_search_balances_the_stages_under_the_cost_model():
    pm, plan = plan_two_stages(schedules=("1f1b", "gpipe"))
    model = pm.build()
    names = [name for name, _ in model.named_children()]
    assert plan["num_stages"] == 2 and plan["data_parallel"] == 1 and plan["schedule"] == "1f1b"
    assert plan["n_microbatches"] in (2, 4) and len(plan["split_points"]) == 1
    costs = plan["stage_costs"]
    n, m = len(names), plan["n_microbatches"]
    # The cut is the best of every cut under the same figures.
    want = brute_force_partition(n, 2, lambda i, j: costs[(i, j)]["time"], m=m)
    assert plan["ranges"] == want[1] and plan["split_points"] == [names[want[1][1][0]]]
    # The heavy 384 x 384 layer (child 5) and the one before it are on different stages.
    cut = plan["ranges"][1][0]
    assert 4 <= cut <= 5
    # The predicted step is the pipeline's: sum + (m - 1) max + the updates.
    times = plan["stage_times"]
    update = max(costs[r]["update"] for r in plan["ranges"])
    assert plan["step_time"] == pytest.approx(sum(times) + (m - 1) * max(times) + update, rel=1e-12)
    best = min(c["step_time"] for c in plan["candidates"])
    assert plan["step_time"] == pytest.approx(best, rel=1e-9)
    # 1F1B keeps 2 micro-batches on the first stage and 1 on the last.
    first, second = (costs[r] for r in plan["ranges"])
    assert plan["memory_per_stage"][0] == pytest.approx(first["parameters"] + min(2, m) * first["activations"])
    assert plan["memory_per_stage"][1] == pytest.approx(second["parameters"] + second["activations"])


def test_zero_bubble_stages_are_simulated_from_their_forward_and_backward_parts():
    from meshflow.distributed import pipelining as pp
    pm, plan = plan_two_stages()
    _, one_f_one_b = plan_two_stages(schedules=("1f1b",))
    assert plan["schedule"] == "zero_bubble"
    costs, m = plan["stage_costs"], plan["n_microbatches"]
    # Every range's time splits into forward, input-gradient and weight-gradient parts. A
    # range past the first layer computes its input's gradient; the whole model (one
    # stage, nothing to send) has no input-gradient part at all.
    n = max(j for _, j in costs)
    for (i, j), c in costs.items():
        assert c["forward"] > 0 and c["backward_weight"] >= 0
        assert c["forward"] + c["backward_input"] + c["backward_weight"] == pytest.approx(c["time"], rel=1e-12)
        assert c["backward_input"] > 0 if i > 0 else True, (i, j, c)
    assert costs[(0, n)]["backward_input"] == 0
    # The step is the schedule simulator's with the stages' parts, plus the updates.
    stages = [costs[r] for r in plan["ranges"]]
    result = pp.make_schedule("zero_bubble", 2, m).simulate(
        forward=[c["forward"] for c in stages], backward_input=[c["backward_input"] for c in stages],
        backward_weight=[c["backward_weight"] for c in stages])
    update = max(c["update"] for c in stages)
    assert plan["step_time"] == pytest.approx(result.step_time + update, rel=1e-12)
    for s, c in enumerate(stages):
        assert plan["memory_per_stage"][s] == pytest.approx(c["parameters"] + result.peak_activations[s] *
                                                            c["activations"])
    # Running weight gradients in 1F1B's bubbles makes it no slower than 1F1B.
    assert plan["step_time"] <= one_f_one_b["step_time"] * (1 + 1e-12)


def test_stage_search_chooses_the_stage_count_and_checks_its_arguments():
    from meshflow.distributed import simulate
    pm = pipeline_model()
    machine = simulate.described_machine(0.05, 20, 10, 5, [2])
    plan = auto.plan_pipeline(pm.build(), F.mse_loss, pm.batch(), 2, cost_model=machine, microbatches=[1, 2])
    seen = {(c["num_stages"], c["n_microbatches"], c["schedule"]) for c in plan["candidates"]}
    assert seen == {(s, m, k) for s in (1, 2) for m in (1, 2) for k in ("1f1b", "gpipe", "zero_bubble")}
    # One stage has no bubble to fill: zero-bubble is left to 1F1B there.
    assert all(c["step_time"] == float("inf") for c in plan["candidates"]
               if c["num_stages"] == 1 and c["schedule"] == "zero_bubble")
    assert plan["step_time"] == pytest.approx(min(c["step_time"] for c in plan["candidates"]), rel=1e-9)
    with pytest.raises(ValueError, match="num_stages"):
        auto.plan_pipeline(pm.build(), F.mse_loss, pm.batch(), 2, cost_model=machine, num_stages=3)
    with pytest.raises(ValueError, match="divide the batch"):
        auto.plan_pipeline(pm.build(), F.mse_loss, pm.batch(), 2, cost_model=machine, microbatches=[3])
    with pytest.raises(ValueError, match="children"):
        auto.plan_pipeline(mf.nn.Tanh(), F.mse_loss, pm.batch(), 2, cost_model=machine)
    with pytest.raises(ValueError, match="memory limit"):
        auto.plan_pipeline(pm.build(), F.mse_loss, pm.batch(), 2, cost_model=machine, memory_limit=1)
    with pytest.raises(ValueError, match="memory_limit must be >= 0"):
        auto.plan_pipeline(pm.build(), F.mse_loss, pm.batch(), 2, cost_model=machine, memory_limit=-5)
    with pytest.raises(ValueError, match="batch dimension"):
        auto.plan_pipeline(pm.build(), F.mse_loss, (mf.tensor(1.0), pm.batch()[1]), 2, cost_model=machine)
    with pytest.raises(ValueError, match="world_size"):
        auto.plan_pipeline(pm.build(), F.mse_loss, pm.batch(), 0, cost_model=machine)


def test_interleaved_stages_are_simulated_two_per_rank():
    from meshflow.distributed import pipelining as pp
    _, plan = plan_two_stages(schedules=("interleaved_1f1b",))
    _, one_f_one_b = plan_two_stages(schedules=("1f1b",))
    assert plan["schedule"] == "interleaved_1f1b" and plan["num_stages"] == 4 and plan["stages_per_rank"] == 2
    costs, m, ranges = plan["stage_costs"], plan["n_microbatches"], plan["ranges"]
    assert len(plan["split_points"]) == 3 and ranges[0][0] == 0 and ranges[-1][1] == max(j for _, j in costs)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    # The step is the schedule simulator's with the four ranges' parts, plus
    # the slowest rank's updates (stage k on rank k % 2).
    stages = [costs[r] for r in ranges]
    result = pp.make_schedule("interleaved_1f1b", 2, m, 2).simulate(
        forward=[c["forward"] for c in stages], backward_input=[c["backward_input"] for c in stages],
        backward_weight=[c["backward_weight"] for c in stages])
    update = max(stages[r]["update"] + stages[r + 2]["update"] for r in (0, 1))
    assert plan["step_time"] == pytest.approx(result.step_time + update, rel=1e-12)
    for k, c in enumerate(stages):
        assert plan["memory_per_stage"][k] == pytest.approx(c["parameters"] + result.peak_activations[k] *
                                                            c["activations"])
    for r in (0, 1):
        assert plan["memory_per_rank"][r] == pytest.approx(plan["memory_per_stage"][r] + plan["memory_per_stage"][r + 2])
    # Among the cuts the dynamic program offers, the fastest under the simulator; here
    # faster than 1F1B's two stages.
    assert plan["step_time"] < one_f_one_b["step_time"]
    # Asked for with the others, every kind is a candidate.
    _, both = plan_two_stages(schedules=("1f1b", "interleaved_1f1b"))
    assert {c["schedule"] for c in both["candidates"]} == {"1f1b", "interleaved_1f1b"}
    with pytest.raises(ValueError, match="schedules must be among"):
        plan_two_stages(schedules=("zbv",))


@needs_mpi
@pytest.mark.parametrize("schedules", [("1f1b", "gpipe", "zero_bubble"), ("interleaved_1f1b",)])
def test_the_searched_stages_train_equal_to_one_process(schedules):
    _, plan = plan_two_stages(schedules)
    out = mpirun(2, "auto_pipeline.py", ",".join(plan["split_points"]), str(plan["n_microbatches"]),
                 plan["schedule"], SCRIPTS)
    assert out.count("auto pipeline OK") == 2
