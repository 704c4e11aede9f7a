"""meshflow.linalg: torch.linalg's norms, determinants, inverses, solves and
decompositions, on LAPACK (docs/linalg.md). The functions are the C++ API's
(include/meshflow/ops/linalg.h, namespace mf::linalg); those with several
results return named tuples with torch.return_types' fields."""
from meshflow._C import _linalg
from meshflow.errors import LinAlgError
from meshflow.return_types import linalg_eigh, linalg_qr, linalg_slogdet, linalg_svd

__all__ = ["LinAlgError", "vector_norm", "matrix_norm", "norm", "det", "slogdet", "inv", "solve", "cholesky", "qr",
           "svd", "svdvals", "eigh", "eigvalsh"]

vector_norm = _linalg.vector_norm
matrix_norm = _linalg.matrix_norm
norm = _linalg.norm
det = _linalg.det
inv = _linalg.inv
solve = _linalg.solve
cholesky = _linalg.cholesky
eigvalsh = _linalg.eigvalsh


def slogdet(A):
    """(sign, logabsdet) of det(A): sign 0 and logabsdet -inf for a singular A."""
    return linalg_slogdet(*_linalg.slogdet(A))


def qr(A, mode="reduced"):
    """(Q, R) with A = Q R; mode 'reduced', 'complete' or 'r' (Q empty)."""
    return linalg_qr(*_linalg.qr(A, mode))


def _check_driver(name, driver):
    if driver is not None:
        raise RuntimeError(f"torch.linalg.{name}: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")


def svd(A, full_matrices=True, *, driver=None):
    """(U, S, Vh) with A = U diag(S) Vh, S descending."""
    _check_driver("svd", driver)
    return linalg_svd(*_linalg.svd(A, full_matrices))


def svdvals(A, *, driver=None):
    """The singular values of A, descending."""
    _check_driver("svdvals", driver)
    return _linalg.svdvals(A)


def eigh(A, UPLO="L"):
    """(eigenvalues ascending, eigenvectors as columns) of the symmetric matrix
    in A's lower (UPLO='L') or upper ('U') triangle."""
    return linalg_eigh(*_linalg.eigh(A, UPLO))
