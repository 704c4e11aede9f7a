// mf.Tensor: metadata, conversions, Python protocols and indexing.
#include <cmath>
#include <cstring>
#include <functional>
#include <string_view>

#include "bindings.h"
#include "meshflow/distributed/global.h"
#include "meshflow/graph/trace.h"

namespace mf::python {

void check_host_data(const Tensor& t, const char* op) {
  MF_CHECK(!t.is_global(), Error, op,
           ": a global tensor holds no data of its own; use to_local() for this rank's shard, or "
           "to_global(sbp=broadcast).to_local() for the whole value");
  graph::check_traceable(t, op);
  MF_CHECK(t.device().is_cpu() && t.storage()->has_data(), Error, op,
           ": the tensor has no host data (it is on ", t.device(), " or is a traced graph tensor)");
}

namespace {

py::object size_of(const Shape& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return size_type()(t);
}

// Tensor.to: casts on the CPU side of a copy between devices.
Tensor convert(const Tensor& t, std::optional<Device> device, std::optional<DType> dtype, bool non_blocking,
               bool copy) {
  Tensor out = t;
  const bool cast_first = device && !device->is_cpu();
  if (dtype && cast_first) out = to(out, *dtype);
  if (device) out = to(out, *device, non_blocking);
  if (dtype && !cast_first) out = to(out, *dtype);
  if (copy && out.is_same(t)) out = clone(t);
  return out;
}


py::object tolist(const Tensor& t) {
  // A device tensor's values come through a host copy, as in PyTorch.
  if (!t.is_global() && !t.device().is_cpu() && t.storage()->has_data()) return tolist(to(t.detach(), Device()));
  check_host_data(t, "Tensor.tolist");
  return dispatch_dtype(t.dtype(), [&]<typename T>() -> py::object {
    const T* base = static_cast<const T*>(t.data_ptr());
    std::function<py::object(int64_t, int64_t)> visit = [&](int64_t dim, int64_t offset) -> py::object {
      if (dim == t.dim()) {
        const T v = base[offset];
        if constexpr (std::is_same_v<T, bool>) return py::bool_(v);
        else if constexpr (is_floating_type_v<T>) return py::float_(double(acc_type<T>(v)));
        else return py::int_(int64_t(v));
      }
      const int64_t n = t.sizes()[size_t(dim)];
      py::list out{size_t(n)};
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = visit(dim + 1, offset + i * t.strides()[size_t(dim)]);
      return out;
    };
    return visit(0, 0);
  });
}

Scalar one_element(const Tensor& t, const char* what) {
  MF_CHECK(t.numel() == 1, Error, what);
  return t.item();
}

Slice to_slice(py::handle h) {
  auto bound = [](py::handle v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    py::detail::make_caster<int64_t> i;
    MF_CHECK(i.load(v, true), TypeError, "index: slice indices must be integers or None, got ",
             public_type_name(v.ptr()));
    return py::detail::cast_op<int64_t>(i);
  };
  Slice s{bound(h.attr("start")), bound(h.attr("stop")), 1};
  if (auto step = bound(h.attr("step"))) s.step = *step;
  return s;
}

void add_index(std::vector<TensorIndex>& out, py::handle h) {
  PyObject* o = h.ptr();
  if (o == Py_None) {
    out.emplace_back(NewAxis{});
  } else if (o == Py_Ellipsis) {
    out.emplace_back(Ellipsis{});
  } else if (PyBool_Check(o)) {
    out.emplace_back(scalar_tensor(Scalar(o == Py_True)));
  } else if (PyLong_Check(o)) {
    out.emplace_back(h.cast<int64_t>());
  } else if (PySlice_Check(o)) {
    out.emplace_back(to_slice(h));
  } else if (py::isinstance<Tensor>(h)) {
    out.emplace_back(h.cast<Tensor>());
  } else if (PyIndex_Check(o) && !PySequence_Check(o)) {  // NumPy integers
    out.emplace_back(h.cast<int64_t>());
  } else if (PySequence_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o)) {  // lists, NumPy arrays
    out.emplace_back(PySequence_Size(o) == 0 ? empty({0}, {.dtype = DType::Int64, .device = Device()})
                                             : tensor_from_data(h, std::nullopt));
  } else {
    throw TypeError(detail::concat(
        "index: only integers, slices (`:`), ellipsis (`...`), None, bools and integer or bool tensors "
        "are valid indices, got ", public_type_name(o)));
  }
}

void set_item(Tensor self, py::handle index, py::handle value) {
  std::vector<TensorIndex> indices = to_indices(index);
  if (py::isinstance<Tensor>(value)) {
    index_put_(self, indices, value.cast<Tensor>());
    return;
  }
  py::detail::make_caster<Scalar> number;
  if (number.load(value, true)) {
    index_put_(self, indices, py::detail::cast_op<Scalar>(number));
    return;
  }
  index_put_(self, indices, tensor_from_data(value, self.dtype()));
}

// round(t) and round(t, n): PyTorch's torch.round(t, decimals=n), halves to
// even; integers are returned unchanged for n >= 0.
Tensor round_digits(const Tensor& t, std::optional<int64_t> ndigits) {
  if (!ndigits || *ndigits == 0) return round(t);
  MF_CHECK(is_floating(t.dtype()), TypeError, "round: decimals are supported for floating-point tensors, got ",
           dtype_name(t.dtype()));
  MF_CHECK(*ndigits > -400 && *ndigits < 400, ValueError, "round: ndigits must be in (-400, 400), got ", *ndigits);
  const double scale = std::pow(10.0, double(*ndigits));
  return div(round(mul(t, scale)), scale);
}

// Note [Tensor pickle]: a tensor pickles as its raw little-endian bytes, its
// dtype's name, its shape and requires_grad, rebuilt by _rebuild_tensor, which
// checks that the bytes fit the shape exactly. Loading runs no other code than
// that function, so a pickle from a stranger cannot make a tensor over memory
// it does not own.
py::tuple reduce_tensor(const Tensor& t, int /*protocol*/) {
  check_host_data(t, "pickle");
  const Tensor c = contiguous(t.detach());
  const auto nbytes = size_t(c.numel()) * c.element_size();
  py::bytes data(nbytes ? static_cast<const char*>(c.data_ptr()) : "", nbytes);
  py::tuple shape(size_t(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) shape[size_t(d)] = py::int_(t.size(d));
  return py::make_tuple(py::module_::import("meshflow").attr("_rebuild_tensor"),
                        py::make_tuple(data, dtype_name(t.dtype()), shape, t.requires_grad()));
}

Tensor rebuild_tensor(const py::bytes& data, const std::string& dtype_text, const Shape& shape, bool requires_grad) {
  const DType dtype = dtype_from_name(dtype_text);
  const int64_t nbytes = checked_nbytes(shape, dtype, "unpickle");
  const std::string_view bytes = data;
  MF_CHECK(int64_t(bytes.size()) == nbytes, ValueError, "unpickle: a ", dtype_name(dtype), " tensor of shape ",
           shape_str(shape), " needs ", nbytes, " bytes, the pickle holds ", bytes.size());
  if (dtype == DType::Bool)
    for (size_t i = 0; i < bytes.size(); ++i)
      MF_CHECK(static_cast<unsigned char>(bytes[i]) <= 1, ValueError, "unpickle: bool element ", i, " is byte ",
               int(static_cast<unsigned char>(bytes[i])), ", not 0 or 1");
  Tensor t = make_empty(shape, dtype);
  if (nbytes) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  if (requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

std::vector<TensorIndex> to_indices(py::handle index) {
  std::vector<TensorIndex> out;
  if (PyTuple_Check(index.ptr())) {
    for (py::handle h : py::reinterpret_borrow<py::tuple>(index)) add_index(out, h);
  } else {
    add_index(out, index);
  }
  return out;
}

void init_tensor(py::module_& m) {
  m.def("_rebuild_tensor", &rebuild_tensor, py::arg("data"), py::arg("dtype"), py::arg("shape"),
        py::arg("requires_grad"));
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def_property_readonly("shape", [](const Tensor& t) { return size_of(t.sizes()); })
      .def("size", [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
        return dim ? py::int_(t.size(*dim)) : size_of(t.sizes());
      }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
        return dim ? py::object(py::int_(t.stride(*dim))) : py::object(py::tuple(py::cast(t.strides())));
      }, py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def("ndimension", &Tensor::dim)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("is_cpu", [](const Tensor& t) { return t.device().is_cpu(); })
      .def_property_readonly("is_cuda", [](const Tensor& t) { return t.device().type() == DeviceType::CUDA; })
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def("element_size", &Tensor::element_size)
      .def_property_readonly("itemsize", &Tensor::element_size)
      .def_property_readonly("nbytes", [](const Tensor& t) { return t.numel() * int64_t(t.element_size()); })
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      // The identity of the tensor itself (its impl), stable while it lives.
      .def_property_readonly("_impl_id", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl()); })
      .def_property_readonly("_version", &Tensor::version)
      .def_property_readonly("T", [](const Tensor& t) {
        Shape dims(size_t(t.dim()));
        for (int64_t i = 0; i < t.dim(); ++i) dims[size_t(i)] = t.dim() - 1 - i;
        return permute(t, dims);
      })
      .def_property_readonly("mT", [](const Tensor& t) { return transpose(t, -2, -1); })
      // `p.data = t` (PyTorch): p keeps its identity (optimizers and modules
      // hold it) and takes t's data, shape and dtype.
      .def_property("data", &Tensor::detach, [](const Tensor& t, const Tensor& src) {
        MF_CHECK(src.defined(), TypeError, "Tensor.data: expected a Tensor");
        t.set_data(src);
      })
      .def("__round__", [](const Tensor& t, std::optional<int64_t> ndigits) { return round_digits(t, ndigits); },
           py::arg("ndigits") = py::none())
      .def("__reduce_ex__", &reduce_tensor)
      .def("item", [](const Tensor& t) {
        // A global tensor's value is gathered first (collective: every rank
        // of the placement calls item(), as every rank computes the loss).
        if (!t.is_global()) return t.item();
        NoGradGuard no_grad;
        const Placement& p = placement_of(t);
        Tensor whole = global_to_local(global_to_global(t.detach(), p, NdSbp(size_t(p.ndim()), Sbp::broadcast())));
        MF_CHECK(whole.defined(), ValueError, "item: this rank is not in the tensor's ", p.str());
        return whole.item();
      })
      .def("tolist", &tolist)
      .def("__repr__", [](const Tensor& t) {
        // PyTorch prints a parameter with this heading
        const bool parameter = t.defined() && t.impl()->is_parameter();
        return (parameter ? std::string("Parameter containing:\n") : std::string()) + t.to_string();
      })
      .def("__len__", [](const Tensor& t) {
        MF_CHECK(t.dim() > 0, TypeError, "len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__iter__", [](const Tensor& t) {
        MF_CHECK(t.dim() > 0, TypeError, "iteration over a 0-d tensor");
        return py::iter(to_tuple(unbind(t, 0)));
      })
      .def("__bool__", [](const Tensor& t) {
        return one_element(t, "Boolean value of Tensor with more than one value is ambiguous").to_bool();
      })
      .def("__float__", [](const Tensor& t) { return t.item().to_double(); })
      .def("__int__", [](const Tensor& t) { return t.item().to_int(); })
      .def("__index__", [](const Tensor& t) {
        MF_CHECK(is_integral(t.dtype()) && t.numel() == 1, TypeError,
                 "only integer tensors of a single element can be converted to an index");
        return t.item().to_int();
      })
      .def("__hash__", [](py::handle self) { return py::int_(reinterpret_cast<uintptr_t>(self.ptr()) >> 4); })
      .def("__contains__", [](const Tensor& t, const Tensor& element) { return any(eq(t, element)).item<bool>(); })
      .def("__contains__", [](const Tensor& t, Scalar element) { return any(eq(t, element)).item<bool>(); })
      .def("__getitem__", [](const Tensor& t, py::handle index) { return mf::index(t, to_indices(index)); })
      .def("__setitem__", &set_item)
      .def("index_put_", [](py::object self, const TensorList& indices, const Tensor& values, bool accumulate) {
        std::vector<TensorIndex> entries(indices.begin(), indices.end());
        Tensor t = self.cast<Tensor>();
        index_put_(t, entries, values, accumulate);
        return self;
      }, py::arg("indices"), py::arg("values"), py::arg("accumulate") = false)
      .def("index_put", [](const Tensor& t, const TensorList& indices, const Tensor& values, bool accumulate) {
        std::vector<TensorIndex> entries(indices.begin(), indices.end());
        Tensor out = clone(t);
        return index_put_(out, entries, values, accumulate);
      }, py::arg("indices"), py::arg("values"), py::arg("accumulate") = false)
      .def("to", [](const Tensor& t, DType dtype, bool non_blocking, bool copy) {
        return convert(t, std::nullopt, dtype, non_blocking, copy);
      }, py::arg("dtype"), py::arg("non_blocking") = false, py::arg("copy") = false)
      // A device named by a string is parsed here, so that a bad name is the
      // device's ValueError, not a failed overload match.
      .def("to", [](const Tensor& t, const std::string& device, std::optional<DType> dtype, bool non_blocking,
                    bool copy) { return convert(t, Device(device), dtype, non_blocking, copy); },
           py::arg("device"), py::arg("dtype") = py::none(), py::arg("non_blocking") = false,
           py::arg("copy") = false)
      .def("to", [](const Tensor& t, std::optional<Device> device, std::optional<DType> dtype, bool non_blocking,
                    bool copy) { return convert(t, device, dtype, non_blocking, copy); },
           py::arg("device") = py::none(), py::arg("dtype") = py::none(), py::arg("non_blocking") = false,
           py::arg("copy") = false)
      .def("to", [](const Tensor& t, const Tensor& other, bool non_blocking, bool copy) {
        return convert(t, other.device(), other.dtype(), non_blocking, copy);
      }, py::arg("other"), py::arg("non_blocking") = false, py::arg("copy") = false)
      .def("type_as", [](const Tensor& t, const Tensor& other) { return to(t, other.dtype()); }, py::arg("other"))
      .def("cpu", [](const Tensor& t) { return to(t, Device()); })
      .def("cuda", [](const Tensor& t, py::object device, bool non_blocking) {
        Device d(DeviceType::CUDA, 0);
        if (py::isinstance<py::int_>(device)) d = Device(DeviceType::CUDA, device.cast<int>());
        else if (!device.is_none()) d = device.cast<Device>();
        MF_CHECK(d.type() == DeviceType::CUDA, ValueError, "Tensor.cuda: expected a cuda device, got ", d);
        return to(t, d, non_blocking);
      }, py::arg("device") = py::none(), py::arg("non_blocking") = false)
      .def("pin_memory", [](const Tensor& t) { return pin_memory(t); })
      .def("is_pinned", [](const Tensor& t) { return !t.is_global() && t.is_pinned(); })
      .def("float", [](const Tensor& t) { return to(t, DType::Float32); })
      .def("double", [](const Tensor& t) { return to(t, DType::Float64); })
      .def("half", [](const Tensor& t) { return to(t, DType::Float16); })
      .def("bfloat16", [](const Tensor& t) { return to(t, DType::BFloat16); })
      .def("long", [](const Tensor& t) { return to(t, DType::Int64); })
      .def("int", [](const Tensor& t) { return to(t, DType::Int32); })
      .def("short", [](const Tensor& t) { return to(t, DType::Int16); })
      .def("char", [](const Tensor& t) { return to(t, DType::Int8); })
      .def("byte", [](const Tensor& t) { return to(t, DType::UInt8); })
      .def("bool", [](const Tensor& t) { return to(t, DType::Bool); });
}

}  // namespace mf::python
