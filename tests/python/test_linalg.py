"""torch.linalg against PyTorch 1.13 beyond the OpInfo samples (opinfo_linalg.py):
error classes and messages, named tuple results, norms over a grid of
ord/dim/keepdim, second derivatives, batches against single matrices, and
nn.init.orthogonal_."""
import math

import numpy as np
import pytest
import torch

import meshflow as mf
from test_errors import raised

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torch.cholesky's deprecation warning


def to_numpy(t):
    return t.detach().double().numpy()


def pair(array, requires_grad=False):
    """The same float64 values as a torch and a meshflow tensor."""
    array = np.asarray(array, dtype=np.float64)
    t = torch.tensor(array, requires_grad=requires_grad)
    m = mf.tensor(array)
    if requires_grad:
        m.requires_grad_()
    return t, m


def well_conditioned(rng, *shape):
    n = shape[-1]
    return rng.uniform(-1, 1, size=shape) + n * np.eye(n)


def spd(rng, *shape):
    m = rng.uniform(-1, 1, size=shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


# --- errors -----------------------------------------------------------------------------------------

SINGULAR = "lib.tensor([[1., 2.], [2., 4.]])"
BATCH_SINGULAR = f"lib.stack([lib.eye(2), {SINGULAR}])"

# (call for either library, text meshflow's message must contain): LinAlgError in both.
LINALG_ERRORS = [
    (f"lib.linalg.inv({SINGULAR})", "singular"),
    (f"lib.linalg.inv({BATCH_SINGULAR})", "(Batch element 1)"),
    (f"lib.inverse({SINGULAR})", "singular"),
    (f"lib.linalg.solve({SINGULAR}, lib.ones(2))", "singular"),
    (f"lib.linalg.solve({BATCH_SINGULAR}, lib.ones(2, 2, 1))", "(Batch element 1)"),
    (f"lib.linalg.cholesky({SINGULAR})", "the leading minor of order 2 is not positive-definite"),
    (f"lib.linalg.cholesky(-lib.eye(3))", "the leading minor of order 1 is not positive-definite"),
    (f"lib.linalg.cholesky({BATCH_SINGULAR})", "(Batch element 1)"),
    (f"lib.cholesky({SINGULAR})", "positive-definite"),
    ("lib.linalg.svd(lib.tensor([[float('nan'), 1.], [1., 1.]]))", "non-finite"),
    ("lib.linalg.svdvals(lib.tensor([[1., 1.], [float('nan'), 1.]]))", "non-finite"),
    ("lib.linalg.svd(lib.stack([lib.eye(2), lib.full((2, 2), float('nan'))]))", "(Batch element 1)"),
]


@pytest.mark.parametrize("expr,text", LINALG_ERRORS, ids=[c[0] for c in LINALG_ERRORS])
def test_matrix_failures_raise_linalg_error(expr, text):
    assert isinstance(raised(expr, torch), torch.linalg.LinAlgError)
    error = raised(expr, mf)
    assert isinstance(error, mf.linalg.LinAlgError), repr(error)
    assert isinstance(error, RuntimeError) and isinstance(error, mf.errors.Error)
    assert text in str(error)


def test_linalg_error_class():
    assert mf.linalg.LinAlgError is mf.errors.LinAlgError
    assert issubclass(mf.linalg.LinAlgError, RuntimeError)
    with pytest.raises(RuntimeError, match="singular"):
        mf.linalg.inv(mf.zeros(3, 3))


# (call for either library, text meshflow's message must contain): PyTorch's class, RuntimeError or a
# subclass (meshflow's ShapeError/TypeError/ValueError are RuntimeErrors too), IndexError for dims.
BAD_INPUT = [
    ("lib.linalg.det(lib.ones(2, 3))", "A must be batches of square matrices, but they are 2 by 3 matrices"),
    ("lib.linalg.inv(lib.ones(2, 3))", "square"),
    ("lib.linalg.cholesky(lib.ones(2, 3))", "square"),
    ("lib.linalg.slogdet(lib.ones(3, 4))", "square"),
    ("lib.linalg.eigh(lib.ones(3, 4))", "square"),
    ("lib.linalg.eigvalsh(lib.ones(3, 4))", "square"),
    ("lib.logdet(lib.ones(3, 4))", "square"),
    ("lib.linalg.inv(lib.ones(3))", "must have at least 2 dimensions"),
    ("lib.linalg.det(lib.ones(3))", "must have at least 2 dimensions"),
    ("lib.linalg.qr(lib.ones(3))", "must have at least 2 dimensions"),
    ("lib.linalg.svd(lib.ones(3))", "must have at least 2 dimensions"),
    ("lib.linalg.svdvals(lib.ones(()))", "must have at least 2 dimensions"),
    ("lib.linalg.inv(lib.ones(3, 3, dtype=lib.int64))", "floating point"),
    ("lib.linalg.svd(lib.ones(3, 3, dtype=lib.int64))", "floating point"),
    ("lib.linalg.inv(lib.ones(3, 3, dtype=lib.float16))", "Low precision"),
    ("lib.linalg.slogdet(lib.ones(3, 3, dtype=lib.float16))", "Low precision"),
    ("lib.linalg.svd(lib.ones(3, 3, dtype=lib.bfloat16))", "float"),
    ("lib.linalg.qr(lib.ones(3, 3), mode='bad')", "unrecognized mode 'bad'"),
    ("lib.linalg.eigh(lib.eye(3), UPLO='X')", "Expected UPLO argument to be 'L' or 'U', but got X"),
    ("lib.linalg.eigvalsh(lib.eye(3), UPLO='UL')", "UPLO"),
    ("lib.linalg.solve(lib.eye(3), lib.ones(4))", "Incompatible shapes of A and B for the equation AX = B (3x3 and 4x1)"),
    ("lib.linalg.solve(lib.eye(3), lib.ones(3, 2), left=False)", "XA = B (3x3 and 3x2)"),
    ("lib.linalg.solve(lib.eye(3), lib.ones(3), left=False)", "XA = B (3x3 and 3x1)"),
    ("lib.linalg.solve(lib.ones(1, 1), lib.ones(1), left=False)", "Vector broadcasting of the left hand side"),
    ("lib.linalg.solve(lib.eye(3), lib.ones(2, 4, 3))", "AX = B"),
    ("lib.linalg.solve(lib.eye(3), lib.ones(3, dtype=lib.float64))", "same dtype"),
    ("lib.linalg.solve(lib.ones(3, 4), lib.ones(3))", "square"),
    ("lib.linalg.solve(lib.ones(3), lib.ones(3))", "A must have at least 2 dimensions"),
    ("lib.linalg.solve(lib.eye(3), lib.tensor(1.))", "B must have at least 2 dimensions"),
    ("lib.linalg.solve(lib.ones(2, 3, 3), lib.ones(4, 3, 1))", "linalg.solve"),
    ("lib.linalg.vector_norm(lib.ones(3, dtype=lib.int64))", "floating point"),
    ("lib.linalg.vector_norm(lib.ones(3, dtype=lib.float64), dtype=lib.float32)", "without narrowing"),
    ("lib.linalg.vector_norm(lib.ones(3), dtype=lib.int64)", "dtype should be floating point"),
    ("lib.linalg.vector_norm(lib.ones(0, 3), float('inf'))", "cannot compute the inf norm on an empty tensor"),
    ("lib.linalg.vector_norm(lib.ones(0, 3), -1, dim=0)", "cannot compute the -1 norm on the dimension 0"),
    ("lib.linalg.vector_norm(lib.ones(0, 3), -float('inf'))", "-inf norm"),
    ("lib.linalg.vector_norm(lib.ones(3, 3), dim=(0, 0))", "multiple times"),
    ("lib.linalg.matrix_norm(lib.ones(3), 'fro')", "must have at least 2 dimensions"),
    ("lib.linalg.matrix_norm(lib.ones(3, 3), 'abc')", "Order abc not supported."),
    ("lib.linalg.matrix_norm(lib.ones(3, 3), 3)", "Order 3 not supported."),
    ("lib.linalg.matrix_norm(lib.ones(3, 3), 3.5)", "Order 3.5 not supported."),
    ("lib.linalg.matrix_norm(lib.ones(3, 3), dim=(0,))", "dim must be a 2-tuple"),
    ("lib.linalg.matrix_norm(lib.ones(3, 3), dim=(0, -2))", "dims must be different. Got (0, 0)"),
    ("lib.linalg.matrix_norm(lib.ones(3, 3, dtype=lib.int64))", "floating point"),
    ("lib.linalg.matrix_norm(lib.ones(3, 3, dtype=lib.float16), 'nuc')", "Low precision"),
    ("lib.linalg.matrix_norm(lib.ones(3, 3, dtype=lib.float16), -2)", "Low precision"),
    ("lib.linalg.matrix_norm(lib.ones(3, 3), dtype=lib.int32)", "dtype should be floating point"),
    ("lib.linalg.norm(lib.ones(2, 3, 4), 2)", "the input must be 1D or 2D. Got 3D."),
    ("lib.linalg.norm(lib.ones(2, 3, 4), 'fro')", "1D or 2D"),
    ("lib.linalg.norm(lib.ones(2, 3, 4), dim=(0, 1, 2))", "it must be of length 1 or 2"),
    ("lib.linalg.norm(lib.ones(3), 'fro')", "must have at least 2 dimensions"),
    ("lib.linalg.norm(lib.ones(3, 4), 'nuc', dim=(0,))", "dim must be a 2-tuple"),
    ("lib.linalg.norm(lib.ones(3, 4, dtype=lib.int64))", "floating point"),
    ("lib.linalg.svd(lib.ones(3, 3), driver='gesvd')", "driver"),
]

INDEX_ERRORS = [  # PyTorch's IndexError for a dim out of range, and for amax/amin over nothing
    "lib.linalg.matrix_norm(lib.ones(0, 3), 2)",
    "lib.linalg.matrix_norm(lib.ones(3, 0), -1)",
    "lib.linalg.vector_norm(lib.ones(3, 3), dim=2)",
    "lib.linalg.matrix_norm(lib.ones(3, 3), dim=(0, 5))",
    "lib.linalg.norm(lib.ones(3, 3), 1, dim=(0, 2))",
]


@pytest.mark.parametrize("expr,text", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_raises_like_pytorch(expr, text):
    expected = raised(expr, torch)
    assert isinstance(expected, RuntimeError), f"PyTorch gives {expected!r}; the case is wrong"
    error = raised(expr, mf)
    assert isinstance(error, RuntimeError), repr(error)
    assert not isinstance(error, mf.linalg.LinAlgError), "bad arguments are not a LinAlgError"
    assert text in str(error)


@pytest.mark.parametrize("expr", INDEX_ERRORS)
def test_dims_out_of_range_raise_index_error(expr):
    assert isinstance(raised(expr, torch), IndexError)
    assert isinstance(raised(expr, mf), IndexError)


def test_backward_errors_match_pytorch():
    for lib in (torch, mf):
        a = lib.ones(4, 3, dtype=lib.float64).add(lib.eye(4, 3, dtype=lib.float64)).requires_grad_()
        with pytest.raises(RuntimeError, match="not differentiable when mode='complete' and nrows > ncols"):
            lib.linalg.qr(a, mode="complete").R.sum().backward()
        with pytest.raises(RuntimeError, match="mode='r'"):
            lib.linalg.qr(a, mode="r").R.sum().backward()


# --- named tuples ------------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["lib.linalg.qr(A)", "lib.linalg.qr(A, mode='r')", "lib.linalg.svd(A)",
                                  "lib.linalg.svd(A, full_matrices=False)", "lib.linalg.eigh(A @ A.mT)",
                                  "lib.linalg.slogdet(A)", "lib.slogdet(A)", "A.slogdet()"])
def test_results_are_named_tuples_like_pytorch(call):
    rng = np.random.default_rng(0)
    a_t, a_m = pair(well_conditioned(rng, 4, 4))
    t = eval(call, {"lib": torch, "A": a_t})
    m = eval(call, {"lib": mf, "A": a_m})
    assert type(m).__name__ == type(t).__name__
    assert m._fields == type(t).__match_args__
    for field in m._fields:
        tv, mv = getattr(t, field), getattr(m, field)
        assert tuple(mv.shape) == tuple(tv.shape), field
        np.testing.assert_allclose(to_numpy(mv), to_numpy(tv), rtol=1e-10, atol=1e-10, err_msg=field)
    assert all(a is b for a, b in zip(m, (getattr(m, f) for f in m._fields)))


# --- norms -------------------------------------------------------------------------------------------

VECTOR_ORDS = [2, 1, 0, 3, 0.5, -1, -2.5, math.inf, -math.inf]
VECTOR_DIMS = [None, 0, -1, (0, 2), (2, 0, 1), ()]
MATRIX_ORDS = ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf]
MATRIX_DIMS = [(-2, -1), (0, 1), (1, 0), (0, 2), (-1, 0)]


def assert_forward_and_backward(fn, shape, seed=0, tol=1e-10):
    rng = np.random.default_rng(seed)
    # distinct magnitudes bounded away from 0: every ord and its gradient is defined and unique
    values = (rng.permutation(math.prod(shape)) + 1.0).reshape(shape) / 3 * rng.choice([-1, 1], size=shape)
    t, m = pair(values, requires_grad=True)
    rt, rm = fn(torch, t), fn(mf, m)
    assert tuple(rm.shape) == tuple(rt.shape)
    np.testing.assert_allclose(to_numpy(rm), to_numpy(rt), rtol=tol, atol=tol)
    cot = rng.standard_normal(tuple(rt.shape))
    (gt,) = torch.autograd.grad(rt, t, torch.tensor(cot), allow_unused=True)  # ord 0: no gradient, as zeros
    (gm,) = mf.autograd.grad(rm, m, mf.tensor(cot), allow_unused=True)
    gt = torch.zeros_like(t) if gt is None else gt
    gm = mf.zeros(shape, dtype=mf.float64) if gm is None else gm
    np.testing.assert_allclose(to_numpy(gm), to_numpy(gt), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("ord", VECTOR_ORDS)
@pytest.mark.parametrize("dim", VECTOR_DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_vector_norm_grid(ord, dim, keepdim):
    assert_forward_and_backward(lambda lib, x: lib.linalg.vector_norm(x, ord, dim, keepdim), (2, 3, 4))


@pytest.mark.parametrize("ord", MATRIX_ORDS)
@pytest.mark.parametrize("dim", MATRIX_DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_matrix_norm_grid(ord, dim, keepdim):
    assert_forward_and_backward(lambda lib, x: lib.linalg.matrix_norm(x, ord, dim, keepdim), (3, 4, 5), tol=1e-9)


@pytest.mark.parametrize("shape,ord,dim", [
    ((5,), None, None), ((5,), 3, None), ((5,), math.inf, 0), ((3, 4), None, None), ((3, 4), "fro", None),
    ((3, 4), "nuc", None), ((3, 4), 2, None), ((3, 4), -1, None), ((3, 4), 2, 0), ((3, 4), 1, (1,)),
    ((3, 4), math.inf, (1, 0)), ((2, 3, 4), None, None), ((2, 3, 4), None, (0, 2)), ((2, 3, 4), -2, (2, 1)),
    ((2, 3, 4), 0.5, -1), ((2, 3, 4), "nuc", (0, 1))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_norm_dispatches_like_pytorch(shape, ord, dim, keepdim):
    assert_forward_and_backward(lambda lib, x: lib.linalg.norm(x, ord, dim, keepdim), shape, tol=1e-9)


def test_norm_dtype_argument():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for fn in (lambda lib, t: lib.linalg.vector_norm(t, 3, dtype=lib.float64),
               lambda lib, t: lib.linalg.matrix_norm(t, "nuc", dtype=lib.float64),
               lambda lib, t: lib.linalg.norm(t, dtype=lib.float64)):
        rt, rm = fn(torch, torch.tensor(x)), fn(mf, mf.tensor(x))
        assert rm.dtype == mf.float64 and rt.dtype == torch.float64
        np.testing.assert_allclose(to_numpy(rm), to_numpy(rt), rtol=1e-12)


# --- second derivatives ------------------------------------------------------------------------------

SECOND_ORDER = {
    "det": (lambda lib, a: lib.linalg.det(a), "square"),
    "slogdet": (lambda lib, a: lib.linalg.slogdet(a).logabsdet, "square"),
    "inv": (lambda lib, a: lib.linalg.inv(a), "square"),
    "solve": (lambda lib, a: lib.linalg.solve(a, a[..., :2] * 2 + 1), "square"),
    "cholesky": (lambda lib, a: lib.linalg.cholesky(a), "spd"),
    "cholesky_upper": (lambda lib, a: lib.linalg.cholesky(a, upper=True), "spd"),
    "eigh": (lambda lib, a: lib.linalg.eigh(a), "spd"),
    "eigvalsh": (lambda lib, a: lib.linalg.eigvalsh(a), "spd"),
    "svd": (lambda lib, a: lib.linalg.svd(a, full_matrices=False), "square"),
    "svdvals": (lambda lib, a: lib.linalg.svdvals(a), "square"),
    "qr": (lambda lib, a: lib.linalg.qr(a), "square"),
    "matrix_norm_2": (lambda lib, a: lib.linalg.matrix_norm(a, 2), "square"),
}


def as_list(out):
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_derivatives_match_pytorch(name):
    fn, kind = SECOND_ORDER[name]
    rng = np.random.default_rng(7)
    a = spd(rng, 2, 4, 4) if kind == "spd" else well_conditioned(rng, 2, 4, 4)
    t, m = pair(a, requires_grad=True)
    results = {}
    for lib, x in ((torch, t), (mf, m)):
        outs = as_list(fn(lib, x))
        cots = [lib.tensor(np.random.default_rng(3 + i).standard_normal(tuple(o.shape))) for i, o in enumerate(outs)]
        (g,) = lib.autograd.grad(outs, [x], cots, create_graph=True)
        # a scalar of the gradient whose derivative mixes every entry
        weight = lib.tensor(np.random.default_rng(11).standard_normal(tuple(g.shape)))
        (gg,) = lib.autograd.grad((g * g * weight).sum(), [x])
        results[lib.__name__] = (to_numpy(g), to_numpy(gg))
    np.testing.assert_allclose(results["meshflow"][0], results["torch"][0], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(results["meshflow"][1], results["torch"][1], rtol=1e-6, atol=1e-6)


# --- batches, aliases, values ---------------------------------------------------------------------


@pytest.mark.parametrize("fn", [
    lambda lib, a: lib.linalg.det(a), lambda lib, a: lib.linalg.inv(a), lambda lib, a: lib.linalg.cholesky(a),
    lambda lib, a: lib.linalg.qr(a).R, lambda lib, a: lib.linalg.svdvals(a), lambda lib, a: lib.linalg.eigvalsh(a),
    lambda lib, a: lib.linalg.eigh(a).eigenvectors, lambda lib, a: lib.linalg.svd(a).U])
def test_batches_equal_their_matrices(fn):
    rng = np.random.default_rng(5)
    a = mf.tensor(spd(rng, 3, 2, 4, 4))
    batched = fn(mf, a)
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(to_numpy(batched[i, j]), to_numpy(fn(mf, a[i, j])), rtol=1e-12, atol=1e-12)


def test_solve_broadcasts_batches():
    rng = np.random.default_rng(6)
    a_t, a_m = pair(well_conditioned(rng, 2, 1, 3, 3), requires_grad=True)
    b_t, b_m = pair(rng.standard_normal((4, 3, 2)), requires_grad=True)
    x_t, x_m = torch.linalg.solve(a_t, b_t), mf.linalg.solve(a_m, b_m)
    assert tuple(x_m.shape) == (2, 4, 3, 2)
    np.testing.assert_allclose(to_numpy(x_m), to_numpy(x_t), rtol=1e-12)
    x_t.sum().backward()
    x_m.sum().backward()
    np.testing.assert_allclose(to_numpy(a_m.grad), to_numpy(a_t.grad), rtol=1e-10)
    np.testing.assert_allclose(to_numpy(b_m.grad), to_numpy(b_t.grad), rtol=1e-10)


def test_decompositions_reconstruct_their_input():
    rng = np.random.default_rng(8)
    a = mf.tensor(rng.standard_normal((2, 5, 3)))
    q, r = mf.linalg.qr(a)
    np.testing.assert_allclose(to_numpy(q @ r), to_numpy(a), atol=1e-12)
    np.testing.assert_allclose(to_numpy(q.mT @ q), np.broadcast_to(np.eye(3), (2, 3, 3)), atol=1e-12)
    u, s, vh = mf.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(to_numpy((u * s.unsqueeze(-2)) @ vh), to_numpy(a), atol=1e-12)
    sym = mf.tensor(spd(rng, 2, 4, 4))
    w, v = mf.linalg.eigh(sym)
    np.testing.assert_allclose(to_numpy((v * w.unsqueeze(-2)) @ v.mT), to_numpy(sym), atol=1e-10)
    low = mf.linalg.cholesky(sym)
    np.testing.assert_allclose(to_numpy(low @ low.mT), to_numpy(sym), atol=1e-10)


def test_singular_and_degenerate_values_match_pytorch():
    for expr in ["lib.linalg.det(lib.tensor([[1., 2.], [2., 4.]], dtype=lib.float64))",
                 "lib.linalg.slogdet(lib.tensor([[1., 2.], [2., 4.]], dtype=lib.float64)).logabsdet",
                 "lib.linalg.slogdet(-lib.eye(3, dtype=lib.float64)).sign",
                 "lib.logdet(-lib.eye(3, dtype=lib.float64))",
                 "lib.logdet(lib.zeros(2, 2, dtype=lib.float64))",
                 "lib.linalg.det(lib.ones(2, 0, 0))", "lib.linalg.slogdet(lib.ones(0, 0)).sign",
                 "lib.linalg.svd(lib.ones(0, 3)).Vh", "lib.linalg.svd(lib.ones(3, 0)).U",
                 "lib.linalg.qr(lib.ones(3, 0), mode='complete').Q", "lib.linalg.qr(lib.ones(3, 2), mode='r').Q",
                 "lib.linalg.eigh(lib.ones(0, 0)).eigenvectors", "lib.linalg.inv(lib.ones(2, 0, 0))",
                 "lib.linalg.svdvals(lib.eye(3) * 2)"]:
        t, m = eval(expr, {"lib": torch}), eval(expr, {"lib": mf})
        assert tuple(m.shape) == tuple(t.shape), expr
        np.testing.assert_allclose(to_numpy(m), to_numpy(t), rtol=1e-12, equal_nan=True, err_msg=expr)


def test_svd_refuses_inf_input():
    # PyTorch hands an inf to gesdd (NaN results, LAPACK argument errors, or no return); meshflow refuses it.
    for fn in (mf.linalg.svd, mf.linalg.svdvals, lambda a: mf.linalg.matrix_norm(a, "nuc")):
        with pytest.raises(mf.linalg.LinAlgError, match="non-finite"):
            fn(mf.tensor([[1.0, float("inf")], [2.0, 3.0]]))


def test_svd_of_singular_values_only_differentiates_like_svdvals():
    # U and Vh unused: PyTorch's gradient U diag(gS) Vh, finite even with repeated singular values.
    for lib in (torch, mf):
        a = lib.eye(3, dtype=lib.float64).requires_grad_()
        lib.linalg.svd(a).S.sum().backward()
        np.testing.assert_allclose(to_numpy(a.grad), np.eye(3), atol=1e-12)


def test_aliases_are_the_linalg_functions():
    rng = np.random.default_rng(9)
    a = mf.tensor(spd(rng, 3, 3))
    assert mf.det(a).item() == mf.linalg.det(a).item() == a.det().item()
    assert np.array_equal(mf.inverse(a).numpy(), mf.linalg.inv(a).numpy())
    assert np.array_equal(a.inverse().numpy(), mf.linalg.inv(a).numpy())
    assert np.array_equal(mf.cholesky(a, upper=True).numpy(), mf.linalg.cholesky(a, upper=True).numpy())
    assert np.array_equal(a.cholesky().numpy(), mf.linalg.cholesky(a).numpy())
    assert a.logdet().item() == mf.logdet(a).item() == mf.linalg.slogdet(a).logabsdet.item()


AUTOCAST = {
    "inv": lambda lib, h: lib.linalg.inv(h), "solve": lambda lib, h: lib.linalg.solve(h, h),
    "cholesky": lambda lib, h: lib.linalg.cholesky(h), "qr": lambda lib, h: lib.linalg.qr(h).R,
    "svd": lambda lib, h: lib.linalg.svd(h).S, "svdvals": lambda lib, h: lib.linalg.svdvals(h),
    "eigh": lambda lib, h: lib.linalg.eigh(h).eigenvalues, "eigvalsh": lambda lib, h: lib.linalg.eigvalsh(h),
    "matrix_norm_fro": lambda lib, h: lib.linalg.matrix_norm(h), "matrix_norm_1": lambda lib, h: lib.linalg.matrix_norm(h, 1),
    "matrix_norm_nuc": lambda lib, h: lib.linalg.matrix_norm(h, "nuc"), "vector_norm": lambda lib, h: lib.linalg.vector_norm(h),
    "norm": lambda lib, h: lib.linalg.norm(h), "det": lambda lib, h: lib.linalg.det(h),
    "slogdet": lambda lib, h: lib.linalg.slogdet(h).logabsdet, "inverse": lambda lib, h: lib.inverse(h),
}


@pytest.mark.parametrize("name", sorted(AUTOCAST))
def test_autocast_policy_matches_pytorch(name):
    """bfloat16 inputs under CPU autocast: float32 results where PyTorch's fp32 list has the op,
    bfloat16 (or PyTorch's refusal of bfloat16) where it follows its input."""
    rng = np.random.default_rng(10)
    a = spd(rng, 4, 4)
    results = {}
    for lib in (torch, mf):
        with lib.autocast("cpu", dtype=lib.bfloat16):
            h = lib.tensor(a, dtype=lib.float32) @ lib.eye(4)  # bfloat16 under autocast
            try:
                results[lib.__name__] = AUTOCAST[name](lib, h)
            except RuntimeError as error:
                results[lib.__name__] = error
    t, m = results["torch"], results["meshflow"]
    if isinstance(t, Exception):
        assert isinstance(m, RuntimeError) and "Low precision" in str(m), repr(m)
        return
    assert str(m.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(to_numpy(m), to_numpy(t), rtol=1e-5, atol=1e-5)


def test_linalg_ops_trace_into_a_graph():
    rng = np.random.default_rng(12)
    a = mf.tensor(spd(rng, 2, 3, 3))

    class Solve(mf.nn.Graph):
        def build(self, x):
            return mf.linalg.cholesky(x) @ mf.linalg.inv(x) + mf.linalg.det(x)[..., None, None]

    expected = mf.linalg.cholesky(a) @ mf.linalg.inv(a) + mf.linalg.det(a)[..., None, None]
    np.testing.assert_allclose(to_numpy(Solve()(a)), to_numpy(expected), rtol=1e-12)


# --- nn.init.orthogonal_ ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (2, 3, 4), (6, 2, 2), (1, 7), (7, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_orthogonal_gives_orthonormal_rows_or_columns_like_pytorch(shape, dtype):
    gain = 1.7
    for lib in (torch, mf):
        w = lib.empty(shape, dtype=getattr(lib, dtype))
        out = lib.nn.init.orthogonal_(w, gain=gain)
        assert out is w and tuple(w.shape) == shape
        flat = to_numpy(w).reshape(shape[0], -1)
        rows, cols = flat.shape
        gram = flat @ flat.T if rows < cols else flat.T @ flat
        np.testing.assert_allclose(gram, gain ** 2 * np.eye(min(rows, cols)), atol=1e-5 if dtype == "float32" else 1e-12)


def test_orthogonal_errors_and_edge_cases_match_pytorch():
    for lib, error in ((torch, ValueError), (mf, ValueError)):
        with pytest.raises(error, match="2 or more dimensions"):
            lib.nn.init.orthogonal_(lib.empty(4))
        empty = lib.ones(0, 3)
        assert lib.nn.init.orthogonal_(empty) is empty
    p = mf.nn.Parameter(mf.empty(3, 3))
    mf.nn.init.orthogonal_(p)
    assert p.is_leaf and p.requires_grad and p.grad_fn is None


def test_orthogonal_is_reproducible_and_seeded():
    mf.manual_seed(3)
    a = mf.nn.init.orthogonal_(mf.empty(4, 6)).numpy().copy()
    b = mf.nn.init.orthogonal_(mf.empty(4, 6)).numpy().copy()
    mf.manual_seed(3)
    c = mf.nn.init.orthogonal_(mf.empty(4, 6)).numpy().copy()
    assert np.array_equal(a, c) and not np.allclose(a, b)


def test_orthogonal_draws_from_the_haar_distribution_like_pytorch():
    # The sign correction by diag(R) makes Q uniform over O(n): det(Q) = +-1 equally often (Householder
    # QR alone gives the same sign nearly always), and each entry has mean 0 and variance 1/n.
    torch.manual_seed(0)
    mf.manual_seed(0)
    n, draws = 4, 400
    for lib in (torch, mf):
        qs = np.stack([to_numpy(lib.nn.init.orthogonal_(lib.empty(n, n, dtype=lib.float64))) for _ in range(draws)])
        positive = np.mean(np.linalg.det(qs) > 0)
        assert 0.4 < positive < 0.6, (lib.__name__, positive)
        assert abs(qs.mean()) < 0.05, lib.__name__
        np.testing.assert_allclose(qs.var(axis=0), 1.0 / n, atol=0.06, err_msg=lib.__name__)
