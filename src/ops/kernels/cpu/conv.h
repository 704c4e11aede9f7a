// 2-d convolution kernels: oneDNN for float32 and bfloat16, im2col + GEMM
// for float64 (oneDNN has no f64) and wherever oneDNN has no implementation
// (float16 on CPUs without it computes in float32).
#pragma once

#include "meshflow/tensor.h"

namespace mf::cpu {

struct ConvParams {
  int64_t stride[2];
  int64_t padding[2];
  int64_t dilation[2];
  int64_t groups;
};

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C/groups, KH, KW)) + bias (O),
// bias optional (undefined); y contiguous, x and w any strides.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p);

// The gradients of conv2d_forward for grad_y; a null output is not wanted.
// Outputs are contiguous and fully written.
void conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& w, Tensor* grad_x, Tensor* grad_w,
                     Tensor* grad_bias, const ConvParams& p);

}  // namespace mf::cpu
