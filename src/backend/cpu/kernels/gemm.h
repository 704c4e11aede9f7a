// Batched, broadcasting matrix products on the CPU: oneDNN for large float32
// products (Note [oneDNN for float32 GEMMs] in gemm.cpp), OpenBLAS for the
// other float32 and the float64 ones, oneDNN for bfloat16 (and float16 where
// the CPU has it), plain loops for integers.
#pragma once

#include "backend/common/gemm_plan.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

// out = beta * out + alpha * (a @ b), with a (..., n, k) and b (..., k, m)
// of out's dtype and any strides, and out contiguous (batch..., n, m) where
// batch is the broadcast of a's and b's batch dims. out is read only when
// beta != 0.
void matmul(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha = 1, Scalar beta = 0);

// Row-major C (m, n) = alpha * op(A) op(B) + beta * C on raw float or
// double pointers (OpenBLAS), op(X) = X^T where the flag is set; k == 0
// scales C by beta (zero-fills at beta == 0). For kernels that multiply
// blocks of their own scratch; sizes must fit BLAS's int.
template <typename T>
void gemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace mf::cpu
