// Convolution and pooling (oneDNN on the CPU where it is faster).
#pragma once

#include "meshflow/tensor.h"

namespace mf {

struct Conv2dArgs {
  Shape stride = {1, 1};
  Shape padding = {0, 0};
  Shape dilation = {1, 1};
  int64_t groups = 1;
};
// x (N, C, H, W), weight (O, C/groups, kH, kW), bias (O) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dArgs& args = {});
struct Pool2dArgs {
  Shape kernel_size;
  Shape stride = {};  // empty: kernel_size
  Shape padding = {0, 0};
  Shape dilation = {1, 1};  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const Pool2dArgs& args);
// {values, indices}: indices (int64) are positions h * W + w in each input
// plane, as PyTorch's return_indices=True gives.
TensorList max_pool2d_with_indices(const Tensor& x, const Pool2dArgs& args);
Tensor avg_pool2d(const Tensor& x, const Pool2dArgs& args);
Tensor adaptive_avg_pool2d(const Tensor& x, const Shape& output_size);

}  // namespace mf
