// The CUDA kernels of the random ops: the shared kernel table of
// backend/common/random_kernels.h over cuda::Loops (Note [Device random ops]).
#include "backend/common/random_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  random_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
