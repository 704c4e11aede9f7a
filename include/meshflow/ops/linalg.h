// Matrix products on OpenBLAS (float32/float64) and oneDNN (bfloat16), and
// torch.linalg (namespace mf::linalg): norms, determinants, inverses,
// solves and the decompositions, on LAPACK (docs/linalg.md).
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "meshflow/tensor.h"

namespace mf {

// torch.matmul: 1-d/2-d/batched with broadcasting of batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);     // (n, k) @ (k, m)
Tensor bmm(const Tensor& a, const Tensor& b);    // (B, n, k) @ (B, k, m)
Tensor mv(const Tensor& a, const Tensor& v);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor outer(const Tensor& a, const Tensor& b);
// beta * t + alpha * (a @ b)
Tensor addmm(const Tensor& t, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
Tensor baddbmm(const Tensor& t, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
// x @ weight^T + bias, weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// torch.logdet: log det(A), NaN where det(A) < 0 and -inf where it is 0.
Tensor logdet(const Tensor& A);

// torch.linalg. Matrices are the last two dims of A (..., m, n), the leading
// dims a batch; float32 and float64 (the vector norms also float16 and
// bfloat16). Failures of the matrix itself (singular, not
// positive-definite, no convergence) throw LinAlgError.
namespace linalg {

// A norm's order: a number, or "fro" / "nuc" for matrix norms.
using NormOrder = std::variant<double, std::string>;

// (sum |x|^ord)^(1 / ord) over dim (empty: every dim); ord inf / -inf: the
// largest / smallest |x|, 0: the count of non-zeros. dtype: computed in
// that (floating, not narrower) dtype.
Tensor vector_norm(const Tensor& x, double ord = 2, const Shape& dim = {}, bool keepdim = false,
                   std::optional<DType> dtype = {});
// ord "fro", "nuc" (sum of singular values), 2 / -2 (largest / smallest
// singular value), 1 / -1 (largest / smallest column sum of |A|), inf /
// -inf (row sums) over the two dims `dim`.
Tensor matrix_norm(const Tensor& A, const NormOrder& ord = "fro", const Shape& dim = {-2, -1}, bool keepdim = false,
                   std::optional<DType> dtype = {});
// PyTorch's dispatch: a matrix norm for two dims (given, or A 2-d with an
// ord), the vector norm (ord 2 unless given) otherwise.
Tensor norm(const Tensor& A, const std::optional<NormOrder>& ord = {}, const std::optional<Shape>& dim = {},
            bool keepdim = false, std::optional<DType> dtype = {});

Tensor det(const Tensor& A);
struct SlogdetResult {
  Tensor sign, logabsdet;
};
SlogdetResult slogdet(const Tensor& A);
Tensor inv(const Tensor& A);
// X with A X = B (left) or X A = B; B (..., n, k) or a vector (n) / (..., n)
// (B.dim() == 1, or A's batch shape with n) taken as a column, batch dims
// broadcast.
Tensor solve(const Tensor& A, const Tensor& B, bool left = true);
// L with A = L L^T from A's lower triangle; upper: U with A = U^T U from
// the upper one.
Tensor cholesky(const Tensor& A, bool upper = false);
// mode "reduced" (Q (m, k), R (k, n), k = min(m, n)), "complete" (Q (m, m),
// R (m, n)) or "r" (R only; Q is an empty tensor).
struct QRResult {
  Tensor Q, R;
};
QRResult qr(const Tensor& A, const std::string& mode = "reduced");
// A = U diag(S) Vh; S descending. full_matrices: U (m, m) and Vh (n, n),
// else (m, k) and (k, n).
struct SVDResult {
  Tensor U, S, Vh;
};
SVDResult svd(const Tensor& A, bool full_matrices = true);
Tensor svdvals(const Tensor& A);
// The eigenvalues (ascending) and eigenvectors (columns) of the symmetric
// matrix in A's lower (UPLO "L") or upper ("U") triangle.
struct EighResult {
  Tensor eigenvalues, eigenvectors;
};
EighResult eigh(const Tensor& A, const std::string& UPLO = "L");
Tensor eigvalsh(const Tensor& A, const std::string& UPLO = "L");

}  // namespace linalg
}  // namespace mf
