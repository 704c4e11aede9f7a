// The im2col convolution path shared by the conv kernel files.
#pragma once

#include "ops/kernels/cpu/conv.h"

namespace mf::cpu {

// conv2d_forward / conv2d_backward (data and weights) by im2col + GEMM.
// float64 and float32 run natively, other floating types in float32.
void im2col_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p);
void im2col_conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& w, Tensor* grad_x, Tensor* grad_w,
                            const ConvParams& p);
// The 16-bit weight gradient as one GEMM (Note [bfloat16 weight gradient by
// GEMM]); false when it does not apply (grouped convolutions, other dtypes).
bool gemm_conv2d_weight_grad(const Tensor& grad_y, const Tensor& x, Tensor& grad_w, const ConvParams& p);

}  // namespace mf::cpu
