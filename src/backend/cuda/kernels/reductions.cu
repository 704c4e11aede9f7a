// The CUDA kernels of the reduction ops (the shared kernel table of
// backend/common/reduce_kernels.h over cuda::Reducer), and of softmax and
// the norms as passes of them (Note [Composed device kernels]), and of the
// class losses (Note [Device class losses]).
#include "backend/common/composed_kernels.h"
#include "backend/common/loss_kernels.h"
#include "backend/common/reduce_kernels.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  reduce_kernels::register_all<cuda::Reducer>(DeviceType::CUDA);
  composed_kernels::register_all<cuda::Loops, cuda::Reducer>(DeviceType::CUDA);
  loss_kernels::register_all<cuda::Loops, cuda::Reducer>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
