// Reductions (include/meshflow/ops/reduce.h) with PyTorch's argument forms:
// dim=None | int | tuple, keepdim, dtype=.
#include "bindings.h"

namespace mf::python {
namespace {

Tensor cast_if(const Tensor& t, std::optional<DType> dtype) { return dtype ? to(t, *dtype) : t; }

int64_t correction_of(std::optional<bool> unbiased, std::optional<int64_t> correction, const char* op) {
  MF_CHECK(!(unbiased && correction), ValueError, op, ": pass either unbiased or correction, not both");
  if (correction) return *correction;
  return unbiased.value_or(true) ? 1 : 0;
}

double norm_order(py::handle p) {
  if (p.is_none()) return 2.0;
  if (py::isinstance<py::str>(p)) {
    const auto name = p.cast<std::string>();
    MF_CHECK(name == "fro", ValueError, "norm: p='", name, "' is not supported (use a number or 'fro')");
    return 2.0;
  }
  // PyTorch's p is a number or a string; anything else (a tensor passed
  // positionally as p) is a TypeError naming the argument.
  const auto wrong = [&] {
    return TypeError(detail::concat("norm(): argument 'p' must be a number or 'fro', got ", public_type_name(p.ptr())));
  };
  if (py::isinstance<Tensor>(p) || PyBool_Check(p.ptr())) throw wrong();
  try {
    return p.cast<double>();
  } catch (const py::cast_error&) {
    throw wrong();
  }
}

using DimReduction = Tensor (*)(const Tensor&, const Shape&, int64_t, bool);

void def_moment(py::module_& m, const char* name, DimReduction f) {
  m.def(name, [f](const Tensor& t, bool unbiased) { return f(t, {}, unbiased ? 1 : 0, false); }, py::arg("input"),
        py::arg("unbiased"));
  m.def(name, [f, name](const Tensor& t, const DimsArg& dim, std::optional<bool> unbiased, bool keepdim,
                        std::optional<int64_t> correction) {
    return f(t, dim.dims, correction_of(unbiased, correction, name), keepdim);
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false,
        py::kw_only(), py::arg("correction") = py::none());
}

}  // namespace

void init_reduce(py::module_& m) {
  m.def("sum", [](const Tensor& t, const DimsArg& dim, bool keepdim, std::optional<DType> dtype) {
    return sum(t, dim.dims, keepdim, dtype);
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("dtype") = py::none());
  m.def("mean", [](const Tensor& t, const DimsArg& dim, bool keepdim, std::optional<DType> dtype) {
    return mean(cast_if(t, dtype), dim.dims, keepdim);
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("dtype") = py::none());
  m.def("prod", [](const Tensor& t, std::optional<int64_t> dim, bool keepdim, std::optional<DType> dtype) {
    return prod(cast_if(t, dtype), dim, keepdim);
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("dtype") = py::none());

  for (const char* name : {"max", "min"}) {
    const bool is_max = name[1] == 'a';
    m.def(name, [is_max](const Tensor& t) { return is_max ? max(t) : min(t); }, py::arg("input"));
    m.def(name, [is_max](const Tensor& t, int64_t dim, bool keepdim) {
      return is_max ? max(t, dim, keepdim) : min(t, dim, keepdim);
    }, py::arg("input"), py::arg("dim"), py::arg("keepdim") = false);
    m.def(name, [is_max](const Tensor& t, const Tensor& other) {
      return is_max ? maximum(t, other) : minimum(t, other);
    }, py::arg("input"), py::arg("other"));
  }
  m.def("amax", [](const Tensor& t, const DimsArg& dim, bool keepdim) { return amax(t, dim.dims, keepdim); },
        py::arg("input"), py::arg("dim") = py::tuple(), py::arg("keepdim") = false);
  m.def("amin", [](const Tensor& t, const DimsArg& dim, bool keepdim) { return amin(t, dim.dims, keepdim); },
        py::arg("input"), py::arg("dim") = py::tuple(), py::arg("keepdim") = false);
  m.def("argmax", &argmax, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("argmin", &argmin, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_moment(m, "var", &var);
  def_moment(m, "std", &std);
  m.def("norm", [](const Tensor& t, py::handle p, const DimsArg& dim, bool keepdim, std::optional<DType> dtype) {
    return norm(cast_if(t, dtype), norm_order(p), dim.dims, keepdim);
  }, py::arg("input"), py::arg("p") = "fro", py::arg("dim") = py::none(), py::arg("keepdim") = false,
        py::arg("dtype") = py::none());
  m.def("logsumexp", [](const Tensor& t, const DimsArg& dim, bool keepdim) { return logsumexp(t, dim.dims, keepdim); },
        py::arg("input"), py::arg("dim"), py::arg("keepdim") = false);
  m.def("all", [](const Tensor& t) { return all(t); }, py::arg("input"));
  m.def("all", [](const Tensor& t, int64_t dim, bool keepdim) { return all(t, dim, keepdim); }, py::arg("input"),
        py::arg("dim"), py::arg("keepdim") = false);
  m.def("any", [](const Tensor& t) { return any(t); }, py::arg("input"));
  m.def("any", [](const Tensor& t, int64_t dim, bool keepdim) { return any(t, dim, keepdim); }, py::arg("input"),
        py::arg("dim"), py::arg("keepdim") = false);
  m.def("cumsum", &cumsum, py::arg("input"), py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  m.def("median", py::overload_cast<const Tensor&>(&median), py::arg("input"));
  m.def("median", py::overload_cast<const Tensor&, int64_t, bool>(&median), py::arg("input"), py::arg("dim"),
        py::arg("keepdim") = false);
  m.def("unique", [](const Tensor& t, bool sorted, bool return_inverse, bool return_counts,
                     std::optional<int64_t> dim) -> py::object {
    MF_CHECK(!dim, ValueError, "unique: dim= is not supported (the unique rows or slices along a dim)");
    UniqueResult r = unique(t, return_inverse, return_counts);  // always sorted (sorted=False allows any order)
    if (!return_inverse && !return_counts) return py::cast(r.values);
    py::list out;
    out.append(r.values);
    if (return_inverse) out.append(r.inverse);
    if (return_counts) out.append(r.counts);
    return py::tuple(out);
  }, py::arg("input"), py::arg("sorted") = true, py::arg("return_inverse") = false, py::arg("return_counts") = false,
        py::arg("dim") = py::none());
  m.def("cumprod", &cumprod, py::arg("input"), py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());

  py::handle cls = m.attr("Tensor");
  add_methods(m, cls, {"sum", "mean", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "var", "std", "norm",
                       "logsumexp", "all", "any", "cumsum", "cumprod", "median", "unique"});
  py::reinterpret_borrow<py::class_<Tensor>>(cls).def("sum_to_size", [](const Tensor& t, py::args size) {
    return sum_to(t, shape_from_args(size, "sum_to_size"));
  });
}

}  // namespace mf::python
