// The CUDA kernels of the pooling ops: the shared walks of
// backend/common/pool_kernels.h over cuda::Loops (Note [Device pooling]).
#include "backend/common/pool_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  pool_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
