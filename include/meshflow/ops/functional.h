// torch functions and torch.nn.functional's activations, normalisation and
// losses that are compositions of other ops: their gradients, autocast behaviour and SBP
// signatures follow from those ops (src/ops/functional.cpp).
#pragma once

#include <string>

#include "meshflow/ops/conv.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/scalar.h"
#include "meshflow/tensor.h"

namespace mf {

// |t| in place.
Tensor& abs_(Tensor& t);
// base ** linspace(start, end, steps), computed in float64 and cast to
// options.dtype.
Tensor logspace(double start, double end, int64_t steps, double base = 10.0, const TensorOptions& options = {});
// input viewed as 1-d, indexed by `index` (int64, any shape; negative
// indices count from the end): the result has index's shape.
Tensor take(const Tensor& input, const Tensor& index);
// clamp with one bound (torch.clamp_min / clamp_max).
Tensor clamp_min(const Tensor& t, Scalar min);
Tensor clamp_max(const Tensor& t, Scalar max);
// min(max(x, min_val), max_val); relu6 is hardtanh(x, 0, 6). min_val <= max_val.
Tensor hardtanh(const Tensor& t, Scalar min_val = -1, Scalar max_val = 1);
Tensor relu6(const Tensor& t);
// x / max(||x||_p along dim, eps).
Tensor normalize(const Tensor& t, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// sum(x1 * x2) / sqrt(max(sum(x1^2) * sum(x2^2), eps^2)) along dim, the
// inputs broadcast (PyTorch 1.13's formula).
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// y = x1^T W x2 + b over the last dimension: input1 (*, in1), input2 (*,
// in2), weight (out, in1, in2), bias (out) -> (*, out).
Tensor bilinear(const Tensor& input1, const Tensor& input2, const Tensor& weight, const Tensor& bias = Tensor());
// a * sigmoid(b) for the halves a, b of dim (its size must be even).
Tensor glu(const Tensor& t, int64_t dim = -1);
// |input - target|, reduced ("mean", "sum" or "none"; shapes must match).
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
// 0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta 0: l1).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                      double beta = 1.0);
// 0.5 d^2 where d < delta, else delta (d - 0.5 delta); delta > 0.
Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                  double delta = 1.0);
// x * log(y), and 0 where x == 0 unless y is NaN; x and y broadcast.
Tensor xlogy(const Tensor& x, const Tensor& y);
// -w (t log(x) + (1 - t) log(1 - x)), each log clamped to >= -100 as in
// PyTorch; input holds probabilities in [0, 1] (checked where its values
// are on the host) and target has input's shape; weight broadcasts to it.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            const std::string& reduction = "mean");
// Pointwise KL divergence of input (log-probabilities) from target
// (probabilities, or log-probabilities with log_target): t (log t - input),
// 0 where t == 0. Reductions "none", "sum", "mean" (over every element) and
// "batchmean" (the sum over input.size(0)).
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
              bool log_target = false);
// In-place forms of scatter, scatter_add and index_add, and index_fill
// (value written at `index` along dim; index 0-d or 1-d int64), computed
// out of place and copied into t, so autograd sees those ops.
Tensor& scatter_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& t, int64_t dim, const Tensor& index, Scalar value);
Tensor& scatter_add_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_reduce_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                        bool include_self = true);
Tensor& index_add_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, Scalar alpha = 1);
Tensor index_fill(const Tensor& t, int64_t dim, const Tensor& index, Scalar value);
Tensor& index_fill_(Tensor& t, int64_t dim, const Tensor& index, Scalar value);
// The tensors expanded to their common broadcast shape (views).
TensorList broadcast_tensors(const TensorList& tensors);
// 1-d input: a square matrix with it on diagonal `diagonal` (above the main
// one when positive); 2-d input: a copy of that diagonal.
Tensor diag(const Tensor& t, int64_t diagonal = 0);
// The indices of the nonzero elements, one row each (torch.argwhere).
Tensor argwhere(const Tensor& t);
// 1-d convolution and pooling of (N, C, L) or unbatched (C, L) inputs, as
// their 2-d forms over a height of 1 (so their gradients, kernels and SBP
// signatures are those). padding_same: PyTorch's padding="same" (stride 1;
// an even effective kernel puts the extra column on the right).
struct Conv1dArgs {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool padding_same = false;
};
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv1dArgs& args = {});
struct Pool1dArgs {
  int64_t kernel_size = 1;
  std::optional<int64_t> stride;  // kernel_size when unset
  int64_t padding = 0;
  int64_t dilation = 1;  // max_pool1d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool1d only
};
Tensor max_pool1d(const Tensor& x, const Pool1dArgs& args);
Tensor avg_pool1d(const Tensor& x, const Pool1dArgs& args);
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
// (*, C r^2, H, W) -> (*, C, H r, W r), and back.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
// max(0, x) + weight * min(0, x), weight of 1 element or one per channel
// (dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight);
// Channel dropout: whole channels zeroed with probability p, the rest
// scaled by 1 / (1 - p). spatial_dims is 1, 2 or 3 (dropout1d/2d/3d); an
// input with one dim fewer than batched is one unbatched sample (a 3-d
// input to dropout2d is taken as (N, C, L), as PyTorch 1.13 does).
Tensor channel_dropout(const Tensor& x, double p, bool training, int64_t spatial_dims);
// Normalisation over each sample's channel (the dims after 1). With
// use_input_stats and defined running statistics, these are updated with
// the mean over the batch of each sample's statistics (PyTorch's
// instance_norm); without use_input_stats the running statistics are used.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum = 0.1, double eps = 1e-5);
// x * tanh(softplus(x)).
Tensor mish(const Tensor& x);
// torch.nn.functional's other activations, composed of ops:
// hardsigmoid = clamp(x / 6 + 1/2, 0, 1), hardswish = x * hardsigmoid(x),
// selu = scale * elu(x, alpha) (PyTorch's constants), celu = alpha *
// elu(x / alpha), softsign = x / (1 + |x|), tanhshrink = x - tanh(x),
// logsigmoid = -softplus(-x), softmin = softmax(-x), threshold: x where
// x > threshold else value, softshrink: x -+ lambd outside [-lambd,
// lambd] else 0, hardshrink: x outside [-lambd, lambd] else 0.
Tensor hardsigmoid(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor selu(const Tensor& x);
Tensor celu(const Tensor& x, double alpha = 1.0);
Tensor softsign(const Tensor& x);
Tensor tanhshrink(const Tensor& x);
Tensor logsigmoid(const Tensor& x);
Tensor softmin(const Tensor& x, int64_t dim);
Tensor threshold(const Tensor& x, double threshold, double value);
Tensor softshrink(const Tensor& x, double lambd = 0.5);
Tensor hardshrink(const Tensor& x, double lambd = 0.5);
// Einstein summation over the operands' subscripts (PyTorch's equation
// syntax: letters, "..." for broadcast dims, "->" for the output, implicit
// output otherwise), planned as bmm contractions (Note [Planning einsum]
// in src/ops/einsum.cpp).
Tensor einsum(const std::string& equation, const TensorList& operands);
// The lower median of all elements (NaN if any is NaN); the gradient is
// shared evenly by the elements equal to it, as PyTorch's.
Tensor median(const Tensor& t);
// The lower median along dim and its index (the first NaN where a row has
// one); the gradient goes to that index.
ValuesIndices median(const Tensor& t, int64_t dim, bool keepdim = false);
// The distinct values of t, sorted (NaNs are distinct from each other),
// with, when asked, the index of each element's value (t's shape) and
// each value's count. Not differentiable.
struct UniqueResult {
  Tensor values, inverse, counts;
};
UniqueResult unique(const Tensor& t, bool return_inverse = false, bool return_counts = false);

}  // namespace mf
