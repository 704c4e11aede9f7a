// Layers over the composite functional ops (meshflow/ops/functional.h):
// ReLU6, Hardtanh, GLU, CosineSimilarity and the L1 / smooth-L1 / Huber
// losses, with torch.nn's constructor arguments.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "meshflow/nn/module.h"
#include "meshflow/ops/functional.h"

namespace mf::nn {

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0, bool inplace = false,
                    std::string type_name = "Hardtanh");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const double min_val, max_val;
  const bool inplace;
};
class ReLU6 : public Hardtanh {
 public:
  explicit ReLU6(bool inplace = false) : Hardtanh(0.0, 6.0, inplace, "ReLU6") {}
  std::string extra_repr() const override;
};
class GLU : public Module {
 public:
  explicit GLU(int64_t dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t dim;
};
class CosineSimilarity : public Module {
 public:
  explicit CosineSimilarity(int64_t dim = 1, double eps = 1e-8);
  Tensor forward(const Tensor& x1, const Tensor& x2);
  using Module::forward;
  std::string extra_repr() const override;
  const int64_t dim;
  const double eps;
};
class L1Loss : public Module {
 public:
  explicit L1Loss(std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
};
class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(std::string reduction = "mean", double beta = 1.0);
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
  const double beta;
};
class HuberLoss : public Module {
 public:
  explicit HuberLoss(std::string reduction = "mean", double delta = 1.0);
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
  const double delta;
};
class Mish : public Module {
 public:
  explicit Mish(bool inplace = false) : Module("Mish"), inplace(inplace) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const bool inplace;
};
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0, bool inplace = false) : Module("ELU"), alpha(alpha), inplace(inplace) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const double alpha;
  const bool inplace;
};
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0)
      : Module("Softplus"), beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const double beta, threshold;
};

// A layer computing fn(x) (written into x when inplace), printing repr.
class PointwiseLayer : public Module {
 public:
  PointwiseLayer(std::string type_name, std::function<Tensor(const Tensor&)> fn, std::string repr = "",
                 bool inplace = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return repr_; }
  const bool inplace;

 private:
  std::function<Tensor(const Tensor&)> fn_;
  std::string repr_;
};
class Hardswish : public PointwiseLayer {
 public:
  explicit Hardswish(bool inplace = false) : PointwiseLayer("Hardswish", hardswish, "", inplace) {}
};
class Hardsigmoid : public PointwiseLayer {
 public:
  explicit Hardsigmoid(bool inplace = false) : PointwiseLayer("Hardsigmoid", hardsigmoid, "", inplace) {}
};
class SELU : public PointwiseLayer {
 public:
  explicit SELU(bool inplace = false) : PointwiseLayer("SELU", selu, inplace ? "inplace=True" : "", inplace) {}
};
class CELU : public PointwiseLayer {
 public:
  explicit CELU(double alpha = 1.0, bool inplace = false);
  const double alpha;
};
class Softsign : public PointwiseLayer {
 public:
  Softsign() : PointwiseLayer("Softsign", softsign) {}
};
class Tanhshrink : public PointwiseLayer {
 public:
  Tanhshrink() : PointwiseLayer("Tanhshrink", tanhshrink) {}
};
class LogSigmoid : public PointwiseLayer {
 public:
  LogSigmoid() : PointwiseLayer("LogSigmoid", logsigmoid) {}
};
class Threshold : public PointwiseLayer {
 public:
  Threshold(double threshold, double value, bool inplace = false);
  const double threshold, value;
};
// Softshrink and Hardshrink (by name).
class Shrink : public PointwiseLayer {
 public:
  Shrink(std::string type_name, double lambd);
  const double lambd;
};
class Softshrink : public Shrink {
 public:
  explicit Softshrink(double lambd = 0.5) : Shrink("Softshrink", lambd) {}
};
class Hardshrink : public Shrink {
 public:
  explicit Hardshrink(double lambd = 0.5) : Shrink("Hardshrink", lambd) {}
};
// softmin over dim (nullopt: PyTorch's implicit choice, 0 for 0-, 1- and
// 3-d inputs, else 1).
class Softmin : public Module {
 public:
  explicit Softmin(std::optional<int64_t> dim = {}) : Module("Softmin"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const std::optional<int64_t> dim;
};
// softmax over the channels of (N, C, H, W) or (C, H, W).
class Softmax2d : public Module {
 public:
  Softmax2d() : Module("Softmax2d") {}
  Tensor forward(const Tensor& x) override;
};
// PyTorch's implicit softmax dimension of an x.dim()-d input.
int64_t implicit_softmax_dim(int64_t ndim);

// --- shape and 1-d layers ---------------------------------------------------------------
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Shape unflattened_size)
      : Module("Unflatten"), dim(dim), unflattened_size(std::move(unflattened_size)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t dim;
  const Shape unflattened_size;
};
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor, bool unshuffle = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t factor;
  const bool unshuffle;  // PixelUnshuffle
};
class PixelUnshuffle : public PixelShuffle {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor) : PixelShuffle(downscale_factor, true) {}
};
// Conv1d: weight (out_channels, in_channels / groups, kernel_size), bias
// (out_channels), initialised as Conv2d's.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dArgs& args = {},
         bool bias = true);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;
  const int64_t in_channels, out_channels, kernel_size;
  const Conv1dArgs args;
};
// MaxPool1d, AvgPool1d (by kind) and AdaptiveAvgPool1d.
class Pool1d : public Module {
 public:
  Pool1d(std::string type_name, Pool1dArgs args) : Module(std::move(type_name)), args(std::move(args)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Pool1dArgs args;
};
class MaxPool1d : public Pool1d {
 public:
  explicit MaxPool1d(Pool1dArgs args) : Pool1d("MaxPool1d", std::move(args)) {}
};
class AvgPool1d : public Pool1d {
 public:
  explicit AvgPool1d(Pool1dArgs args) : Pool1d("AvgPool1d", std::move(args)) {}
};
class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(int64_t output_size) : Module("AdaptiveAvgPool1d"), output_size(output_size) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t output_size;
};

// PReLU: parameter weight (num_parameters values, initialised to init).
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t num_parameters;
};
// Dropout1d, Dropout2d, Dropout3d: whole channels (channel_dropout).
class ChannelDropout : public Module {
 public:
  ChannelDropout(int64_t spatial_dims, double p = 0.5, bool inplace = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t spatial_dims;
  const double p;
  const bool inplace;
};
template <int64_t D>
class DropoutNd : public ChannelDropout {
 public:
  explicit DropoutNd(double p = 0.5, bool inplace = false) : ChannelDropout(D, p, inplace) {}
};
using Dropout1d = DropoutNd<1>;
using Dropout2d = DropoutNd<2>;
using Dropout3d = DropoutNd<3>;
// InstanceNorm1d ((N, C, L) or (C, L)) and InstanceNorm2d ((N, C, H, W) or
// (C, H, W)): parameters weight/bias when affine (ones, zeros), buffers
// running_mean/running_var/num_batches_tracked when track_running_stats.
class InstanceNorm : public Module {
 public:
  InstanceNorm(int64_t spatial_dims, int64_t num_features, double eps = 1e-5, double momentum = 0.1,
               bool affine = false, bool track_running_stats = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t spatial_dims, num_features;
  const double eps, momentum;
  const bool affine, track_running_stats;
};
template <int64_t D>
class InstanceNormNd : public InstanceNorm {
 public:
  explicit InstanceNormNd(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false)
      : InstanceNorm(D, num_features, eps, momentum, affine, track_running_stats) {}
};
using InstanceNorm1d = InstanceNormNd<1>;
using InstanceNorm2d = InstanceNormNd<2>;

class BCELoss : public Module {
 public:
  explicit BCELoss(const Tensor& weight = Tensor(), std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
};
class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(std::string reduction = "mean", bool log_target = false);
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
  const bool log_target;
};

}  // namespace mf::nn
