// Factories, random numbers and in-place fills (include/meshflow/ops/creation.h).
#include "bindings.h"

namespace mf::python {
namespace {

TensorOptions options(std::optional<DType> dtype, std::optional<Device> device, bool requires_grad) {
  return {.dtype = dtype.value_or(default_dtype()), .device = device.value_or(Device()),
          .requires_grad = requires_grad};
}

// The dtype PyTorch gives full(size, value) without dtype=.
DType dtype_of_value(Scalar value) {
  return value.is_floating() ? default_dtype() : value.default_dtype();
}

Tensor with_grad(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}

using SizeFactory = Tensor (*)(const Shape&, const TensorOptions&);

void def_size_factory(py::module_& m, const char* name, SizeFactory factory) {
  m.def(name, [factory, name](py::args size, std::optional<DType> dtype, std::optional<Device> device,
                              bool requires_grad) {
    return factory(shape_from_args(size, name), options(dtype, device, requires_grad));
  }, py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false);
}

using RandomFactory = Tensor (*)(const Shape&, const TensorOptions&, Generator*);
using LikeFactory = Tensor (*)(const Tensor&, std::optional<DType>);

void def_like_factory(py::module_& m, const char* name, LikeFactory factory) {
  m.def(name, [factory](const Tensor& t, std::optional<DType> dtype, std::optional<Device> device,
                        bool requires_grad) { return with_grad(factory(t, dtype), requires_grad); },
        py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false);
}

}  // namespace

void init_creation(py::module_& m) {
  def_size_factory(m, "empty", &empty);
  def_size_factory(m, "zeros", &zeros);
  def_size_factory(m, "ones", &ones);
  for (auto [name, f] : std::initializer_list<std::pair<const char*, RandomFactory>>{{"rand", &rand},
                                                                                    {"randn", &randn}}) {
    m.def(name, [f, name](py::args size, Generator* generator, std::optional<DType> dtype,
                          std::optional<Device> device, bool requires_grad) {
      return f(shape_from_args(size, name), options(dtype, device, requires_grad), generator);
    }, py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
          py::arg("device") = py::none(), py::arg("requires_grad") = false);
  }
  def_like_factory(m, "empty_like", &empty_like);
  def_like_factory(m, "zeros_like", &zeros_like);
  def_like_factory(m, "ones_like", &ones_like);

  m.def("full", [](const Shape& size, Scalar value, std::optional<DType> dtype, std::optional<Device> device,
                   bool requires_grad) {
    return full(size, value, options(dtype.value_or(dtype_of_value(value)), device, requires_grad));
  }, py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def("full_like", [](const Tensor& t, Scalar value, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(full_like(t, value, dtype), requires_grad);
  }, py::arg("input"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("requires_grad") = false);
  m.def("rand_like", [](const Tensor& t, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(dtype ? rand(t.sizes(), {.dtype = *dtype, .device = t.device()}) : rand_like(t), requires_grad);
  }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
  m.def("randn_like", [](const Tensor& t, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(dtype ? randn(t.sizes(), {.dtype = *dtype, .device = t.device()}) : randn_like(t),
                     requires_grad);
  }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false);

  m.def("arange", [](Scalar end, std::optional<DType> dtype, std::optional<Device> device, bool requires_grad) {
    return with_grad(arange(end, dtype, device.value_or(Device())), requires_grad);
  }, py::arg("end"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false);
  m.def("arange", [](Scalar start, Scalar end, Scalar step, std::optional<DType> dtype, std::optional<Device> device,
                     bool requires_grad) {
    return with_grad(arange(start, end, step, dtype, device.value_or(Device())), requires_grad);
  }, py::arg("start"), py::arg("end"), py::arg("step") = 1, py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def("linspace", [](double start, double end, int64_t steps, std::optional<DType> dtype,
                       std::optional<Device> device, bool requires_grad) {
    return linspace(start, end, steps, options(dtype, device, requires_grad));
  }, py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def("logspace", [](double start, double end, int64_t steps, double base, std::optional<DType> dtype,
                       std::optional<Device> device, bool requires_grad) {
    return logspace(start, end, steps, base, options(dtype, device, requires_grad));
  }, py::arg("start"), py::arg("end"), py::arg("steps"), py::arg("base") = 10.0, py::kw_only(),
        py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def("eye", [](int64_t n, std::optional<int64_t> cols, std::optional<DType> dtype, std::optional<Device> device,
                  bool requires_grad) { return eye(n, cols, options(dtype, device, requires_grad)); },
        py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def("scalar_tensor", [](Scalar s, std::optional<DType> dtype, std::optional<Device> device,
                            bool requires_grad) {
    return with_grad(scalar_tensor(s, dtype.value_or(default_dtype()), device.value_or(Device())), requires_grad);
  }, py::arg("s"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false);

  m.def("randint", [](int64_t high, const Shape& size, Generator* generator, std::optional<DType> dtype,
                      std::optional<Device> device, bool requires_grad) {
    return randint(0, high, size, options(dtype.value_or(DType::Int64), device, requires_grad), generator);
  }, py::arg("high"), py::arg("size"), py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def("randint", [](int64_t low, int64_t high, const Shape& size, Generator* generator, std::optional<DType> dtype,
                      std::optional<Device> device, bool requires_grad) {
    return randint(low, high, size, options(dtype.value_or(DType::Int64), device, requires_grad), generator);
  }, py::arg("low"), py::arg("high"), py::arg("size"), py::kw_only(), py::arg("generator") = py::none(),
        py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def("randperm", [](int64_t n, Generator* generator, std::optional<DType> dtype, std::optional<Device> device) {
    Tensor t = randperm(n, device.value_or(Device()), generator);
    return dtype ? to(t, *dtype) : t;
  }, py::arg("n"), py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none());
  m.def("bernoulli", py::overload_cast<const Tensor&, Generator*>(&bernoulli), py::arg("input"), py::kw_only(),
        py::arg("generator") = py::none());
  m.def("bernoulli", py::overload_cast<const Tensor&, double, Generator*>(&bernoulli), py::arg("input"),
        py::arg("p"), py::kw_only(), py::arg("generator") = py::none());
  m.def("_standard_gamma", &standard_gamma, py::arg("input"), py::kw_only(), py::arg("generator") = py::none());
  m.def("multinomial", &multinomial, py::arg("input"), py::arg("num_samples"), py::arg("replacement") = false,
        py::kw_only(), py::arg("generator") = py::none());
  // torch.normal: the values of mean + std * N(0, 1), with no gradient
  // reaching mean or std (PyTorch's derivative of normal is zero).
  auto normal_of = [](const Tensor& mean, const Tensor& std, Generator* generator) {
    NoGradGuard no_grad;
    const Shape shape = broadcast_shapes(mean.sizes(), std.sizes(), "normal");
    const DType dtype = result_type(mean, std);
    MF_CHECK(is_floating(dtype), TypeError, "normal: mean and std must be floating-point, got ", dtype_name(dtype));
    MF_CHECK(std.numel() == 0 || amin(std).item().to_double() >= 0, ValueError, "normal: std must be >= 0");
    return add(mean, mul(std, randn(shape, {.dtype = dtype, .device = mean.device()}, generator)));
  };
  m.def("normal", normal_of, py::arg("mean"), py::arg("std"), py::kw_only(), py::arg("generator") = py::none());
  m.def("normal", [normal_of](const Tensor& mean, double std, Generator* generator) {
    return normal_of(mean, full({}, std, {.dtype = mean.dtype(), .device = mean.device()}), generator);
  }, py::arg("mean"), py::arg("std") = 1.0, py::kw_only(), py::arg("generator") = py::none());
  m.def("normal", [normal_of](double mean, const Tensor& std, Generator* generator) {
    return normal_of(full({}, mean, {.dtype = std.dtype(), .device = std.device()}), std, generator);
  }, py::arg("mean"), py::arg("std"), py::kw_only(), py::arg("generator") = py::none());
  m.def("normal", [](double mean, double std, const Shape& size, Generator* generator, std::optional<DType> dtype,
                     std::optional<Device> device, bool requires_grad) {
    Tensor t = empty(size, options(dtype, device, false));
    normal_(t, mean, std, generator);
    return with_grad(t, requires_grad);
  }, py::arg("mean"), py::arg("std"), py::arg("size"), py::kw_only(), py::arg("generator") = py::none(),
        py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false);
  add_methods(m, m.attr("Tensor"), {"bernoulli", "multinomial"});

  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def("uniform_", [](py::object self, double from, double to, Generator* generator) {
        uniform_(self.cast<Tensor&>(), from, to, generator);
        return self;
      }, py::arg("from") = 0.0, py::arg("to") = 1.0, py::kw_only(), py::arg("generator") = py::none())
      .def("normal_", [](py::object self, double mean, double std, Generator* generator) {
        normal_(self.cast<Tensor&>(), mean, std, generator);
        return self;
      }, py::arg("mean") = 0.0, py::arg("std") = 1.0, py::kw_only(), py::arg("generator") = py::none())
      .def("bernoulli_", [](py::object self, double p, Generator* generator) {
        Tensor& t = self.cast<Tensor&>();
        copy_(t, bernoulli(t, p, generator));
        return self;
      }, py::arg("p") = 0.5, py::kw_only(), py::arg("generator") = py::none())
      .def("fill_", [](py::object self, Scalar value) {
        fill_(self.cast<Tensor&>(), value);
        return self;
      }, py::arg("value"))
      .def("zero_", [](py::object self) {
        zero_(self.cast<Tensor&>());
        return self;
      })
      .def("copy_", [](py::object self, const Tensor& src, bool non_blocking) {
        copy_(self.cast<Tensor&>(), src);
        return self;
      }, py::arg("src"), py::arg("non_blocking") = false);
}

}  // namespace mf::python
