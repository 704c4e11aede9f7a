// Shared pieces of the torch.linalg ops (linalg_lu.cpp, linalg_spectral.cpp,
// linalg_norm.cpp): PyTorch's input checks and the small matrix helpers
// their backward formulas are written with.
#pragma once

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/shape.h"

namespace mf::linalg_detail {

// A has at least 2 dims ("A" or "B": the argument's name).
inline void check_is_matrix(const Tensor& a, const char* op, const char* name = "A") {
  MF_CHECK(a.dim() >= 2, ShapeError, op, ": The input tensor ", name, " must have at least 2 dimensions.");
}

// A is a batch of square matrices.
inline void check_square(const Tensor& a, const char* op) {
  check_is_matrix(a, op);
  MF_CHECK(a.size(-1) == a.size(-2), ShapeError, op, ": A must be batches of square matrices, but they are ",
           a.size(-2), " by ", a.size(-1), " matrices");
}

// A dtype LAPACK takes: float32 or float64, PyTorch's messages otherwise.
inline void check_lapack_dtype(DType dtype, const char* op) {
  MF_CHECK(is_floating(dtype), TypeError, op, ": Expected a floating point tensor as input. Got ", dtype_name(dtype));
  MF_CHECK(dtype == DType::Float32 || dtype == DType::Float64, TypeError, op,
           ": Low precision dtypes not supported. Got ", dtype_name(dtype));
}

// The batch dims of a (..., m, n) followed by `core`.
inline Shape batch_with(const Tensor& a, std::initializer_list<int64_t> core) {
  Shape s(a.sizes().begin(), a.sizes().end() - 2);
  s.insert(s.end(), core.begin(), core.end());
  return s;
}

// The transpose of the last two dims (PyTorch's mT).
inline Tensor mT(const Tensor& t) { return transpose(t, -1, -2); }

// v (..., k) on the diagonal of (..., k, k) matrices.
inline Tensor diag_embed(const Tensor& v) {
  return mul(unsqueeze(v, -1), eye(v.size(-1), std::nullopt, {.dtype = v.dtype(), .device = v.device()}));
}

// The diagonal (..., k) of matrices (..., k, k).
inline Tensor matrix_diagonal(const Tensor& t) { return diagonal(t, 0, -2, -1); }

}  // namespace mf::linalg_detail
