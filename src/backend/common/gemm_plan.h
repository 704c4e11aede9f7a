// Note [BLAS plans]
// A batched, broadcasting matrix product out = a @ b (row-major, any
// strides) as the column-major calls of a BLAS library, for backends whose
// GEMM is one (cuBLAS): row-major C = A B is column-major C^T = B^T A^T,
// so each call multiplies op(B) by op(A) into C^T with ldc = m. A row-major
// (rows, cols) operand with strides (s, 1) is already the column-major
// transpose (no op, ld = s); with strides (1, s) it is the column-major
// matrix itself (op T, ld = s). An operand with neither layout is copied
// dense first. The batch's matrices are one strided batch where their
// offsets step evenly (broadcast batch dims step by 0), else one call each.
#pragma once

#include "backend/common/scratch.h"

#include <cstdint>
#include <vector>

#include "meshflow/small_vector.h"
#include "meshflow/tensor.h"

namespace mf {

// Element offsets of matrices: six inline (a plain matmul has one), as
// shapes are (Note [Inline shapes]).
using Offsets = SmallVector<int64_t, 6>;
// The element offset of every matrix of t (..., rows, cols) when its batch
// dims broadcast to `batch`, in batch order (a broadcast dim steps by 0).
Offsets batch_offsets(const Tensor& t, const Shape& batch);

struct BlasOperand {
  Tensor tensor;           // the operand, or its dense copy
  bool transposed = false;  // op T
  int64_t ld = 1;
  Offsets offsets;          // per matrix of the batch
};

struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;  // column-major C^T (m, n) = op(B) (m, k) op(A) (k, n)
  BlasOperand a, b;
  int64_t count = 0;            // matrices in the batch
  // One strided batch: every operand's offsets step evenly.
  bool strided = false;
  int64_t stride_a = 0, stride_b = 0;
};

// The plan of out (contiguous (batch..., n, m)) = a (..., n, k) @ b
// (..., k, m); copy_cast makes an operand dense, in a piece of `taken`,
// where its layout needs it.
GemmPlan plan_gemm(const Tensor& a, const Tensor& b, const Tensor& out,
                   void (*copy_cast)(Tensor& dst, const Tensor& src), Scratch& taken);
// The scratch plan_gemm takes for a and b (Note [Kernel scratch]).
int64_t gemm_scratch_bytes(const Tensor& a, const Tensor& b);

}  // namespace mf
