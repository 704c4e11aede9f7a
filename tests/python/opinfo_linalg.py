"""OpInfo entries of torch.linalg and its top-level names (det, inverse, ...);
opinfo.py imports this module so that opinfo.OPS holds them.

The matrices are well conditioned, as the decompositions' gradients need:
A + n I for general square matrices, M M^T + n I for positive-definite ones,
symmetric matrices and rectangular ones with well separated eigen- and
singular values. Both libraries run the same LAPACK routines on the CPU
(PyTorch's Debian build and meshflow share OpenBLAS), so even the signs of
singular vectors and eigenvectors agree there; on other devices the entries
with `signs=` compare them up to sign."""
import math

import numpy as np

from opinfo import op
from sampling import Arr, Dt, S, exact

LAPACK = ("float32", "float64")
# Decomposition gradients go through a few products and a division by
# eigenvalue gaps: float32 agrees to about 1e-5 relative.
_TOL = {"float32": (1e-4, 1e-4)}
_GRAD_TOL = {"float32": (1e-3, 1e-3), "float64": (1e-6, 1e-7)}


def _arr(values, dtype, requires_grad=True):
    return Arr(exact(values, dtype), dtype, requires_grad=requires_grad)


def _square(rng, dtype, shape, negative_det=False):
    """A + n I: well conditioned, det > 0 (< 0 with the first row negated)."""
    n = shape[-1]
    a = rng.uniform(-1, 1, size=shape) + n * np.eye(n)
    if negative_det and n:
        a[..., 0, :] *= -1
    return _arr(a, dtype)


def _spd(rng, dtype, shape):
    """M M^T + n I: symmetric positive-definite."""
    n = shape[-1]
    m = rng.uniform(-1, 1, size=shape)
    return _arr(m @ np.swapaxes(m, -1, -2) + n * np.eye(n), dtype)


def _with_spectrum(rng, shape, values):
    """Matrices Q1 diag(values) Q2^T (..., m, n) with random orthogonal Q1, Q2."""
    m, n = shape[-2], shape[-1]
    q1 = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, m)))[0]
    q2 = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, n)))[0]
    d = np.zeros(shape)
    k = min(m, n)
    d[..., range(k), range(k)] = values[:k]
    return q1 @ d @ np.swapaxes(q2, -1, -2)


def _separated(k):
    """k values from 1 to about 2k, each at least 0.5 from the next."""
    return 1.0 + np.arange(k)[::-1] * 1.5


def _general(rng, dtype, shape, requires_grad=True):
    """A rectangular matrix with well separated singular values."""
    return _arr(_with_spectrum(rng, shape, _separated(min(shape[-2:]))), dtype, requires_grad)


def _symmetric(rng, dtype, shape, definite=False):
    """A symmetric matrix with well separated eigenvalues of both signs."""
    n = shape[-1]
    values = _separated(n) - (0 if definite else n * 0.75)
    q = np.linalg.qr(rng.standard_normal(shape))[0]
    return _arr(q @ (values[:, None] * np.swapaxes(q, -1, -2)), dtype)


# --- determinants, inverses, solves, cholesky ----------------------------------------------------


def det_samples(rng, dtype):
    return [S(_square(rng, dtype, (3, 3))), S(_square(rng, dtype, (2, 4, 4))),
            S(_square(rng, dtype, (3, 3), negative_det=True)), S(_square(rng, dtype, (1, 1))),
            S(_square(rng, dtype, (0, 3, 3))), S(_square(rng, dtype, (2, 0, 0))),
            S(_square(rng, dtype, (2, 1, 5, 5)))]


op("linalg.det", det_samples, dtypes=LAPACK, aliases=("det", "Tensor.det"), tol=_TOL, grad_tol=_GRAD_TOL)
op("linalg.slogdet", det_samples, dtypes=LAPACK, aliases=("slogdet", "Tensor.slogdet"), tol=_TOL,
   grad_tol=_GRAD_TOL)
# torch.logdet: NaN where det < 0 (the third sample), with a zero gradient there.
op("logdet", det_samples, dtypes=LAPACK, method=True, tol=_TOL, grad_tol=_GRAD_TOL)
op("linalg.inv", det_samples, dtypes=LAPACK, aliases=("inverse", "Tensor.inverse"), tol=_TOL, grad_tol=_GRAD_TOL)


def solve_samples(rng, dtype):
    def b(*shape):
        return _arr(rng.uniform(-2, 2, size=shape), dtype)

    a = lambda *shape: _square(rng, dtype, shape)  # noqa: E731
    return [S(a(3, 3), b(3, 2)), S(a(2, 3, 3), b(2, 3, 1)), S(a(3, 3), b(3)), S(a(2, 3, 3), b(2, 3)),
            S(a(3, 3), b(2, 3, 2)), S(a(2, 1, 3, 3), b(4, 3, 2)), S(a(3, 3), b(2, 3), left=False),
            S(a(2, 4, 4), b(2, 3, 4), left=False), S(a(0, 3, 3), b(0, 3, 2)),
            S(a(3, 3), b(3, 0))]


op("linalg.solve", solve_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL)


def cholesky_samples(rng, dtype):
    return [S(_spd(rng, dtype, (3, 3))), S(_spd(rng, dtype, (2, 4, 4))), S(_spd(rng, dtype, (3, 3)), upper=True),
            S(_spd(rng, dtype, (2, 5, 5)), upper=True), S(_spd(rng, dtype, (0, 3, 3))),
            S(_spd(rng, dtype, (1, 1)))]


op("linalg.cholesky", cholesky_samples, dtypes=LAPACK, aliases=("cholesky", "Tensor.cholesky"), tol=_TOL,
   grad_tol=_GRAD_TOL)


# --- qr, svd, eigh ---------------------------------------------------------------------------------


def qr_samples(rng, dtype):
    g = lambda *shape, rg=True: _general(rng, dtype, shape, rg)  # noqa: E731
    # complete with more rows than columns, and mode 'r', are not differentiable (in PyTorch either).
    return [S(g(4, 3)), S(g(3, 3)), S(g(3, 5)), S(g(2, 5, 3)),
            S(g(3, 5), mode="complete"), S(g(4, 3, rg=False), mode="complete"), S(g(4, 3, rg=False), mode="r"),
            S(g(2, 3, 4), mode="reduced"), S(g(0, 4, 3)), S(g(0, 3, rg=False)), S(g(3, 0, rg=False), mode="complete")]


op("linalg.qr", qr_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL)


def _sign_of_columns(v):
    """The sign of each column's largest-magnitude element, (..., 1, k), without gradient."""
    return v.gather(-2, v.abs().argmax(-2, keepdim=True)).sign().detach()


def _svd_signs(lib, out):
    """U's first k columns and Vh's first k rows, each pair's sign fixed by U's column (the other
    columns of full factors are any orthonormal completion)."""
    u, s, vh = out
    k = s.shape[-1]
    if k == 0 or u.shape[-2] == 0:
        return (u[..., :k], s, vh[..., :k, :])
    uk = u[..., :k]
    sign = _sign_of_columns(uk)
    return (uk * sign, s, vh[..., :k, :] * sign.transpose(-2, -1))


def _eigh_signs(lib, out):
    values, vectors = out
    if vectors.shape[-1] == 0:
        return (values, vectors)
    return (values, vectors * _sign_of_columns(vectors))


def svd_samples(rng, dtype):
    g = lambda *shape, rg=True: _general(rng, dtype, shape, rg)  # noqa: E731
    return [S(g(4, 3), full_matrices=False), S(g(3, 5), full_matrices=False), S(g(3, 3)), S(g(4, 3)),
            S(g(3, 5)), S(g(2, 4, 3), full_matrices=False), S(g(2, 3, 4)), S(g(0, 3, 2)),
            S(g(0, 3, rg=False)), S(g(3, 0, rg=False), full_matrices=False)]


op("linalg.svd", svd_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL, signs=_svd_signs)


def svdvals_samples(rng, dtype):
    g = lambda *shape: _general(rng, dtype, shape)  # noqa: E731
    return [S(g(4, 3)), S(g(3, 5)), S(g(2, 3, 3)), S(g(1, 1)), S(g(0, 3, 2))]


op("linalg.svdvals", svdvals_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL)


def eigh_samples(rng, dtype):
    sym = lambda *shape: _symmetric(rng, dtype, shape)  # noqa: E731
    lower_only = _arr(np.tril(_symmetric(rng, "float64", (4, 4)).data) + np.triu(rng.uniform(-9, 9, (4, 4)), 1),
                      dtype)
    upper_only = _arr(np.triu(_symmetric(rng, "float64", (4, 4)).data) + np.tril(rng.uniform(-9, 9, (4, 4)), -1),
                      dtype)
    return [S(sym(3, 3)), S(sym(2, 4, 4)), S(sym(4, 4), UPLO="U"), S(lower_only), S(upper_only, UPLO="U"),
            S(sym(1, 1)), S(sym(0, 3, 3)), S(_symmetric(rng, dtype, (5, 5), definite=True), UPLO="u")]


op("linalg.eigh", eigh_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL, signs=_eigh_signs)
op("linalg.eigvalsh", eigh_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL)


# --- norms -----------------------------------------------------------------------------------------


def vector_norm_samples(rng, dtype):
    def x(*shape, low=0.25):  # magnitudes >= low: negative orders and |x|^(p-1) stay finite
        values = rng.uniform(low, 2, size=shape) * rng.choice([-1, 1], size=shape)
        return _arr(values, dtype)

    return [S(x(3, 4)), S(x(3, 4), 1, 1), S(x(2, 3, 4), math.inf, (0, 2), True), S(x(2, 3, 4), -math.inf, -1),
            S(x(5,), 0), S(x(3, 4), 3.5, 0), S(x(3, 4), -1.5, dim=1), S(x(3, 4), 0.5, keepdim=True),
            S(x()), S(x(), 2, 0), S(x(0, 3)), S(x(0, 3), 2, 0), S(x(0, 3), math.inf, 1),
            S(x(3, 4), 2, dim=(0, 1), dtype=Dt("float64"))]


op("linalg.vector_norm", vector_norm_samples, dtypes=("float16", "bfloat16", "float32", "float64"), tol=_TOL,
   grad_tol=_GRAD_TOL)


def matrix_norm_samples(rng, dtype):
    g = lambda *shape: _general(rng, dtype, shape)  # noqa: E731

    def x(*shape):  # distinct magnitudes: max / min and their gradients are unique
        values = (rng.permutation(math.prod(shape)) + 1.0).reshape(shape) * rng.choice([-1, 1], size=shape) / 4
        return _arr(values, dtype)

    out = [S(x(3, 4)), S(x(2, 3, 4), "fro", (0, 2), True)]
    for ord_ in ("nuc", 2, -2):
        out += [S(g(4, 3), ord_), S(g(2, 3, 5), ord_, keepdim=True), S(g(3, 2, 4), ord_, (0, 2))]
    for ord_ in (1, -1, math.inf, -math.inf):
        out += [S(x(3, 4), ord_), S(x(2, 3, 4), ord_, (2, 0), True), S(x(2, 4, 3), ord_, (-1, 1))]
    out += [S(x(3, 4), "fro", dtype=Dt("float64")), S(x(0, 3), "fro"), S(x(2, 0, 3), 1, (0, 2))]
    return out


op("linalg.matrix_norm", matrix_norm_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL)


def norm_samples(rng, dtype):
    g = lambda *shape: _general(rng, dtype, shape)  # noqa: E731

    def x(*shape):
        values = (rng.permutation(math.prod(shape)) + 1.0).reshape(shape) * rng.choice([-1, 1], size=shape) / 4
        return _arr(values, dtype)

    return [S(x(2, 3, 4)), S(x(5,)), S(g(4, 3), 2), S(x(3, 4), 2, 1), S(x(3, 4), "fro"), S(g(2, 3, 4), "nuc", (1, 2)),
            S(x(5,), math.inf), S(x(3, 4), 1), S(x(3, 4), -math.inf, (1, 0), True), S(x(2, 3, 4), None, (0, 2)),
            S(x(2, 3, 4), 0.5, -1), S(x(3, 4), dtype=Dt("float64"))]


op("linalg.norm", norm_samples, dtypes=LAPACK, tol=_TOL, grad_tol=_GRAD_TOL)
