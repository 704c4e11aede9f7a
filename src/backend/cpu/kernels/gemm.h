// Batched, broadcasting matrix products on the CPU: float32 and bfloat16 on
// OpenBLAS, oneDNN or oneMKL, whichever measures fastest for the shape
// (Note [Choosing a GEMM library] in gemm.cpp; include/meshflow/cpu_blas.h),
// float16 on oneDNN, float64 on OpenBLAS, integers in plain loops.
#pragma once

#include "backend/common/gemm_plan.h"
#include "backend/common/scratch.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

// out = beta * out + alpha * (a @ b), with a (..., n, k) and b (..., k, m)
// of out's dtype and any strides, and out contiguous (batch..., n, m) where
// batch is the broadcast of a's and b's batch dims. out is read only when
// beta != 0. Copies and library buffers come from ws (Note [GEMM scratch]
// in gemm.cpp); measuring, it only takes them.
void matmul(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha, Scalar beta, Workspace& ws);

// Row-major C (m, n) = alpha * op(A) op(B) + beta * C on raw float or
// double pointers (OpenBLAS), op(X) = X^T where the flag is set; k == 0
// scales C by beta (zero-fills at beta == 0). For kernels that multiply
// blocks of their own scratch; sizes must fit BLAS's int.
template <typename T>
void gemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace mf::cpu
