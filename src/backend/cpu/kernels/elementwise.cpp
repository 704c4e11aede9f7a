// The CPU kernels of the elementwise ops and the layout ops: the shared
// kernel tables (backend/common/elementwise_kernels.h, layout_kernels.h)
// over cpu::Loops.
#include "backend/common/elementwise_kernels.h"
#include "backend/common/layout_kernels.h"
#include "backend/cpu/kernels/loops.h"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  elementwise_kernels::register_all<cpu::Loops>(DeviceType::CPU);
  layout_kernels::register_all<cpu::Loops>(DeviceType::CPU, false);
  return true;
}();

}  // namespace
}  // namespace mf
