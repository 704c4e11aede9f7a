// Pooling kernels over (N, C, H, W) and (N, C, D, H, W) tensors: outputs
// and inputs contiguous (the registered kernels copy other inputs into
// their scratch first, Note [Kernel scratch]). Each (n, c) plane (or volume) is
// independent; planes run in parallel.
#pragma once

#include "backend/common/scratch.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

// Entry d describes spatial dim d of (depth, height, width); a 2-d pool
// leaves the depth entry neutral (kernel 1, stride 1, no padding).
struct PoolParams {
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t padding[3] = {0, 0, 0};
  int64_t dilation[3] = {1, 1, 1};
  bool count_include_pad = true;
};

// y = the max of each window; indices (int64) = its position
// (d * H + h) * W + w in the input plane (the first maximum; NaN wins, as
// in PyTorch).
void max_pool_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolParams& p);
// grad_x (zeroed here) += grad_y scattered to indices, plane by plane.
void max_pool_scatter(const Tensor& grad_y, const Tensor& indices, Tensor& grad_x);
// out = t gathered at indices, plane by plane (the adjoint of the scatter).
void max_pool_gather(const Tensor& t, const Tensor& indices, Tensor& out);

// taken: the kernel's scratch, whose next piece is oneDNN's scratchpad when
// oneDNN runs the pool.
void avg_pool_forward(const Tensor& x, Tensor& y, const PoolParams& p, Scratch& taken);
void avg_pool_backward(const Tensor& grad_y, Tensor& grad_x, const PoolParams& p, Scratch& taken);

// PyTorch's adaptive windows: output i of n over m inputs covers
// [floor(i m / n), ceil((i + 1) m / n)) along each dim.
void adaptive_avg_pool_forward(const Tensor& x, Tensor& y);
void adaptive_avg_pool_backward(const Tensor& grad_y, Tensor& grad_x);
// Max and indices as max_pool_forward's; the gradient is max_pool_scatter's.
void adaptive_max_pool_forward(const Tensor& x, Tensor& y, Tensor& indices);

}  // namespace mf::cpu
