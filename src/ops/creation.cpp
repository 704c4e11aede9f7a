// Factories: empty, zeros, ones, full, fill_, the *_like forms, ranges
// (arange, linspace, eye) and host-data constructors. Random factories are
// in random.cpp.
#include <cmath>
#include <cstring>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "ops/elementwise_common.h"

namespace mf {
namespace {

void check_size(const Shape& size, const char* op) {
  for (int64_t s : size)
    MF_CHECK(s >= 0, ValueError, op, ": size must be non-negative, got ", shape_str(size));
}

MF_REGISTER_OP(OpDef{
    .name = "full",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      const Shape& size = attrs.get_shape("size");
      check_size(size, "full");
      return std::vector<TensorMeta>{{size, attrs.get_dtype("dtype"), attrs.get_device("device")}};
    },
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
    // Uninitialised, except bool: a byte other than 0 or 1 read as a C++ bool
    // is undefined behaviour in every later kernel, so bool tensors start false.
    .differentiable = false,
});

// fill_(self, value): in place, no gradient to self's old value.
MF_REGISTER_OP(OpDef{
    .name = "fill",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext&) { return TensorList(1); },
    .inplace = true,
    .elementwise = true,
});

// --- ranges ------------------------------------------------------------------

std::vector<TensorMeta> infer_range(const char* op, const Shape& size, const Attrs& attrs) {
  MF_CHECK(attrs.get_dtype("dtype") != DType::Bool, TypeError, op, ": not implemented for bool");
  return {{size, attrs.get_dtype("dtype"), attrs.get_device("device")}};
}

// start + i * step (functors::Arange).
MF_REGISTER_OP(OpDef{
    .name = "arange",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      return infer_range("arange", {attrs.get_int("size")}, attrs);
    },
    .differentiable = false,
});

// Symmetric, like PyTorch (functors::Linspace).
MF_REGISTER_OP(OpDef{
    .name = "linspace",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      return infer_range("linspace", {attrs.get_int("steps")}, attrs);
    },
    .differentiable = false,
});

MF_REGISTER_OP(OpDef{
    .name = "eye",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      return std::vector<TensorMeta>{
          {{attrs.get_int("n"), attrs.get_int("m")}, attrs.get_dtype("dtype"), attrs.get_device("device")}};
    },
    .differentiable = false,
});

Tensor make_full(const Shape& size, Scalar value, const TensorOptions& options, const char* name) {
  static const OpDef& op = dispatch::op("full");
  elementwise_detail::check_scalar_fits(value, options.dtype, name, "fill_value");
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

Tensor arange(Scalar end, std::optional<DType> dtype, Device device) { return arange(0, end, 1, dtype, device); }

Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<DType> dtype, Device device) {
  static const OpDef& op = dispatch::op("arange");
  const bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  const DType dt = dtype.value_or(integral ? DType::Int64 : default_dtype());
  const double lo = start.to_double(), hi = end.to_double(), by = step.to_double();
  MF_CHECK(std::isfinite(lo) && std::isfinite(hi), Error, "arange: unsupported range: ", start.str(), " -> ",
           end.str());
  MF_CHECK(by != 0, Error, "arange: step must be nonzero");
  MF_CHECK((by > 0 && hi >= lo) || (by < 0 && hi <= lo), Error,
           "arange: upper bound and larger bound inconsistent with step sign; got start=", start.str(),
           ", end=", end.str(), ", step=", step.str());
  // An integral dtype computes with start and step truncated to integers.
  MF_CHECK(!is_integral(dt) || step.to_int() != 0, Error, "arange: step must be nonzero (", step.str(),
           " truncates to 0 for ", dtype_name(dt), ")");
  int64_t size;
  if (integral) {
    // Exact for the whole int64 range: ceil((end - start) / step).
    int64_t span;
    MF_CHECK(!__builtin_sub_overflow(end.to_int(), start.to_int(), &span), Error, "arange: the range ",
             start.str(), " -> ", end.str(), " overflows int64");
    const int64_t by_int = step.to_int();
    size = span / by_int + (span % by_int != 0 ? 1 : 0);
  } else {
    const double size_d = std::ceil((hi - lo) / by);
    MF_CHECK(size_d >= 0 && size_d <= double(std::numeric_limits<int64_t>::max()), Error,
             "arange: invalid size ", size_d, ", possible overflow?");
    size = int64_t(size_d);
  }
  return dispatch::apply_one(
      op, {}, {{"start", start}, {"step", step}, {"size", size}, {"dtype", dt}, {"device", device}});
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options) {
  static const OpDef& op = dispatch::op("linspace");
  MF_CHECK(steps >= 0, Error, "linspace: number of steps must be non-negative, got ", steps);
  Tensor t = dispatch::apply_one(op, {}, {{"start", start}, {"end", end}, {"steps", steps},
                                          {"dtype", options.dtype}, {"device", options.device}});
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor eye(int64_t n, std::optional<int64_t> m, const TensorOptions& options) {
  static const OpDef& op = dispatch::op("eye");
  const int64_t cols = m.value_or(n);
  MF_CHECK(n >= 0, Error, "eye: n must be greater or equal to 0, got ", n);
  MF_CHECK(cols >= 0, Error, "eye: m must be greater or equal to 0, got ", cols);
  Tensor t = dispatch::apply_one(
      op, {}, {{"n", n}, {"m", cols}, {"dtype", options.dtype}, {"device", options.device}});
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor& fill_(Tensor& t, Scalar value) {
  static const OpDef& op = dispatch::op("fill");
  elementwise_detail::check_scalar_fits(value, t.dtype(), "fill_", "value");
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
