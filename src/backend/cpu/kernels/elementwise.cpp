// The CPU kernels of the elementwise ops: the shared kernel table
// (backend/common/elementwise_kernels.h) over cpu::Loops.
#include "backend/common/elementwise_kernels.h"
#include "backend/cpu/kernels/loops.h"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  elementwise_kernels::register_all<cpu::Loops>(DeviceType::CPU);
  return true;
}();

}  // namespace
}  // namespace mf
