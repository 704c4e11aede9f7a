// Conv3d, the transposed convolutions ConvTranspose1d/2d/3d, adaptive max
// pooling (AdaptiveMaxPool1d/2d) and the 3-d pools (MaxPool3d, AvgPool3d,
// AdaptiveAvgPool3d), with torch.nn's constructor arguments, parameter
// names, default initialisation and repr.
#pragma once

#include <optional>
#include <string>

#include "meshflow/nn/module.h"
#include "meshflow/ops/conv.h"

namespace mf::nn {

// Size options take one entry (for every spatial dim) or one per spatial
// dim; the layer keeps them expanded to one per spatial dim.
struct ConvOptions {
  Shape stride = {1};
  Shape padding = {0};
  Shape output_padding = {0};  // transposed convolutions only
  Shape dilation = {1};
  int64_t groups = 1;
  bool bias = true;
  // Convolutions (not transposed): "valid" (no padding) or "same" (stride
  // 1; the output keeps the input's size) in place of padding; "" uses
  // padding.
  std::string padding_str;
};

// A convolution over `spatial` dims: weight (out_channels, in_channels /
// groups, k...), or transposed (in_channels, out_channels / groups, k...);
// bias (out_channels). Initialised as PyTorch's (kaiming_uniform_ with
// a = sqrt(5), the bias uniform in +-1/sqrt(fan_in)).
class ConvNd : public Module {
 public:
  ConvNd(std::string type_name, int64_t spatial, bool transposed, int64_t in_channels, int64_t out_channels,
         const Shape& kernel_size, const ConvOptions& options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  const Tensor& weight() const { return param_at(0); }
  const Tensor& bias() const { return param_at(1); }
  std::string extra_repr() const override;
  const int64_t spatial;
  const bool transposed;
  const int64_t in_channels, out_channels;
  const Shape kernel_size;
  const ConvOptions options;
};

class Conv3d : public ConvNd {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, const Shape& kernel_size, const ConvOptions& options = {})
      : ConvNd("Conv3d", 3, false, in_channels, out_channels, kernel_size, options) {}
};

// forward(x, output_size): output_size is the spatial output size (the
// batch and channel dims may lead it), from which the output_padding is
// derived in place of options.output_padding (PyTorch's output_size
// argument); it must lie within stride - 1 of the smallest output size.
class ConvTranspose : public ConvNd {
 public:
  ConvTranspose(int64_t spatial, int64_t in_channels, int64_t out_channels, const Shape& kernel_size,
                const ConvOptions& options);
  Tensor forward(const Tensor& x) override { return forward(x, std::nullopt); }
  Tensor forward(const Tensor& x, const std::optional<Shape>& output_size);

 private:
  Shape output_padding_for(const Tensor& x, const Shape& output_size) const;
};
template <int64_t D>
class ConvTransposeNd : public ConvTranspose {
 public:
  ConvTransposeNd(int64_t in_channels, int64_t out_channels, const Shape& kernel_size, const ConvOptions& options = {})
      : ConvTranspose(D, in_channels, out_channels, kernel_size, options) {}
};
using ConvTranspose1d = ConvTransposeNd<1>;
using ConvTranspose2d = ConvTransposeNd<2>;
using ConvTranspose3d = ConvTransposeNd<3>;

// AdaptiveMaxPool1d (output_size one int) and AdaptiveMaxPool2d (one or two
// entries; an empty entry keeps the input's size). forward gives the
// values; forward_with_indices adds the indices (return_indices=True).
// int_size: output_size was given as an int (how repr prints it).
class AdaptiveMaxPool : public Module {
 public:
  AdaptiveMaxPool(int64_t spatial, OptionalSizes output_size, bool return_indices, bool int_size);
  Tensor forward(const Tensor& x) override { return forward_with_indices(x)[0]; }
  TensorList forward_with_indices(const Tensor& x);
  std::string extra_repr() const override;
  const int64_t spatial;
  const OptionalSizes output_size;
  const bool return_indices, int_size;
};
template <int64_t D>
class AdaptiveMaxPoolNd : public AdaptiveMaxPool {
 public:
  explicit AdaptiveMaxPoolNd(OptionalSizes output_size, bool return_indices = false, bool int_size = false)
      : AdaptiveMaxPool(D, std::move(output_size), return_indices, int_size) {}
};
using AdaptiveMaxPool1d = AdaptiveMaxPoolNd<1>;
using AdaptiveMaxPool2d = AdaptiveMaxPoolNd<2>;

// MaxPool3d and AvgPool3d: args as given (repr prints a one-entry size as an
// int, as PyTorch prints the int it was given). forward_with_indices:
// MaxPool3d's (values, indices) (return_indices=True).
class Pool3d : public Module {
 public:
  Pool3d(std::string type_name, Pool3dArgs args, bool max, bool return_indices)
      : Module(std::move(type_name)), args(std::move(args)), max(max), return_indices(return_indices) {}
  Tensor forward(const Tensor& x) override;
  TensorList forward_with_indices(const Tensor& x);
  std::string extra_repr() const override;
  const Pool3dArgs args;
  const bool max, return_indices;
};
class MaxPool3d : public Pool3d {
 public:
  explicit MaxPool3d(Pool3dArgs args, bool return_indices = false)
      : Pool3d("MaxPool3d", std::move(args), true, return_indices) {}
};
class AvgPool3d : public Pool3d {
 public:
  explicit AvgPool3d(Pool3dArgs args) : Pool3d("AvgPool3d", std::move(args), false, false) {}
};
// output_size: 1 or 3 entries; an empty entry keeps the input's size.
class AdaptiveAvgPool3d : public Module {
 public:
  explicit AdaptiveAvgPool3d(OptionalSizes output_size, bool int_size = false);
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool3d(x, output_size); }
  std::string extra_repr() const override;
  const OptionalSizes output_size;
  const bool int_size;
};

}  // namespace mf::nn
