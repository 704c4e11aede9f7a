// Convolution kernels over 2 or 3 spatial dims: oneDNN for float32 and
// bfloat16, im2col + GEMM for float64 (oneDNN has no f64) and wherever
// oneDNN has no implementation (float16 on CPUs without it computes in
// float32).
#pragma once

#include "backend/common/scratch.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

// Entry d describes spatial dim d of (depth, height, width); a 2-d
// convolution leaves the depth entry neutral (stride 1, no padding,
// dilation 1) and its tensors have no depth dim. padding_end pads after the
// input (bottom/right/back) and may be negative, which crops: a transposed
// convolution's output_padding (Note [Transposed convolution] in
// src/ops/conv_transpose.cpp).
struct ConvParams {
  int64_t spatial = 2;  // 2 or 3
  int64_t stride[3] = {1, 1, 1};
  int64_t padding[3] = {0, 0, 0};
  int64_t padding_end[3] = {0, 0, 0};
  int64_t dilation[3] = {1, 1, 1};
  int64_t groups = 1;
};

// y (N, O, [OD,] OH, OW) = conv(x (N, C, [D,] H, W), w (O, C/groups, [KD,]
// KH, KW)) + bias (O), bias optional (undefined); y contiguous, x and w any
// strides.
void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p,
                  Workspace& ws);

// The gradients of conv_forward for grad_y; a null output is not wanted.
// x is read only for grad_w (its shape is grad_x's when grad_x is given, so
// x may then be undefined). Outputs are contiguous and fully written.
void conv_backward(const Tensor& grad_y, const Tensor& x, const Tensor& w, Tensor* grad_x, Tensor* grad_w,
                   Tensor* grad_bias, const ConvParams& p, Workspace& ws);

// y = the adjoint of conv(., w) applied to x, plus bias (O = w.size(1) *
// groups channels): the transposed convolution, computed as conv_backward's
// input gradient for grad_y = x. y's shape is the convolution's input shape.
void conv_transpose_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p,
                            Workspace& ws);

}  // namespace mf::cpu
