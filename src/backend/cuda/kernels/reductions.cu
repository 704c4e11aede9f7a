// The CUDA kernels of the reduction ops: the shared kernel table
// (backend/common/reduce_kernels.h) over cuda::Reducer.
#include "backend/common/reduce_kernels.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  reduce_kernels::register_all<cuda::Reducer>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
