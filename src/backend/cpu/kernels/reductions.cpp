// The CPU kernels of the reduction ops: the shared kernel table
// (backend/common/reduce_kernels.h) over cpu::Reducer.
#include "backend/common/reduce_kernels.h"
#include "backend/cpu/kernels/reduce.h"

namespace mf {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  reduce_kernels::register_all<cpu::Reducer>(DeviceType::CPU);
  return true;
}();

}  // namespace
}  // namespace mf
