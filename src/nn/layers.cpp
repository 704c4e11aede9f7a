// Linear, convolution, normalisation, embedding, dropout, activations,
// pooling and containers.
#include "meshflow/nn/layers.h"
#include "meshflow/nn/pointwise_layers.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "meshflow/autograd.h"
#include "meshflow/error.h"
#include "meshflow/nn/init.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/functional.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"
#include "distributed/comm_ops.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/ops/reduce.h"
#include "nn/layer_common.h"
#include "nn/repr.h"

namespace mf::nn {
namespace {

// An int when both entries agree (how users usually pass pool sizes).
std::string pair_or_int(const Shape& s) { return s.size() == 2 && s[0] == s[1] ? std::to_string(s[0]) : py_tuple(s); }

}  // namespace

// --- Linear -------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : Module("Linear"), in_features(in_features), out_features(out_features) {
  MF_CHECK(in_features >= 0 && out_features >= 0, ValueError, "Linear: in_features and out_features must be >= 0, got ",
           in_features, " and ", out_features);
  register_parameter("weight", new_param({out_features, in_features}));
  register_parameter("bias", bias ? new_param({out_features}) : Tensor());
  reset_parameters();
}

void Linear::reset_parameters() { reset_affine(weight(), bias()); }

Tensor Linear::forward(const Tensor& x) { return linear(x, weight(), bias()); }

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + py_bool(bias().defined());
}

// --- Conv2d -------------------------------------------------------------------

namespace {
// The options with a padding string resolved into its symmetric padding.
Conv2dOptions resolved_padding(Conv2dOptions o, const Shape& kernel_size) {
  MF_CHECK(kernel_size.size() == 2, ValueError, "Conv2d: kernel_size must have 2 entries, got ", py_tuple(kernel_size));
  for (const auto& [name, v] : {std::pair{"stride", &o.stride}, {"padding", &o.padding}, {"dilation", &o.dilation}})
    MF_CHECK(v->size() == 2, ValueError, "Conv2d: ", name, " must have 2 entries, got ", py_tuple(*v));
  for (size_t i = 0; i < 2; ++i) {
    check_positive(kernel_size[i], "Conv2d", "kernel_size");
    check_positive(o.dilation[i], "Conv2d", "dilation");
  }
  MF_CHECK(o.padding_str.empty() || o.padding_str == "valid" || o.padding_str == "same", ValueError,
           "Conv2d: invalid padding string '", o.padding_str, "', should be one of {'valid', 'same'}");
  if (o.padding_str == "valid") o.padding = {0, 0};
  if (o.padding_str == "same") {
    MF_CHECK(o.stride == Shape({1, 1}), ValueError, "Conv2d: padding='same' is not supported for strided convolutions");
    for (size_t i = 0; i < 2; ++i)
      o.padding[i] = checked_mul(o.dilation[i], kernel_size[i] - 1, "Conv2d", "the padding") / 2;
  }
  return o;
}
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Shape kernel_size, const Conv2dOptions& options)
    : Module("Conv2d"),
      in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(std::move(kernel_size)),
      options(resolved_padding(options, this->kernel_size)) {
  check_positive(in_channels, "Conv2d", "in_channels");
  check_positive(out_channels, "Conv2d", "out_channels");
  check_positive(options.groups, "Conv2d", "groups");
  MF_CHECK(in_channels % options.groups == 0, ValueError, "Conv2d: in_channels (", in_channels,
           ") must be divisible by groups (", options.groups, ")");
  MF_CHECK(out_channels % options.groups == 0, ValueError, "Conv2d: out_channels (", out_channels,
           ") must be divisible by groups (", options.groups, ")");
  register_parameter("weight", new_param({out_channels, in_channels / options.groups, this->kernel_size[0],
                                          this->kernel_size[1]}));
  register_parameter("bias", options.bias ? new_param({out_channels}) : Tensor());
  reset_parameters();
}

void Conv2d::reset_parameters() { reset_affine(weight(), bias()); }

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight(), bias(),
                Conv2dArgs{.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
                           .groups = options.groups, .padding_same = options.padding_str == "same"});
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + py_tuple(kernel_size) + ", stride=" + py_tuple(options.stride);
  if (!options.padding_str.empty()) {
    s += ", padding=" + options.padding_str;
  } else if (options.padding != Shape{0, 0}) {
    s += ", padding=" + py_tuple(options.padding);
  }
  if (options.dilation != Shape{1, 1}) s += ", dilation=" + py_tuple(options.dilation);
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!bias().defined()) s += ", bias=False";
  return s;
}

// --- Conv1d -------------------------------------------------------------------------

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dArgs& args, bool bias)
    : Module("Conv1d"), in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), args(args) {
  check_positive(in_channels, "Conv1d", "in_channels");
  check_positive(out_channels, "Conv1d", "out_channels");
  check_positive(kernel_size, "Conv1d", "kernel_size");
  check_positive(args.groups, "Conv1d", "groups");
  check_positive(args.stride, "Conv1d", "stride");
  check_positive(args.dilation, "Conv1d", "dilation");
  MF_CHECK(args.padding >= 0, ValueError, "Conv1d: padding must be non-negative, got ", args.padding);
  MF_CHECK(!args.padding_same || args.stride == 1, ValueError,
           "Conv1d: padding='same' is not supported for strided convolutions");
  MF_CHECK(in_channels % args.groups == 0 && out_channels % args.groups == 0, ValueError, "Conv1d: in_channels (",
           in_channels, ") and out_channels (", out_channels, ") must be divisible by groups (", args.groups, ")");
  register_parameter("weight", new_param({out_channels, in_channels / args.groups, kernel_size}));
  register_parameter("bias", bias ? new_param({out_channels}) : Tensor());
  reset_parameters();
}

void Conv1d::reset_parameters() { reset_affine(param_at(0), param_at(1)); }

Tensor Conv1d::forward(const Tensor& x) { return conv1d(x, param_at(0), param_at(1), args); }

std::string Conv1d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) + ", kernel_size=(" +
                  std::to_string(kernel_size) + ",), stride=(" + std::to_string(args.stride) + ",)";
  if (args.padding_same) s += ", padding=same";
  else if (args.padding != 0) s += ", padding=(" + std::to_string(args.padding) + ",)";
  if (args.dilation != 1) s += ", dilation=(" + std::to_string(args.dilation) + ",)";
  if (args.groups != 1) s += ", groups=" + std::to_string(args.groups);
  if (!param_at(1).defined()) s += ", bias=False";
  return s;
}

// --- BatchNorm ------------------------------------------------------------------

BatchNorm::BatchNorm(std::string type_name, int64_t num_features, const BatchNormOptions& options,
                     std::vector<int64_t> dims)
    : Module(std::move(type_name)), num_features(num_features), options(options), dims_(std::move(dims)) {
  check_positive(num_features, this->type_name().c_str(), "num_features");
  register_parameter("weight", options.affine ? new_param({num_features}) : Tensor());
  register_parameter("bias", options.affine ? new_param({num_features}) : Tensor());
  if (options.track_running_stats) {
    register_buffer("running_mean", zeros({num_features}, TensorOptions{.dtype = default_dtype()}));
    register_buffer("running_var", ones({num_features}, TensorOptions{.dtype = default_dtype()}));
    register_buffer("num_batches_tracked", zeros({}, TensorOptions{.dtype = DType::Int64}));
  } else {
    register_buffer("running_mean", Tensor());
    register_buffer("running_var", Tensor());
    register_buffer("num_batches_tracked", Tensor());
  }
  reset_parameters();
}

void BatchNorm::reset_running_stats() {
  if (!options.track_running_stats) return;
  init::zeros_(buffer_at(0));
  init::ones_(buffer_at(1));
  NoGradGuard no_grad;
  Tensor n = buffer_at(2);
  zero_(n);
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(param_at(0));
    init::zeros_(param_at(1));
  }
}

double BatchNorm::count_batch() {
  double factor = options.momentum.value_or(0.0);
  // A recomputation for backward (activation checkpointing) counted this
  // batch already; batch_norm leaves the running statistics alone then.
  if (is_training() && options.track_running_stats && buffer_at(2).defined() && !autograd::in_recomputation()) {
    NoGradGuard no_grad;
    Tensor n = buffer_at(2);
    add_(n, Scalar(int64_t(1)));
    if (!options.momentum) factor = 1.0 / double(n.item<int64_t>());
  }
  return factor;
}

Tensor BatchNorm::forward(const Tensor& x) {
  bool rank_ok = std::find(dims_.begin(), dims_.end(), x.dim()) != dims_.end();
  MF_CHECK(rank_ok, ValueError, type_name(), ": expected ", dims_.size() == 1 ? "4D" : "2D or 3D",
           " input (got ", x.dim(), "D input)");
  const Tensor& running_mean = buffer_at(0);
  const double factor = count_batch();
  bool use_batch_stats = is_training() || !running_mean.defined();
  return batch_norm(x, running_mean, buffer_at(1), param_at(0), param_at(1), use_batch_stats, factor, options.eps);
}

// --- SyncBatchNorm ----------------------------------------------------------------------

SyncBatchNorm::SyncBatchNorm(int64_t num_features, const BatchNormOptions& options, std::vector<int> process_group)
    : BatchNorm("SyncBatchNorm", num_features, options, {2, 3, 4, 5}), process_group(std::move(process_group)) {}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  MF_CHECK(x.dim() >= 2, ValueError, "SyncBatchNorm: expected at least 2D input (got ", x.dim(), "D input)");
  MF_CHECK(x.size(1) == num_features, ShapeError, "SyncBatchNorm: expected ", num_features,
           " channels (input.size(1)), got input of shape ", shape_str(x.sizes()));
  MF_CHECK(x.numel() > 0, ValueError, "SyncBatchNorm number of input channels should be non-zero");
  const Tensor& running_mean = buffer_at(0);
  const Tensor& running_var = buffer_at(1);
  const double factor = count_batch();
  const bool use_batch_stats = is_training() || !running_mean.defined();
  std::vector<int> group = process_group;
  if (group.empty())
    for (int r = 0; r < distributed::get_world_size(); ++r) group.push_back(r);
  if (!is_training() || !use_batch_stats || group.size() < 2 || x.is_global())
    return batch_norm(x, running_mean, running_var, param_at(0), param_at(1), use_batch_stats, factor, options.eps);
  MF_CHECK(is_floating(x.dtype()), TypeError, "SyncBatchNorm: expected a floating-point input, got ",
           dtype_name(x.dtype()));
  // Two passes over the group: the mean from the summed sums and counts,
  // then the variance from the summed squared deviations (no cancellation).
  Shape dims{0}, channel_shape(size_t(x.dim()), 1);
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  channel_shape[1] = num_features;
  const int64_t local_count = x.numel() / num_features;
  const Tensor totals = distributed::all_reduce_sum(
      cat({sum(x, dims), full({1}, Scalar(double(local_count)), TensorOptions{.dtype = x.dtype(), .device = x.device()})}, 0), group);
  const Tensor count = narrow(totals, 0, num_features, 1);
  const Tensor mean = div(narrow(totals, 0, 0, num_features), count);
  const Tensor centered = sub(x, reshape(mean, channel_shape));
  const Tensor var = div(distributed::all_reduce_sum(sum(mul(centered, centered), dims), group), count);
  Tensor y = mul(centered, reshape(rsqrt(add(var, Scalar(options.eps))), channel_shape));
  if (param_at(0).defined()) y = add(mul(y, reshape(param_at(0), channel_shape)), reshape(param_at(1), channel_shape));
  if (options.track_running_stats && running_mean.defined()) {
    NoGradGuard no_grad;
    const double n = count.item<double>();
    const Tensor unbiased = mul(var.detach(), Scalar(n > 1 ? n / (n - 1) : 1.0));
    Tensor rm = running_mean, rv = running_var;
    copy_(rm, add(mul(rm, Scalar(1 - factor)), mul(mf::to(mean.detach(), rm.dtype()), Scalar(factor))));
    copy_(rv, add(mul(rv, Scalar(1 - factor)), mul(mf::to(unbiased, rv.dtype()), Scalar(factor))));
  }
  return y;
}

std::string BatchNorm::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + py_float(options.eps) +
         ", momentum=" + (options.momentum ? py_float(*options.momentum) : "None") +
         ", affine=" + py_bool(options.affine) + ", track_running_stats=" + py_bool(options.track_running_stats);
}

// --- LayerNorm / GroupNorm --------------------------------------------------------

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : Module("LayerNorm"), normalized_shape(std::move(normalized_shape)), eps(eps), elementwise_affine(elementwise_affine) {
  register_parameter("weight", elementwise_affine ? new_param(this->normalized_shape) : Tensor());
  register_parameter("bias", elementwise_affine ? new_param(this->normalized_shape) : Tensor());
  if (elementwise_affine) {
    init::ones_(param_at(0));
    init::zeros_(param_at(1));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, param_at(0), param_at(1), eps); }

std::string LayerNorm::extra_repr() const {
  return py_tuple(normalized_shape) + ", eps=" + py_float(eps) + ", elementwise_affine=" + py_bool(elementwise_affine);
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : Module("GroupNorm"), num_groups(num_groups), num_channels(num_channels), eps(eps), affine(affine) {
  check_positive(num_groups, "GroupNorm", "num_groups");
  MF_CHECK(num_channels % num_groups == 0, ValueError, "GroupNorm: num_channels (", num_channels,
           ") must be divisible by num_groups (", num_groups, ")");
  register_parameter("weight", affine ? new_param({num_channels}) : Tensor());
  register_parameter("bias", affine ? new_param({num_channels}) : Tensor());
  if (affine) {
    init::ones_(param_at(0));
    init::zeros_(param_at(1));
  }
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, num_groups, param_at(0), param_at(1), eps); }

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups) + ", " + std::to_string(num_channels) + ", eps=" + py_float(eps) +
         ", affine=" + py_bool(affine);
}

// --- Embedding / Dropout -------------------------------------------------------------

namespace {
std::optional<int64_t> wrap_padding_idx(std::optional<int64_t> idx, int64_t n) {
  if (!idx) return idx;
  MF_CHECK(*idx >= -n && *idx < n, ValueError, "Embedding: padding_idx (", *idx, ") must be within num_embeddings (",
           n, ")");
  return *idx < 0 ? *idx + n : *idx;
}
// An embedding table, N(0, 1) with the padding row zero, as PyTorch initialises it.
Tensor embedding_table(int64_t rows, int64_t dim, std::optional<int64_t> padding_idx) {
  Tensor table = new_param({rows, dim});
  init::normal_(table);
  if (padding_idx) {
    NoGradGuard no_grad;
    Tensor row = select(table, 0, *padding_idx);
    zero_(row);
  }
  return table;
}
}  // namespace

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx)
    : Module("Embedding"),
      num_embeddings(num_embeddings),
      embedding_dim(embedding_dim),
      padding_idx(wrap_padding_idx(padding_idx, num_embeddings)) {
  register_parameter("weight", embedding_table(num_embeddings, embedding_dim, this->padding_idx));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight(), padding_idx); }

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  return s;
}

Bilinear::Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias)
    : Module("Bilinear"), in1_features(in1_features), in2_features(in2_features), out_features(out_features) {
  MF_CHECK(in1_features >= 0 && in2_features >= 0 && out_features >= 0, ValueError,
           "Bilinear: in1_features, in2_features and out_features must be >= 0, got ", in1_features, ", ",
           in2_features, " and ", out_features);
  register_parameter("weight", new_param({out_features, in1_features, in2_features}));
  register_parameter("bias", bias ? new_param({out_features}) : Tensor());
  reset_parameters();
}

void Bilinear::reset_parameters() {
  const double bound = in1_features > 0 ? 1.0 / std::sqrt(double(in1_features)) : 0.0;
  init::uniform_(param_at(0), -bound, bound);
  if (param_at(1).defined()) init::uniform_(param_at(1), -bound, bound);
}

Tensor Bilinear::forward(const Tensor& input1, const Tensor& input2) {
  return bilinear(input1, input2, param_at(0), param_at(1));
}

std::string Bilinear::extra_repr() const {
  return "in1_features=" + std::to_string(in1_features) + ", in2_features=" + std::to_string(in2_features) +
         ", out_features=" + std::to_string(out_features) + ", bias=" + py_bool(param_at(1).defined());
}

EmbeddingBag::EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim, std::string mode, bool include_last_offset,
                           std::optional<int64_t> padding_idx)
    : Module("EmbeddingBag"),
      num_embeddings(num_embeddings),
      embedding_dim(embedding_dim),
      mode(std::move(mode)),
      include_last_offset(include_last_offset),
      padding_idx(wrap_padding_idx(padding_idx, num_embeddings)) {
  MF_CHECK(this->mode == "sum" || this->mode == "mean" || this->mode == "max", ValueError,
           "EmbeddingBag: mode has to be one of sum, mean or max, got ", this->mode);
  register_parameter("weight", embedding_table(num_embeddings, embedding_dim, this->padding_idx));
}

Tensor EmbeddingBag::forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights) {
  return embedding_bag(input, weight(), offsets, mode, per_sample_weights, include_last_offset, padding_idx);
}

std::string EmbeddingBag::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim) + ", mode=" + mode;
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  return s;
}

Dropout::Dropout(double p) : Module("Dropout"), p(p) {
  MF_CHECK(p >= 0 && p <= 1, ValueError, "Dropout: dropout probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Dropout::extra_repr() const { return "p=" + py_float(p) + ", inplace=False"; }

// --- activations ----------------------------------------------------------------------

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
GELU::GELU(std::string approximate) : Module("GELU"), approximate(std::move(approximate)) {
  MF_CHECK(this->approximate == "none" || this->approximate == "tanh", ValueError,
           "GELU: approximate must be 'none' or 'tanh', got '", this->approximate, "'");
}
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }
std::string GELU::extra_repr() const { return "approximate='" + approximate + "'"; }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope); }
std::string LeakyReLU::extra_repr() const { return "negative_slope=" + py_float(negative_slope); }
Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim); }
Tensor LogSoftmax::forward(const Tensor& x) { return log_softmax(x, dim); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(dim); }
Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }
std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

// --- pooling ------------------------------------------------------------------------------

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, args); }
std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + pair_or_int(args.kernel_size) +
         ", stride=" + pair_or_int(args.stride.empty() ? args.kernel_size : args.stride) +
         ", padding=" + pair_or_int(args.padding) + ", dilation=" + pair_or_int(args.dilation) +
         ", ceil_mode=" + py_bool(args.ceil_mode);
}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, args); }
std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + pair_or_int(args.kernel_size) +
         ", stride=" + pair_or_int(args.stride.empty() ? args.kernel_size : args.stride) +
         ", padding=" + pair_or_int(args.padding);
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_or_int(output_size); }

// --- containers ------------------------------------------------------------------------------

namespace {
ModulePtr child_at(const Module& m, int64_t index) {
  int64_t n = int64_t(m.own_children().size());
  MF_CHECK(index >= -n && index < n, IndexError, m.type_name(), ": index ", index, " is out of range for ", n,
           " modules");
  return m.own_children()[size_t(index < 0 ? index + n : index)].module;
}
}  // namespace

Sequential::Sequential(const std::vector<ModulePtr>& modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& c : own_children()) y = (*c.module)(y);
  return y;
}

void Sequential::push_back(ModulePtr module, std::shared_ptr<void> owner) {
  MF_CHECK(module != nullptr, ValueError, "Sequential: a module is None");
  register_module(std::to_string(size()), std::move(module), std::move(owner));
}

ModulePtr Sequential::operator[](int64_t index) const { return child_at(*this, index); }

ModuleList::ModuleList(const std::vector<ModulePtr>& modules) : Module("ModuleList") {
  for (const auto& m : modules) push_back(m);
}

void ModuleList::push_back(ModulePtr module, std::shared_ptr<void> owner) {
  MF_CHECK(module != nullptr, ValueError, "ModuleList: a module is None");
  register_module(std::to_string(size()), std::move(module), std::move(owner));
}

ModulePtr ModuleList::operator[](int64_t index) const { return child_at(*this, index); }

}  // namespace mf::nn
