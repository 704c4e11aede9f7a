// The im2col convolution path shared by the conv kernel files.
#pragma once

#include "backend/cpu/kernels/conv.h"

namespace mf::cpu {

// conv_forward / conv_backward (data and weights) by im2col + GEMM. float64
// and float32 run natively, other floating types in float32. x_shape is
// the input's shape (x itself is read for grad_w only).
void im2col_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p,
                         Workspace& ws);
void im2col_conv_backward(const Tensor& grad_y, const Tensor& x, const Shape& x_shape, const Tensor& w,
                          Tensor* grad_x, Tensor* grad_w, const ConvParams& p, Workspace& ws);
// The 16-bit weight gradient as one GEMM (Note [bfloat16 weight gradient by
// GEMM]); false when it does not apply (grouped convolutions, other dtypes).
bool gemm_conv_weight_grad(const Tensor& grad_y, const Tensor& x, Tensor& grad_w, const ConvParams& p,
                           Workspace& ws);

// Depthwise 2-d convolutions (groups == in == out channels) by direct loops
// (Note [Depthwise convolution] in conv_depthwise.cpp); false (nothing
// written) when the call is not one: another path runs it.
bool depthwise_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p,
                            Workspace& ws);
bool depthwise_conv_backward(const Tensor& grad_y, const Tensor& x, const Shape& x_shape, const Tensor& w,
                             Tensor* grad_x, Tensor* grad_w, const ConvParams& p, Workspace& ws);

}  // namespace mf::cpu
