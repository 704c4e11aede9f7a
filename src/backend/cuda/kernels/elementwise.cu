// The CUDA kernels of the elementwise ops: the shared kernel table
// (backend/common/elementwise_kernels.h) over cuda::Loops.
#include "backend/common/elementwise_kernels.h"
#include "backend/common/layout_kernels.h"
#include "backend/cuda/kernels/loops.cuh"
#include "backend/cuda/kernels/reduce.cuh"

namespace mf {

void cuda::copy_cast(Tensor& dst, const Tensor& src) { elementwise_kernels::copy_cast<cuda::Loops>(dst, src); }

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  elementwise_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  layout_kernels::register_all<cuda::Loops>(DeviceType::CUDA, true);
  return true;
}();

}  // namespace
}  // namespace mf
