// The optimizer updates' kernels, written once over a backend's update
// launcher U (Note [Shared optimizer updates] in optim_functors.h): operand
// gathering, dtype and flag dispatch, and the per-element steps.
//
//   U::Math                                          the backend's math
//   U::run(param, in, f, ptrs...)                    f(i, ptrs...) for every
//                                                    element of param, unless
//                                                    found_inf (in.back()) is set
//   U::run_stepped(param, step, in, make, ptrs...)   the same, after step += 1,
//                                                    with f = make(step)
//
// The ops' schemas, inference and functional API live in src/optim/.
#pragma once

#include "backend/common/optim_functors.h"
#include "meshflow/op_def.h"
#include "optim/update_common.h"

namespace mf::optim_kernels {

using namespace optim_functors;
using optim::detail::dispatch_bool;
using optim::detail::FlatOperands;

template <typename U>
void sgd(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename U::Math;
  const bool momentum = in[2].defined();
  const bool init = attrs.get_bool("init_momentum_buffer"), nesterov = attrs.get_bool("nesterov");
  FlatOperands flat;
  dispatch_floating(out[0].dtype(), "sgd_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* buf = flat.written<T>(in[2]);
    const auto s = optim::detail::sgd_scalars<acc_type<T>>(attrs);
    dispatch_bool(momentum, [&](auto kMomentum) {
      dispatch_bool(momentum && init, [&](auto kInit) {
        dispatch_bool(momentum && nesterov, [&](auto kNesterov) {
          dispatch_bool(attrs.get_float("weight_decay") != 0, [&](auto kDecay) {
            U::run(out[0], in, SgdStep<M, T, kMomentum(), kInit(), kNesterov(), kDecay()>{s}, p, g, buf);
          });
        });
      });
    });
  });
  flat.write_back();
}

template <typename U, bool kDecoupled>
void adam(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename U::Math;
  const AdamConfig config = optim::detail::adam_config(attrs);
  FlatOperands flat;
  dispatch_floating(out[0].dtype(), kDecoupled ? "adamw_update" : "adam_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* m = flat.written<T>(in[2]);
    T* v = flat.written<T>(in[3]);
    T* vmax = flat.written<T>(in[4]);
    dispatch_bool(config.weight_decay != 0, [&](auto kDecay) {
      dispatch_bool(attrs.get_bool("amsgrad"), [&](auto kAmsgrad) {
        U::run_stepped(out[0], in[5], in, MakeAdam<M, T, kDecoupled, kDecay(), kAmsgrad()>{config}, p, g, m, v, vmax);
      });
    });
  });
  flat.write_back();
}

template <typename U>
void rmsprop(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename U::Math;
  const bool centered = in[3].defined(), momentum = in[4].defined();
  FlatOperands flat;
  dispatch_floating(out[0].dtype(), "rmsprop_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sq = flat.written<T>(in[2]);
    T* ga = flat.written<T>(in[3]);
    T* buf = flat.written<T>(in[4]);
    const auto s = optim::detail::rmsprop_scalars<acc_type<T>>(attrs);
    dispatch_bool(attrs.get_float("weight_decay") != 0, [&](auto kDecay) {
      dispatch_bool(centered, [&](auto kCentered) {
        dispatch_bool(momentum, [&](auto kMomentum) {
          using Step = RMSpropStep<M, T, kDecay(), kCentered(), kMomentum()>;
          U::run_stepped(out[0], in[5], in, Fixed<Step>{Step{s}}, p, g, sq, ga, buf);
        });
      });
    });
  });
  flat.write_back();
}

template <typename U>
void adagrad(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename U::Math;
  const AdagradConfig config = optim::detail::adagrad_config(attrs);
  FlatOperands flat;
  dispatch_floating(out[0].dtype(), "adagrad_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sum = flat.written<T>(in[2]);
    dispatch_bool(config.weight_decay != 0, [&](auto kDecay) {
      U::run_stepped(out[0], in[3], in, MakeAdagrad<M, T, kDecay()>{config}, p, g, sum);
    });
  });
  flat.write_back();
}

template <typename U>
void register_all(DeviceType device) {
  auto& registry = OpRegistry::instance();
  registry.set_kernel("sgd_update", device, sgd<U>);
  registry.set_kernel("adam_update", device, adam<U, false>);
  registry.set_kernel("adamw_update", device, adam<U, true>);
  registry.set_kernel("rmsprop_update", device, rmsprop<U>);
  registry.set_kernel("adagrad_update", device, adagrad<U>);
}

}  // namespace mf::optim_kernels
