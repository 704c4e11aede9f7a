// cuDNN, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h).
#include "backend/cuda/cudnn_api.h"

#include <array>
#include <mutex>

#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/libraries.h"
#include "meshflow/error.h"

namespace mf::cuda {

const CudnnApi& cudnn() {
  static const CudnnApi api = [] {
    void* lib = library::open({"libcudnn.so.9", "libcudnn.so"}, "cuDNN");
    CudnnApi a{};
    auto bind = [lib](const char* name, auto& fn) { library::bind(lib, "cuDNN", name, fn); };
    bind("cudnnCreate", a.create);
    bind("cudnnSetStream", a.set_stream);
    bind("cudnnGetErrorString", a.error_string);
    bind("cudnnCreateTensorDescriptor", a.create_tensor);
    bind("cudnnDestroyTensorDescriptor", a.destroy_tensor);
    bind("cudnnSetTensorNdDescriptor", a.set_tensor);
    bind("cudnnCreateFilterDescriptor", a.create_filter);
    bind("cudnnDestroyFilterDescriptor", a.destroy_filter);
    bind("cudnnSetFilterNdDescriptor", a.set_filter);
    bind("cudnnCreateConvolutionDescriptor", a.create_conv);
    bind("cudnnDestroyConvolutionDescriptor", a.destroy_conv);
    bind("cudnnSetConvolutionNdDescriptor", a.set_conv);
    bind("cudnnSetConvolutionGroupCount", a.set_group_count);
    bind("cudnnSetConvolutionMathType", a.set_math_type);
    bind("cudnnGetConvolutionNdForwardOutputDim", a.forward_output_dim);
    bind("cudnnGetConvolutionForwardAlgorithm_v7", a.forward_algorithms);
    bind("cudnnGetConvolutionBackwardDataAlgorithm_v7", a.backward_data_algorithms);
    bind("cudnnGetConvolutionBackwardFilterAlgorithm_v7", a.backward_filter_algorithms);
    bind("cudnnGetConvolutionForwardWorkspaceSize", a.forward_workspace);
    bind("cudnnGetConvolutionBackwardDataWorkspaceSize", a.backward_data_workspace);
    bind("cudnnGetConvolutionBackwardFilterWorkspaceSize", a.backward_filter_workspace);
    bind("cudnnConvolutionForward", a.forward);
    bind("cudnnConvolutionBackwardData", a.backward_data);
    bind("cudnnConvolutionBackwardFilter", a.backward_filter);
    return a;
  }();
  return api;
}

bool cudnn_available() {
  static const bool available = library::opens(cudnn);
  return available;
}

void check_cudnn(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  throw Error(detail::concat("cuda: ", what, " failed (cuDNN: ", cudnn().error_string(status), ")"));
}

cudnnHandle_t cudnn_handle(int device) {
  static std::mutex mutex;
  static std::array<cudnnHandle_t, 64> handles{};
  const CudnnApi& api = cudnn();
  cudnnHandle_t handle = library::device_handle(
      handles, mutex, device, [&](cudnnHandle_t* h) { check_cudnn(api.create(h), "cudnnCreate"); });
  check_cudnn(api.set_stream(handle, current_stream(device)), "cudnnSetStream");
  return handle;
}

}  // namespace mf::cuda
