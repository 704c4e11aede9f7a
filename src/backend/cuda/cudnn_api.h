// cuDNN, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h): the legacy convolution API of cuDNN 9 (libcudnn.so.9 loads
// its sub-libraries itself).
#pragma once

#include <cudnn.h>

namespace mf::cuda {

struct CudnnApi {
  decltype(&::cudnnCreate) create;
  decltype(&::cudnnSetStream) set_stream;
  decltype(&::cudnnGetErrorString) error_string;
  decltype(&::cudnnCreateTensorDescriptor) create_tensor;
  decltype(&::cudnnDestroyTensorDescriptor) destroy_tensor;
  decltype(&::cudnnSetTensorNdDescriptor) set_tensor;
  decltype(&::cudnnCreateFilterDescriptor) create_filter;
  decltype(&::cudnnDestroyFilterDescriptor) destroy_filter;
  decltype(&::cudnnSetFilterNdDescriptor) set_filter;
  decltype(&::cudnnCreateConvolutionDescriptor) create_conv;
  decltype(&::cudnnDestroyConvolutionDescriptor) destroy_conv;
  decltype(&::cudnnSetConvolutionNdDescriptor) set_conv;
  decltype(&::cudnnSetConvolutionGroupCount) set_group_count;
  decltype(&::cudnnSetConvolutionMathType) set_math_type;
  decltype(&::cudnnGetConvolutionNdForwardOutputDim) forward_output_dim;
  decltype(&::cudnnGetConvolutionForwardAlgorithm_v7) forward_algorithms;
  decltype(&::cudnnGetConvolutionBackwardDataAlgorithm_v7) backward_data_algorithms;
  decltype(&::cudnnGetConvolutionBackwardFilterAlgorithm_v7) backward_filter_algorithms;
  decltype(&::cudnnGetConvolutionForwardWorkspaceSize) forward_workspace;
  decltype(&::cudnnGetConvolutionBackwardDataWorkspaceSize) backward_data_workspace;
  decltype(&::cudnnGetConvolutionBackwardFilterWorkspaceSize) backward_filter_workspace;
  decltype(&::cudnnConvolutionForward) forward;
  decltype(&::cudnnConvolutionBackwardData) backward_data;
  decltype(&::cudnnConvolutionBackwardFilter) backward_filter;
};

// The library's entry points; throws Error naming the library when it
// cannot be opened.
const CudnnApi& cudnn();
// Whether it opens (the convolutions run their direct kernels where not).
bool cudnn_available();
// The handle of `device` (one per device, created on first use), bound to
// the device's current stream.
cudnnHandle_t cudnn_handle(int device);
void check_cudnn(cudnnStatus_t status, const char* what);

}  // namespace mf::cuda
