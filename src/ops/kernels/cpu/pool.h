// 2-d pooling kernels over (N, C, H, W) tensors: outputs contiguous, inputs
// any strides. Each (n, c) plane is independent; planes run in parallel.
#pragma once

#include "meshflow/tensor.h"

namespace mf::cpu {

struct PoolParams {
  int64_t kernel[2];
  int64_t stride[2];
  int64_t padding[2];
  int64_t dilation[2];
  bool count_include_pad;
};

// y = the max of each window; indices (int64) = its position h * W + w in
// the input plane (the first maximum; NaN wins, as in PyTorch).
void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolParams& p);
// grad_x (zeroed here) += grad_y scattered to indices, plane by plane.
void max_pool2d_scatter(const Tensor& grad_y, const Tensor& indices, Tensor& grad_x);
// out = t gathered at indices, plane by plane (the adjoint of the scatter).
void max_pool2d_gather(const Tensor& t, const Tensor& indices, Tensor& out);

void avg_pool2d_forward(const Tensor& x, Tensor& y, const PoolParams& p);
void avg_pool2d_backward(const Tensor& grad_y, Tensor& grad_x, const PoolParams& p);

void adaptive_avg_pool2d_forward(const Tensor& x, Tensor& y);
// PyTorch's adaptive windows (output i of n over m inputs covers
// [floor(i m / n), ceil((i + 1) m / n))), max and indices as max_pool2d's;
// the gradient is max_pool2d_scatter's.
void adaptive_max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices);
void adaptive_avg_pool2d_backward(const Tensor& grad_y, Tensor& grad_x);

}  // namespace mf::cpu
