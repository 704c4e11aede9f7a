// The CUDA kernels of fused attention: the shared row walks of
// backend/common/attention_kernels.h over cuda::Loops (Note [Device attention]).
#include "backend/common/attention_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  attention_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
