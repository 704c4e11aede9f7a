// The CUDA kernels of the optimizer updates: the shared kernel table
// (backend/common/optim_kernels.h) over cuda::Updates, one grid-stride kernel
// per update. Nothing is read on the host: found_inf (Note [Skipped updates]
// in optimizer.h) is read by the kernels, which then leave every value as it
// was, and the step count is incremented by a one-thread kernel on the same
// stream, from which the update kernel computes its step-dependent scalars.
// Gradient scaling's unscale and scale update are walks of the shared
// amp kernels (backend/common/amp_kernels.h).
#include "backend/common/amp_kernels.h"
#include "backend/common/optim_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf::cuda {
namespace {

MF_FORCE_INLINE __device__ bool skipped(const float* found_inf) { return found_inf && *found_inf != 0.0f; }

template <typename F, typename... P>
__global__ void update_kernel(int64_t n, F f, const float* found_inf, P*... ptrs) {
  if (skipped(found_inf)) return;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    f(i, ptrs...);
}

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

struct Updates {
  using Math = DeviceMath;
  template <typename F, typename... P>
  static void run(const Tensor& param, const TensorList& in, const F& f, P*... ptrs) {
    const int64_t n = param.numel();
    const int device = param.device().index();
    DeviceGuard guard(device);
    update_kernel<<<grid_for(std::max<int64_t>(n, 1)), kBlock, 0, current_stream(device)>>>(n, f, found_inf_of(in),
                                                                                          ptrs...);
    check_cuda(cudaGetLastError(), "optimizer update launch");
  }
  template <typename Make, typename... P>
  static void run_stepped(const Tensor& param, const Tensor& step, const TensorList& in, const Make& make, P*... ptrs) {
    const int64_t n = param.numel();
    const int device = param.device().index();
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    dispatch_floating(step.dtype(), "optimizer step", [&]<typename S>() {
      S* s = static_cast<S*>(step.data_ptr());
      increment_step_kernel<<<1, 1, 0, stream>>>(s, found_inf_of(in));
      stepped_update_kernel<<<grid_for(std::max<int64_t>(n, 1)), kBlock, 0, stream>>>(n, make, s, found_inf_of(in),
                                                                                      ptrs...);
    });
    check_cuda(cudaGetLastError(), "optimizer update launch");
  }
};

[[maybe_unused]] const bool kRegistered = [] {
  optim_kernels::register_all<Updates>(DeviceType::CUDA);
  amp_kernels::register_all<Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf::cuda
