// Layers of torch.nn with PyTorch's constructor arguments, parameter names
// (so state dicts are interchangeable), default initialisation and repr.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/nn/module.h"
#include "meshflow/ops/conv.h"

namespace mf::nn {

// y = x W^T + b; weight (out, in), bias (out).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  const Tensor& weight() const { return param_at(0); }
  const Tensor& bias() const { return param_at(1); }
  std::string extra_repr() const override;
  const int64_t in_features, out_features;
};

// torch.nn.Bilinear: weight (out, in1, in2), bias (out), both uniform in
// +-1/sqrt(in1_features). forward(x1, x2) = bilinear(x1, x2, weight, bias).
class Bilinear : public Module {
 public:
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  using Module::forward;
  Tensor forward(const Tensor& input1, const Tensor& input2);
  void reset_parameters();
  std::string extra_repr() const override;
  const int64_t in1_features, in2_features, out_features;
};

struct Conv2dOptions {
  Shape stride = {1, 1};
  Shape padding = {0, 0};
  Shape dilation = {1, 1};
  int64_t groups = 1;
  bool bias = true;
  // PyTorch's padding strings: "valid" (no padding) or "same" (the output
  // keeps the input's size; stride 1 only; when the effective kernel size
  // is even the extra row/column goes bottom/right). They replace padding,
  // which the constructor sets to the symmetric part. "" uses padding.
  std::string padding_str;
};
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Shape kernel_size, const Conv2dOptions& options = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  const Tensor& weight() const { return param_at(0); }
  const Tensor& bias() const { return param_at(1); }
  std::string extra_repr() const override;
  const int64_t in_channels, out_channels;
  const Shape kernel_size;
  const Conv2dOptions options;
};

// BatchNorm1d ((N, C) or (N, C, L)) and BatchNorm2d ((N, C, H, W)):
// parameters weight/bias, buffers running_mean/running_var/
// num_batches_tracked. momentum nullopt is the cumulative average.
struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};
class BatchNorm : public Module {
 public:
  BatchNorm(std::string type_name, int64_t num_features, const BatchNormOptions& options, std::vector<int64_t> dims);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  void reset_running_stats();
  std::string extra_repr() const override;
  const int64_t num_features;
  const BatchNormOptions options;

 protected:
  // Counts the batch (num_batches_tracked) in training; returns the factor
  // of the running statistics' update.
  double count_batch();

 private:
  std::vector<int64_t> dims_;  // accepted input ranks
};
// torch.nn.SyncBatchNorm: in training, the statistics of a local input
// are those of the whole batch over the process group's ranks (empty:
// every rank), by a differentiable all-reduce of the per-channel sums, so
// its backward sums the ranks' gradients of the statistics as PyTorch's.
// A global input already is the whole batch: plain batch_norm. Input
// (N, C, *).
class SyncBatchNorm : public BatchNorm {
 public:
  SyncBatchNorm(int64_t num_features, const BatchNormOptions& options = {}, std::vector<int> process_group = {});
  Tensor forward(const Tensor& x) override;
  const std::vector<int> process_group;
};
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNorm("BatchNorm1d", num_features, options, {2, 3}) {}
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNorm("BatchNorm2d", num_features, options, {4}) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Shape normalized_shape;
  const double eps;
  const bool elementwise_affine;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t num_groups, num_channels;
  const double eps;
  const bool affine;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = {});
  Tensor forward(const Tensor& indices) override;
  const Tensor& weight() const { return param_at(0); }
  std::string extra_repr() const override;
  const int64_t num_embeddings, embedding_dim;
  const std::optional<int64_t> padding_idx;
};

// torch.nn.EmbeddingBag: forward(input, offsets, per_sample_weights) is
// embedding_bag over the weight (meshflow/ops/nn.h).
class EmbeddingBag : public Module {
 public:
  EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim, std::string mode = "mean",
               bool include_last_offset = false, std::optional<int64_t> padding_idx = {});
  Tensor forward(const Tensor& input) override { return forward(input, Tensor(), Tensor()); }
  Tensor forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights);
  const Tensor& weight() const { return param_at(0); }
  std::string extra_repr() const override;
  const int64_t num_embeddings, embedding_dim;
  const std::string mode;
  const bool include_last_offset;
  const std::optional<int64_t> padding_idx;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const double p;
};

// Parameter-free layers that apply one function.
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const std::string approximate;
};
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const double negative_slope;
};
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : Module("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t dim;
};
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : Module("LogSoftmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t dim;
};
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t start_dim, end_dim;
};
class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dArgs args) : Module("MaxPool2d"), args(std::move(args)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Pool2dArgs args;
};
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dArgs args) : Module("AvgPool2d"), args(std::move(args)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Pool2dArgs args;
};
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Shape output_size) : Module("AdaptiveAvgPool2d"), output_size(std::move(output_size)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Shape output_size;
};

// --- containers ---------------------------------------------------------------------
// Children are named "0", "1", ... in order.
class Sequential : public Module {
 public:
  explicit Sequential(const std::vector<ModulePtr>& modules = {});
  // Applies each child in turn.
  Tensor forward(const Tensor& x) override;
  void push_back(ModulePtr module, std::shared_ptr<void> owner = nullptr);
  size_t size() const { return own_children().size(); }
  ModulePtr operator[](int64_t index) const;
};
class ModuleList : public Module {
 public:
  explicit ModuleList(const std::vector<ModulePtr>& modules = {});
  void push_back(ModulePtr module, std::shared_ptr<void> owner = nullptr);
  size_t size() const { return own_children().size(); }
  ModulePtr operator[](int64_t index) const;
};
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
};

// --- attention ----------------------------------------------------------------------
// PyTorch's nn.MultiheadAttention with kdim = vdim = embed_dim: parameters
// in_proj_weight (3E, E), in_proj_bias (3E), child out_proj (Linear).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false);
  // (attn_output, attn_weights); weights are undefined unless need_weights
  // (averaged over heads when average_attn_weights). attn_mask (L, S) or
  // (N * heads, L, S): bool (true = not allowed) or additive float;
  // key_padding_mask (N, S): true = ignore that key.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true);
  using Module::forward;
  void reset_parameters();
  const int64_t embed_dim, num_heads;
  const double dropout;
  const bool batch_first;
};

// --- losses -----------------------------------------------------------------------------
// forward(input, target); reduction "mean", "sum" or "none". Class weights
// are a buffer named "weight", as in PyTorch.
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(const Tensor& weight = Tensor(), int64_t ignore_index = -100,
                            std::string reduction = "mean", double label_smoothing = 0.0);
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const int64_t ignore_index;
  const std::string reduction;
  const double label_smoothing;
};
class NLLLoss : public Module {
 public:
  explicit NLLLoss(const Tensor& weight = Tensor(), int64_t ignore_index = -100, std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const int64_t ignore_index;
  const std::string reduction;
};
class MSELoss : public Module {
 public:
  explicit MSELoss(std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
};
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(const Tensor& weight = Tensor(), std::string reduction = "mean",
                             const Tensor& pos_weight = Tensor());
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
};

}  // namespace mf::nn
