// Views, joins, splits, indexing and rearranging ops
// (include/meshflow/ops/shape.h). Methods that PyTorch lets take sizes as
// separate ints (x.view(2, 3)) accept both forms.
#include "bindings.h"

namespace mf::python {
namespace {

using SizeMethod = Tensor (*)(const Tensor&, const Shape&);

void def_size_method(py::class_<Tensor>& cls, const char* name, SizeMethod f) {
  cls.def(name, [f, name](const Tensor& t, py::args size) { return f(t, shape_from_args(size, name)); });
}

}  // namespace

void init_shape(py::module_& m) {
  m.def("view", &view, py::arg("input"), py::arg("size"));
  m.def("reshape", &reshape, py::arg("input"), py::arg("shape"));
  m.def("permute", &permute, py::arg("input"), py::arg("dims"));
  m.def("transpose", &transpose, py::arg("input"), py::arg("dim0"), py::arg("dim1"));
  m.def("t", &t, py::arg("input"));
  m.def("narrow", &narrow, py::arg("input"), py::arg("dim"), py::arg("start"), py::arg("length"));
  m.def("select", &select, py::arg("input"), py::arg("dim"), py::arg("index"));
  m.def("expand", &expand, py::arg("input"), py::arg("size"));
  m.def("expand_as", &expand_as, py::arg("input"), py::arg("other"));
  m.def("broadcast_to", &broadcast_to, py::arg("input"), py::arg("size"));
  m.def("squeeze", &squeeze, py::arg("input"), py::arg("dim") = py::none());
  m.def("unsqueeze", &unsqueeze, py::arg("input"), py::arg("dim"));
  m.def("flatten", &flatten, py::arg("input"), py::arg("start_dim") = 0, py::arg("end_dim") = -1);
  m.def("unflatten", &unflatten, py::arg("input"), py::arg("dim"), py::arg("sizes"));
  m.def("as_strided", &as_strided, py::arg("input"), py::arg("size"), py::arg("stride"),
        py::arg("storage_offset") = py::none());
  m.def("diagonal", &diagonal, py::arg("input"), py::arg("offset") = 0, py::arg("dim1") = 0, py::arg("dim2") = 1);
  m.def("contiguous", &contiguous, py::arg("input"));
  m.def("clone", &clone, py::arg("input"));

  m.def("cat", &cat, py::arg("tensors"), py::arg("dim") = 0);
  m.attr("concat") = m.attr("cat");
  m.def("stack", &stack, py::arg("tensors"), py::arg("dim") = 0);
  m.def("split", [](const Tensor& t, int64_t size, int64_t dim) { return to_tuple(split(t, size, dim)); },
        py::arg("tensor"), py::arg("split_size_or_sections"), py::arg("dim") = 0);
  m.def("split", [](const Tensor& t, const Shape& sizes, int64_t dim) { return to_tuple(split(t, sizes, dim)); },
        py::arg("tensor"), py::arg("split_size_or_sections"), py::arg("dim") = 0);
  m.def("chunk", [](const Tensor& t, int64_t chunks, int64_t dim) { return to_tuple(chunk(t, chunks, dim)); },
        py::arg("input"), py::arg("chunks"), py::arg("dim") = 0);
  m.def("unbind", [](const Tensor& t, int64_t dim) { return to_tuple(unbind(t, dim)); }, py::arg("input"),
        py::arg("dim") = 0);

  m.def("index_select", &index_select, py::arg("input"), py::arg("dim"), py::arg("index"));
  m.def("gather", &gather, py::arg("input"), py::arg("dim"), py::arg("index"));
  m.def("scatter", py::overload_cast<const Tensor&, int64_t, const Tensor&, const Tensor&>(&scatter),
        py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"));
  m.def("scatter", py::overload_cast<const Tensor&, int64_t, const Tensor&, Scalar>(&scatter), py::arg("input"),
        py::arg("dim"), py::arg("index"), py::arg("value"));
  m.def("scatter_add", &scatter_add, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"));
  m.def("scatter_reduce", &scatter_reduce, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"),
        py::arg("reduce"), py::kw_only(), py::arg("include_self") = true);
  m.def("index_add", &index_add, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("source"),
        py::kw_only(), py::arg("alpha") = 1);
  m.def("index_fill", &index_fill, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("value"));
  m.def("broadcast_tensors", [](py::args tensors) {
    TensorList list;
    for (py::handle t : tensors) list.push_back(t.cast<Tensor>());
    return to_tuple(broadcast_tensors(list));
  });
  m.def("diag", &diag, py::arg("input"), py::arg("diagonal") = 0);
  m.def("argwhere", &argwhere, py::arg("input"));
  m.def("masked_select", &masked_select, py::arg("input"), py::arg("mask"));
  m.def("nonzero", [](const Tensor& t, bool as_tuple) -> py::object {
    Tensor nz = nonzero(t);
    return as_tuple ? py::object(to_tuple(unbind(nz, 1))) : py::cast(nz);
  }, py::arg("input"), py::kw_only(), py::arg("as_tuple") = false);

  m.def("take", &take, py::arg("input"), py::arg("index"));
  m.def("tril", &tril, py::arg("input"), py::arg("diagonal") = 0);
  m.def("triu", &triu, py::arg("input"), py::arg("diagonal") = 0);
  m.def("repeat", &repeat, py::arg("input"), py::arg("repeats"));
  m.def("repeat_interleave", &repeat_interleave, py::arg("input"), py::arg("repeats"), py::arg("dim") = py::none());
  m.def("flip", &flip, py::arg("input"), py::arg("dims"));
  m.def("roll", [](const Tensor& t, const DimsArg& shifts, const DimsArg& dims) {
    return roll(t, shifts.dims, dims.dims);
  }, py::arg("input"), py::arg("shifts"), py::arg("dims") = py::none());
  m.def("topk", &topk, py::arg("input"), py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true,
        py::arg("sorted") = true);
  m.def("sort", [](const Tensor& t, int64_t dim, bool descending, bool stable) { return sort(t, dim, descending); },
        py::arg("input"), py::arg("dim") = -1, py::arg("descending") = false, py::kw_only(),
        py::arg("stable") = false);
  m.def("argsort", &argsort, py::arg("input"), py::arg("dim") = -1, py::arg("descending") = false);

  py::handle handle = m.attr("Tensor");
  add_methods(m, handle, {"transpose", "t", "narrow", "select", "expand_as", "broadcast_to", "squeeze", "unsqueeze",
                          "flatten", "unflatten", "as_strided", "diagonal", "contiguous", "clone", "split", "chunk",
                          "unbind", "index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_add",
                          "index_fill", "diag", "argwhere", "masked_select", "nonzero", "take", "tril", "triu", "repeat_interleave", "roll", "topk", "sort",
                          "argsort"});
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(handle);
  def_size_method(cls, "view", &view);
  def_size_method(cls, "reshape", &reshape);
  def_size_method(cls, "permute", &permute);
  def_size_method(cls, "expand", &expand);
  def_size_method(cls, "repeat", &repeat);
  def_size_method(cls, "flip", &flip);
  // In-place forms: self is returned (its one Python object).
  cls.def("scatter_", [](py::object self, int64_t dim, const Tensor& index, const Tensor& src) {
        scatter_(self.cast<Tensor&>(), dim, index, src);
        return self;
      }, py::arg("dim"), py::arg("index"), py::arg("src"))
      .def("scatter_", [](py::object self, int64_t dim, const Tensor& index, Scalar value) {
        scatter_(self.cast<Tensor&>(), dim, index, value);
        return self;
      }, py::arg("dim"), py::arg("index"), py::arg("value"))
      .def("scatter_add_", [](py::object self, int64_t dim, const Tensor& index, const Tensor& src) {
        scatter_add_(self.cast<Tensor&>(), dim, index, src);
        return self;
      }, py::arg("dim"), py::arg("index"), py::arg("src"))
      .def("scatter_reduce_", [](py::object self, int64_t dim, const Tensor& index, const Tensor& src,
                                 const std::string& reduce, bool include_self) {
        scatter_reduce_(self.cast<Tensor&>(), dim, index, src, reduce, include_self);
        return self;
      }, py::arg("dim"), py::arg("index"), py::arg("src"), py::arg("reduce"), py::kw_only(),
          py::arg("include_self") = true)
      .def("index_add_", [](py::object self, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
        index_add_(self.cast<Tensor&>(), dim, index, source, alpha);
        return self;
      }, py::arg("dim"), py::arg("index"), py::arg("source"), py::kw_only(), py::arg("alpha") = 1)
      .def("index_fill_", [](py::object self, int64_t dim, const Tensor& index, Scalar value) {
        index_fill_(self.cast<Tensor&>(), dim, index, value);
        return self;
      }, py::arg("dim"), py::arg("index"), py::arg("value"));
  cls.def("view_as", [](const Tensor& t, const Tensor& other) { return view(t, other.sizes()); }, py::arg("other"))
      .def("reshape_as", [](const Tensor& t, const Tensor& other) { return reshape(t, other.sizes()); },
           py::arg("other"));
}

}  // namespace mf::python
