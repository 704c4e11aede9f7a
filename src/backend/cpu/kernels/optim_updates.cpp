// The CPU kernels of the optimizer updates (Note [Optimizer updates are ops]
// in meshflow/optim/optimizer.h): the shared kernel table
// (backend/common/optim_kernels.h) over cpu::Updates, whose loops inline the
// per-element steps (Note [Shared optimizer updates]) over restrict
// pointers, vectorised by the compiler in the compute type A. found_inf and
// the step count are read on the host.
#include "backend/common/optim_kernels.h"
#include "backend/cpu/kernels/math.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

// f(i, ptrs...) for i in [b, e); the pointers do not alias.
template <typename F, typename... P>
[[gnu::flatten]] void run_range(int64_t b, int64_t e, const F& f, P* __restrict... ptrs) {
  for (int64_t i = b; i < e; ++i) f(i, ptrs...);
}

struct Updates {
  using Math = HostMath;
  // Note [Skipped updates] in optimizer.h.
  static bool skipped(const TensorList& in) {
    const Tensor& found_inf = in.back();
    return found_inf.defined() && *static_cast<const float*>(found_inf.data_ptr()) != 0.0f;
  }
  template <typename F, typename... P>
  static void run(const Tensor& param, const TensorList& in, const F& f, P*... ptrs) {
    if (skipped(in)) return;
    parallel_for(0, param.numel(), kGrainSize, [&](int64_t b, int64_t e) { run_range(b, e, f, ptrs...); });
  }
  template <typename Make, typename... P>
  static void run_stepped(const Tensor& param, const Tensor& step, const TensorList& in, const Make& make, P*... ptrs) {
    if (skipped(in)) return;
    const auto f = make(optim::detail::increment_step(step));
    parallel_for(0, param.numel(), kGrainSize, [&](int64_t b, int64_t e) { run_range(b, e, f, ptrs...); });
  }
};

[[maybe_unused]] const bool kRegistered = [] {
  optim_kernels::register_all<Updates>(DeviceType::CPU);
  return true;
}();

}  // namespace
}  // namespace mf::cpu
