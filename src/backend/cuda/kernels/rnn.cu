// The CUDA kernels of the fused recurrent layers: the shared walks of
// backend/common/rnn_kernels.h over cuda::Loops (Note [Device recurrent
// layers]).
#include "backend/common/rnn_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  rnn_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
