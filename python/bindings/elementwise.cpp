// Elementwise ops (include/meshflow/ops/elementwise.h) as meshflow.<op> and
// Tensor.<op>, with PyTorch's argument names.
#include "bindings.h"

namespace mf::python {
namespace {

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);
using BinaryScalar = Tensor (*)(const Tensor&, Scalar);

void def_unary(py::module_& m, const char* name, Unary f) { m.def(name, f, py::arg("input")); }

// name(input, other) for a tensor or a number `other`.
void def_binary(py::module_& m, const char* name, Binary f, BinaryScalar g) {
  m.def(name, f, py::arg("input"), py::arg("other"));
  m.def(name, g, py::arg("input"), py::arg("other"));
}

Tensor floor_divide_scalar(const Tensor& a, Scalar b) { return div(a, b, "floor"); }
Tensor bitwise_and_scalar(const Tensor& a, Scalar b) { return bitwise_and(a, wrap_scalar(a, b)); }
Tensor bitwise_or_scalar(const Tensor& a, Scalar b) { return bitwise_or(a, wrap_scalar(a, b)); }
Tensor bitwise_xor_scalar(const Tensor& a, Scalar b) { return bitwise_xor(a, wrap_scalar(a, b)); }

}  // namespace

void init_elementwise(py::module_& m) {
  m.def("result_type", py::overload_cast<const Tensor&, const Tensor&>(&result_type), py::arg("tensor1"),
        py::arg("tensor2"));
  m.def("result_type", py::overload_cast<const Tensor&, Scalar>(&result_type), py::arg("tensor1"),
        py::arg("tensor2"));
  m.def("broadcast_shapes", [](py::args shapes) {
    Shape out;
    for (py::handle s : shapes) {
      Shape shape = PyIndex_Check(s.ptr()) ? Shape{s.cast<int64_t>()} : s.cast<Shape>();
      out = broadcast_shapes(out, shape, "broadcast_shapes");
    }
    return size_type()(py::tuple(py::cast(out)));
  });

  m.def("add", py::overload_cast<const Tensor&, const Tensor&, Scalar>(&add), py::arg("input"), py::arg("other"),
        py::kw_only(), py::arg("alpha") = 1);
  m.def("add", py::overload_cast<const Tensor&, Scalar, Scalar>(&add), py::arg("input"), py::arg("other"),
        py::kw_only(), py::arg("alpha") = 1);
  m.def("sub", py::overload_cast<const Tensor&, const Tensor&, Scalar>(&sub), py::arg("input"), py::arg("other"),
        py::kw_only(), py::arg("alpha") = 1);
  m.def("sub", py::overload_cast<const Tensor&, Scalar, Scalar>(&sub), py::arg("input"), py::arg("other"),
        py::kw_only(), py::arg("alpha") = 1);
  m.def("rsub", [](const Tensor& a, const Tensor& b, Scalar alpha) { return sub(b, a, alpha); }, py::arg("input"),
        py::arg("other"), py::kw_only(), py::arg("alpha") = 1);
  m.def("rsub", py::overload_cast<const Tensor&, Scalar>(&rsub), py::arg("input"), py::arg("other"));
  def_binary(m, "mul", py::overload_cast<const Tensor&, const Tensor&>(&mul),
             py::overload_cast<const Tensor&, Scalar>(&mul));
  m.def("div", [](const Tensor& a, const Tensor& b, std::optional<std::string> mode) {
    return div(a, b, mode.value_or(""));
  }, py::arg("input"), py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none());
  m.def("div", [](const Tensor& a, Scalar b, std::optional<std::string> mode) { return div(a, b, mode.value_or("")); },
        py::arg("input"), py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none());
  def_binary(m, "floor_divide", &floor_divide, &floor_divide_scalar);
  def_binary(m, "remainder", py::overload_cast<const Tensor&, const Tensor&>(&remainder),
             py::overload_cast<const Tensor&, Scalar>(&remainder));
  def_binary(m, "pow", py::overload_cast<const Tensor&, const Tensor&>(&pow),
             py::overload_cast<const Tensor&, Scalar>(&pow));
  m.def("pow", py::overload_cast<Scalar, const Tensor&>(&pow), py::arg("self"), py::arg("exponent"));
  m.def("minimum", &minimum, py::arg("input"), py::arg("other"));
  m.def("maximum", &maximum, py::arg("input"), py::arg("other"));
  m.def("atan2", &atan2, py::arg("input"), py::arg("other"));
  m.def("xlogy", &xlogy, py::arg("input"), py::arg("other"));
  m.def("xlogy", [](const Tensor& x, Scalar y) { return xlogy(x, wrap_scalar(x, y)); }, py::arg("input"),
        py::arg("other"));
  m.def("xlogy", [](Scalar x, const Tensor& y) { return xlogy(wrap_scalar(y, x), y); }, py::arg("input"),
        py::arg("other"));

  for (auto [name, f] : std::initializer_list<std::pair<const char*, Unary>>{
           {"neg", &neg}, {"abs", &abs}, {"sign", &sign}, {"exp", &exp}, {"log", &log}, {"log1p", &log1p},
           {"expm1", &expm1}, {"sqrt", &sqrt}, {"rsqrt", &rsqrt}, {"square", &square},
           {"reciprocal", &reciprocal}, {"sin", &sin}, {"cos", &cos}, {"tanh", &tanh}, {"sigmoid", &sigmoid},
           {"erf", &erf}, {"lgamma", &lgamma}, {"digamma", &digamma}, {"floor", &floor}, {"ceil", &ceil}, {"round", &round}, {"trunc", &trunc},
           {"relu", &relu}, {"silu", &silu}, {"logical_not", &logical_not}, {"bitwise_not", &bitwise_not},
           {"isnan", &isnan}, {"isinf", &isinf}, {"isfinite", &isfinite}}) {
    def_unary(m, name, f);
    fast_unary(name, f);
  }
  m.def("polygamma", &polygamma, py::arg("n"), py::arg("input"));
  m.def("_standard_gamma_grad", &standard_gamma_grad, py::arg("input"), py::arg("output"));
  m.def("gelu", &gelu, py::arg("input"), py::kw_only(), py::arg("approximate") = "none");
  m.def("leaky_relu", &leaky_relu, py::arg("input"), py::arg("negative_slope") = 0.01);
  m.def("elu", &elu, py::arg("input"), py::arg("alpha") = 1.0);
  m.def("softplus", &softplus, py::arg("input"), py::arg("beta") = 1.0, py::arg("threshold") = 20.0);
  m.def("clamp", py::overload_cast<const Tensor&, std::optional<Scalar>, std::optional<Scalar>>(&clamp),
        py::arg("input"), py::arg("min") = py::none(), py::arg("max") = py::none());
  m.def("clamp", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&clamp), py::arg("input"),
        py::arg("min") = py::none(), py::arg("max") = py::none());
  m.attr("clip") = m.attr("clamp");

  // where(condition) is nonzero(condition, as_tuple=True), as in PyTorch.
  m.def("where", [](const Tensor& condition) {
    const Tensor nz = nonzero(condition);
    py::tuple out(size_t(nz.size(1)));
    for (int64_t d = 0; d < nz.size(1); ++d) out[size_t(d)] = select(nz, 1, d);
    return out;
  }, py::arg("condition"));
  m.def("where", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&where), py::arg("condition"),
        py::arg("input"), py::arg("other"));
  m.def("where", py::overload_cast<const Tensor&, const Tensor&, Scalar>(&where), py::arg("condition"),
        py::arg("input"), py::arg("other"));
  m.def("where", py::overload_cast<const Tensor&, Scalar, const Tensor&>(&where), py::arg("condition"),
        py::arg("input"), py::arg("other"));
  for (auto [name, f, g] : std::initializer_list<std::tuple<const char*, Binary, BinaryScalar>>{
           {"eq", &eq, &eq}, {"ne", &ne, &ne}, {"lt", &lt, &lt}, {"le", &le, &le}, {"gt", &gt, &gt},
           {"ge", &ge, &ge}, {"bitwise_and", &bitwise_and, &bitwise_and_scalar},
           {"bitwise_or", &bitwise_or, &bitwise_or_scalar}, {"bitwise_xor", &bitwise_xor, &bitwise_xor_scalar},
           {"bitwise_left_shift", &bitwise_left_shift, &bitwise_left_shift},
           {"bitwise_right_shift", &bitwise_right_shift, &bitwise_right_shift}})
    def_binary(m, name, f, g);
  m.def("logical_and", &logical_and, py::arg("input"), py::arg("other"));
  m.def("logical_or", &logical_or, py::arg("input"), py::arg("other"));
  m.def("logical_xor", &logical_xor, py::arg("input"), py::arg("other"));
  m.def("masked_fill", py::overload_cast<const Tensor&, const Tensor&, Scalar>(&masked_fill), py::arg("input"),
        py::arg("mask"), py::arg("value"));
  m.def("masked_fill", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&masked_fill),
        py::arg("input"), py::arg("mask"), py::arg("value"));
  m.def("lerp", &lerp, py::arg("input"), py::arg("end"), py::arg("weight"));
  m.def("addcmul", &addcmul, py::arg("input"), py::arg("tensor1"), py::arg("tensor2"), py::kw_only(),
        py::arg("value") = 1);
  m.def("addcdiv", &addcdiv, py::arg("input"), py::arg("tensor1"), py::arg("tensor2"), py::kw_only(),
        py::arg("value") = 1);
  m.def("relu_", [](Tensor t) { return relu_(t); }, py::arg("input"));
  m.def("abs_", [](Tensor t) { return abs_(t); }, py::arg("input"));
  m.def("clamp_min", &clamp_min, py::arg("input"), py::arg("min"));
  m.def("clamp_max", &clamp_max, py::arg("input"), py::arg("max"));
  m.def("isclose", &isclose, py::arg("input"), py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
        py::arg("equal_nan") = false);
  m.def("allclose", &allclose, py::arg("input"), py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
        py::arg("equal_nan") = false);
  m.def("equal", &equal, py::arg("input"), py::arg("other"));

  py::handle cls = m.attr("Tensor");
  add_methods(m, cls, {"add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "minimum", "maximum",
                       "atan2", "neg", "abs", "sign", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "square",
                       "reciprocal", "sin", "cos", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc",
                       "relu", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "clamp", "clip", "eq",
                       "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                       "bitwise_right_shift", "logical_and",
                       "logical_or", "logical_xor", "masked_fill", "lerp", "addcmul", "addcdiv", "isclose", "allclose", "clamp_min", "clamp_max",
                       "equal", "xlogy", "lgamma", "digamma"});

  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(cls);
  tensor.def("polygamma", [](const Tensor& t, int64_t n) { return polygamma(n, t); }, py::arg("n"));
  tensor.def("where", [](const Tensor& t, const Tensor& condition, const Tensor& other) {
            return where(condition, t, other);
          }, py::arg("condition"), py::arg("other"))
      .def("where", [](const Tensor& t, const Tensor& condition, Scalar other) { return where(condition, t, other); },
           py::arg("condition"), py::arg("other"))
      .def("add_", [](py::object self, const Tensor& other, Scalar alpha) {
        add_(self.cast<Tensor&>(), other, alpha);
        return self;
      }, py::arg("other"), py::kw_only(), py::arg("alpha") = 1)
      .def("add_", [](py::object self, Scalar other, Scalar alpha) {
        add_(self.cast<Tensor&>(), other, alpha);
        return self;
      }, py::arg("other"), py::kw_only(), py::arg("alpha") = 1)
      .def("sub_", [](py::object self, const Tensor& other, Scalar alpha) {
        sub_(self.cast<Tensor&>(), other, alpha);
        return self;
      }, py::arg("other"), py::kw_only(), py::arg("alpha") = 1)
      .def("sub_", [](py::object self, Scalar other, Scalar alpha) {
        sub_(self.cast<Tensor&>(), other, alpha);
        return self;
      }, py::arg("other"), py::kw_only(), py::arg("alpha") = 1)
      .def("mul_", [](py::object self, const Tensor& other) {
        mul_(self.cast<Tensor&>(), other);
        return self;
      }, py::arg("other"))
      .def("mul_", [](py::object self, Scalar other) {
        mul_(self.cast<Tensor&>(), other);
        return self;
      }, py::arg("other"))
      .def("div_", [](py::object self, const Tensor& other) {
        div_(self.cast<Tensor&>(), other);
        return self;
      }, py::arg("other"))
      .def("div_", [](py::object self, Scalar other) {
        div_(self.cast<Tensor&>(), other);
        return self;
      }, py::arg("other"))
      .def("abs_", [](py::object self) {
        abs_(self.cast<Tensor&>());
        return self;
      })
      .def("neg_", [](py::object self) {
        neg_(self.cast<Tensor&>());
        return self;
      })
      .def("relu_", [](py::object self) {
        relu_(self.cast<Tensor&>());
        return self;
      })
      .def("clamp_", [](py::object self, std::optional<Scalar> min, std::optional<Scalar> max) {
        clamp_(self.cast<Tensor&>(), min, max);
        return self;
      }, py::arg("min") = py::none(), py::arg("max") = py::none())
      .def("masked_fill_", [](py::object self, const Tensor& mask, Scalar value) {
        masked_fill_(self.cast<Tensor&>(), mask, value);
        return self;
      }, py::arg("mask"), py::arg("value"));

  // src/ops/unary_math.cpp
  const std::initializer_list<std::pair<const char*, Unary>> more_math{
      {"tan", &tan},     {"asin", &asin},   {"acos", &acos},   {"atan", &atan},         {"sinh", &sinh},
      {"cosh", &cosh},   {"asinh", &asinh}, {"acosh", &acosh}, {"atanh", &atanh},       {"log2", &log2},
      {"log10", &log10}, {"exp2", &exp2},   {"erfc", &erfc},   {"erfinv", &erfinv},     {"sinc", &sinc},
      {"frac", &frac},   {"deg2rad", &deg2rad}, {"rad2deg", &rad2deg}};
  for (auto [name, f] : more_math) {
    def_unary(m, name, f);
    tensor.def(name, f);
    fast_unary(name, f);
  }
  // In-place forms (Tensor.sin_() and torch.sin_(t)) of the unary functions that have none yet.
  std::vector<std::pair<const char*, Unary>> in_place(more_math);
  for (auto entry : std::initializer_list<std::pair<const char*, Unary>>{
           {"exp", &exp}, {"log", &log}, {"log1p", &log1p}, {"expm1", &expm1}, {"sqrt", &sqrt}, {"rsqrt", &rsqrt},
           {"square", &square}, {"reciprocal", &reciprocal}, {"sin", &sin}, {"cos", &cos}, {"tanh", &tanh},
           {"sigmoid", &sigmoid}, {"erf", &erf}, {"lgamma", &lgamma}, {"digamma", &digamma}, {"sign", &sign},
           {"floor", &floor}, {"ceil", &ceil}, {"round", &round}, {"trunc", &trunc}})
    in_place.push_back(entry);
  for (auto [name, f] : in_place) {
    const std::string method = std::string(name) + "_";
    if (py::hasattr(cls, method.c_str())) continue;
    auto apply = [f = f, name = name](py::object self) {
      apply_unary_(self.cast<Tensor&>(), f, name);
      return self;
    };
    tensor.def(method.c_str(), apply);
    // torch has no module-level form of these four
    const std::string n = name;
    if (n != "lgamma" && n != "digamma" && n != "sign" && n != "erfinv") m.def(method.c_str(), apply, py::arg("input"));
  }
  // PyTorch's other names of the same functions (and of their methods and in-place forms).
  for (auto [alias, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"absolute", "abs"}, {"negative", "neg"}, {"arcsin", "asin"}, {"arccos", "acos"}, {"arctan", "atan"},
           {"arcsinh", "asinh"}, {"arccosh", "acosh"}, {"arctanh", "atanh"}, {"arctan2", "atan2"},
           {"multiply", "mul"}, {"divide", "div"}, {"subtract", "sub"}, {"true_divide", "div"}, {"greater", "gt"},
           {"greater_equal", "ge"}, {"less", "lt"}, {"less_equal", "le"}, {"not_equal", "ne"}, {"fix", "trunc"}}) {
    for (const std::string suffix : {"", "_"}) {
      const std::string from = name + suffix, to = alias + suffix;
      // the in-place aliases torch has are methods only, but for the inverse trigonometric ones
      const std::string a = alias;
      const bool module_level =
          suffix.empty() || (a.rfind("arc", 0) == 0 && a != "arctan2") || a == "negative" || a == "fix";
      if (module_level && py::hasattr(m, from.c_str()) && !py::hasattr(m, to.c_str()))
        m.attr(to.c_str()) = m.attr(from.c_str());
      if (py::hasattr(cls, from.c_str()) && !py::hasattr(cls, to.c_str())) cls.attr(to.c_str()) = cls.attr(from.c_str());
    }
  }
}

}  // namespace mf::python
