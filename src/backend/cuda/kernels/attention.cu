// The CUDA kernels of fused attention: batched cuBLAS products with the
// softmax as one walk over the rows where the weights fit (Note [Attention
// by batched GEMMs]), else the shared block programs of attention_tiles.h
// (Note [Tiled attention]) where the head dims fit them, else the shared
// row walks of attention_kernels.h (Note [Device attention]), over
// cuda::Loops.
#include "backend/common/attention_gemm.h"
#include "backend/cuda/kernels/batched_gemm.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  attention_gemm::register_all<cuda::Loops, cuda::CublasBatchedGemm>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
