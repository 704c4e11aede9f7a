// The CUDA kernels of the resampling ops: the shared passes of
// backend/common/resample_kernels.h over cuda::Loops (Note [Device resampling]).
#include "backend/common/resample_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  resample_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
