// Conv3d, ConvTranspose1d/2d/3d, AdaptiveMaxPool1d/2d and the 3-d pools.
#include "meshflow/nn/conv_layers.h"

#include <algorithm>

#include "meshflow/error.h"
#include "nn/layer_common.h"
#include "nn/repr.h"

namespace mf::nn {
namespace {

// v with one entry repeated to n, or v itself when it has n.
Shape expanded(const Shape& v, int64_t n, const std::string& layer, const char* arg) {
  MF_CHECK(v.size() == 1 || int64_t(v.size()) == n, ValueError, layer, ": ", arg, " must be an int or ", n,
           " ints, got ", py_tuple(v));
  return v.size() == 1 ? Shape(size_t(n), v[0]) : v;
}

// The options with every size expanded to `spatial` entries and a padding
// string checked (its padding: zeros).
ConvOptions resolved(ConvOptions o, int64_t spatial, bool transposed, const std::string& layer) {
  o.stride = expanded(o.stride, spatial, layer, "stride");
  o.padding = expanded(o.padding, spatial, layer, "padding");
  o.output_padding = expanded(o.output_padding, spatial, layer, "output_padding");
  o.dilation = expanded(o.dilation, spatial, layer, "dilation");
  for (int64_t i = 0; i < spatial; ++i) {
    check_positive(o.stride[size_t(i)], layer.c_str(), "stride");
    check_positive(o.dilation[size_t(i)], layer.c_str(), "dilation");
    MF_CHECK(o.padding[size_t(i)] >= 0 && o.output_padding[size_t(i)] >= 0, ValueError, layer,
             ": padding and output_padding must be non-negative, got ", py_tuple(o.padding), " and ",
             py_tuple(o.output_padding));
  }
  if (o.padding_str.empty()) return o;
  MF_CHECK(!transposed, ValueError, layer, ": padding must be ints, got '", o.padding_str, "'");
  MF_CHECK(o.padding_str == "valid" || o.padding_str == "same", ValueError, layer, ": invalid padding string '",
           o.padding_str, "', should be one of {'valid', 'same'}");
  MF_CHECK(o.padding_str == "valid" || std::all_of(o.stride.begin(), o.stride.end(), [](int64_t s) { return s == 1; }),
           ValueError, layer, ": padding='same' is not supported for strided convolutions");
  o.padding = Shape(size_t(spatial), 0);
  return o;
}

// "output_size=..." as PyTorch prints the int or tuple (None entries) given.
std::string output_size_repr(const OptionalSizes& size, bool int_size) {
  std::string s;
  for (size_t i = 0; i < size.size(); ++i) s += (i ? ", " : "") + (size[i] ? std::to_string(*size[i]) : "None");
  if (int_size) return "output_size=" + s;
  return "output_size=(" + s + (size.size() == 1 ? ",)" : ")");
}

}  // namespace

ConvNd::ConvNd(std::string type_name, int64_t spatial, bool transposed, int64_t in_channels, int64_t out_channels,
               const Shape& kernel_size, const ConvOptions& options)
    : Module(std::move(type_name)),
      spatial(spatial),
      transposed(transposed),
      in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(expanded(kernel_size, spatial, this->type_name(), "kernel_size")),
      options(resolved(options, spatial, transposed, this->type_name())) {
  const char* layer = this->type_name().c_str();
  check_positive(in_channels, layer, "in_channels");
  check_positive(out_channels, layer, "out_channels");
  check_positive(options.groups, layer, "groups");
  for (int64_t k : this->kernel_size) check_positive(k, layer, "kernel_size");
  MF_CHECK(in_channels % options.groups == 0, ValueError, layer, ": in_channels (", in_channels,
           ") must be divisible by groups (", options.groups, ")");
  MF_CHECK(out_channels % options.groups == 0, ValueError, layer, ": out_channels (", out_channels,
           ") must be divisible by groups (", options.groups, ")");
  Shape weight_shape = transposed ? Shape{in_channels, out_channels / options.groups}
                                  : Shape{out_channels, in_channels / options.groups};
  weight_shape.insert(weight_shape.end(), this->kernel_size.begin(), this->kernel_size.end());
  register_parameter("weight", new_param(weight_shape));
  register_parameter("bias", options.bias ? new_param({out_channels}) : Tensor());
  reset_parameters();
}

void ConvNd::reset_parameters() { reset_affine(weight(), bias()); }

Tensor ConvNd::forward(const Tensor& x) {
  return conv3d(x, weight(), bias(),
                ConvArgs{.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
                         .groups = options.groups, .padding_same = options.padding_str == "same"});
}

// PyTorch's _ConvNd.extra_repr.
std::string ConvNd::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + py_tuple(kernel_size) + ", stride=" + py_tuple(options.stride);
  const Shape zeros(size_t(spatial), 0), ones(size_t(spatial), 1);
  if (!options.padding_str.empty()) s += ", padding=" + options.padding_str;
  else if (options.padding != zeros) s += ", padding=" + py_tuple(options.padding);
  if (options.dilation != ones) s += ", dilation=" + py_tuple(options.dilation);
  if (transposed && options.output_padding != zeros) s += ", output_padding=" + py_tuple(options.output_padding);
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!bias().defined()) s += ", bias=False";
  return s;
}

ConvTranspose::ConvTranspose(int64_t spatial, int64_t in_channels, int64_t out_channels, const Shape& kernel_size,
                             const ConvOptions& options)
    : ConvNd("ConvTranspose" + std::to_string(spatial) + "d", spatial, true, in_channels, out_channels, kernel_size,
             options) {}

Tensor ConvTranspose::forward(const Tensor& x, const std::optional<Shape>& output_size) {
  const ConvTransposeArgs args{.stride = options.stride,
                               .padding = options.padding,
                               .output_padding = output_size ? output_padding_for(x, *output_size)
                                                             : options.output_padding,
                               .groups = options.groups,
                               .dilation = options.dilation};
  if (spatial == 1) return conv_transpose1d(x, weight(), bias(), args);
  if (spatial == 2) return conv_transpose2d(x, weight(), bias(), args);
  return conv_transpose3d(x, weight(), bias(), args);
}

// PyTorch's _ConvTransposeNd._output_padding: output_size less the
// smallest output size, which must leave less than a stride.
Shape ConvTranspose::output_padding_for(const Tensor& x, const Shape& output_size) const {
  const std::string& layer = type_name();
  MF_CHECK(x.defined() && (x.dim() == spatial + 1 || x.dim() == spatial + 2), ShapeError, layer, ": expected a ",
           spatial + 1, "-d (unbatched) or ", spatial + 2, "-d (batched) input, got ",
           x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  const int64_t lead = x.dim() - spatial;  // batch and channel dims
  Shape size = output_size;
  if (int64_t(size.size()) == lead + spatial) size.erase(size.begin(), size.begin() + lead);
  MF_CHECK(int64_t(size.size()) == spatial, ValueError, layer, ": for ", x.dim(), "-d input, output_size must have ",
           spatial, " or ", lead + spatial, " elements (got ", output_size.size(), ")");
  Shape smallest, largest, padding;
  for (int64_t d = 0; d < spatial; ++d) {
    const size_t i = size_t(d);
    const char* what = "the output size";
    int64_t min = checked_mul(x.size(lead + d) - 1, options.stride[i], layer, what);
    min = checked_sub(min, checked_mul(2, options.padding[i], layer, what), layer, what);
    min = checked_add(min, checked_mul(options.dilation[i], kernel_size[i] - 1, layer, what) + 1, layer, what);
    smallest.push_back(min);
    largest.push_back(checked_add(min, options.stride[i] - 1, layer, what));
  }
  for (size_t i = 0; i < size.size(); ++i)
    MF_CHECK(size[i] >= smallest[i] && size[i] <= largest[i], ValueError, layer, ": requested an output size of ",
             py_tuple(size), ", but valid sizes range from ", py_tuple(smallest), " to ", py_tuple(largest),
             " (for an input of ", py_tuple(Shape(x.sizes().begin() + lead, x.sizes().end())), ")");
  for (size_t i = 0; i < size.size(); ++i) padding.push_back(size[i] - smallest[i]);
  return padding;
}

AdaptiveMaxPool::AdaptiveMaxPool(int64_t spatial, OptionalSizes output_size, bool return_indices, bool int_size)
    : Module("AdaptiveMaxPool" + std::to_string(spatial) + "d"),
      spatial(spatial),
      output_size(std::move(output_size)),
      return_indices(return_indices),
      int_size(int_size) {
  const std::string& layer = type_name();
  MF_CHECK(this->output_size.size() == 1 || int64_t(this->output_size.size()) == spatial, ValueError, layer,
           ": output_size must have 1 or ", spatial, " entries, got ", this->output_size.size());
  MF_CHECK(spatial == 2 || this->output_size[0], TypeError, layer, ": output_size must be an int, got None");
}

TensorList AdaptiveMaxPool::forward_with_indices(const Tensor& x) {
  if (spatial == 1) return adaptive_max_pool1d_with_indices(x, *output_size[0]);
  return adaptive_max_pool2d_with_indices(x, output_size);
}

std::string AdaptiveMaxPool::extra_repr() const { return output_size_repr(output_size, int_size); }

Tensor Pool3d::forward(const Tensor& x) {
  return max ? max_pool3d(x, args) : avg_pool3d(x, args);
}

TensorList Pool3d::forward_with_indices(const Tensor& x) { return max_pool3d_with_indices(x, args); }

// PyTorch's _MaxPoolNd / _AvgPoolNd extra_repr (stride None: kernel_size).
std::string Pool3d::extra_repr() const {
  auto text = [](const Shape& v) { return v.size() == 1 ? std::to_string(v[0]) : py_tuple(v); };
  std::string s = "kernel_size=" + text(args.kernel_size) +
                  ", stride=" + text(args.stride.empty() ? args.kernel_size : args.stride) +
                  ", padding=" + text(args.padding);
  if (!max) return s;
  return s + ", dilation=" + text(args.dilation) + ", ceil_mode=" + py_bool(args.ceil_mode);
}

AdaptiveAvgPool3d::AdaptiveAvgPool3d(OptionalSizes output_size, bool int_size)
    : Module("AdaptiveAvgPool3d"), output_size(std::move(output_size)), int_size(int_size) {
  MF_CHECK(this->output_size.size() == 1 || this->output_size.size() == 3, ValueError,
           "AdaptiveAvgPool3d: output_size must have 1 or 3 entries, got ", this->output_size.size());
}

std::string AdaptiveAvgPool3d::extra_repr() const { return output_size_repr(output_size, int_size); }

}  // namespace mf::nn
