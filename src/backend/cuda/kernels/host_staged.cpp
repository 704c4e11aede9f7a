// The CUDA kernels of the collectives and the sharded embeddings: their CPU
// kernels over host copies (Note [Host-staged kernels]), then the
// collectives on NCCL over those (Note [NCCL collectives]).
#include "backend/common/host_staged.h"

namespace mf {
namespace cuda {
void register_nccl_collectives();  // nccl_collectives.cpp
}  // namespace cuda
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  host_staged::register_all(DeviceType::CUDA);
  cuda::register_nccl_collectives();
  return true;
}();

}  // namespace
}  // namespace mf
