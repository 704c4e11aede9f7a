// Layers over interpolate and F.pad (meshflow/ops/resample.h): Upsample,
// UpsamplingNearest2d, UpsamplingBilinear2d and the padding layers, with
// torch.nn's constructor arguments and repr.
#pragma once

#include <string>
#include <variant>

#include "meshflow/nn/module.h"
#include "meshflow/ops/resample.h"

namespace mf::nn {

// interpolate with fixed options. As torch.nn.Upsample keeps
// `float(scale_factor) if scale_factor else None`, a scale_factor of 0 is
// none (and forward then refuses the missing size).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options, std::string type_name = "Upsample");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const InterpolateOptions options;
};
using UpsampleSize = decltype(InterpolateOptions::size);
using UpsampleScale = decltype(InterpolateOptions::scale_factor);
class UpsamplingNearest2d : public Upsample {
 public:
  explicit UpsamplingNearest2d(UpsampleSize size = {}, UpsampleScale scale_factor = {})
      : Upsample({.size = std::move(size), .scale_factor = std::move(scale_factor)}, "UpsamplingNearest2d") {}
};
class UpsamplingBilinear2d : public Upsample {
 public:
  explicit UpsamplingBilinear2d(UpsampleSize size = {}, UpsampleScale scale_factor = {})
      : Upsample({.size = std::move(size), .scale_factor = std::move(scale_factor), .mode = "bilinear",
                  .align_corners = true},
                 "UpsamplingBilinear2d") {}
};

// F.pad with a fixed padding, mode and value. An int pads both sides of the
// layer's `dims` last dims; a sequence is used as given (torch's _ntuple
// keeps any length).
using PadArg = std::variant<int64_t, Shape>;
class Pad : public Module {
 public:
  Pad(std::string type_name, const PadArg& padding, int64_t dims, std::string mode, Scalar value = 0);
  Tensor forward(const Tensor& x) override;
  // "(1, 1)"; the ConstantPad layers "padding=(1, 1), value=3.5".
  std::string extra_repr() const override;
  const Shape padding;
  const std::string mode;
  const Scalar value;
};
template <int64_t D>
class ReflectionPad : public Pad {
 public:
  explicit ReflectionPad(const PadArg& padding)
      : Pad("ReflectionPad" + std::to_string(D) + "d", padding, D, "reflect") {}
};
template <int64_t D>
class ReplicationPad : public Pad {
 public:
  explicit ReplicationPad(const PadArg& padding)
      : Pad("ReplicationPad" + std::to_string(D) + "d", padding, D, "replicate") {}
};
template <int64_t D>
class ConstantPad : public Pad {
 public:
  ConstantPad(const PadArg& padding, Scalar value)
      : Pad("ConstantPad" + std::to_string(D) + "d", padding, D, "constant", value) {}
};
class ZeroPad2d : public Pad {
 public:
  explicit ZeroPad2d(const PadArg& padding) : Pad("ZeroPad2d", padding, 2, "constant", 0.0) {}
};
using ReflectionPad1d = ReflectionPad<1>;
using ReflectionPad2d = ReflectionPad<2>;
using ReflectionPad3d = ReflectionPad<3>;
using ReplicationPad1d = ReplicationPad<1>;
using ReplicationPad2d = ReplicationPad<2>;
using ReplicationPad3d = ReplicationPad<3>;
using ConstantPad1d = ConstantPad<1>;
using ConstantPad2d = ConstantPad<2>;
using ConstantPad3d = ConstantPad<3>;

}  // namespace mf::nn
