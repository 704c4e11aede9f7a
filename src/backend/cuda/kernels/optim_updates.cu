// The CUDA kernels of the optimizer updates: the shared per-element math
// (Note [Shared optimizer updates]) in one grid-stride kernel per update.
// Nothing is read on the host: found_inf (Note [Skipped updates] in
// optimizer.h) is read by the kernels, which then leave every value as it
// was, and the step count is incremented by a one-thread kernel on the same
// stream, from which the update kernel computes its step-dependent scalars.
#include "backend/common/optim_functors.h"
#include "backend/cuda/kernels/loops.cuh"
#include "optim/update_common.h"

namespace mf::cuda {
namespace {

using namespace optim_functors;
using optim::detail::dispatch_bool;

MF_FORCE_INLINE __device__ bool skipped(const float* found_inf) { return found_inf && *found_inf != 0.0f; }

// f(i, ptrs...) for every i, or nothing when found_inf is set.
template <typename F, typename... P>
__global__ void update_kernel(int64_t n, F f, const float* found_inf, P*... ptrs) {
  if (skipped(found_inf)) return;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    f(i, ptrs...);
}

// make(step)(i, ptrs...) for every i, the step read from the device.
template <typename S, typename Make, typename... P>
__global__ void stepped_update_kernel(int64_t n, Make make, const S* step, const float* found_inf, P*... ptrs) {
  if (skipped(found_inf)) return;
  const auto f = make(double(acc_type<S>(*step)));
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    f(i, ptrs...);
}

template <typename S>
__global__ void increment_step_kernel(S* step, const float* found_inf) {
  if (!skipped(found_inf)) *step = S(acc_type<S>(*step) + acc_type<S>(1));
}

const float* found_inf_of(const TensorList& in) {
  const Tensor& found_inf = in.back();
  return found_inf.defined() ? static_cast<const float*>(found_inf.data_ptr()) : nullptr;
}

cudaStream_t stream_of(const Tensor& t) { return current_stream(t.device().index()); }

template <typename F, typename... P>
void launch(const Tensor& param, const TensorList& in, const F& f, P*... ptrs) {
  const int64_t n = param.numel();
  DeviceGuard guard(param.device().index());
  update_kernel<<<grid_for(std::max<int64_t>(n, 1)), kBlock, 0, stream_of(param)>>>(n, f, found_inf_of(in), ptrs...);
  check_cuda(cudaGetLastError(), "optimizer update launch");
}

// Increments the step, then runs make(step) over the parameter.
template <typename Make, typename... P>
void launch_stepped(const Tensor& param, const Tensor& step, const TensorList& in, const Make& make, P*... ptrs) {
  const int64_t n = param.numel();
  DeviceGuard guard(param.device().index());
  cudaStream_t stream = stream_of(param);
  dispatch_floating(step.dtype(), "optimizer step", [&]<typename S>() {
    S* s = static_cast<S*>(step.data_ptr());
    increment_step_kernel<<<1, 1, 0, stream>>>(s, found_inf_of(in));
    stepped_update_kernel<<<grid_for(std::max<int64_t>(n, 1)), kBlock, 0, stream>>>(n, make, s, found_inf_of(in),
                                                                                    ptrs...);
  });
  check_cuda(cudaGetLastError(), "optimizer update launch");
}

template <typename T, bool kDecoupled, bool kDecay, bool kAmsgrad>
struct MakeAdam {
  AdamConfig config;
  MF_FORCE_INLINE __device__ AdamStep<DeviceMath, T, kDecoupled, kDecay, kAmsgrad> operator()(double step) const {
    return {adam_scalars<DeviceMath, acc_type<T>>(config, step)};
  }
};
template <typename T, bool kDecay>
struct MakeAdagrad {
  AdagradConfig config;
  MF_FORCE_INLINE __device__ AdagradStep<DeviceMath, T, kDecay> operator()(double step) const {
    return {adagrad_scalars<acc_type<T>>(config, step)};
  }
};
// RMSprop counts its steps but no scalar depends on them.
template <typename F>
struct Fixed {
  F f;
  MF_FORCE_INLINE __device__ F operator()(double) const { return f; }
};

void sgd_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const bool momentum = in[2].defined();
  const bool init = attrs.get_bool("init_momentum_buffer"), nesterov = attrs.get_bool("nesterov");
  optim::detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "sgd_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* buf = flat.written<T>(in[2]);
    const auto s = optim::detail::sgd_scalars<acc_type<T>>(attrs);
    dispatch_bool(momentum, [&](auto kMomentum) {
      dispatch_bool(momentum && init, [&](auto kInit) {
        dispatch_bool(momentum && nesterov, [&](auto kNesterov) {
          dispatch_bool(attrs.get_float("weight_decay") != 0, [&](auto kDecay) {
            launch(out[0], in, SgdStep<DeviceMath, T, kMomentum(), kInit(), kNesterov(), kDecay()>{s}, p, g, buf);
          });
        });
      });
    });
  });
  flat.write_back();
}

template <bool kDecoupled>
void adam_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const AdamConfig config = optim::detail::adam_config(attrs);
  optim::detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), kDecoupled ? "adamw_update" : "adam_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* m = flat.written<T>(in[2]);
    T* v = flat.written<T>(in[3]);
    T* vmax = flat.written<T>(in[4]);
    dispatch_bool(config.weight_decay != 0, [&](auto kDecay) {
      dispatch_bool(attrs.get_bool("amsgrad"), [&](auto kAmsgrad) {
        launch_stepped(out[0], in[5], in, MakeAdam<T, kDecoupled, kDecay(), kAmsgrad()>{config}, p, g, m, v, vmax);
      });
    });
  });
  flat.write_back();
}

void rmsprop_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const bool centered = in[3].defined(), momentum = in[4].defined();
  optim::detail::FlatOperands flat;
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
          using Step = RMSpropStep<DeviceMath, T, kDecay(), kCentered(), kMomentum()>;
          launch_stepped(out[0], in[5], in, Fixed<Step>{Step{s}}, p, g, sq, ga, buf);
        });
      });
    });
  });
  flat.write_back();
}

void adagrad_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const AdagradConfig config = optim::detail::adagrad_config(attrs);
  optim::detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "adagrad_update", [&]<typename T>() {
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sum = flat.written<T>(in[2]);
    dispatch_bool(config.weight_decay != 0, [&](auto kDecay) {
      launch_stepped(out[0], in[3], in, MakeAdagrad<T, kDecay()>{config}, p, g, sum);
    });
  });
  flat.write_back();
}

}  // namespace

MF_REGISTER_KERNEL("sgd_update", DeviceType::CUDA, sgd_kernel);
MF_REGISTER_KERNEL("adam_update", DeviceType::CUDA, adam_kernel<false>);
MF_REGISTER_KERNEL("adamw_update", DeviceType::CUDA, adam_kernel<true>);
MF_REGISTER_KERNEL("rmsprop_update", DeviceType::CUDA, rmsprop_kernel);
MF_REGISTER_KERNEL("adagrad_update", DeviceType::CUDA, adagrad_kernel);

}  // namespace mf::cuda
