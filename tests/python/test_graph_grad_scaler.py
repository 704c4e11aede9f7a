"""Graph mode with a grad scaler (nn.Graph.set_grad_scaler): a compiled step
scales the loss, unscales and checks the gradients, skips the update of a
step with inf/NaN gradients and updates the scale, as eager code with the
same GradScaler does."""
import math
import os
import sys

import numpy as np
import pytest

import meshflow as mf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import models  # noqa: E402
from test_graph import ClippedGraph, EvalGraph, TrainGraph, assert_same_state, batch, twin_models  # noqa: E402

OPTIMIZERS = {
    "sgd_momentum": lambda p: mf.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p: mf.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: mf.optim.AdamW(p, lr=1e-3, weight_decay=0.1),
}


def eager_scaled_step(name, model, optimizer, scaler, x, y, amp_dtype=None):
    optimizer.zero_grad()
    with mf.autocast("cpu", dtype=amp_dtype or mf.bfloat16, enabled=amp_dtype is not None):
        loss = models.loss_fn(name, mf, model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def optimizer_state(optimizer):
    return {(i, key): value.numpy().copy()
            for i, entry in optimizer.state_dict()["state"].items()
            for key, value in entry.items() if isinstance(value, mf.Tensor)}


def assert_same_optimizer_state(a, b):
    sa, sb = optimizer_state(a), optimizer_state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=str(k))


def with_inf(x):
    values = x.numpy().copy()
    values.flat[3] = math.inf
    return mf.tensor(values)


@pytest.mark.parametrize("opt", list(OPTIMIZERS))
def test_scaled_graph_steps_equal_eager_including_skipped_steps(opt):
    eager, traced = twin_models("mlp")
    opt_e, opt_g = OPTIMIZERS[opt](eager.parameters()), OPTIMIZERS[opt](traced.parameters())
    cfg = dict(init_scale=2.0**10, growth_interval=2)
    scaler_e, scaler_g = mf.amp.GradScaler(**cfg), mf.amp.GradScaler(**cfg)
    graph = TrainGraph("mlp", traced, opt_g)
    graph.set_grad_scaler(scaler_g)
    rng = np.random.default_rng(0)
    overflow = [False, False, True, True, False, False, False]
    for step, inf in enumerate(overflow):
        x, y = batch("mlp", rng)
        if inf:
            x = with_inf(x)
        params_before, state_before = traced.state_dict(), optimizer_state(opt_g)
        params_before = {k: v.numpy().copy() for k, v in params_before.items()}
        loss_e = eager_scaled_step("mlp", eager, opt_e, scaler_e, x, y)
        loss_g = graph(x, y)
        np.testing.assert_array_equal(loss_g.numpy(), loss_e.detach().numpy(), err_msg=f"step {step}")
        assert math.isnan(loss_g.item()) == inf
        assert scaler_g.get_scale() == scaler_e.get_scale(), f"step {step}"
        assert scaler_g._get_growth_tracker() == scaler_e._get_growth_tracker(), f"step {step}"
        assert_same_state(eager, traced)
        assert_same_optimizer_state(opt_e, opt_g)
        if inf:  # a skipped step changes no parameter and no state (Adam's step counter included)
            for k, v in traced.state_dict().items():
                np.testing.assert_array_equal(v.numpy(), params_before[k], err_msg=k)
            after = optimizer_state(opt_g)
            for k in state_before:
                np.testing.assert_array_equal(after[k], state_before[k], err_msg=str(k))
    # 2 finite steps grow 1024 -> 2048, two overflows back off to 512, 2 finite steps grow to 1024
    assert scaler_g.get_scale() == 1024.0 and scaler_g._get_growth_tracker() == 1
    assert graph.num_compiled == 1
    text = str(graph)
    assert "amp_unscale_" in text and "amp_update_scale_" in text and "grad_scaler.found_inf" in text


@pytest.mark.parametrize("opt", ["sgd_momentum", "adamw"])
def test_float16_overflow_backs_off_as_eager(opt):
    """float16 autocast with a huge initial scale: the first steps overflow
    in float16 and are skipped until the scale has backed off enough."""
    eager, traced = twin_models("gpt")
    opt_e, opt_g = OPTIMIZERS[opt](eager.parameters()), OPTIMIZERS[opt](traced.parameters())
    cfg = dict(init_scale=2.0**24, growth_interval=3)
    scaler_e, scaler_g = mf.amp.GradScaler(**cfg), mf.amp.GradScaler(**cfg)
    graph = TrainGraph("gpt", traced, opt_g)
    graph.config.enable_amp(True, dtype=mf.float16)
    graph.set_grad_scaler(scaler_g)
    initial = {k: v.numpy().copy() for k, v in traced.state_dict().items()}
    rng = np.random.default_rng(1)
    scales = []
    for step in range(8):
        x, y = batch("gpt", rng)
        loss_e = eager_scaled_step("gpt", eager, opt_e, scaler_e, x, y, amp_dtype=mf.float16)
        loss_g = graph(x, y)
        np.testing.assert_allclose(loss_g.numpy(), loss_e.detach().numpy(), rtol=1e-5, err_msg=f"step {step}")
        assert scaler_g.get_scale() == scaler_e.get_scale(), f"step {step}"
        assert scaler_g._get_growth_tracker() == scaler_e._get_growth_tracker(), f"step {step}"
        scales.append(scaler_g.get_scale())
    skipped = [s < before for s, before in zip(scales, [cfg["init_scale"]] + scales)]
    assert skipped[0] and sum(skipped) >= 2 and sum(not s for s in skipped) >= 3, scales
    changed = [not np.array_equal(v.numpy(), initial[k]) for k, v in traced.state_dict().items()]
    assert any(changed)  # the finite steps did train
    for (k, a), (_, b) in zip(eager.state_dict().items(), traced.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    sa, sb = optimizer_state(opt_e), optimizer_state(opt_g)
    for k in sa:
        np.testing.assert_allclose(sb[k], sa[k], rtol=1e-4, atol=1e-6, err_msg=str(k))


def test_eager_and_graph_steps_share_the_scaler():
    eager, traced = twin_models("mlp")
    opt_e, opt_g = mf.optim.Adam(eager.parameters(), lr=1e-3), mf.optim.Adam(traced.parameters(), lr=1e-3)
    scaler_e, scaler_g = mf.amp.GradScaler(init_scale=64.0, growth_interval=1), mf.amp.GradScaler(
        init_scale=64.0, growth_interval=1)
    graph = TrainGraph("mlp", traced, opt_g)
    graph.set_grad_scaler(scaler_g)
    rng = np.random.default_rng(2)
    for step in range(5):
        x, y = batch("mlp", rng)
        if step == 2:
            x = with_inf(x)
        eager_scaled_step("mlp", eager, opt_e, scaler_e, x, y)
        if step % 2:
            eager_scaled_step("mlp", traced, opt_g, scaler_g, x, y)
        else:
            graph(x, y)
        assert scaler_g.state_dict() == scaler_e.state_dict(), f"step {step}"
    assert_same_state(eager, traced)
    assert_same_optimizer_state(opt_e, opt_g)
    # load_state_dict writes the scaler's tensors in place: the compiled step follows it
    scaler_g.load_state_dict({**scaler_g.state_dict(), "scale": 2.0**100})
    scaler_e.load_state_dict({**scaler_e.state_dict(), "scale": 2.0**100})
    x, y = batch("mlp", rng)
    eager_scaled_step("mlp", eager, opt_e, scaler_e, x, y)
    graph(x, y)
    assert scaler_g.state_dict() == scaler_e.state_dict()
    assert_same_state(eager, traced)


def test_clipping_in_build_sees_unscaled_gradients():
    """The gradients are unscaled when backward() ends, as eager code calls
    scaler.unscale_(opt) before clipping."""
    eager, traced = twin_models("mlp")
    opt_e, opt_g = mf.optim.SGD(eager.parameters(), lr=0.1), mf.optim.SGD(traced.parameters(), lr=0.1)
    scaler_e, scaler_g = mf.amp.GradScaler(init_scale=2.0**12), mf.amp.GradScaler(init_scale=2.0**12)
    graph = ClippedGraph("mlp", traced, opt_g)
    graph.set_grad_scaler(scaler_g)
    rng = np.random.default_rng(6)
    for _ in range(3):
        x, y = batch("mlp", rng)
        opt_e.zero_grad()
        loss = models.loss_fn("mlp", mf, eager(x), y)
        scaler_e.scale(loss).backward()
        scaler_e.unscale_(opt_e)
        mf.nn.utils.clip_grad_norm_(eager.parameters(), 0.5)
        scaler_e.step(opt_e)
        scaler_e.update()
        assert graph(x, y).item() == loss.item()
    assert_same_state(eager, traced)


def test_disabled_scaler_changes_nothing():
    eager, traced = twin_models("mlp")
    opt_e, opt_g = mf.optim.SGD(eager.parameters(), lr=0.1), mf.optim.SGD(traced.parameters(), lr=0.1)
    graph = TrainGraph("mlp", traced, opt_g)
    graph.set_grad_scaler(mf.amp.GradScaler(enabled=False))
    x, y = batch("mlp", np.random.default_rng(7))
    eager_scaled_step("mlp", eager, opt_e, mf.amp.GradScaler(enabled=False), x, y)
    graph(x, y)
    assert_same_state(eager, traced)
    assert "amp_unscale" not in str(graph)


class NoBackwardGraph(TrainGraph):
    def build(self, x, y):
        return models.loss_fn(self.name, mf, self.model(x), y)


class TwoBackwardsGraph(TrainGraph):
    def build(self, x, y):
        loss = models.loss_fn(self.name, mf, self.model(x), y)
        loss.backward(retain_graph=True)
        loss.backward()
        return loss


class ScalingInBuildGraph(TrainGraph):
    def __init__(self, name, model, optimizer, scaler):
        super().__init__(name, model, optimizer)
        self.scaler = scaler

    def build(self, x, y):
        loss = models.loss_fn(self.name, mf, self.model(x), y)
        self.scaler.scale(loss).backward()
        return loss


def test_misuse_is_refused():
    model = models.build("mlp", mf)
    opt = mf.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch("mlp", np.random.default_rng(8))
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    with pytest.raises(TypeError, match="expected a meshflow.amp.GradScaler, got float"):
        TrainGraph("mlp", model, opt).set_grad_scaler(2.0**16)
    evaluate = EvalGraph(model)
    evaluate.set_grad_scaler(mf.amp.GradScaler())
    with pytest.raises(RuntimeError, match="set_grad_scaler needs an optimizer"):
        evaluate(x)
    no_backward = NoBackwardGraph("mlp", model, opt)
    no_backward.set_grad_scaler(mf.amp.GradScaler())
    with pytest.raises(RuntimeError, match="must call loss.backward"):
        no_backward(x, y)
    twice = TwoBackwardsGraph("mlp", model, opt)
    twice.set_grad_scaler(mf.amp.GradScaler())
    with pytest.raises(RuntimeError, match="backward\\(\\) only once"):
        twice(x, y)
    scaler = mf.amp.GradScaler()
    scaling = ScalingInBuildGraph("mlp", model, opt, scaler)
    scaling.set_grad_scaler(scaler)
    with pytest.raises(RuntimeError, match="scales the loss itself"):
        scaling(x, y)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    scaler.scale(mf.tensor(1.0))  # usable again outside the trace



class TwoBranchGraph(mf.nn.Graph):
    def __init__(self, left, right, opt_left, opt_right):
        super().__init__()
        self.left, self.right = left, right
        self.add_optimizer(opt_left)
        self.add_optimizer(opt_right)

    def build(self, a, b):
        loss = self.left(a).square().mean() + self.right(b).square().mean()
        loss.backward()
        return loss


def test_each_optimizer_skips_on_its_own_gradients():
    """As eager GradScaler.step: an optimizer steps unless its own gradients
    hold an inf or NaN; the scale backs off when any optimizer's did."""
    mf.manual_seed(3)
    nets = [mf.nn.Linear(8, 4) for _ in range(4)]
    for eager, traced in ((nets[0], nets[2]), (nets[1], nets[3])):
        traced.load_state_dict(eager.state_dict())
    opts = [mf.optim.SGD(nets[0].parameters(), lr=0.1, momentum=0.9), mf.optim.Adam(nets[1].parameters(), lr=0.01),
            mf.optim.SGD(nets[2].parameters(), lr=0.1, momentum=0.9), mf.optim.Adam(nets[3].parameters(), lr=0.01)]
    scaler_e, scaler_g = mf.amp.GradScaler(init_scale=2.0**8), mf.amp.GradScaler(init_scale=2.0**8)
    graph = TwoBranchGraph(nets[2], nets[3], opts[2], opts[3])
    graph.set_grad_scaler(scaler_g)
    rng = np.random.default_rng(4)
    for step in range(4):
        a, b = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal((5, 8)).astype(np.float32)
        if step == 1:
            a[2, 3] = math.inf  # only the left branch overflows
        a, b = mf.tensor(a), mf.tensor(b)
        right_before = {k: v.numpy().copy() for k, v in nets[3].state_dict().items()}
        for opt in opts[:2]:
            opt.zero_grad()
        loss = nets[0](a).square().mean() + nets[1](b).square().mean()
        scaler_e.scale(loss).backward()
        for opt in opts[:2]:
            scaler_e.step(opt)
        scaler_e.update()
        graph(a, b)
        assert scaler_g.get_scale() == scaler_e.get_scale(), f"step {step}"
        for eager, traced in ((nets[0], nets[2]), (nets[1], nets[3])):
            assert_same_state(eager, traced)
        assert_same_optimizer_state(opts[1], opts[3])
        if step == 1:  # the right optimizer stepped although the left one skipped
            assert not np.array_equal(nets[3].weight.detach().numpy(), right_before["weight"])
    assert scaler_g.get_scale() == 2.0**7
