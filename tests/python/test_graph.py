"""Graph mode (meshflow.nn.Graph): traced train steps equal eager ones on the
example models, eval graphs, retracing, alternating with eager steps, and
clear errors for code that cannot be traced."""
import os
import sys

import numpy as np
import pytest

import meshflow as mf
import meshflow.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import models  # noqa: E402

SMALL = {
    "mlp": dict(kwargs={}, batch=32),  # (32, 1024) activations: big enough to fuse
    "lenet": dict(kwargs={}, batch=4),
    "resnet18": dict(kwargs={}, batch=2),
    # (2, 2, 64, 64) attention scores: big enough for the masked softmax to fuse
    "gpt": dict(kwargs=dict(vocab=64, d_model=32, heads=2, layers=2, seq=64), batch=2),
    "vit_tiny": dict(kwargs=dict(dim=48, depth=2, mlp=96), batch=2),
    "bert": dict(kwargs=dict(vocab=64, dim=32, layers=2, mlp=64, seq=24), batch=3),
    "convnext": dict(kwargs=dict(dims=(8, 16, 24, 32), depths=(1, 1, 2, 1)), batch=2),
    "dlrm": dict(kwargs=dict(dim=8, bottom=(16,), top=(16,)), batch=16),
}


def batch(name, rng, device="cpu"):
    cfg = SMALL[name]
    if name in ("gpt", "bert"):
        x, y = models.random_batch(name, cfg["batch"], rng, vocab=cfg["kwargs"]["vocab"], seq=cfg["kwargs"]["seq"])
    else:
        x, y = models.random_batch(name, cfg["batch"], rng)
    if name == "resnet18":
        x = np.ascontiguousarray(x[:, :, :16, :16])
    return mf.tensor(x, device=device), mf.tensor(y, device=device)


def twin_models_of(name, **kwargs):
    a = models.build(name, mf, **kwargs)
    b = models.build(name, mf, **kwargs)
    models.copy_state(a, b, mf)
    return a, b


def twin_models(name, device="cpu"):
    a, b = twin_models_of(name, **SMALL[name]["kwargs"])
    return a.to(device), b.to(device)


class TrainGraph(mf.nn.Graph):
    """exact: only rewrites that keep eager's bits, so that graph steps can be
    compared with eager ones bit for bit."""

    def __init__(self, name, model, optimizer, scheduler=None, exact=True):
        super().__init__()
        self.name = name
        self.model = model
        self.add_optimizer(optimizer, lr_sch=scheduler)
        self.config.enable_exact_mode(exact)

    def build(self, x, y):
        loss = models.loss_fn(self.name, mf, self.model(x), y)
        loss.backward()
        return loss


class EvalGraph(mf.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def eager_step(name, model, optimizer, x, y):
    optimizer.zero_grad()
    loss = models.loss_fn(name, mf, model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def assert_same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k].cpu().numpy(), sb[k].cpu().numpy(), err_msg=k)


@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet18", "gpt", "vit_tiny", "bert", "convnext", "dlrm"])
def test_train_steps_equal_eager(name, device):
    """On a device, graph steps equal eager steps there bit for bit, and
    follow the CPU's steps within rounding."""
    eager, traced = twin_models(name, device)
    cpu = models.build(name, mf, **SMALL[name]["kwargs"])
    models.copy_state(eager, cpu, mf)
    make = (lambda p: mf.optim.AdamW(p, lr=1e-3)) if name == "gpt" else (
        lambda p: mf.optim.SGD(p, lr=0.05, momentum=0.9))
    opt_e, opt_g, opt_c = make(eager.parameters()), make(traced.parameters()), make(cpu.parameters())
    graph = TrainGraph(name, traced, opt_g)
    rng = np.random.default_rng(0)
    for step in range(5):
        x, y = batch(name, rng, device)
        loss_e = eager_step(name, eager, opt_e, x, y)
        loss_g = graph(x, y)
        assert loss_g.item() == loss_e.item(), f"step {step}"
        loss_c = eager_step(name, cpu, opt_c, x.cpu(), y.cpu()) if device != "cpu" else None
        if device != "cpu" and step < 2:  # later steps of these tiny batches amplify rounding (ResNet's loss grows)
            np.testing.assert_allclose(loss_e.item(), loss_c.item(), rtol=1e-4, err_msg=f"step {step}")
    assert graph.num_compiled == 1
    assert_same_state(eager, traced)
    if device != "cpu":  # the fusions below are the CPU's
        return
    if name == "mlp":  # the ReLU gradients (gt, where) run fused, with the same bits
        assert "fused_elementwise" in str(graph)
    if name in ("mlp", "lenet"):  # linear + ReLU, with the same bits
        assert "fused_linear" in str(graph)
    if name == "gpt":  # so do attention (one fused op), residual adds and layer norms
        assert "fused_attention(" in str(graph)
        assert "fused_add_layer_norm" in str(graph)
        assert "fused_linear" in str(graph)  # linear1 + GELU
        assert "gelu_with_backward" in str(graph)  # the recomputed GELU with its gradient


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_default_fusions_match_eager(name):
    """Bias-gradient fusion sums each gradient block by block: not eager's
    bits, but within float rounding of them."""
    eager, traced = twin_models(name)
    make = (lambda p: mf.optim.AdamW(p, lr=1e-3)) if name == "gpt" else (
        lambda p: mf.optim.SGD(p, lr=0.05, momentum=0.9))
    opt_e, opt_g = make(eager.parameters()), make(traced.parameters())
    graph = TrainGraph(name, traced, opt_g, exact=False)
    rng = np.random.default_rng(0)
    for step in range(5):
        x, y = batch(name, rng)
        loss_e = eager_step(name, eager, opt_e, x, y)
        np.testing.assert_allclose(graph(x, y).item(), loss_e.item(), rtol=1e-6, err_msg=f"step {step}")
    assert "column sum" in str(graph)
    for (k, a), (_, b) in zip(eager.state_dict().items(), traced.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-7, err_msg=k)


def test_plain_sgd_updates_run_in_the_weight_gradient_gemm():
    """Note [Updates in the GEMM]: with a scheduler, each run reads the new
    learning rate."""
    eager, traced = twin_models("mlp")
    opt_e = mf.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = mf.optim.SGD(traced.parameters(), lr=0.1)
    sch_e = mf.optim.lr_scheduler.StepLR(opt_e, step_size=1, gamma=0.5)
    sch_g = mf.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.5)
    graph = TrainGraph("mlp", traced, opt_g, sch_g, exact=False)
    rng = np.random.default_rng(11)
    for _ in range(4):
        x, y = batch("mlp", rng)
        loss_e = eager_step("mlp", eager, opt_e, x, y)
        sch_e.step()
        np.testing.assert_allclose(graph(x, y).item(), loss_e.item(), rtol=1e-6)
    assert str(graph).count("matmul_sgd_update_") == 3
    for (k, a), (_, b) in zip(eager.state_dict().items(), traced.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-7, err_msg=k)


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_fused_graph_steps_match_torch(name):
    """The fused plan (linear epilogues, residual layer norms, bias gradients,
    SGD with weight decay inside the GEMMs) against PyTorch 1.13's steps, in
    float64: in float32 the libraries' rounding (Note [Choosing a GEMM
    library]) flips the odd ReLU near zero and with it a gradient."""
    torch = pytest.importorskip("torch")
    model = models.build(name, mf, **SMALL[name]["kwargs"]).double()
    reference = models.build(name, torch, **SMALL[name]["kwargs"]).double()
    models.copy_state(model, reference, torch)
    # SGD: Adam would scale the noise in gradients that are zero in exact
    # arithmetic (the key bias's: softmax ignores a constant per row) up to
    # the learning rate.
    opt = mf.optim.SGD(model.parameters(), lr=0.05, weight_decay=0.01)
    opt_t = torch.optim.SGD(reference.parameters(), lr=0.05, weight_decay=0.01)
    graph = TrainGraph(name, model, opt, exact=False)
    rng = np.random.default_rng(12)
    for _ in range(3):
        x, y = batch(name, rng)
        if x.is_floating_point():
            x = x.double()
        opt_t.zero_grad()
        loss_t = models.loss_fn(name, torch, reference(torch.tensor(x.numpy())), torch.tensor(y.numpy()))
        loss_t.backward()
        opt_t.step()
        np.testing.assert_allclose(graph(x, y).item(), loss_t.item(), rtol=1e-12)
    text = str(graph)
    assert "fused_linear" in text and "column sum" in text
    assert "matmul_sgd_update_" in text
    assert ("fused_add_layer_norm" in text) == (name == "gpt")
    for k, v in reference.state_dict().items():
        if v.is_floating_point():
            np.testing.assert_allclose(model.state_dict()[k].numpy(), v.numpy(), rtol=1e-10, atol=1e-12, err_msg=k)


def test_scheduler_steps_after_each_run():
    eager, traced = twin_models("mlp")
    opt_e = mf.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = mf.optim.SGD(traced.parameters(), lr=0.1)
    sch_e = mf.optim.lr_scheduler.StepLR(opt_e, step_size=1, gamma=0.5)
    sch_g = mf.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.5)
    graph = TrainGraph("mlp", traced, opt_g, sch_g)
    rng = np.random.default_rng(1)
    for _ in range(3):
        x, y = batch("mlp", rng)
        eager_step("mlp", eager, opt_e, x, y)
        sch_e.step()
        graph(x, y)
        assert opt_g.param_groups[0]["lr"] == opt_e.param_groups[0]["lr"]
    assert_same_state(eager, traced)


def test_eval_graph_and_retrace_on_new_batch_size(device):
    model = models.build("lenet", mf).to(device)
    model.eval()
    graph = EvalGraph(model)
    rng = np.random.default_rng(2)
    for n in (3, 3, 5):
        x = mf.tensor(rng.standard_normal((n, 3, 32, 32)).astype(np.float32), device=device)
        with mf.no_grad():
            expected = model(x)
        np.testing.assert_array_equal(graph(x).cpu().numpy(), expected.cpu().numpy())
    assert graph.num_compiled == 2
    assert "conv2d" in str(graph)
    assert graph.planned_peak_bytes > 0


def test_eager_and_graph_steps_alternate(device):
    eager, traced = twin_models("mlp", device)
    opt_e = mf.optim.Adam(eager.parameters(), lr=1e-3)
    opt_g = mf.optim.Adam(traced.parameters(), lr=1e-3)
    graph = TrainGraph("mlp", traced, opt_g)
    rng = np.random.default_rng(3)
    for step in range(4):
        x, y = batch("mlp", rng, device)
        eager_step("mlp", eager, opt_e, x, y)
        if step % 2:
            eager_step("mlp", traced, opt_g, x, y)
        else:
            graph(x, y)
    assert_same_state(eager, traced)
    state_e, state_g = opt_e.state_dict()["state"], opt_g.state_dict()["state"]
    for i in state_e:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            np.testing.assert_array_equal(state_e[i][key].cpu().numpy(), state_g[i][key].cpu().numpy())


def test_trace_leaves_eager_model_unchanged():
    model = models.build("mlp", mf)
    opt = mf.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch("mlp", np.random.default_rng(4))
    eager_step("mlp", model, opt, x, y)
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    graph = TrainGraph("mlp", model, opt)
    graph._compile([x, y])  # trace and compile without running
    for p, g in zip(model.parameters(), grads):
        np.testing.assert_array_equal(p.grad.numpy(), g)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


class ItemGraph(mf.nn.Graph):
    def __init__(self, call):
        super().__init__()
        self.call = call

    def build(self, x):
        return self.call(x)


@pytest.mark.parametrize("call, name", [
    (lambda x: x.sum() * x.sum().item(), "Tensor.item()"),
    (lambda x: mf.tensor(x.numpy()), "Tensor.numpy"),
    (lambda x: mf.tensor(x.tolist()), "Tensor.tolist"),
    (lambda x: mf.nonzero(x), "nonzero is not traceable"),
    (lambda x: mf.masked_select(x, x > 0), "masked_select is not traceable"),
])
def test_untraceable_calls_raise_naming_the_op(call, name):
    graph = ItemGraph(call)
    with pytest.raises(RuntimeError, match="not traceable in graph mode") as info:
        graph(mf.ones(3))
    assert name in str(info.value)
    assert not mf._C._graph.is_tracing()
    # Eager code works again after the failed trace.
    assert mf.ones(2).sum().item() == 2.0


def test_build_must_return_tensors():
    graph = ItemGraph(lambda x: 3)
    with pytest.raises(TypeError, match="must return a tensor"):
        graph(mf.ones(3))
    with pytest.raises(TypeError, match="graph inputs must be tensors"):
        graph(3)


def test_dropout_masks_and_batch_norm_statistics_match_eager():
    # fashion_cnn has BatchNorm (running statistics written by the kernel)
    # and Dropout (fresh Philox counters reserved on every run, in eager's order).
    eager, traced = twin_models_of("fashion_cnn")
    opt_e = mf.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_g = mf.optim.SGD(traced.parameters(), lr=0.05, momentum=0.9)
    graph = TrainGraph("fashion_cnn", traced, opt_g)
    rng = np.random.default_rng(5)
    for step in range(3):
        x, y = models.random_batch("fashion_cnn", 4, rng)
        x, y = mf.tensor(x), mf.tensor(y)
        mf.manual_seed(100 + step)
        loss_e = eager_step("fashion_cnn", eager, opt_e, x, y)
        mf.manual_seed(100 + step)
        assert graph(x, y).item() == loss_e.item(), f"step {step}"
    assert_same_state(eager, traced)


class ClippedGraph(TrainGraph):
    def build(self, x, y):
        loss = models.loss_fn(self.name, mf, self.model(x), y)
        loss.backward()
        mf.nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        return loss


def test_gradient_clipping_is_traced():
    eager, traced = twin_models("mlp")
    opt_e = mf.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = mf.optim.SGD(traced.parameters(), lr=0.1)
    graph = ClippedGraph("mlp", traced, opt_g)
    rng = np.random.default_rng(6)
    for _ in range(3):
        x, y = batch("mlp", rng)
        opt_e.zero_grad()
        loss = models.loss_fn("mlp", mf, eager(x), y)
        loss.backward()
        mf.nn.utils.clip_grad_norm_(eager.parameters(), 0.5)
        opt_e.step()
        assert graph(x, y).item() == loss.item()
    assert_same_state(eager, traced)
    assert "norm" in str(graph)


def test_optimizer_state_dict_loaded_after_compiling_is_used():
    eager, traced = twin_models("mlp")
    opt_e = mf.optim.Adam(eager.parameters(), lr=1e-3)
    opt_g = mf.optim.Adam(traced.parameters(), lr=1e-3)
    graph = TrainGraph("mlp", traced, opt_g)
    rng = np.random.default_rng(7)
    x, y = batch("mlp", rng)
    graph(x, y)  # compiled with opt_g's first state tensors
    eager_step("mlp", eager, opt_e, x, y)
    eager_step("mlp", eager, opt_e, x, y)
    # Both sides continue from eager's state: the graph follows the new tensors.
    traced.load_state_dict(eager.state_dict())
    opt_g.load_state_dict(opt_e.state_dict())
    for _ in range(2):
        x, y = batch("mlp", rng)
        assert graph(x, y).item() == eager_step("mlp", eager, opt_e, x, y).item()
    assert_same_state(eager, traced)
    assert "model.1.weight.exp_avg" in str(graph)


@pytest.mark.parametrize("name", ["mlp", "lenet"])
def test_steady_state_runs_take_no_new_memory(name):
    eager, traced = twin_models(name)
    opt = mf.optim.SGD(traced.parameters(), lr=0.01, momentum=0.9)
    graph = TrainGraph(name, traced, opt)
    x, y = batch(name, np.random.default_rng(8))
    graph(x, y)
    graph(x, y)
    before = mf.memory_stats()
    for _ in range(3):
        graph(x, y)
    after = mf.memory_stats()
    # Buffers and every kernel's scratch, fused programs' included, come
    # from the plan: a run allocates only the loss it returns, from the
    # allocator's cache.
    assert after["reserved_bytes"] == before["reserved_bytes"]
    assert after["num_allocations"] - before["num_allocations"] == 3
    assert after["num_cache_hits"] - before["num_cache_hits"] == 3


def test_profile_lists_the_kernels():
    model = models.build("mlp", mf)
    model.eval()
    graph = EvalGraph(model)
    x = mf.randn(2, 784)
    with pytest.raises(ValueError, match="no plan for these inputs"):
        graph.profile(x)
    graph(x)
    table = graph.profile(x, runs=2)
    assert "addmm" in table and "ms/run" in table


class SteppingGraph(TrainGraph):
    def build(self, x, y):
        loss = super().build(x, y)
        self._optimizers[0][0].step()
        return loss


def test_stepping_the_optimizer_in_build_is_refused():
    model = models.build("mlp", mf)
    opt = mf.optim.SGD(model.parameters(), lr=0.1)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    graph = SteppingGraph("mlp", model, opt)
    with pytest.raises(RuntimeError, match="called an optimizer's step"):
        graph(*batch("mlp", np.random.default_rng(9)))
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    assert repr(EvalGraph(model)) == "EvalGraph (not traced yet)"


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_graph_amp_equals_eager_amp(name, device):
    """config.enable_amp traces under autocast: the same casts, the same
    kernels, so graph and eager bfloat16 steps agree."""
    mf.manual_seed(0)
    eager_model, graph_model = twin_models(name, device)
    eager_opt = mf.optim.AdamW(eager_model.parameters(), lr=1e-3)
    graph_opt = mf.optim.AdamW(graph_model.parameters(), lr=1e-3)
    g = TrainGraph(name, graph_model, graph_opt, exact=False)
    g.config.enable_amp(True, dtype=mf.bfloat16)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = batch(name, rng, device)
        eager_opt.zero_grad()
        with mf.autocast(device, dtype=mf.bfloat16):
            eager_loss = models.loss_fn(name, mf, eager_model(x), y)
        eager_loss.backward()
        eager_opt.step()
        graph_loss = g(x, y)
        assert graph_loss.dtype == eager_loss.dtype == mf.float32
        np.testing.assert_allclose(graph_loss.cpu().numpy(), eager_loss.detach().cpu().numpy(), rtol=1e-5)
    assert "cast" in str(g)
    for (k, a), (_, b) in zip(eager_model.state_dict().items(), graph_model.state_dict().items()):
        assert a.dtype == b.dtype == mf.float32, k
        np.testing.assert_allclose(b.cpu().numpy(), a.cpu().numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    with pytest.raises(TypeError, match="bfloat16"):
        g.config.enable_amp(True, dtype=mf.float32)


def test_global_graph_on_one_rank_keeps_layouts_and_retraces_per_sbp():
    p = mf.placement("cpu", [0])
    B, S = mf.sbp.broadcast, mf.sbp.split
    mf.manual_seed(0)
    model = mf.nn.Linear(4, 3).to_global(p, B)

    class Predict(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    g = Predict()
    x = mf.randn(6, 4)
    for sbp in (S(0), B, S(0)):
        xg = x.to_global(placement=p, sbp=sbp)
        out = g(xg)
        with mf.no_grad():
            expected = model(xg)
        assert out.is_global and out.sbp == expected.sbp == (sbp,) and out.placement == p
        assert out.to_local().tolist() == expected.to_local().tolist()
    assert g.num_compiled == 2
    assert "global (S(0),) of (6, 4)" in str(g)  # the last call's plan
    with pytest.raises(ValueError, match="compiled for a global one"):
        g._last.executable.run([x])


# --- gradient accumulation (config.set_gradient_accumulation_steps) ---------------


def _accumulation_model():
    mf.manual_seed(0)
    return mf.nn.Sequential(mf.nn.Linear(5, 7), mf.nn.Tanh(), mf.nn.Linear(7, 3)).double()


class _AccumulatingGraph(mf.nn.Graph):
    def __init__(self, model, opt, steps):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.config.set_gradient_accumulation_steps(steps)

    def build(self, x, y):
        out = self.model(x)
        loss = F.mse_loss(out, y)
        loss.backward()
        return loss, out


def test_gradient_accumulation_equals_the_whole_batch(device):
    rng = np.random.default_rng(0)
    data = [(mf.tensor(rng.standard_normal((8, 5)), device=device),
             mf.tensor(rng.standard_normal((8, 3)), device=device)) for _ in range(4)]
    ref = _accumulation_model().to(device)
    ref_opt = mf.optim.AdamW(ref.parameters(), lr=0.01)
    model = _accumulation_model().to(device)
    graph = _AccumulatingGraph(model, mf.optim.AdamW(model.parameters(), lr=0.01), 4)
    for x, y in data:
        ref_opt.zero_grad()
        out = ref(x)
        loss = F.mse_loss(out, y)
        loss.backward()
        ref_opt.step()
        got_loss, got_out = graph(x, y)
        # The 0-d loss is the micro-batches' mean, the per-row output their concatenation.
        np.testing.assert_allclose(got_loss.item(), loss.item(), rtol=1e-12)
        np.testing.assert_allclose(got_out.cpu().numpy(), out.detach().cpu().numpy(), rtol=1e-12, atol=1e-15)
    assert graph.num_compiled == 1
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-10, atol=1e-14)


def test_gradient_accumulation_bad_input():
    model = _accumulation_model()
    graph = _AccumulatingGraph(model, mf.optim.SGD(model.parameters(), lr=0.1), 3)
    with pytest.raises(ValueError, match=r"input 0 has shape \(8, 5\)"):
        graph(mf.randn(8, 5, dtype=mf.float64), mf.randn(8, 3, dtype=mf.float64))
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="set_gradient_accumulation_steps"):
            mf.nn.Graph().config.set_gradient_accumulation_steps(bad)


class _ScaledAccumulatingGraph(_AccumulatingGraph):
    def build(self, x, y, blowup):
        loss = F.mse_loss(self.model(x), y) * blowup
        loss.backward()
        return loss


def test_gradient_accumulation_under_a_grad_scaler():
    # The summed gradients are unscaled once: equal to eager accumulation of
    # scaler.scale(loss / 4), and an inf in one micro-batch skips the step.
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((8, 5)), rng.standard_normal((8, 3))) for _ in range(6)]
    ref = _accumulation_model()
    ref_opt = mf.optim.AdamW(ref.parameters(), lr=0.01)
    ref_scaler = mf.amp.GradScaler(init_scale=8.0, growth_interval=2)
    model = _accumulation_model()
    graph = _ScaledAccumulatingGraph(model, mf.optim.AdamW(model.parameters(), lr=0.01), 4)
    scaler = mf.amp.GradScaler(init_scale=8.0, growth_interval=2)
    graph.set_grad_scaler(scaler)
    for step, (x, y) in enumerate(data):
        ref_opt.zero_grad()
        for k in range(4):
            rows = slice(2 * k, 2 * k + 2)
            loss = F.mse_loss(ref(mf.tensor(x[rows])), mf.tensor(y[rows])) / 4
            if step == 2 and k == 1:
                loss = loss * float("inf")
            ref_scaler.scale(loss).backward()
        ref_scaler.step(ref_opt)
        ref_scaler.update()
        # blowup is a 0-d input: every micro-batch gets it whole.
        blowup = mf.tensor(float("inf") if step == 2 else 1.0, dtype=mf.float64)
        graph(mf.tensor(x), mf.tensor(y), blowup)
        assert scaler.get_scale() == ref_scaler.get_scale(), step
    assert graph.num_compiled == 1
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-14)


def test_a_parameter_frozen_between_calls_gets_its_own_plan():
    rng = np.random.default_rng(2)
    data = [(mf.tensor(rng.standard_normal((8, 5))), mf.tensor(rng.standard_normal((8, 3)))) for _ in range(4)]
    ref = _accumulation_model()
    ref_opt = mf.optim.AdamW(ref.parameters(), lr=0.01)
    model = _accumulation_model()
    graph = _AccumulatingGraph(model, mf.optim.AdamW(model.parameters(), lr=0.01), 1)
    for step, (x, y) in enumerate(data):
        for m in (ref, model):
            m[0].bias.requires_grad_(step != 1)
        ref_opt.zero_grad()
        F.mse_loss(ref(x), y).backward()
        ref_opt.step()
        graph(x, y)
    assert graph.num_compiled == 2
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_an_input_no_node_reads_gets_its_own_buffer():
    """An unused build() input is still copied into the plan's arena each
    run: it needs a buffer of its own (it once got offset -1 and the copy
    wrote before the arena)."""
    r = mf.randn(1, 4)

    class G(mf.nn.Graph):
        def build(self, x, unused):
            return x * 0.5 + r

    g = G()
    x = mf.randn(4, 4)
    for _ in range(3):
        out = g(x, mf.randn(64, 64))
        np.testing.assert_array_equal(out.numpy(), (x * 0.5 + r).numpy())
    assert g.planned_peak_bytes >= 64 * 64 * 4


@pytest.mark.skipif(not mf.cuda.is_available(), reason="no CUDA device (or emulated device) is visible")
@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet18"])
def test_cuda_graph_replays_equal_eager_steps(name):
    """config.enable_cuda_graph() (Note [Captured steps]): the first run goes
    step by step, the second is recorded, later runs replay it; a changed
    learning rate records again. Steps equal eager ones bit for bit."""
    eager, traced = twin_models(name, "cuda")
    opt_e = mf.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_g = mf.optim.SGD(traced.parameters(), lr=0.05, momentum=0.9)
    sch_e = mf.optim.lr_scheduler.StepLR(opt_e, step_size=3, gamma=0.5)
    sch_g = mf.optim.lr_scheduler.StepLR(opt_g, step_size=3, gamma=0.5)
    graph = TrainGraph(name, traced, opt_g, sch_g)
    graph.config.enable_cuda_graph()
    rng = np.random.default_rng(0)
    for step in range(5):
        x, y = batch(name, rng, "cuda")
        loss_e = eager_step(name, eager, opt_e, x, y)
        sch_e.step()
        assert graph(x, y).item() == loss_e.item(), f"step {step}"
    # Recorded at the second run and again after the learning rate fell at the third step.
    assert graph._last.executable.num_captures == 2
    assert_same_state(eager, traced)


@pytest.mark.skipif(not mf.cuda.is_available(), reason="no CUDA device (or emulated device) is visible")
def test_cuda_graph_skips_plans_that_draw_random_numbers_and_the_cpu():
    mf.manual_seed(0)
    model = mf.nn.Sequential(mf.nn.Linear(8, 8), mf.nn.Dropout(0.5), mf.nn.Linear(8, 2)).to("cuda")

    class Forward(mf.nn.Graph):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def build(self, x):
            return self.net(x)

    graph = Forward(model)
    graph.config.enable_cuda_graph()
    x = mf.randn(4, 8, device="cuda")
    first, second, third = (graph(x).cpu().numpy() for _ in range(3))
    assert not np.array_equal(first, third)  # each run draws new masks
    assert graph._last.executable.num_captures == 0
    cpu = Forward(mf.nn.Linear(8, 2))
    cpu.config.enable_cuda_graph()
    for _ in range(3):
        cpu(mf.randn(4, 8))
    assert cpu._last.executable.num_captures == 0
