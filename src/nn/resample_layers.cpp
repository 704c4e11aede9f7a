// The layers of meshflow/nn/resample_layers.h.
#include "meshflow/nn/resample_layers.h"

#include "nn/repr.h"

namespace mf::nn {
namespace {

InterpolateOptions without_zero_scale(InterpolateOptions options) {
  const auto& scale = options.scale_factor;
  if (scale && std::holds_alternative<double>(*scale) && std::get<double>(*scale) == 0.0) options.scale_factor = {};
  return options;
}

std::string py_scalar(const Scalar& v) {
  if (v.is_bool()) return py_bool(v.to_bool());
  return v.is_integral() ? std::to_string(v.to_int()) : py_float(v.to_double());
}

}  // namespace

Upsample::Upsample(InterpolateOptions options, std::string type_name)
    : Module(std::move(type_name)), options(without_zero_scale(std::move(options))) {}

Tensor Upsample::forward(const Tensor& x) { return interpolate(x, options); }

std::string Upsample::extra_repr() const {
  std::string info;
  if (const auto& scale = options.scale_factor) {
    info = "scale_factor=" + (std::holds_alternative<double>(*scale)
                                  ? py_float(std::get<double>(*scale))
                                  : py_tuple(std::get<std::vector<double>>(*scale), py_float));
  } else if (const auto& size = options.size) {
    info = "size=" + (std::holds_alternative<int64_t>(*size) ? std::to_string(std::get<int64_t>(*size))
                                                              : py_tuple(std::get<Shape>(*size)));
  } else {
    info = "size=None";
  }
  return info + ", mode=" + options.mode;
}

Pad::Pad(std::string type_name, const PadArg& padding, int64_t dims, std::string mode, Scalar value)
    : Module(std::move(type_name)),
      padding(std::holds_alternative<int64_t>(padding) ? Shape(size_t(2 * dims), std::get<int64_t>(padding))
                                                       : std::get<Shape>(padding)),
      mode(std::move(mode)),
      value(value) {}

Tensor Pad::forward(const Tensor& x) {
  return pad(x, padding, mode, mode == "constant" ? std::optional<double>(value.to_double()) : std::nullopt);
}

std::string Pad::extra_repr() const {
  if (type_name().rfind("ConstantPad", 0) == 0) return "padding=" + py_tuple(padding) + ", value=" + py_scalar(value);
  return py_tuple(padding);
}

}  // namespace mf::nn
