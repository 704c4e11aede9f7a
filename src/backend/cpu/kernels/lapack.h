// The CPU kernels of torch.linalg's decompositions (src/ops/linalg_lu.cpp,
// src/ops/linalg_spectral.cpp) on LAPACK (OpenBLAS's; CMakeLists.txt, Note
// [One OpenBLAS]). Inputs are float32 or float64 batches of matrices
// (..., m, n) of any strides; outputs are contiguous. See Note [LAPACK
// batches] in lapack.cpp for how matrices reach LAPACK and how its `info`
// becomes an error.
#pragma once

#include <string>

#include "meshflow/tensor.h"

namespace mf::cpu {

// det (...) of a (..., n, n) through its LU factorisation (getrf).
void lu_det(const Tensor& a, Tensor& det);
// sign (...) and log|det| (...); a singular matrix gives sign 0 and -inf.
void lu_slogdet(const Tensor& a, Tensor& sign, Tensor& logabsdet);
// a^-1 (getrf, getrs on the identity); LinAlgError for a singular matrix.
void lu_inverse(const Tensor& a, Tensor& out);
// X with a X = b for a (..., n, n) and b (..., n, k) whose batch dims
// broadcast to out's; LinAlgError for a singular a.
void lu_solve(const Tensor& a, const Tensor& b, Tensor& out);
// The Cholesky factor of the lower (or upper) triangle of a (potrf), the
// other triangle zero; LinAlgError when a is not positive-definite.
void cholesky(const Tensor& a, Tensor& out, bool upper);
// Q and R of a (..., m, n) (geqrf, orgqr): Q is (..., m, q.size(-1)) with
// q.size(-1) k = min(m, n) or m; R is r's shape (k or m rows). With
// compute_q false, q is not written.
void qr(const Tensor& a, Tensor& q, Tensor& r, bool compute_q);
// Singular values s (..., k) descending, and with compute_uv u (..., m, m or
// k) and vh (..., n or k, n), full or reduced by their shapes (gesdd).
// LinAlgError for NaN input (which gesdd refuses) or no convergence.
void svd(const Tensor& a, Tensor& u, Tensor& s, Tensor& vh, bool compute_uv);
// Eigenvalues w (..., n) ascending of the symmetric matrix held in the lower
// (or upper) triangle of a, and with compute_v the eigenvectors as the
// columns of v (syevd); LinAlgError when LAPACK does not converge.
void eigh(const Tensor& a, Tensor& w, Tensor& v, bool upper, bool compute_v);

}  // namespace mf::cpu
