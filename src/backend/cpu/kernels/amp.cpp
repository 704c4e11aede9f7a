// The CPU kernels of gradient scaling's ops (src/optim/grad_scaler.cpp):
// amp_unscale and amp_update_scale, on the host's scalars.
#include <atomic>
#include <cmath>

#include "meshflow/op_def.h"
#include "meshflow/parallel.h"
#include "optim/update_common.h"

namespace mf::cpu {
namespace {

// grad *= inv_scale; found_inf = 1 when grad held an inf or NaN. One pass.
void unscale_kernel(const TensorList& in, TensorList& out, const Attrs&) {
  const float inv_scale = *static_cast<const float*>(in[2].data_ptr());
  std::atomic<bool> found{false};
  optim::detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "amp_unscale", [&]<typename T>() {
    using A = acc_type<T>;
    T* __restrict g = flat.written<T>(out[0]);
    const A s = A(inv_scale);
    parallel_for(0, out[0].numel(), kGrainSize, [&](int64_t begin, int64_t end) {
      int bad = 0;
      for (int64_t i = begin; i < end; ++i) {
        const A v = A(g[i]);
        bad |= !(v - v == A(0));  // inf - inf and NaN - NaN are NaN
        g[i] = T(v * s);
      }
      if (bad) found.store(true, std::memory_order_relaxed);
    });
  });
  flat.write_back();
  if (found.load()) *static_cast<float*>(in[1].data_ptr()) = 1.0f;
}

void update_scale_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  float& scale = *static_cast<float*>(out[0].data_ptr());
  int32_t& tracker = *static_cast<int32_t*>(in[1].data_ptr());
  const float found_inf = *static_cast<const float*>(in[2].data_ptr());
  if (found_inf != 0.0f) {
    scale *= float(attrs.get_float("backoff_factor"));
    tracker = 0;
    return;
  }
  const int32_t successful = tracker + 1;
  if (successful == attrs.get_int("growth_interval")) {
    const float grown = scale * float(attrs.get_float("growth_factor"));
    if (std::isfinite(grown)) scale = grown;
    tracker = 0;
  } else {
    tracker = successful;
  }
}

}  // namespace

MF_REGISTER_KERNEL("amp_unscale", DeviceType::CPU, unscale_kernel);
MF_REGISTER_KERNEL("amp_update_scale", DeviceType::CPU, update_scale_kernel);

}  // namespace mf::cpu
