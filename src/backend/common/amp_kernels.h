// Gradient scaling's ops (src/optim/grad_scaler.cpp) written once over a
// backend's walks L (Note [Device index kernels]): amp_unscale multiplies
// each gradient element by inv_scale and raises found_inf where one is inf
// or NaN; amp_update_scale grows or backs off the scale in a one-element
// walk. Both read their scalars (inv_scale, found_inf, the scale and the
// growth tracker) on the device, so a scaled step reads nothing back. The
// CPU keeps its own kernels (backend/cpu/kernels/amp.cpp).
#pragma once

#include "backend/common/index_kernels.h"

namespace mf::amp_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;

// Operands: 0 the gradient written, 1 the gradient read (the same tensor).
template <typename M, typename T>
struct Unscale {
  const float* inv_scale;
  float* found_inf;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    const A v = M::template to_acc<A>(*reinterpret_cast<const T*>(data[1] + off[1]));
    if (!(v - v == A(0))) *found_inf = 1.0f;  // inf - inf and NaN - NaN are NaN; every writer writes 1
    *reinterpret_cast<T*>(data[0] + off[0]) = T(v * A(*inv_scale));
  }
};

// inputs (grad, found_inf, inv_scale); out[0] is the gradient, in place.
template <typename L>
void unscale(const TensorList& in, TensorList& out, const Attrs&) {
  Tensor& g = out[0];
  if (g.numel() == 0) return;
  const LoopGeometry<2> walk =
      walk_geometry<2>(g.sizes(), {operand(g, g.strides()), operand(in[0], in[0].strides())}, "amp_unscale");
  dispatch_floating(g.dtype(), "amp_unscale", [&]<typename T>() {
    L::template for_each<2>(g.device(), walk, g.numel(),
                            Unscale<typename L::Math, T>{static_cast<const float*>(in[2].data_ptr()),
                                                         static_cast<float*>(in[1].data_ptr())});
  });
}

// Operands: 0 the scale (float32), 1 the growth tracker (int32), 2 found_inf.
template <typename M>
struct UpdateScale {
  float growth, backoff;
  int32_t interval;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    float& scale = *reinterpret_cast<float*>(data[0] + off[0]);
    int32_t& tracker = *reinterpret_cast<int32_t*>(data[1] + off[1]);
    if (*reinterpret_cast<const float*>(data[2] + off[2]) != 0.0f) {
      scale *= backoff;
      tracker = 0;
      return;
    }
    const int32_t successful = tracker + 1;
    if (successful == interval) {
      const float grown = scale * growth;
      if (!M::isinf(grown) && !M::isnan(grown)) scale = grown;
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
};

// inputs (scale, growth_tracker, found_inf); out[0] is the scale, in place.
template <typename L>
void update_scale(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const LoopGeometry<3> walk =
      walk_geometry<3>({}, {operand(out[0], {}), operand(in[1], {}), operand(in[2], {})}, "amp_update_scale");
  L::template for_each<3>(out[0].device(), walk, 1,
                          UpdateScale<typename L::Math>{float(attrs.get_float("growth_factor")),
                                                        float(attrs.get_float("backoff_factor")),
                                                        int32_t(attrs.get_int("growth_interval"))});
}

template <typename L>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("amp_unscale", device, unscale<L>);
  OpRegistry::instance().set_kernel("amp_update_scale", device, update_scale<L>);
}

}  // namespace mf::amp_kernels
