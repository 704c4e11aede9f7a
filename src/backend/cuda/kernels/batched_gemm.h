// The batched GEMM of Note [Attention by batched GEMMs] on cuBLAS
// (gemm.cpp); a plain header, so that nvcc's attention.cu can use it.
#pragma once

#include "backend/common/scratch.h"
#include "meshflow/tensor.h"

namespace mf::cuda {

struct CublasBatchedGemm {
  // out (n, M, N) = op(a) @ op(b), all contiguous 3-d; op(x) is x or its
  // last two dims swapped. a and b share a dtype; out's may be wider
  // (float32 for 16-bit operands), the products accumulating in float32
  // (float64 for float64) on the tensor cores where the dtype has them.
  static void bmm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, Scratch& taken);
  static int64_t bmm_scratch(const Shape&, const Shape&, DType, DType) { return 0; }
};

}  // namespace mf::cuda
