// The CUDA kernels of sort and topk: the shared line walks of
// backend/common/sort_kernels.h over cuda::Loops (Note [Device sorting]).
#include "backend/common/sort_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  sort_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
