// The CPU kernels of the optimizer updates (Note [Optimizer updates are ops]
// in meshflow/optim/optimizer.h): one pass over a parameter, its gradient
// and its state, the shared per-element math (Note [Shared optimizer
// updates]) inlined into loops the compiler vectorises in the compute type
// A. The ops' schemas, inference and functional API live in src/optim/.
#include <cmath>

#include "backend/common/optim_functors.h"
#include "backend/cpu/kernels/math.h"
#include "meshflow/op_def.h"
#include "meshflow/parallel.h"
#include "optim/update_common.h"

namespace mf::optim {
namespace {

using namespace optim_functors;
using detail::dispatch_bool;
using cpu::HostMath;

// f(i, ptrs...) for i in [0, n), in parallel; the pointers do not alias.
template <typename F, typename... P>
[[gnu::flatten]] void run_range(int64_t b, int64_t e, const F& f, P* __restrict... ptrs) {
  for (int64_t i = b; i < e; ++i) f(i, ptrs...);
}
template <typename F, typename... P>
void run_update(int64_t n, const F& f, P*... ptrs) {
  parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) { run_range(b, e, f, ptrs...); });
}

void sgd_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const bool momentum = in[2].defined();
  const bool init = attrs.get_bool("init_momentum_buffer");
  const bool nesterov = attrs.get_bool("nesterov");
  const double weight_decay = attrs.get_float("weight_decay");
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "sgd_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* buf = flat.written<T>(in[2]);
    const auto s = detail::sgd_scalars<acc_type<T>>(attrs);
    dispatch_bool(momentum, [&](auto kMomentum) {
      dispatch_bool(momentum && init, [&](auto kInit) {
        dispatch_bool(momentum && nesterov, [&](auto kNesterov) {
          dispatch_bool(weight_decay != 0, [&](auto kDecay) {
            run_update(out[0].numel(), SgdStep<HostMath, T, kMomentum(), kInit(), kNesterov(), kDecay()>{s}, p, g, buf);
          });
        });
      });
    });
  });
  flat.write_back();
}

template <bool kDecoupled>
void adam_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const AdamConfig config = detail::adam_config(attrs);
  const double step = detail::increment_step(in[5]);
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), kDecoupled ? "adamw_update" : "adam_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* m = flat.written<T>(in[2]);
    T* v = flat.written<T>(in[3]);
    T* vmax = flat.written<T>(in[4]);
    const auto s = adam_scalars<HostMath, acc_type<T>>(config, step);
    dispatch_bool(config.weight_decay != 0, [&](auto kDecay) {
      dispatch_bool(attrs.get_bool("amsgrad"), [&](auto kAmsgrad) {
        run_update(out[0].numel(), AdamStep<HostMath, T, kDecoupled, kDecay(), kAmsgrad()>{s}, p, g, m, v, vmax);
      });
    });
  });
  flat.write_back();
}

void rmsprop_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const double weight_decay = attrs.get_float("weight_decay");
  const bool centered = in[3].defined(), momentum = in[4].defined();
  detail::increment_step(in[5]);
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "rmsprop_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sq = flat.written<T>(in[2]);
    T* ga = flat.written<T>(in[3]);
    T* buf = flat.written<T>(in[4]);
    const auto s = detail::rmsprop_scalars<acc_type<T>>(attrs);
    dispatch_bool(weight_decay != 0, [&](auto kDecay) {
      dispatch_bool(centered, [&](auto kCentered) {
        dispatch_bool(momentum, [&](auto kMomentum) {
          run_update(out[0].numel(), RMSpropStep<HostMath, T, kDecay(), kCentered(), kMomentum()>{s}, p, g, sq, ga, buf);
        });
      });
    });
  });
  flat.write_back();
}

void adagrad_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const AdagradConfig config = detail::adagrad_config(attrs);
  const double step = detail::increment_step(in[3]);
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "adagrad_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sum = flat.written<T>(in[2]);
    const auto s = adagrad_scalars<acc_type<T>>(config, step);
    dispatch_bool(config.weight_decay != 0, [&](auto kDecay) {
      run_update(out[0].numel(), AdagradStep<HostMath, T, kDecay()>{s}, p, g, sum);
    });
  });
  flat.write_back();
}

}  // namespace

MF_REGISTER_KERNEL("sgd_update", DeviceType::CPU, detail::skip_if_found_inf(sgd_kernel));
MF_REGISTER_KERNEL("adam_update", DeviceType::CPU, detail::skip_if_found_inf(adam_kernel<false>));
MF_REGISTER_KERNEL("adamw_update", DeviceType::CPU, detail::skip_if_found_inf(adam_kernel<true>));
MF_REGISTER_KERNEL("rmsprop_update", DeviceType::CPU, detail::skip_if_found_inf(rmsprop_kernel));
MF_REGISTER_KERNEL("adagrad_update", DeviceType::CPU, detail::skip_if_found_inf(adagrad_kernel));

}  // namespace mf::optim
