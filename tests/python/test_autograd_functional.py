"""meshflow.autograd.functional against torch.autograd.functional (PyTorch 1.13), float64.

Each function is written once over either library's tensors and evaluated by
vjp, jvp, jacobian, hessian, vhp and hvp in both; the results must agree in
value (rtol 1e-10), in structure (single tensor, tuple, tuple of tuples) and
shapes, and in whether they carry a graph (create_graph). strict mode and
bad arguments must raise the errors torch raises, with its messages.
"""
import numpy as np
import pytest
import torch
import torch.autograd.functional as TF

import meshflow as mf
import meshflow.autograd.functional as MF
from meshflow.autograd.functional import hessian as mf_hessian

RTOL = 1e-10
ATOL = 1e-12
LIBS = {torch: TF, mf: MF}


def tensor(lib, arr):
    return torch.tensor(np.asarray(arr, dtype=np.float64)) if lib is torch else mf.tensor(np.asarray(arr, np.float64))


def to_np(t):
    return t.detach().numpy()


def assert_same(mine, ref):
    """Same nesting of tuples, same shapes and values."""
    if isinstance(ref, (tuple, list)):
        assert type(mine) is type(ref), f"expected a {type(ref).__name__}, got {type(mine).__name__}"
        assert len(mine) == len(ref)
        for a, b in zip(mine, ref):
            assert_same(a, b)
        return
    assert isinstance(ref, torch.Tensor)
    assert isinstance(mine, mf.Tensor), f"expected a tensor, got {type(mine).__name__}"
    assert tuple(mine.shape) == tuple(ref.shape)
    np.testing.assert_allclose(to_np(mine), to_np(ref), rtol=RTOL, atol=ATOL)


def flat(result):
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in flat(r)]
    return [result]


rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4))
B = rng.standard_normal((4, 2))
X = rng.standard_normal((3, 4))
Y = rng.standard_normal((4,))
W1 = rng.standard_normal((5, 4)) * 0.5
W2 = rng.standard_normal((2, 5)) * 0.5
DATA = rng.standard_normal((6, 4))
TARGET = rng.standard_normal((6, 2))


# functions over either library: (builder(lib) -> func, input arrays)
def elementwise(lib):
    return lambda x: x.sin() * x.exp() + x * x * x


def matmul(lib):
    a, b = tensor(lib, A), tensor(lib, B)
    return lambda x: (a.t() @ x.tanh()) @ b


def two_in_tuple_out(lib):
    def f(x, y):
        return (x * y).sigmoid(), (x @ y).sum() * x.cos()
    return f


def scalar(lib):
    def f(x, y):
        return ((x * y).sin().sum() + (x.exp() * x).sum() * y.pow(2).sum()).reshape(1)
    return f


def mlp_loss(lib):
    data, target, w2 = tensor(lib, DATA), tensor(lib, TARGET), tensor(lib, W2)

    def loss(w1):
        hidden = (data @ w1.t()).tanh()
        return ((hidden @ w2.t() - target) ** 2).mean()
    return loss


CASES = {
    "elementwise": (elementwise, (X,), False),
    "matmul": (matmul, (X,), False),
    "two_in_tuple_out": (two_in_tuple_out, (X, Y), True),
    "mlp_loss": (mlp_loss, (W1,), False),
}
SCALAR_CASES = {
    "scalar_two_inputs": (scalar, (X, Y), True),
    "mlp_loss": (mlp_loss, (W1,), False),
    "elementwise_sum": (lambda lib: (lambda x: (x.sin() * x.exp() + x ** 3).sum()), (X,), False),
}


def inputs_for(lib, arrays, as_tuple):
    ts = tuple(tensor(lib, a) for a in arrays)
    return ts if as_tuple else ts[0]


def outputs_like(lib, builder, arrays, as_tuple, seed):
    """A random v shaped like the function's outputs."""
    out = builder(torch)(*(torch.tensor(a) for a in arrays))
    r = np.random.default_rng(seed)
    if isinstance(out, tuple):
        return tuple(tensor(lib, r.standard_normal(tuple(o.shape))) for o in out)
    return tensor(lib, r.standard_normal(tuple(out.shape)))


def inputs_like(lib, arrays, as_tuple, seed):
    r = np.random.default_rng(seed)
    vs = tuple(tensor(lib, r.standard_normal(a.shape)) for a in arrays)
    return vs if as_tuple else vs[0]


def run(lib, name, *args, **kwargs):
    return getattr(LIBS[lib], name)(*args, **kwargs)


# --- values and structure -------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_vjp_and_jvp_match_torch(case):
    builder, arrays, as_tuple = CASES[case]
    for op, v_of in (("vjp", lambda lib: outputs_like(lib, builder, arrays, as_tuple, 1)),
                     ("jvp", lambda lib: inputs_like(lib, arrays, as_tuple, 2))):
        ref = run(torch, op, builder(torch), inputs_for(torch, arrays, as_tuple), v_of(torch))
        mine = run(mf, op, builder(mf), inputs_for(mf, arrays, as_tuple), v_of(mf))
        assert isinstance(mine, tuple) and len(mine) == 2
        assert_same(mine, ref)
        assert all(not t.requires_grad for t in flat(mine))


@pytest.mark.parametrize("case", CASES)
def test_jacobian_matches_torch(case):
    builder, arrays, as_tuple = CASES[case]
    ref = TF.jacobian(builder(torch), inputs_for(torch, arrays, as_tuple))
    mine = MF.jacobian(builder(mf), inputs_for(mf, arrays, as_tuple))
    assert_same(mine, ref)
    assert all(not t.requires_grad for t in flat(mine))
    # vectorize=True and forward mode (which needs it) give the same values
    assert_same(MF.jacobian(builder(mf), inputs_for(mf, arrays, as_tuple), vectorize=True), ref)
    ref_fwd = TF.jacobian(builder(torch), inputs_for(torch, arrays, as_tuple), vectorize=True,
                          strategy="forward-mode")
    assert_same(MF.jacobian(builder(mf), inputs_for(mf, arrays, as_tuple), vectorize=True,
                            strategy="forward-mode"), ref_fwd)


def test_jacobian_structure():
    x, y = tensor(mf, X), tensor(mf, Y)
    j = MF.jacobian(lambda a: a * 2, x)
    assert isinstance(j, mf.Tensor) and tuple(j.shape) == (3, 4, 3, 4)
    j = MF.jacobian(lambda a, b: a @ b, (x, y))
    assert isinstance(j, tuple) and [tuple(t.shape) for t in j] == [(3, 3, 4), (3, 4)]
    j = MF.jacobian(lambda a: (a.sum(), a * 3), x)
    assert isinstance(j, tuple) and [tuple(t.shape) for t in j] == [(3, 4), (3, 4, 3, 4)]
    j = MF.jacobian(lambda a, b: (a @ b, b.sum()), (x, y))
    assert isinstance(j, tuple) and all(isinstance(r, tuple) and len(r) == 2 for r in j)
    assert [[tuple(t.shape) for t in r] for r in j] == [[(3, 3, 4), (3, 4)], [(3, 4), (4,)]]
    # a 1-tuple of inputs stays a tuple
    j = MF.jacobian(lambda a: a.exp(), (x,))
    assert isinstance(j, tuple) and len(j) == 1 and tuple(j[0].shape) == (3, 4, 3, 4)
    # the caller's tensors are left alone
    xg = tensor(mf, X).requires_grad_()
    MF.jacobian(lambda a: a.exp(), xg)
    assert xg.grad is None


@pytest.mark.parametrize("case", SCALAR_CASES)
def test_hessian_vhp_hvp_match_torch(case):
    builder, arrays, as_tuple = SCALAR_CASES[case]
    ref = TF.hessian(builder(torch), inputs_for(torch, arrays, as_tuple))
    mine = mf_hessian(builder(mf), inputs_for(mf, arrays, as_tuple))
    assert_same(mine, ref)
    assert all(not t.requires_grad for t in flat(mine))
    ref_fwd = TF.hessian(builder(torch), inputs_for(torch, arrays, as_tuple), vectorize=True,
                         outer_jacobian_strategy="forward-mode")
    assert_same(MF.hessian(builder(mf), inputs_for(mf, arrays, as_tuple), vectorize=True,
                           outer_jacobian_strategy="forward-mode"), ref_fwd)
    for op in ("vhp", "hvp"):
        ref = run(torch, op, builder(torch), inputs_for(torch, arrays, as_tuple),
                  inputs_like(torch, arrays, as_tuple, 3))
        mine = run(mf, op, builder(mf), inputs_for(mf, arrays, as_tuple), inputs_like(mf, arrays, as_tuple, 3))
        assert_same(mine, ref)
        assert all(not t.requires_grad for t in flat(mine))


def test_hessian_shapes():
    x, y = tensor(mf, X), tensor(mf, Y)
    h = MF.hessian(lambda a: (a ** 3).sum(), x)
    assert isinstance(h, mf.Tensor) and tuple(h.shape) == (3, 4, 3, 4)
    h = MF.hessian(lambda a, b: (a @ b).pow(2).sum(), (x, y))
    assert [[tuple(t.shape) for t in r] for r in h] == [[(3, 4, 3, 4), (3, 4, 4)], [(4, 3, 4), (4, 4)]]


def test_scalar_input_default_v():
    for op in ("vjp", "jvp", "vhp", "hvp"):
        ref = run(torch, op, lambda a: (a ** 3).sum(), torch.tensor([1.5], dtype=torch.float64))
        mine = run(mf, op, lambda a: (a ** 3).sum(), mf.tensor([1.5], dtype=mf.float64))
        assert_same(mine, ref)


# --- create_graph ----------------------------------------------------------------------------------


def test_create_graph_allows_second_order():
    def second_order(lib, api):
        x = tensor(lib, X).requires_grad_()
        y = tensor(lib, Y).requires_grad_()
        f = two_in_tuple_out(lib)
        jac = api.jacobian(f, (x, y), create_graph=True)
        assert all(t.requires_grad for t in flat(jac))
        total = sum((t * t).sum() for t in flat(jac))
        gx, gy = (torch if lib is torch else mf).autograd.grad(total, (x, y))
        _, v = api.vjp(f, (x, y), tuple(o.cos() for o in f(x, y)), create_graph=True)
        assert all(t.requires_grad for t in v)
        _, jv = api.jvp(f, (x, y), (x.sin(), y * 2), create_graph=True)
        _, hv = api.hvp(scalar(lib), (x, y), (x.cos(), y.sin()), create_graph=True)
        _, vh = api.vhp(scalar(lib), (x, y), (x.cos(), y.sin()), create_graph=True)
        h = api.hessian(scalar(lib), (x, y), create_graph=True)
        extra = (sum(t.sum() for t in v) + sum(t.tanh().sum() for t in jv) + sum((t * t).sum() for t in hv)
                 + sum(t.exp().sum() for t in vh) + sum(t.sin().sum() for t in flat(h)))
        ex, ey = (torch if lib is torch else mf).autograd.grad(extra, (x, y))
        return gx, gy, ex, ey

    assert_same(second_order(mf, MF), second_order(torch, TF))


def test_create_graph_false_returns_detached_results_even_for_inputs_requiring_grad():
    x = tensor(mf, X).requires_grad_()
    out, v = MF.vjp(elementwise(mf), x, tensor(mf, X))
    assert not out.requires_grad and not v.requires_grad
    assert not MF.jacobian(elementwise(mf), x).requires_grad
    assert not MF.hessian(lambda a: (a ** 3).sum(), x).requires_grad
    # with create_graph the results are differentiable functions of the inputs
    j = MF.jacobian(elementwise(mf), x, create_graph=True)
    assert j.requires_grad and not j.is_leaf
    # under no_grad, create_graph=False still computes
    with mf.no_grad():
        out, v = MF.vjp(elementwise(mf), x, tensor(mf, X))
        assert not v.requires_grad
        np.testing.assert_allclose(to_np(v), to_np(TF.vjp(elementwise(torch), tensor(torch, X), tensor(torch, X))[1]),
                                   rtol=RTOL)


# --- independent inputs, strict mode ---------------------------------------------------------------


def error_of(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.type, str(info.value).replace("torch.Size", "Size").replace("meshflow.Size", "Size")


def same_error(call):
    """call(lib, api) raises the same error type and message in both libraries."""
    ref = error_of(lambda: call(torch, TF))
    mine = error_of(lambda: call(mf, MF))
    assert mine == ref


def test_independent_inputs_give_zeros_when_not_strict():
    def f(x, y):
        return x.sin(), x * 2

    def g(x, y):
        return (x ** 3).sum()

    def c(x):
        return x.detach() * 2  # no graph to x at all

    def pair(lib, api):
        x, y = tensor(lib, X), tensor(lib, Y)
        return (api.jacobian(f, (x, y)), api.vjp(f, (x, y), (x, x))[1], api.jvp(f, (x, y), (x, y))[1],
                api.hessian(g, (x, y)), api.vhp(g, (x, y), (x, y))[1], api.hvp(g, (x, y), (x, y))[1],
                api.jacobian(c, x), api.vjp(c, x, x))
    mine, ref = pair(mf, MF), pair(torch, TF)
    assert_same(mine, ref)
    assert float(mine[0][0][1].abs().sum()) == 0.0 and float(mine[3][1][1].abs().sum()) == 0.0


STRICT_CALLS = {
    "jacobian_independent_input": lambda lib, api: api.jacobian(lambda x, y: x * 2, (tensor(lib, X), tensor(lib, Y)),
                                                               strict=True),
    "jacobian_output_no_grad": lambda lib, api: api.jacobian(lambda x: x.detach(), tensor(lib, X), strict=True),
    "jacobian_create_graph_linear": lambda lib, api: api.jacobian(lambda x: x * 2, tensor(lib, X), strict=True,
                                                                 create_graph=True),
    "vjp_independent": lambda lib, api: api.vjp(lambda x, y: x.sin(), (tensor(lib, X), tensor(lib, Y)),
                                               tensor(lib, X), strict=True),
    "jvp_independent": lambda lib, api: api.jvp(lambda x, y: x.sin(), (tensor(lib, X), tensor(lib, Y)),
                                               (tensor(lib, X), tensor(lib, Y)), strict=True),
    "hessian_linear": lambda lib, api: api.hessian(lambda x: (x * 2).sum(), tensor(lib, X), strict=True),
    "vhp_linear": lambda lib, api: api.vhp(lambda x: (x * 2).sum(), tensor(lib, X), tensor(lib, X), strict=True),
    "hvp_linear": lambda lib, api: api.hvp(lambda x: (x * 2).sum(), tensor(lib, X), tensor(lib, X), strict=True),
    "vectorize_and_strict": lambda lib, api: api.jacobian(lambda x: x.sin(), tensor(lib, X), strict=True,
                                                         vectorize=True),
    "forward_mode_and_strict": lambda lib, api: api.jacobian(lambda x: x.sin(), tensor(lib, X), strict=True,
                                                            vectorize=True, strategy="forward-mode"),
    "forward_mode_not_vectorized": lambda lib, api: api.jacobian(lambda x: x.sin(), tensor(lib, X),
                                                                strategy="forward-mode"),
    "forward_mode_create_graph": lambda lib, api: api.jacobian(lambda x: x.sin(), tensor(lib, X), create_graph=True,
                                                              vectorize=True, strategy="forward-mode"),
}


@pytest.mark.parametrize("name", STRICT_CALLS)
def test_strict_and_mode_errors_match_torch(name):
    same_error(STRICT_CALLS[name])


def test_strict_passes_for_dependent_outputs():
    x, y = tensor(mf, X), tensor(mf, Y)
    ref = TF.jacobian(two_in_tuple_out(torch), (tensor(torch, X), tensor(torch, Y)), strict=True)
    assert_same(MF.jacobian(two_in_tuple_out(mf), (x, y), strict=True), ref)
    ref = TF.hessian(scalar(torch), (tensor(torch, X), tensor(torch, Y)), strict=True)
    assert_same(MF.hessian(scalar(mf), (x, y), strict=True), ref)


# --- argument errors -------------------------------------------------------------------------------


ARG_CALLS = {
    "non_tensor_input": lambda lib, api: api.jacobian(lambda x: x, 3.0),
    "non_tensor_in_tuple": lambda lib, api: api.vjp(lambda x, y: x, (tensor(lib, X), 2), tensor(lib, X)),
    "list_is_not_a_tuple": lambda lib, api: api.jvp(lambda x: x, [tensor(lib, X)], tensor(lib, X)),
    "non_tensor_output": lambda lib, api: api.jacobian(lambda x: 1.0, tensor(lib, X)),
    "non_tensor_output_in_tuple": lambda lib, api: api.vjp(lambda x: (x, None), tensor(lib, X), tensor(lib, X)),
    "vjp_v_missing": lambda lib, api: api.vjp(lambda x: x.sin(), tensor(lib, X)),
    "jvp_v_missing": lambda lib, api: api.jvp(lambda x: x.sin(), tensor(lib, X)),
    "vhp_v_missing": lambda lib, api: api.vhp(lambda x: x.sum(), tensor(lib, X)),
    "v_bad_size": lambda lib, api: api.vjp(lambda x: x.sin(), tensor(lib, X), tensor(lib, Y)),
    "v_bad_size_in_tuple": lambda lib, api: api.jvp(lambda x, y: x, (tensor(lib, X), tensor(lib, Y)),
                                                   (tensor(lib, X), tensor(lib, X))),
    "v_bad_length": lambda lib, api: api.jvp(lambda x, y: x, (tensor(lib, X), tensor(lib, Y)), (tensor(lib, X),)),
    "v_single_expected": lambda lib, api: api.vjp(lambda x: x.sin(), tensor(lib, X), (tensor(lib, X),) * 2),
    "hessian_non_scalar": lambda lib, api: api.hessian(lambda x: x.sin(), tensor(lib, X)),
    "hessian_tuple_output": lambda lib, api: api.hessian(lambda x: (x.sum(),), tensor(lib, X)),
    "hvp_non_scalar": lambda lib, api: api.hvp(lambda x: x.sin(), tensor(lib, X), tensor(lib, X)),
    "vhp_tuple_output": lambda lib, api: api.vhp(lambda x: (x.sum(), x.sum()), tensor(lib, X), tensor(lib, X)),
    "bad_strategy": lambda lib, api: api.jacobian(lambda x: x, tensor(lib, X), strategy="sideways"),
}


@pytest.mark.parametrize("name", ARG_CALLS)
def test_argument_errors_match_torch(name):
    same_error(ARG_CALLS[name])
