// The CUDA kernels of the convolutions: the shared direct convolutions of
// backend/common/conv_kernels.h over cuda::Loops (Note [Device convolutions]).
#include "backend/common/conv_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  conv_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
