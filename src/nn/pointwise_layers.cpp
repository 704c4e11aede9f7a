// The activation layers of meshflow/nn/pointwise_layers.h (its losses: loss.cpp).
#include "meshflow/nn/pointwise_layers.h"

#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/functional.h"
#include "meshflow/ops/nn.h"
#include "meshflow/error.h"
#include "meshflow/ops/shape.h"
#include "nn/layer_common.h"
#include "nn/repr.h"

namespace mf::nn {
Hardtanh::Hardtanh(double min_val, double max_val, bool inplace, std::string type_name)
    : Module(std::move(type_name)), min_val(min_val), max_val(max_val), inplace(inplace) {
  MF_CHECK(min_val <= max_val, ValueError, this->type_name(), ": min_val (", min_val, ") must not exceed max_val (",
           max_val, ")");
}

Tensor Hardtanh::forward(const Tensor& x) {
  if (!inplace) return hardtanh(x, min_val, max_val);
  Tensor t = x;
  return clamp_(t, min_val, max_val);
}

std::string Hardtanh::extra_repr() const {
  return "min_val=" + py_float(min_val) + ", max_val=" + py_float(max_val) + (inplace ? ", inplace=True" : "");
}

std::string ReLU6::extra_repr() const { return inplace ? "inplace=True" : ""; }

GLU::GLU(int64_t dim) : Module("GLU"), dim(dim) {}
Tensor GLU::forward(const Tensor& x) { return glu(x, dim); }
std::string GLU::extra_repr() const { return "dim=" + std::to_string(dim); }

CosineSimilarity::CosineSimilarity(int64_t dim, double eps) : Module("CosineSimilarity"), dim(dim), eps(eps) {}
Tensor CosineSimilarity::forward(const Tensor& x1, const Tensor& x2) { return cosine_similarity(x1, x2, dim, eps); }
std::string CosineSimilarity::extra_repr() const { return ""; }  // as torch.nn prints it

namespace {
// Python's text of a number PyTorch's defaults give as an int (Softplus's
// beta=1, threshold=20): integral values without ".0".
std::string py_number(double v) { return v == double(int64_t(v)) ? std::to_string(int64_t(v)) : py_float(v); }
}  // namespace

Tensor Mish::forward(const Tensor& x) {
  if (!inplace) return mish(x);
  Tensor t = x;
  return copy_(t, mish(x));
}
std::string Mish::extra_repr() const { return inplace ? "inplace=True" : ""; }

Tensor ELU::forward(const Tensor& x) {
  if (!inplace) return elu(x, alpha);
  Tensor t = x;
  return copy_(t, elu(x, alpha));
}
std::string ELU::extra_repr() const { return "alpha=" + py_float(alpha) + (inplace ? ", inplace=True" : ""); }

Tensor Softplus::forward(const Tensor& x) { return softplus(x, beta, threshold); }
std::string Softplus::extra_repr() const { return "beta=" + py_number(beta) + ", threshold=" + py_number(threshold); }

PointwiseLayer::PointwiseLayer(std::string type_name, std::function<Tensor(const Tensor&)> fn, std::string repr,
                               bool inplace)
    : Module(std::move(type_name)), inplace(inplace), fn_(std::move(fn)), repr_(std::move(repr)) {}

Tensor PointwiseLayer::forward(const Tensor& x) {
  if (!inplace) return fn_(x);
  Tensor t = x;
  return copy_(t, fn_(x));
}

CELU::CELU(double alpha, bool inplace)
    : PointwiseLayer("CELU", [alpha](const Tensor& x) { return celu(x, alpha); },
                     "alpha=" + py_float(alpha) + (inplace ? ", inplace=True" : ""), inplace),
      alpha(alpha) {}

Threshold::Threshold(double threshold, double value, bool inplace)
    : PointwiseLayer("Threshold", [threshold, value](const Tensor& x) { return mf::threshold(x, threshold, value); },
                     "threshold=" + py_float(threshold) + ", value=" + py_float(value) +
                         (inplace ? ", inplace=True" : ""),
                     inplace),
      threshold(threshold),
      value(value) {}

Shrink::Shrink(std::string type_name, double lambd)
    : PointwiseLayer(
          type_name,
          [lambd, soft = type_name == "Softshrink"](const Tensor& x) {
            return soft ? softshrink(x, lambd) : hardshrink(x, lambd);
          },
          py_float(lambd)),
      lambd(lambd) {}

int64_t implicit_softmax_dim(int64_t ndim) { return ndim == 0 || ndim == 1 || ndim == 3 ? 0 : 1; }

Tensor Softmin::forward(const Tensor& x) { return softmin(x, dim.value_or(implicit_softmax_dim(x.dim()))); }
std::string Softmin::extra_repr() const { return "dim=" + (dim ? std::to_string(*dim) : std::string("None")); }

Tensor Softmax2d::forward(const Tensor& x) {
  MF_CHECK(x.dim() == 3 || x.dim() == 4, ValueError, "Softmax2d: expected input to be 3D or 4D, got ", x.dim(),
           "D instead");
  return softmax(x, -3);
}

Tensor Unflatten::forward(const Tensor& x) { return unflatten(x, dim, unflattened_size); }
std::string Unflatten::extra_repr() const {
  return "dim=" + std::to_string(dim) + ", unflattened_size=" + py_tuple(unflattened_size);
}

PixelShuffle::PixelShuffle(int64_t factor, bool unshuffle)
    : Module(unshuffle ? "PixelUnshuffle" : "PixelShuffle"), factor(factor), unshuffle(unshuffle) {
  MF_CHECK(factor > 0, ValueError, type_name(), ": the factor must be positive, got ", factor);
}
Tensor PixelShuffle::forward(const Tensor& x) { return unshuffle ? pixel_unshuffle(x, factor) : pixel_shuffle(x, factor); }
std::string PixelShuffle::extra_repr() const {
  return (unshuffle ? "downscale_factor=" : "upscale_factor=") + std::to_string(factor);
}

Tensor Pool1d::forward(const Tensor& x) { return type_name() == "MaxPool1d" ? max_pool1d(x, args) : avg_pool1d(x, args); }
std::string Pool1d::extra_repr() const {
  const std::string common = "kernel_size=" + std::to_string(args.kernel_size) +
                             ", stride=" + std::to_string(args.stride.value_or(args.kernel_size)) +
                             ", padding=" + std::to_string(args.padding);
  if (type_name() == "MaxPool1d")
    return common + ", dilation=" + std::to_string(args.dilation) + ", ceil_mode=" + py_bool(args.ceil_mode);
  return "kernel_size=(" + std::to_string(args.kernel_size) + ",), stride=(" +
         std::to_string(args.stride.value_or(args.kernel_size)) + ",), padding=(" + std::to_string(args.padding) +
         ",)";
}

Tensor AdaptiveAvgPool1d::forward(const Tensor& x) { return adaptive_avg_pool1d(x, output_size); }
std::string AdaptiveAvgPool1d::extra_repr() const { return "output_size=" + std::to_string(output_size); }

PReLU::PReLU(int64_t num_parameters, double init) : Module("PReLU"), num_parameters(num_parameters) {
  MF_CHECK(num_parameters > 0, ValueError, "PReLU: num_parameters must be positive, got ", num_parameters);
  register_parameter("weight", full({num_parameters}, init, {.dtype = default_dtype()}));
}
Tensor PReLU::forward(const Tensor& x) { return prelu(x, param_at(0)); }
std::string PReLU::extra_repr() const { return "num_parameters=" + std::to_string(num_parameters); }

ChannelDropout::ChannelDropout(int64_t spatial_dims, double p, bool inplace)
    : Module("Dropout" + std::to_string(spatial_dims) + "d"), spatial_dims(spatial_dims), p(p), inplace(inplace) {
  MF_CHECK(p >= 0 && p <= 1, ValueError, type_name(), ": dropout probability has to be between 0 and 1, but got ", p);
}
Tensor ChannelDropout::forward(const Tensor& x) {
  if (!inplace) return channel_dropout(x, p, is_training(), spatial_dims);
  Tensor t = x;
  return copy_(t, channel_dropout(x, p, is_training(), spatial_dims));
}
std::string ChannelDropout::extra_repr() const { return "p=" + py_float(p) + ", inplace=" + py_bool(inplace); }

InstanceNorm::InstanceNorm(int64_t spatial_dims, int64_t num_features, double eps, double momentum, bool affine,
                           bool track_running_stats)
    : Module("InstanceNorm" + std::to_string(spatial_dims) + "d"),
      spatial_dims(spatial_dims),
      num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats) {
  MF_CHECK(num_features > 0, ValueError, type_name(), ": num_features must be positive, got ", num_features);
  const TensorOptions f{.dtype = default_dtype()};
  register_parameter("weight", affine ? ones({num_features}, f) : Tensor());
  register_parameter("bias", affine ? zeros({num_features}, f) : Tensor());
  if (track_running_stats) {
    register_buffer("running_mean", zeros({num_features}, f));
    register_buffer("running_var", ones({num_features}, f));
    register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::Int64}));
  }
}

Tensor InstanceNorm::forward(const Tensor& x) {
  MF_CHECK(x.defined() && (x.dim() == spatial_dims + 1 || x.dim() == spatial_dims + 2), ShapeError, type_name(),
           ": expected ", spatial_dims + 1, "-d (unbatched) or ", spatial_dims + 2, "-d (batched) input, got ",
           x.defined() ? x.dim() : 0, " dims");
  const bool unbatched = x.dim() == spatial_dims + 1;
  const Tensor input = unbatched ? unsqueeze(x, 0) : x;
  MF_CHECK(input.size(1) == num_features, ShapeError, type_name(), ": expected ", num_features,
           " channels, got ", input.size(1));
  const Tensor rm = track_running_stats ? buffer_at(0) : Tensor(), rv = track_running_stats ? buffer_at(1) : Tensor();
  const Tensor y = instance_norm(input, rm, rv, param_at(0), param_at(1), is_training() || !track_running_stats,
                                 momentum, eps);
  return unbatched ? squeeze(y, 0) : y;
}

std::string InstanceNorm::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + py_float(eps) + ", momentum=" + py_float(momentum) +
         ", affine=" + py_bool(affine) + ", track_running_stats=" + py_bool(track_running_stats);
}

}  // namespace mf::nn
