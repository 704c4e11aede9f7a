"""autograd.Function, autograd.graph.saved_tensors_hooks and
utils.checkpoint against PyTorch, and checkpointed gradients against the
uncheckpointed run bit for bit."""
import warnings

import numpy as np
import pytest
import torch
import torch.utils.checkpoint  # noqa: F401

import meshflow as mf
import meshflow.nn.functional as F


def same(a, b):
    """Bit-for-bit equality of two meshflow tensors."""
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.array_equal(a.detach().float().numpy() if a.dtype == mf.bfloat16 else a.detach().numpy(),
                          b.detach().float().numpy() if b.dtype == mf.bfloat16 else b.detach().numpy())


def close_to_torch(a, t, tol=1e-12):
    np.testing.assert_allclose(a.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


# --- autograd.Function ---------------------------------------------------------------------------

def exp_function(lib):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y
    return Exp


def scaled_mul_function(lib):
    """Two tensors and a number in, two outputs out (one unused below)."""
    class ScaledMul(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, scale, b):
            ctx.scale = scale
            ctx.save_for_backward(a, b)
            return a * b * scale, a + b

        @staticmethod
        def backward(ctx, g_prod, g_sum):
            a, b = ctx.saved_tensors
            ga = g_prod * b * ctx.scale + g_sum if ctx.needs_input_grad[0] else None
            gb = g_prod * a * ctx.scale + g_sum if ctx.needs_input_grad[2] else None
            return ga, None, gb
    return ScaledMul


def test_function_forward_backward_and_double_backward_match_torch():
    x0 = np.random.default_rng(0).standard_normal(5)
    results = {}
    for lib in (mf, torch):
        x = lib.tensor(x0, dtype=lib.float64, requires_grad=True)
        y = exp_function(lib).apply(x)
        assert type(y.grad_fn).__name__ == "ExpBackward" or y.grad_fn.name() == "ExpBackward"
        (g,) = lib.autograd.grad((y * y).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        results[lib.__name__] = (y, g, gg)
    for a, t in zip(results["meshflow"], results["torch"]):
        close_to_torch(a, t)


def test_function_with_numbers_several_outputs_and_needs_input_grad():
    rng = np.random.default_rng(1)
    a0, b0 = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    grads = {}
    for lib in (mf, torch):
        a = lib.tensor(a0, requires_grad=True)
        b = lib.tensor(b0)  # no gradient wanted: needs_input_grad[2] is False
        prod, total = scaled_mul_function(lib).apply(a, 2.5, b)
        assert prod.requires_grad and total.requires_grad
        (prod.sum() * 3 + total.pow(2).sum()).backward()
        grads[lib.__name__] = a.grad
        assert b.grad is None
    close_to_torch(grads["meshflow"], grads["torch"])


def test_unused_output_gets_zeros_unless_materialize_grads_is_off():
    seen = {}

    class Two(mf.autograd.Function):
        @staticmethod
        def forward(ctx, x, materialize):
            ctx.set_materialize_grads(materialize)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen["g2"] = g2
            return g1 * 2 + (0 if g2 is None else g2 * 3), None

    x = mf.ones(3, requires_grad=True)
    Two.apply(x, True)[0].sum().backward()
    assert seen["g2"] is not None and seen["g2"].tolist() == [0.0, 0.0, 0.0]
    x.grad = None
    Two.apply(x, False)[0].sum().backward()
    assert seen["g2"] is None and x.grad.tolist() == [2.0, 2.0, 2.0]


def test_mark_non_differentiable_and_integer_outputs():
    class SortValues(mf.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            values, indices = x.sort()
            ctx.mark_non_differentiable(indices)
            ctx.save_for_backward(indices)
            return values, indices

        @staticmethod
        def backward(ctx, g, _):
            (indices,) = ctx.saved_tensors
            return mf.zeros_like(g).scatter(0, indices, g)

    x = mf.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values, indices = SortValues.apply(x)
    assert values.requires_grad and not indices.requires_grad
    (values * mf.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [100.0, 1.0, 10.0]


def test_returning_an_input_and_setup_context_style():
    class Identity(mf.autograd.Function):
        @staticmethod
        def forward(x):
            return x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark = "set"

        @staticmethod
        def backward(ctx, g):
            assert ctx.mark == "set"
            return g * 2

    x = mf.ones(2, requires_grad=True)
    y = Identity.apply(x)
    assert y is not x and x.is_leaf and y.grad_fn is not None
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_function_errors_are_clear():
    class WrongCount(mf.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = mf.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        WrongCount.apply(x).sum().backward()

    class WrongShape(WrongCount):
        @staticmethod
        def backward(ctx, g):
            return mf.ones(3)

    with pytest.raises(RuntimeError, match="invalid gradient at index 0"):
        WrongShape.apply(x).sum().backward()

    class GradForNumber(mf.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    with pytest.raises(RuntimeError, match="was not a Tensor"):
        GradForNumber.apply(x, 2.0).sum().backward()
    with pytest.raises(RuntimeError, match="apply"):
        WrongCount()

    y = exp_function(mf).apply(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()


def test_saved_tensors_are_version_checked():
    x = mf.ones(3, requires_grad=True)
    y = exp_function(mf).apply(x * 1)
    with mf.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace|in-place operation"):
        y.sum().backward()


def test_once_differentiable_refuses_a_second_derivative():
    class Square(mf.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @mf.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = mf.tensor([1.0, 2.0], requires_grad=True)
    (g,) = mf.autograd.grad(Square.apply(x).sum(), x)  # once: fine
    assert g.tolist() == [2.0, 4.0]
    # As in PyTorch the error node needs an incoming gradient that requires
    # grad (a plain ones() would leave g without a graph at all).
    v = mf.ones(2, requires_grad=True)
    (g,) = mf.autograd.grad(Square.apply(x), x, grad_outputs=v, create_graph=True)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


# --- saved_tensors_hooks ---------------------------------------------------------------------------

def test_hooks_that_move_saved_tensors_to_numpy_and_back_match_torch():
    x0 = np.random.default_rng(2).standard_normal((4, 3))
    grads = {}
    for lib in (mf, torch):
        packed = []

        def pack(t):
            packed.append(1)
            return t.detach().numpy().copy()

        def unpack(a, lib=lib):
            return lib.from_numpy(a)

        x = lib.tensor(x0, requires_grad=True)
        w = lib.tensor(x0.T.copy(), requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = (x @ w).tanh().sum()
        assert packed
        loss.backward()
        grads[lib.__name__] = (x.grad, w.grad)
    for a, t in zip(grads["meshflow"], grads["torch"]):
        close_to_torch(a, t)


def test_hooks_nest_innermost_first_and_cover_function_saves():
    calls = []

    def hooks(name):
        return mf.autograd.graph.saved_tensors_hooks(lambda t: (calls.append(name), t)[1], lambda t: t)

    x = mf.ones(2, requires_grad=True)
    with hooks("outer"):
        with hooks("inner"):
            a = x * x
        b = exp_function(mf).apply(a)
    assert calls == ["inner", "inner", "outer"]
    b.sum().backward()
    assert np.allclose(x.grad.numpy(), 2 * np.e)


def test_an_unpack_hook_returning_another_shape_is_an_error():
    x = mf.ones(3, requires_grad=True)
    with mf.autograd.graph.saved_tensors_hooks(lambda t: None, lambda _: mf.zeros(5)):
        loss = (x * x).sum()
    with pytest.raises(RuntimeError, match="unpack hook returned a tensor of shape"):
        loss.backward()
    with mf.autograd.graph.saved_tensors_hooks(lambda t: None, lambda _: "not a tensor"):
        loss = (x * x).sum()
    with pytest.raises(TypeError, match="must return a Tensor"):
        loss.backward()


def test_double_backward_through_hooked_saves():
    x0 = np.array([0.3, -1.2, 2.0])
    results = {}
    for lib in (mf, torch):
        x = lib.tensor(x0, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t):
            y = (x * x * x).sin().sum()
        (g,) = lib.autograd.grad(y, x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        results[lib.__name__] = (g, gg)
    for a, t in zip(results["meshflow"], results["torch"]):
        close_to_torch(a, t)


# --- checkpoint ----------------------------------------------------------------------------------

class Block(mf.nn.Module):
    """Linear, BatchNorm, GELU, dropout and a residual: every kind of state
    a recomputation must reproduce."""

    def __init__(self, width):
        super().__init__()
        self.fc = mf.nn.Linear(width, width)
        self.norm = mf.nn.BatchNorm1d(width)
        self.drop = mf.nn.Dropout(0.25)

    def forward(self, x):
        return x + self.drop(F.gelu(self.norm(self.fc(x))))


def run_blocks(checkpointed, use_reentrant, dtype=mf.float64, autocast=False, steps=2):
    """Gradients, outputs and running statistics of two training steps."""
    mf.manual_seed(3)
    blocks = mf.nn.ModuleList([Block(8) for _ in range(3)]).to(dtype)
    x0 = mf.randn(16, 8, dtype=dtype)
    results = []
    for step in range(steps):
        mf.manual_seed(100 + step)
        x = x0.clone().requires_grad_()
        with mf.autocast("cpu", dtype=mf.bfloat16, enabled=autocast):
            h = x
            for block in blocks:
                h = mf.utils.checkpoint.checkpoint(block, h, use_reentrant=use_reentrant) if checkpointed else block(h)
            loss = h.float().pow(2).mean()
        loss.backward()
        results.append([loss, x.grad] + [p.grad.clone() for p in blocks.parameters()])
        for p in blocks.parameters():
            p.grad = None
    results.append([b for b in blocks.buffers()])
    return results


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("autocast", [False, True])
def test_checkpointed_gradients_equal_the_plain_run_bit_for_bit(use_reentrant, autocast):
    dtype = mf.float32 if autocast else mf.float64
    plain = run_blocks(False, use_reentrant, dtype, autocast)
    checkpointed = run_blocks(True, use_reentrant, dtype, autocast)
    for step_plain, step_checkpointed in zip(plain, checkpointed):
        assert len(step_plain) == len(step_checkpointed)
        for a, b in zip(step_plain, step_checkpointed):
            same(a, b)  # includes running_mean/var and num_batches_tracked


def test_checkpoint_matches_torch_without_randomness():
    rng = np.random.default_rng(4)
    w0, x0 = rng.standard_normal((6, 6)), rng.standard_normal((5, 6))
    grads = {}
    for lib in (mf, torch):
        w = lib.tensor(w0, requires_grad=True)
        x = lib.tensor(x0, requires_grad=True)

        def f(a, scale, w=w):
            return (a @ w).tanh() * scale

        out = lib.utils.checkpoint.checkpoint(f, x, 0.5, use_reentrant=False)
        out.pow(2).sum().backward()
        grads[lib.__name__] = (out, x.grad, w.grad)
    for a, t in zip(grads["meshflow"], grads["torch"]):
        close_to_torch(a, t)


def test_checkpoint_frees_activations():
    mf.manual_seed(0)
    blocks = [mf.nn.Sequential(mf.nn.Linear(256, 256), mf.nn.GELU(), mf.nn.Linear(256, 256), mf.nn.GELU())
              for _ in range(8)]
    x = mf.randn(256, 256, requires_grad=True)

    def run(checkpointed):
        base = mf.memory_allocated()
        h = x
        for block in blocks:
            h = mf.utils.checkpoint.checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
        return h, mf.memory_allocated() - base

    out, plain = run(False)
    del out
    out, kept = run(True)
    # Each block saves 4 activations of 256 KiB (its input, both linear
    # outputs and the first GELU's); checkpointed, only the blocks' outputs
    # stay (the next block's input).
    assert plain >= 8 * 3 * 256 * 256 * 4
    assert kept <= 8 * 256 * 256 * 4 + 65536
    out.sum().backward()
    assert x.grad is not None


def test_checkpoint_sequential_equals_the_plain_model():
    mf.manual_seed(1)
    model = mf.nn.Sequential(*[mf.nn.Linear(5, 5) for _ in range(5)]).double()
    x = mf.randn(3, 5, dtype=mf.float64, requires_grad=True)
    model(x).sum().backward()
    plain = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    mf.utils.checkpoint.checkpoint_sequential(model, 3, x, use_reentrant=False).sum().backward()
    for a, b in zip(plain, [x.grad] + [p.grad for p in model.parameters()]):
        same(a, b)
    with pytest.raises(ValueError):
        mf.utils.checkpoint.checkpoint_sequential(model, 9, x, use_reentrant=False)


def test_a_recomputation_that_differs_is_a_checkpoint_error():
    calls = []

    def changing(a):
        calls.append(1)
        return (a[:, : 1 + len(calls)] * 2).sin()

    x = mf.randn(4, 4, requires_grad=True)
    out = mf.utils.checkpoint.checkpoint(changing, x, use_reentrant=False)
    with pytest.raises(mf.utils.checkpoint.CheckpointError, match="when recomputed"):
        out.sum().backward()
    assert issubclass(mf.utils.checkpoint.CheckpointError, RuntimeError)

    y = mf.randn(3, requires_grad=True)
    z = y * 1
    out = mf.utils.checkpoint.checkpoint(lambda a: (a * a).sum(), z, use_reentrant=False)
    with mf.no_grad():
        z.add_(1)
    with pytest.raises(mf.utils.checkpoint.CheckpointError, match="modified in place"):
        out.backward()


def test_checkpoint_warnings_and_arguments():
    with pytest.warns(UserWarning, match="none of the outputs requires grad"):
        mf.utils.checkpoint.checkpoint(lambda a: a * 2, mf.ones(2), use_reentrant=False)
    with pytest.warns(UserWarning, match="use_reentrant"):
        mf.utils.checkpoint.checkpoint(lambda a: a * 2, mf.ones(2, requires_grad=True))
    with pytest.raises(ValueError, match="Unexpected keyword"):
        mf.utils.checkpoint.checkpoint(lambda a, k=1: a * k, mf.ones(2), use_reentrant=True, k=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = mf.ones(2, requires_grad=True)
        out = mf.utils.checkpoint.checkpoint(lambda a, k=1: a * k, x, use_reentrant=False, k=3)
        out.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_checkpoint_with_retain_graph_recomputes_again():
    x = mf.randn(4, dtype=mf.float64, requires_grad=True)
    out = mf.utils.checkpoint.checkpoint(lambda a: (a * a).sin().sum(), x, use_reentrant=False)
    out.backward(retain_graph=True)
    first = x.grad.clone()
    out.backward()
    same(x.grad, first * 2)


# --- graph mode: GraphModule.activation_checkpointing ---------------------------------------------

def graph_blocks(dtype):
    """Three blocks with dropout and BatchNorm, and their optimizer."""
    mf.manual_seed(0)
    blocks = mf.nn.Sequential(*[
        mf.nn.Sequential(mf.nn.Linear(16, 32), mf.nn.GELU(), mf.nn.Dropout(0.3), mf.nn.Linear(32, 16),
                         mf.nn.BatchNorm1d(16)) for _ in range(3)]).to(dtype)
    return blocks, mf.optim.SGD(blocks.parameters(), lr=0.1, momentum=0.9)


def graph_steps(checkpointed, amp, steps=3):
    dtype = mf.float32 if amp else mf.float64
    blocks, opt = graph_blocks(dtype)

    class Step(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = blocks
            self.add_optimizer(opt)
            if amp:
                self.config.enable_amp(True, dtype=mf.bfloat16)
            if checkpointed:
                for block in blocks:
                    block.to(mf.nn.graph.GraphModule).activation_checkpointing = True

        def build(self, x):
            loss = self.model(x).float().pow(2).mean()
            loss.backward()
            return loss

    graph = Step()
    x = mf.randn(32, 16, dtype=dtype)
    mf.manual_seed(5)
    losses = [graph(x) for _ in range(steps)]
    return losses, list(blocks.parameters()) + list(blocks.buffers()), graph


@pytest.mark.parametrize("amp", [False, True])
def test_graph_activation_checkpointing_equals_the_plain_graph_bit_for_bit(amp):
    """Dropout draws the forward's masks in the recomputation, BatchNorm
    updates its statistics once, and the plan keeps fewer bytes."""
    plain_losses, plain_state, plain = graph_steps(False, amp)
    losses, state, graph = graph_steps(True, amp)
    for a, b in zip(plain_losses + plain_state, losses + state):
        same(a, b)
    text = str(graph)
    assert "recomputed" in text and "recomputed" not in str(plain)
    recomputed = [line for line in text.splitlines() if line.endswith("recomputed")]
    assert sum("dropout(" in line for line in recomputed) == 3  # one per block, same masks as the forward's
    assert graph.planned_peak_bytes < plain.planned_peak_bytes


def test_graph_checkpointing_matches_eager_checkpointing():
    losses, state, _ = graph_steps(True, False, steps=1)
    # The same step eagerly, every block under utils.checkpoint.
    blocks, opt = graph_blocks(mf.float64)
    x = mf.randn(32, 16, dtype=mf.float64)
    mf.manual_seed(5)
    h = x
    for block in blocks:
        h = mf.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
    loss = h.float().pow(2).mean()
    loss.backward()
    opt.step()
    np.testing.assert_allclose(losses[0].item(), loss.item(), rtol=1e-12)
    for a, b in zip(state, list(blocks.parameters()) + list(blocks.buffers())):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_graph_module_settings_are_checked():
    m = mf.nn.Linear(2, 2)
    settings = m.to(mf.nn.graph.GraphModule)
    assert settings is m.to(mf.nn.graph.GraphModule) and settings.module is m
    with pytest.raises(TypeError):
        settings.activation_checkpointing = 1
    with pytest.raises(AttributeError):
        settings.activation_checkpointng = True
    assert m.to(mf.float64).weight.dtype == mf.float64


def test_get_and_set_rng_state_replay_random_draws():
    state = mf.get_rng_state()
    assert state.dtype == mf.uint8 and tuple(state.shape) == (16,)
    a = mf.rand(5)
    mf.set_rng_state(state)
    same(mf.rand(5), a)
    with pytest.raises(TypeError, match="uint8 tensor of 16 bytes"):
        mf.set_rng_state(mf.zeros(3))


def test_bad_arguments_are_clear_errors():
    x = mf.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="callable"):
        mf.utils.checkpoint.checkpoint(3, x, use_reentrant=False)
    with pytest.raises(ValueError, match="determinism_check"):
        mf.utils.checkpoint.checkpoint(lambda a: a * 2, x, use_reentrant=False, determinism_check="strict")
    for segments in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="segments"):
            mf.utils.checkpoint.checkpoint_sequential([mf.nn.Tanh()], segments, x, use_reentrant=False)
    with pytest.raises(TypeError, match="callable"):
        mf.autograd.graph.saved_tensors_hooks(None, lambda t: t)

    class SavesANumber(mf.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a, 2.0)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    with pytest.raises(TypeError, match="save_for_backward can only save tensors"):
        SavesANumber.apply(x)
    with pytest.raises(TypeError, match="mark_non_differentiable"):
        mf.autograd.function.FunctionCtx().mark_non_differentiable(1)
