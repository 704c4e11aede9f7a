// Factories: empty, zeros, ones, full, fill_, the *_like forms and
// host-data constructors.
#include "meshflow/dispatch.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "ops/kernels/cpu/loops.h"

namespace mf {
namespace {

void check_size(const Shape& size, const char* op) {
  for (int64_t s : size)
    MF_CHECK(s >= 0, ValueError, op, ": size must be non-negative, got ", shape_str(size));
}

template <typename T>
void fill_value(Tensor& t, Scalar value) {
  T v = value.to<T>();
  cpu::elementwise<T>(t, {}, [v]() { return v; });
}

void fill_kernel(const TensorList&, TensorList& out, const Attrs& attrs) {
  Scalar value = attrs.get_scalar("value");
  dispatch_dtype(out[0].dtype(), [&]<typename T>() { fill_value<T>(out[0], value); });
}

MF_REGISTER_OP(OpDef{
    .name = "full",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      const Shape& size = attrs.get_shape("size");
      check_size(size, "full");
      return std::vector<TensorMeta>{{size, attrs.get_dtype("dtype"), attrs.get_device("device")}};
    },
    .cpu_kernel = fill_kernel,
    .differentiable = false,
});

MF_REGISTER_OP(OpDef{
    .name = "empty",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      const Shape& size = attrs.get_shape("size");
      check_size(size, "empty");
      return std::vector<TensorMeta>{{size, attrs.get_dtype("dtype"), attrs.get_device("device")}};
    },
    .cpu_kernel = [](const TensorList&, TensorList&, const Attrs&) {},
    .differentiable = false,
});

// fill_(self, value): in place, no gradient to self's old value.
MF_REGISTER_OP(OpDef{
    .name = "fill",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = fill_kernel,
    .backward = [](const BackwardContext&) { return TensorList(1); },
    .inplace = true,
});

Tensor make_full(const Shape& size, Scalar value, const TensorOptions& options, const char* name) {
  static const OpDef& op = dispatch::op("full");
  Tensor t = dispatch::apply_one(op, {}, {{"size", size}, {"value", value}, {"dtype", options.dtype},
                                          {"device", options.device}});
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor empty(const Shape& size, const TensorOptions& options) {
  static const OpDef& op = dispatch::op("empty");
  Tensor t = dispatch::apply_one(op, {}, {{"size", size}, {"dtype", options.dtype}, {"device", options.device}});
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}
Tensor zeros(const Shape& size, const TensorOptions& options) { return make_full(size, 0, options, "zeros"); }
Tensor ones(const Shape& size, const TensorOptions& options) { return make_full(size, 1, options, "ones"); }
Tensor full(const Shape& size, Scalar value, const TensorOptions& options) {
  return make_full(size, value, options, "full");
}

Tensor empty_like(const Tensor& t, std::optional<DType> dtype) {
  return empty(t.sizes(), {.dtype = dtype.value_or(t.dtype()), .device = t.device()});
}
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) {
  return zeros(t.sizes(), {.dtype = dtype.value_or(t.dtype()), .device = t.device()});
}
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) {
  return ones(t.sizes(), {.dtype = dtype.value_or(t.dtype()), .device = t.device()});
}
Tensor full_like(const Tensor& t, Scalar value, std::optional<DType> dtype) {
  return full(t.sizes(), value, {.dtype = dtype.value_or(t.dtype()), .device = t.device()});
}

Tensor& fill_(Tensor& t, Scalar value) {
  static const OpDef& op = dispatch::op("fill");
  dispatch::apply_inplace(op, {t}, {{"value", value}});
  return t;
}
Tensor& zero_(Tensor& t) { return fill_(t, 0); }

Tensor from_vector(const std::vector<double>& values, const Shape& size, const TensorOptions& options) {
  MF_CHECK(int64_t(values.size()) == shape_numel(size), ShapeError, "from_vector: ", values.size(),
           " values do not fill shape ", shape_str(size));
  Tensor host = make_empty(size, DType::Float64);
  std::copy(values.begin(), values.end(), static_cast<double*>(host.data_ptr()));
  Tensor t = to(host, options.dtype);
  if (t.is_same(host)) t = host;
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

template <typename T>
Tensor from_data(const std::vector<T>& values, const Shape& size) {
  MF_CHECK(int64_t(values.size()) == shape_numel(size), ShapeError, "from_data: ", values.size(),
           " values do not fill shape ", shape_str(size));
  Tensor t = make_empty(size, dtype_of<T>());
  std::copy(values.begin(), values.end(), static_cast<T*>(t.data_ptr()));
  return t;
}
template Tensor from_data<float>(const std::vector<float>&, const Shape&);
template Tensor from_data<double>(const std::vector<double>&, const Shape&);
template Tensor from_data<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor from_data<int32_t>(const std::vector<int32_t>&, const Shape&);
template Tensor from_data<uint8_t>(const std::vector<uint8_t>&, const Shape&);
template Tensor from_data<int8_t>(const std::vector<int8_t>&, const Shape&);
template Tensor from_data<int16_t>(const std::vector<int16_t>&, const Shape&);

}  // namespace mf
