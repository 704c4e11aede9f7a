// The CUDA kernels of the collectives and the sharded embeddings: their CPU
// kernels over host copies (Note [Host-staged kernels]).
#include "backend/common/host_staged.h"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  host_staged::register_all(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
