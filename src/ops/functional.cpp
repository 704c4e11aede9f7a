// Composite nn.functional ops (meshflow/ops/functional.h): each is written
// with other ops, so autograd, autocast and the global interpreter see
// those ops.
#include "meshflow/ops/functional.h"

#include <cmath>

#include "meshflow/autograd.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "ops/loss_common.h"

namespace mf {
namespace {

Tensor reduce_loss(const Tensor& loss, const char* op, const std::string& reduction) {
  switch (loss_detail::parse_reduction(op, reduction)) {
    case loss_detail::Reduction::Mean: return mean(loss);
    case loss_detail::Reduction::Sum: return sum(loss);
    case loss_detail::Reduction::None: return loss;
  }
  return loss;
}

void check_floating(const Tensor& t, const char* op, const char* arg) {
  MF_CHECK(t.defined(), ValueError, op, ": ", arg, " must be a defined tensor");
  MF_CHECK(is_floating(t.dtype()), TypeError, op, ": ", arg, " must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
}

}  // namespace

Tensor& abs_(Tensor& t) {  // abs has no in-place kernel: its result copied over t
  return copy_(t, abs(clone(t)));  // abs saves the clone, which stays unwritten
}

Tensor logspace(double start, double end, int64_t steps, double base, const TensorOptions& options) {
  TensorOptions wide = options;
  wide.dtype = DType::Float64;
  wide.requires_grad = false;
  Tensor out = to(pow(Scalar(base), linspace(start, end, steps, wide)), options.dtype);
  if (options.requires_grad) out.requires_grad_(true);
  return out;
}

Tensor take(const Tensor& input, const Tensor& index) {
  MF_CHECK(input.defined() && index.defined(), ValueError, "take: input and index must be defined tensors");
  MF_CHECK(index.dtype() == DType::Int64, TypeError, "take: index must be an int64 tensor, got ",
           dtype_name(index.dtype()));
  const int64_t n = input.numel();
  if (index.numel() == 0) return reshape(narrow(reshape(input, {-1}), 0, 0, 0), index.sizes());
  const int64_t lo = min(index).item().to_int(), hi = max(index).item().to_int();
  MF_CHECK(lo >= -n && hi < n, IndexError, "take: index ", lo < -n ? lo : hi, " is out of range for a tensor of ",
           n, " elements");
  const Tensor flat_index = reshape(where(lt(index, Scalar(0)), add(index, Scalar(n)), index), {-1});
  return reshape(index_select(reshape(input, {-1}), 0, flat_index), index.sizes());
}

Tensor clamp_min(const Tensor& t, Scalar min) { return clamp(t, min, std::nullopt); }
Tensor clamp_max(const Tensor& t, Scalar max) { return clamp(t, std::nullopt, max); }

Tensor hardtanh(const Tensor& t, Scalar min_val, Scalar max_val) {
  MF_CHECK(min_val.to_double() <= max_val.to_double(), ValueError, "hardtanh: min_val (", min_val.to_double(),
           ") must not exceed max_val (", max_val.to_double(), ")");
  return clamp(t, min_val, max_val);
}

Tensor relu6(const Tensor& t) { return hardtanh(t, 0, 6); }

Tensor normalize(const Tensor& t, double p, int64_t dim, double eps) {
  check_floating(t, "normalize", "input");
  MF_CHECK(t.dim() > 0, ShapeError, "normalize: input must have at least one dim, got a 0-d tensor");
  MF_CHECK(eps >= 0, ValueError, "normalize: eps must be >= 0, got ", eps);
  const int64_t d = wrap_dim(dim, t.dim(), "normalize");
  return div(t, clamp_min(norm(t, p, {d}, /*keepdim=*/true), eps));
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  check_floating(x1, "cosine_similarity", "x1");
  check_floating(x2, "cosine_similarity", "x2");
  const Shape shape = broadcast_shapes(x1.sizes(), x2.sizes(), "cosine_similarity");
  MF_CHECK(!shape.empty(), ShapeError, "cosine_similarity: the inputs must have at least one dim");
  const int64_t d = wrap_dim(dim, int64_t(shape.size()), "cosine_similarity");
  const Tensor a = expand(x1, shape), b = expand(x2, shape);
  const Tensor w12 = sum(mul(a, b), {d}), w1 = sum(mul(a, a), {d}), w2 = sum(mul(b, b), {d});
  return div(w12, sqrt(clamp_min(mul(w1, w2), eps * eps)));
}

Tensor bilinear(const Tensor& input1, const Tensor& input2, const Tensor& weight, const Tensor& bias) {
  MF_CHECK(input1.defined() && input2.defined() && weight.defined(), ValueError,
           "bilinear(): input1, input2 and weight must be given");
  MF_CHECK(input1.dim() == input2.dim(), ShapeError, "bilinear(): input dimensions do not match: got ", input1.dim(),
           " and ", input2.dim());
  MF_CHECK(input1.dim() >= 1, ShapeError, "bilinear(): inputs must have at least one dimension");
  const Shape batch1(input1.sizes().begin(), input1.sizes().end() - 1);
  const Shape batch2(input2.sizes().begin(), input2.sizes().end() - 1);
  MF_CHECK(batch1 == batch2, ShapeError, "bilinear(): input batch dimensions do not match: got ", shape_str(batch1),
           " and ", shape_str(batch2));
  MF_CHECK(weight.dim() == 3, ShapeError, "bilinear(): weight must be 3-d (out, in1, in2), got shape ",
           shape_str(weight.sizes()));
  MF_CHECK(input1.size(-1) == weight.size(1), ShapeError, "bilinear(): input1 size does not match weight size: got ",
           input1.size(-1), " but expected ", weight.size(1));
  MF_CHECK(input2.size(-1) == weight.size(2), ShapeError, "bilinear(): input2 size does not match weight size: got ",
           input2.size(-1), " but expected ", weight.size(2));
  MF_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), ShapeError,
           "bilinear(): bias size does not match weight size: got ", bias.defined() ? shape_str(bias.sizes()) : "",
           " but expected (", weight.size(0), ")");
  Tensor y = einsum("...i,oij,...j->...o", {input1, weight, input2});
  return bias.defined() ? add(y, bias) : y;
}

Tensor glu(const Tensor& t, int64_t dim) {
  MF_CHECK(t.defined(), ValueError, "glu: input must be a defined tensor");
  MF_CHECK(t.dim() > 0, ShapeError, "glu: glu does not support scalars because halving size must be even");
  const int64_t d = wrap_dim(dim, t.dim(), "glu");
  MF_CHECK(t.size(d) % 2 == 0, ShapeError, "glu: halving dimension must be even, but dimension ", d, " is size ",
           t.size(d));
  const TensorList halves = chunk(t, 2, d);
  return mul(halves[0], sigmoid(halves[1]));
}

Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  check_floating(input, "l1_loss", "input");
  return reduce_loss(abs(sub(input, target)), "l1_loss", reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction, double beta) {
  check_floating(input, "smooth_l1_loss", "input");
  MF_CHECK(beta >= 0, ValueError, "smooth_l1_loss: beta must be >= 0, got ", beta);
  if (beta == 0) return l1_loss(input, target, reduction);
  const Tensor d = abs(sub(input, target));
  const Tensor loss = where(lt(d, Scalar(beta)), div(mul(mul(d, d), 0.5), Scalar(beta)), sub(d, Scalar(0.5 * beta)));
  return reduce_loss(loss, "smooth_l1_loss", reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction, double delta) {
  check_floating(input, "huber_loss", "input");
  MF_CHECK(delta > 0, ValueError, "huber_loss: delta must be > 0, got ", delta);
  const Tensor d = abs(sub(input, target));
  const Tensor loss =
      where(lt(d, Scalar(delta)), mul(mul(d, d), 0.5), mul(sub(d, Scalar(0.5 * delta)), Scalar(delta)));
  return reduce_loss(loss, "huber_loss", reduction);
}

Tensor xlogy(const Tensor& x, const Tensor& y) {
  // Computed in the promoted floating dtype, as torch does. Where x and y
  // are both 0, log(1) = 0 stands in for log(0): the product is 0 and so
  // is d/dx there (torch's gradients; d/dy is 0 there, not torch's 0/0).
  DType dtype = result_type(x, y);
  if (!is_floating(dtype)) dtype = default_dtype();
  const Tensor a = to(x, dtype), b = to(y, dtype);
  return mul(a, log(where(logical_and(eq(a, Scalar(0)), eq(b, Scalar(0))), Scalar(1), b)));
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            const std::string& reduction) {
  check_floating(input, "binary_cross_entropy", "input");
  MF_CHECK(target.defined() && target.sizes() == input.sizes(), ValueError,
           "binary_cross_entropy: target must have the input's size ", shape_str(input.sizes()), ", got ",
           target.defined() ? shape_str(target.sizes()) : std::string("None"));
  loss_detail::parse_reduction("binary_cross_entropy", reduction);
  if (!input.is_global() && input.device().is_cpu() && input.storage()->has_data() && input.numel() > 0) {
    NoGradGuard no_grad;
    const Tensor low = amin(input), high = amax(input);
    MF_CHECK(low.item().to_double() >= 0 && high.item().to_double() <= 1, ValueError,
             "binary_cross_entropy: all elements of input must be between 0 and 1, got values in [",
             low.item().to_double(), ", ", high.item().to_double(), "]");
  }
  const Tensor log_x = clamp_min(log(input), -100);
  const Tensor log_1mx = clamp_min(log1p(neg(input)), -100);
  // (t - 1) log(1 - x) - t log(x), as PyTorch writes it
  Tensor loss = sub(mul(sub(target, Scalar(1)), log_1mx), mul(target, log_x));
  if (weight.defined()) loss = mul(loss, weight);
  return reduce_loss(loss, "binary_cross_entropy", reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction, bool log_target) {
  check_floating(input, "kl_div", "input");
  MF_CHECK(target.defined(), ValueError, "kl_div: target must be a defined tensor");
  const bool batchmean = reduction == "batchmean";
  if (!batchmean) loss_detail::parse_reduction("kl_div", reduction);
  const Tensor loss = log_target ? mul(exp(target), sub(target, input)) : sub(xlogy(target, target), mul(target, input));
  if (!batchmean) return reduce_loss(loss, "kl_div", reduction);
  const Tensor total = sum(loss);
  return input.dim() == 0 ? total : div(total, Scalar(input.size(0)));
}

Tensor& scatter_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return copy_(t, scatter(t, dim, index, src));
}
Tensor& scatter_(Tensor& t, int64_t dim, const Tensor& index, Scalar value) {
  return copy_(t, scatter(t, dim, index, value));
}
Tensor& scatter_add_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return copy_(t, scatter_add(t, dim, index, src));
}
Tensor& scatter_reduce_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                        bool include_self) {
  // The backward reads self (prod, amax, amin): the in-place write must not be to the tensor it saved.
  const bool saved = GradMode::is_enabled() && (t.requires_grad() || src.requires_grad());
  return copy_(t, scatter_reduce(saved ? clone(t) : t, dim, index, src, reduce, include_self));
}
Tensor& index_add_(Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, Scalar alpha) {
  return copy_(t, index_add(t, dim, index, src, alpha));
}

Tensor index_fill(const Tensor& t, int64_t dim, const Tensor& index, Scalar value) {
  MF_CHECK(t.defined() && index.defined(), ValueError, "index_fill: input and index must be defined tensors");
  MF_CHECK(index.dim() <= 1, ShapeError, "index_fill: index must be 0-d or 1-d, got ", index.dim(), " dims");
  MF_CHECK(index.dtype() == DType::Int64, TypeError, "index_fill: index must be int64, got ", dtype_name(index.dtype()));
  if (t.dim() == 0) {
    MF_CHECK(dim == 0 || dim == -1, IndexError, "index_fill: dim ", dim, " is out of range for a 0-d tensor");
    return reshape(scatter(reshape(t, {1}), 0, reshape(index, {-1}), value), {});
  }
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  MF_CHECK(d >= 0 && d < t.dim(), IndexError, "index_fill: dim ", dim, " is out of range for a tensor of ", t.dim(),
           " dims");
  // One scatter index per filled position: index along d, broadcast over the other dims.
  Shape along(size_t(t.dim()), 1), shape = t.sizes();
  along[size_t(d)] = index.numel();
  shape[size_t(d)] = index.numel();
  return scatter(t, d, contiguous(expand(reshape(index, along), shape)), value);
}

Tensor& index_fill_(Tensor& t, int64_t dim, const Tensor& index, Scalar value) {
  return copy_(t, index_fill(t, dim, index, value));
}

TensorList broadcast_tensors(const TensorList& tensors) {
  Shape shape;
  for (const Tensor& t : tensors) {
    MF_CHECK(t.defined(), ValueError, "broadcast_tensors: every argument must be a tensor");
    shape = broadcast_shapes(shape, t.sizes(), "broadcast_tensors");
  }
  TensorList out;
  for (const Tensor& t : tensors) out.push_back(expand(t, shape));
  return out;
}

Tensor diag(const Tensor& t, int64_t offset) {
  MF_CHECK(t.defined() && (t.dim() == 1 || t.dim() == 2), ShapeError, "diag: expected a 1-d or 2-d tensor, got ",
           t.defined() ? t.dim() : 0, " dims");
  if (t.dim() == 2) return clone(diagonal(t, offset));
  const int64_t n = t.size(0), k = offset < 0 ? -offset : offset;
  // eye * t puts t on the main diagonal; padding shifts it off the main one.
  const Tensor square = mul(eye(n, std::nullopt, {.dtype = t.dtype(), .device = t.device()}), t);
  if (k == 0) return square;
  return offset > 0 ? pad(square, {k, 0, 0, k}) : pad(square, {0, k, k, 0});
}

Tensor argwhere(const Tensor& t) { return nonzero(t); }

Tensor median(const Tensor& t) {
  MF_CHECK(t.defined() && t.numel() > 0, ValueError, "median: expected a non-empty tensor");
  const Tensor flat = reshape(t, {-1});
  Tensor m;
  {
    NoGradGuard no_grad;
    m = select(sort(flat).values, 0, (flat.numel() - 1) / 2);
    if (is_floating(flat.dtype())) m = where(any(isnan(flat)), Scalar(std::nan("")), m);
  }
  if (!is_floating(flat.dtype())) return m;
  // m's value, with the gradient of the mean of the elements equal to it.
  const Tensor ties = eq(flat, m);
  const Tensor share = div(sum(where(ties, flat, Scalar(0))), sum(ties));
  return add(m, sub(share, share.detach()));
}

ValuesIndices median(const Tensor& t, int64_t dim, bool keepdim) {
  MF_CHECK(t.defined(), ValueError, "median: input must be a defined tensor");
  const Tensor x = t.dim() == 0 ? reshape(t, {1}) : t;
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  MF_CHECK(d >= 0 && d < x.dim(), IndexError, "median: dim ", dim, " is out of range for a tensor of ", t.dim(),
           " dims");
  const int64_t n = x.size(d);
  MF_CHECK(n > 0, IndexError, "median: cannot compute the median of an empty dim ", dim);
  Tensor index;
  {
    NoGradGuard no_grad;
    index = select(sort(x, d).indices, d, (n - 1) / 2);
    const Tensor nan = isnan(x);
    index = where(any(nan, d), argmax(to(nan, DType::Int64), d), index);  // argmax: the first NaN
  }
  Tensor values = squeeze(gather(x, d, unsqueeze(index, d)), d);
  if (keepdim && t.dim() > 0) return {unsqueeze(values, d), unsqueeze(index, d)};
  if (t.dim() == 0) return {reshape(values, {}), reshape(index, {})};
  return {values, index};
}

UniqueResult unique(const Tensor& t, bool return_inverse, bool return_counts) {
  MF_CHECK(t.defined(), ValueError, "unique: input must be a defined tensor");
  NoGradGuard no_grad;
  const Tensor flat = reshape(t.detach(), {-1});
  const int64_t n = flat.numel();
  UniqueResult r;
  const TensorOptions int64{.dtype = DType::Int64, .device = t.device()};
  if (n == 0) {
    r.values = clone(flat);
    if (return_inverse) r.inverse = zeros(t.sizes(), int64);
    if (return_counts) r.counts = zeros({0}, int64);
    return r;
  }
  const ValuesIndices sorted = sort(flat);
  // first[i]: sorted element i starts a new value (NaN != NaN: each its own)
  const Tensor first = cat({ones({1}, {.dtype = DType::Bool, .device = t.device()}),
                            ne(narrow(sorted.values, 0, 1, n - 1), narrow(sorted.values, 0, 0, n - 1))});
  r.values = masked_select(sorted.values, first);
  if (return_inverse) {
    const Tensor group = sub(cumsum(first, 0), Scalar(1));
    r.inverse = reshape(scatter(zeros({n}, int64), 0, sorted.indices, group), t.sizes());
  }
  if (return_counts) {
    const Tensor starts = reshape(nonzero(first), {-1});
    const Tensor ends = cat({narrow(starts, 0, 1, starts.numel() - 1), full({1}, n, int64)});
    r.counts = sub(ends, starts);
  }
  return r;
}

namespace {

void check_1d_input(const Tensor& x, const char* op) {
  MF_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), ShapeError, op,
           ": expected a 2-d (unbatched) or 3-d (batched) input, got ", x.defined() ? x.dim() : 0, " dims");
}

Pool2dArgs pool_2d_of(const Pool1dArgs& a, const char* op) {
  MF_CHECK(a.kernel_size > 0, ValueError, op, ": kernel_size must be positive, got ", a.kernel_size);
  Pool2dArgs p;
  p.kernel_size = {1, a.kernel_size};
  p.stride = {1, a.stride.value_or(a.kernel_size)};
  p.padding = {0, a.padding};
  p.dilation = {1, a.dilation};
  p.ceil_mode = a.ceil_mode;
  p.count_include_pad = a.count_include_pad;
  return p;
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv1dArgs& args) {
  check_1d_input(x, "conv1d");
  MF_CHECK(weight.defined() && weight.dim() == 3, ShapeError, "conv1d: weight must be 3-d (out_channels, "
           "in_channels / groups, kernel_size), got ", weight.defined() ? weight.dim() : 0, " dims");
  Tensor input = x;
  int64_t padding = args.padding;
  if (args.padding_same) {
    MF_CHECK(args.stride == 1, ValueError, "conv1d: padding='same' is not supported for strided convolutions");
    const int64_t total = checked_mul(args.dilation, weight.size(2) - 1, "conv1d", "the padding");
    padding = total / 2;
    if (total % 2) input = pad(x, {0, 1});
  }
  const Tensor y = conv2d(unsqueeze(input, -2), unsqueeze(weight, 2), bias,
                          Conv2dArgs{.stride = {1, args.stride}, .padding = {0, padding},
                                     .dilation = {1, args.dilation}, .groups = args.groups});
  return squeeze(y, -2);
}

Tensor max_pool1d(const Tensor& x, const Pool1dArgs& args) {
  check_1d_input(x, "max_pool1d");
  return squeeze(max_pool2d(unsqueeze(x, -2), pool_2d_of(args, "max_pool1d")), -2);
}

Tensor avg_pool1d(const Tensor& x, const Pool1dArgs& args) {
  check_1d_input(x, "avg_pool1d");
  return squeeze(avg_pool2d(unsqueeze(x, -2), pool_2d_of(args, "avg_pool1d")), -2);
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  check_1d_input(x, "adaptive_avg_pool1d");
  return squeeze(adaptive_avg_pool2d(unsqueeze(x, -2), {1, output_size}), -2);
}

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  MF_CHECK(x.defined() && x.dim() >= 3, ShapeError, "pixel_shuffle: expected at least 3 dims, got ",
           x.defined() ? x.dim() : 0);
  MF_CHECK(r > 0, ValueError, "pixel_shuffle: upscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), c = x.size(-3), h = x.size(-2), w = x.size(-1);
  const int64_t r2 = checked_mul(r, r, "pixel_shuffle", "upscale_factor squared");
  MF_CHECK(c % r2 == 0, ShapeError, "pixel_shuffle: the channel count ", c,
           " must be divisible by the square of upscale_factor (", r2, ")");
  Shape lead(x.sizes().begin(), x.sizes().end() - 3), split = lead, out = lead;
  for (int64_t v : {c / r2, r, r, h, w}) split.push_back(v);
  for (int64_t v : {c / r2, checked_mul(h, r, "pixel_shuffle", "the output height"),
                    checked_mul(w, r, "pixel_shuffle", "the output width")})
    out.push_back(v);
  Shape perm;
  for (int64_t d = 0; d < n - 3; ++d) perm.push_back(d);
  for (int64_t d : {0, 3, 1, 4, 2}) perm.push_back(n - 3 + d);  // (C, H, r, W, r)
  return reshape(permute(reshape(x, split), perm), out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  MF_CHECK(x.defined() && x.dim() >= 3, ShapeError, "pixel_unshuffle: expected at least 3 dims, got ",
           x.defined() ? x.dim() : 0);
  MF_CHECK(r > 0, ValueError, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), c = x.size(-3), h = x.size(-2), w = x.size(-1);
  MF_CHECK(h % r == 0 && w % r == 0, ShapeError, "pixel_unshuffle: the height ", h, " and width ", w,
           " must be divisible by downscale_factor (", r, ")");
  Shape lead(x.sizes().begin(), x.sizes().end() - 3), split = lead, out = lead;
  for (int64_t v : {c, h / r, r, w / r, r}) split.push_back(v);
  const int64_t channels = checked_mul(c, checked_mul(r, r, "pixel_unshuffle", "downscale_factor squared"),
                                       "pixel_unshuffle", "the output channels");
  for (int64_t v : {channels, h / r, w / r}) out.push_back(v);
  Shape perm;
  for (int64_t d = 0; d < n - 3; ++d) perm.push_back(d);
  for (int64_t d : {0, 2, 4, 1, 3}) perm.push_back(n - 3 + d);  // (C, r, r, H/r, W/r)
  return reshape(permute(reshape(x, split), perm), out);
}

Tensor mish(const Tensor& x) { return mul(x, tanh(softplus(x))); }

namespace {
void check_floating(const char* op, const Tensor& x) {
  MF_CHECK(x.defined() && is_floating(x.dtype()), TypeError, op, ": expected a floating-point tensor, got ",
           x.defined() ? dtype_name(x.dtype()) : std::string("None"));
}
}  // namespace

Tensor hardsigmoid(const Tensor& x) {
  check_floating("hardsigmoid", x);
  return clamp(add(div(x, Scalar(6.0)), Scalar(0.5)), Scalar(0.0), Scalar(1.0));
}
Tensor hardswish(const Tensor& x) { return mul(x, hardsigmoid(x)); }
Tensor selu(const Tensor& x) {
  constexpr double kAlpha = 1.6732632423543772848170429916717, kScale = 1.0507009873554804934193349852946;
  return mul(elu(x, kAlpha), Scalar(kScale));
}
Tensor celu(const Tensor& x, double alpha) {
  MF_CHECK(alpha != 0, ValueError, "celu: ZeroDivisionError (alpha must not be 0)");
  return mul(elu(div(x, Scalar(alpha)), 1.0), Scalar(alpha));
}
Tensor softsign(const Tensor& x) {
  check_floating("softsign", x);
  return div(x, add(abs(x), Scalar(1)));
}
Tensor tanhshrink(const Tensor& x) { return sub(x, tanh(x)); }
Tensor logsigmoid(const Tensor& x) {
  check_floating("logsigmoid", x);
  return neg(softplus(neg(x)));
}
Tensor softmin(const Tensor& x, int64_t dim) { return softmax(neg(x), dim); }
Tensor threshold(const Tensor& x, double threshold, double value) {
  return where(gt(x, Scalar(threshold)), x, Scalar(value));
}
Tensor softshrink(const Tensor& x, double lambd) {
  check_floating("softshrink", x);
  MF_CHECK(lambd >= 0, ValueError, "softshrink: lambda must be greater or equal to 0, but found to be ", lambd);
  const Tensor shrunk = sub(x, mul(sign(x), Scalar(lambd)));
  return where(gt(abs(x), Scalar(lambd)), shrunk, Scalar(0.0));
}
Tensor hardshrink(const Tensor& x, double lambd) {
  check_floating("hardshrink", x);
  return where(gt(abs(x), Scalar(lambd)), x, Scalar(0.0));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  MF_CHECK(x.defined() && weight.defined(), ValueError, "prelu: input and weight must be defined tensors");
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  MF_CHECK(weight.numel() == 1 || weight.numel() == channels, ShapeError, "prelu: weight has ", weight.numel(),
           " elements, expected 1 or the number of channels (", channels, ")");
  Tensor w = weight;
  if (weight.numel() > 1) {
    Shape shape(size_t(x.dim() - 1), 1);
    shape[0] = channels;
    w = reshape(weight, shape);
  } else {
    w = reshape(weight, {});
  }
  return where(ge(x, Scalar(0)), x, mul(w, x));
}

Tensor channel_dropout(const Tensor& x, double p, bool training, int64_t spatial_dims) {
  const std::string op = "dropout" + std::to_string(spatial_dims) + "d";
  MF_CHECK(p >= 0 && p <= 1, ValueError, op, ": dropout probability has to be between 0 and 1, but got ", p);
  MF_CHECK(x.defined(), ValueError, op, ": input must be a defined tensor");
  const int64_t batched = spatial_dims + 2;
  MF_CHECK(x.dim() == batched || x.dim() == batched - 1, ShapeError, op, ": expected a ", batched - 1, "-d or ",
           batched, "-d input, got ", x.dim(), " dims");
  if (!training || p == 0) return x;
  // The dims a mask entry covers: all but (N, C), or all but C unbatched;
  // dropout2d of a 3-d input drops (N, C, L)'s channels.
  const int64_t kept = (x.dim() == batched || spatial_dims == 2) ? 2 : 1;
  Shape mask_shape = x.sizes();
  for (size_t d = size_t(kept); d < mask_shape.size(); ++d) mask_shape[d] = 1;
  if (p == 1) return mul(x, zeros(mask_shape, {.dtype = x.dtype(), .device = x.device()}));
  const Tensor keep = bernoulli(full(mask_shape, 1.0 - p, {.dtype = x.dtype(), .device = x.device()}));
  return mul(x, div(keep, Scalar(1.0 - p)));
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  MF_CHECK(x.defined() && x.dim() >= 2, ShapeError, "instance_norm: expected an input of at least 2 dims, got ",
           x.defined() ? x.dim() : 0);
  if (!use_input_stats) {
    MF_CHECK(running_mean.defined() && running_var.defined(), ValueError,
             "instance_norm: use_input_stats=False needs running_mean and running_var");
    return batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps);
  }
  const int64_t n = x.size(0), c = x.size(1);
  if (!running_mean.defined() && !running_var.defined()) return group_norm(x, c, weight, bias, eps);
  // Each (sample, channel) as a channel of one batch: batch_norm's statistics
  // are then the instances', and its running update is averaged over samples.
  Shape merged = x.sizes();
  merged.erase(merged.begin());
  merged[0] = checked_mul(n, c, "instance_norm", "samples times channels");
  merged.insert(merged.begin(), 1);
  Tensor mean_rep = running_mean.defined() ? repeat(running_mean.detach(), {n}) : Tensor();
  Tensor var_rep = running_var.defined() ? repeat(running_var.detach(), {n}) : Tensor();
  const Tensor w = weight.defined() ? repeat(weight, {n}) : Tensor(), b = bias.defined() ? repeat(bias, {n}) : Tensor();
  const Tensor y = batch_norm(reshape(x, merged), mean_rep, var_rep, w, b, true, momentum, eps);
  {
    NoGradGuard no_grad;
    Tensor rm = running_mean, rv = running_var;
    if (rm.defined()) copy_(rm, mean(reshape(mean_rep, {n, c}), {0}));
    if (rv.defined()) copy_(rv, mean(reshape(var_rep, {n, c}), {0}));
  }
  return reshape(y, x.sizes());
}

}  // namespace mf
