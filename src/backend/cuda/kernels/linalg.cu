// The CUDA kernels of the torch.linalg factorisations: the shared walks of
// backend/common/linalg_kernels.h over cuda::Loops (Note [Device linear
// algebra]).
#include "backend/common/linalg_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  linalg_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
