// Tensors from Python data, NumPy arrays (shared memory both ways) and
// DLPack capsules (torch.from_dlpack / meshflow.from_dlpack).
#include <pybind11/numpy.h>

#include "bindings.h"

namespace mf::python {
namespace {

// --- DLPack (https://dmlc.github.io/dlpack/latest/c_api.html), ABI v0.8 ----------
constexpr int32_t kDLCPU = 1;
enum DLTypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// Bytes spanned by a strided layout: last element's offset plus one element.
size_t span_bytes(const Shape& shape, const Shape& strides, size_t item) {
  int64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return 0;
    last += (shape[i] - 1) * strides[i];
  }
  return size_t(last + 1) * item;
}

// Drops the reference an external storage holds on a Python object.
void release_python_owner(void* owner) {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  Py_DECREF(static_cast<PyObject*>(owner));
}

DType dtype_from_numpy(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  MF_CHECK(dt.attr("byteorder").cast<std::string>() != ">", TypeError,
           "from_numpy: big-endian arrays are not supported; convert with arr.astype(arr.dtype.newbyteorder('='))");
  if (kind == 'b') return DType::Bool;
  if (kind == 'u' && size == 1) return DType::UInt8;
  if (kind == 'i' && size == 1) return DType::Int8;
  if (kind == 'i' && size == 2) return DType::Int16;
  if (kind == 'i' && size == 4) return DType::Int32;
  if (kind == 'i' && size == 8) return DType::Int64;
  if (kind == 'f' && size == 2) return DType::Float16;
  if (kind == 'f' && size == 4) return DType::Float32;
  if (kind == 'f' && size == 8) return DType::Float64;
  throw TypeError(detail::concat("from_numpy: can't convert np.ndarray of type numpy.",
                                 dt.attr("name").cast<std::string>(),
                                 "; the supported types are float64, float32, float16, int64, int32, int16, int8, "
                                 "uint8 and bool"));
}

py::array to_numpy(const Tensor& t, bool force) {
  MF_CHECK(force || !t.requires_grad(), Error,
           "Tensor.numpy: can't call numpy() on a tensor that requires grad; use tensor.detach().numpy() instead");
  check_host_data(t, "Tensor.numpy");
  MF_CHECK(t.dtype() != DType::BFloat16, TypeError,
           "Tensor.numpy: NumPy has no bfloat16; convert first, e.g. tensor.float().numpy()");
  const auto item = ssize_t(t.element_size());
  std::vector<ssize_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<ssize_t> strides;
  for (int64_t s : t.strides()) strides.push_back(ssize_t(s) * item);
  // The array's base keeps the tensor (and so its storage) alive.
  py::capsule owner(new Tensor(t.detach()), [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(py::dtype(dtype_name(t.dtype())), shape, strides, t.data_ptr(), owner);
}

DLDataType dl_dtype(DType d) {
  const auto bits = uint8_t(itemsize(d) * 8);
  if (d == DType::Bool) return {kDLBool, 8, 1};
  if (d == DType::UInt8) return {kDLUInt, bits, 1};
  if (d == DType::BFloat16) return {kDLBfloat, 16, 1};
  return {is_floating(d) ? uint8_t(kDLFloat) : uint8_t(kDLInt), bits, 1};
}

DType dtype_from_dl(DLDataType t) {
  MF_CHECK(t.lanes == 1, TypeError, "from_dlpack: vector types (lanes = ", t.lanes, ") are not supported");
  switch (t.code) {
    case kDLBool: if (t.bits == 8) return DType::Bool; break;
    case kDLUInt: if (t.bits == 8) return DType::UInt8; break;
    case kDLInt:
      if (t.bits == 8) return DType::Int8;
      if (t.bits == 16) return DType::Int16;
      if (t.bits == 32) return DType::Int32;
      if (t.bits == 64) return DType::Int64;
      break;
    case kDLFloat:
      if (t.bits == 16) return DType::Float16;
      if (t.bits == 32) return DType::Float32;
      if (t.bits == 64) return DType::Float64;
      break;
    case kDLBfloat: if (t.bits == 16) return DType::BFloat16; break;
    default: break;
  }
  throw TypeError(detail::concat("from_dlpack: unsupported DLPack type (code ", int(t.code), ", bits ",
                                 int(t.bits), ")"));
}

struct ExportedTensor {
  Tensor tensor;
  Shape shape;
  Shape strides;
  DLManagedTensor managed;
};

void delete_capsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "used_dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    return;
  }
  if (managed->deleter) managed->deleter(managed);
}

py::capsule to_dlpack(const Tensor& t) {
  MF_CHECK(!t.requires_grad(), Error,
           "Tensor.__dlpack__: can't export a tensor that requires grad; use tensor.detach()");
  MF_CHECK(t.device().is_cpu(), Error, "Tensor.__dlpack__: only CPU tensors can be exported, got ", t.device());
  auto* e = new ExportedTensor{t.detach(), t.sizes(), t.strides(), {}};
  e->managed.dl_tensor = DLTensor{t.data_ptr(), {kDLCPU, 0}, int32_t(t.dim()), dl_dtype(t.dtype()),
                                  e->shape.data(), e->strides.data(), 0};
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<ExportedTensor*>(m->manager_ctx); };
  PyObject* capsule = PyCapsule_New(&e->managed, "dltensor", &delete_capsule);
  if (capsule == nullptr) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

void call_dl_deleter(void* managed) {
  auto* m = static_cast<DLManagedTensor*>(managed);
  if (m->deleter) m->deleter(m);
}

Tensor from_dlpack(py::object source) {
  py::object capsule = source;
  if (!PyCapsule_CheckExact(source.ptr())) {
    MF_CHECK(py::hasattr(source, "__dlpack__"), TypeError,
             "from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got ",
             public_type_name(source.ptr()));
    capsule = source.attr("__dlpack__")();
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    throw ValueError("from_dlpack: the capsule is not a DLPack tensor or was already consumed");
  }
  const DLTensor& dl = managed->dl_tensor;
  MF_CHECK(dl.device.device_type == kDLCPU, Error,
           "from_dlpack: only CPU tensors can be imported, got DLPack device type ", dl.device.device_type);
  const DType dtype = dtype_from_dl(dl.dtype);
  Shape shape(dl.shape, dl.shape + dl.ndim);
  Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : contiguous_strides(shape);
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  const size_t nbytes = span_bytes(shape, strides, itemsize(dtype));
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  auto storage = std::make_shared<StorageImpl>(data, nbytes, Device(), &call_dl_deleter, managed);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), std::move(shape), std::move(strides), 0, dtype));
}

// --- nested Python data --------------------------------------------------------------

bool is_sequence(py::handle o) {
  if (py::isinstance<Tensor>(o)) return o.cast<const Tensor&>().dim() > 0;
  if (PyUnicode_Check(o.ptr()) || PyBytes_Check(o.ptr())) return false;
  if (py::isinstance<py::array>(o)) return py::reinterpret_borrow<py::array>(o).ndim() > 0;
  return PySequence_Check(o.ptr()) != 0;
}

Scalar element_value(py::handle o) {
  if (py::isinstance<Tensor>(o)) return o.cast<const Tensor&>().item();
  py::detail::make_caster<Scalar> number;
  MF_CHECK(number.load(o, true), TypeError, "tensor: could not convert an element of type ",
           public_type_name(o.ptr()), " (expected a number, a sequence, a numpy array or a tensor)");
  return py::detail::cast_op<Scalar>(number);
}

// PyTorch's inferred dtype of one element: a NumPy scalar or a tensor keeps
// its dtype; Python numbers give bool, int64 or the default dtype.
DType element_dtype(py::handle o, const Scalar& v) {
  if (py::isinstance<Tensor>(o)) return o.cast<const Tensor&>().dtype();
  if (py::hasattr(o, "dtype") && py::isinstance<py::dtype>(o.attr("dtype")))
    return dtype_from_numpy(py::reinterpret_borrow<py::dtype>(o.attr("dtype")));
  return v.is_floating() ? default_dtype() : v.default_dtype();
}

struct NestedData {
  Shape shape;
  std::vector<Scalar> values;
  std::optional<DType> dtype;  // promoted over the elements

  void collect(py::handle o, size_t dim) {
    if (dim == shape.size()) {
      MF_CHECK(!is_sequence(o), ValueError, "tensor: expected a number at dim ", dim,
               " but got a sequence (the nested lists are ragged)");
      Scalar v = element_value(o);
      const DType d = element_dtype(o, v);
      dtype = dtype ? promote_types(*dtype, d) : d;
      values.push_back(v);
      return;
    }
    MF_CHECK(is_sequence(o), ValueError, "tensor: expected a sequence of length ", shape[dim], " at dim ", dim,
             " but got ", public_type_name(o.ptr()));
    const Py_ssize_t n = PySequence_Size(o.ptr());
    if (n < 0) throw py::error_already_set();
    MF_CHECK(n == shape[dim], ValueError, "tensor: expected sequence of length ", shape[dim], " at dim ", dim,
             " (got ", n, ")");
    for (Py_ssize_t i = 0; i < n; ++i) {
      py::object item = py::reinterpret_steal<py::object>(PySequence_GetItem(o.ptr(), i));
      if (!item) throw py::error_already_set();
      collect(item, dim + 1);
    }
  }
};

Tensor copy_tensor(const Tensor& t, std::optional<DType> dtype) {
  Tensor source = t.detach();
  if (dtype && *dtype != source.dtype()) return contiguous(cast(source, *dtype));
  return clone(source);
}

}  // namespace

Tensor tensor_from_numpy(py::handle h) {
  MF_CHECK(py::isinstance<py::array>(h), TypeError, "from_numpy: expected np.ndarray, got ", public_type_name(h.ptr()));
  auto array = py::reinterpret_borrow<py::array>(h);
  const DType dtype = dtype_from_numpy(array.dtype());
  const auto item = array.itemsize();
  Shape shape, strides;
  for (py::ssize_t i = 0; i < array.ndim(); ++i) {
    MF_CHECK(array.strides(i) >= 0, ValueError,
             "from_numpy: arrays with negative strides are not supported; use arr.copy() first");
    MF_CHECK(array.strides(i) % item == 0, ValueError, "from_numpy: stride ", array.strides(i),
             " of dim ", i, " is not a multiple of the element size ", item);
    shape.push_back(array.shape(i));
    strides.push_back(array.strides(i) / item);
  }
  const size_t nbytes = span_bytes(shape, strides, size_t(item));
  PyObject* owner = array.ptr();
  Py_INCREF(owner);
  auto storage = std::make_shared<StorageImpl>(const_cast<void*>(array.data()), nbytes, Device(),
                                               &release_python_owner, owner);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), std::move(shape), std::move(strides), 0, dtype));
}

Tensor tensor_from_data(py::handle data, std::optional<DType> dtype) {
  if (py::isinstance<Tensor>(data)) return copy_tensor(data.cast<const Tensor&>(), dtype);
  if (py::isinstance<py::array>(data)) return copy_tensor(tensor_from_numpy(data), dtype);
  NestedData nested;
  for (py::object o = py::reinterpret_borrow<py::object>(data); is_sequence(o);) {
    const Py_ssize_t n = PySequence_Size(o.ptr());
    if (n < 0) throw py::error_already_set();
    nested.shape.push_back(n);
    if (n == 0) break;
    o = py::reinterpret_steal<py::object>(PySequence_GetItem(o.ptr(), 0));
    if (!o) throw py::error_already_set();
  }
  nested.values.reserve(size_t(shape_numel(nested.shape)));
  nested.collect(data, 0);
  const DType out_dtype = dtype.value_or(nested.dtype.value_or(default_dtype()));
  Tensor out = empty(nested.shape, {.dtype = out_dtype, .device = Device()});
  dispatch_dtype(out_dtype, [&]<typename T>() {
    T* p = static_cast<T*>(out.data_ptr());
    for (size_t i = 0; i < nested.values.size(); ++i) p[i] = nested.values[i].template to<T>();
  });
  return out;
}

void init_interop(py::module_& m) {
  // pybind11 2.10 looks NumPy's C API up in a function-local static on first
  // use (py::isinstance<py::array>, reached by meshflow.tensor on any data).
  // The lookup imports NumPy, which lets other threads take the GIL; a second
  // thread reaching the static then blocks on its guard while holding the
  // GIL, and both hang (DataLoader worker threads did). Looking it up here,
  // at import, leaves nothing to race for. Without NumPy the lookup fails
  // and is retried on use, as before.
  try {
    py::detail::npy_api::get();
  } catch (const py::error_already_set&) {
  }
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def("numpy", [](const Tensor& t, bool force) { return to_numpy(t, force); }, py::kw_only(),
          py::arg("force") = false)
      .def("__array__", [](const Tensor& t, py::object dtype) {
        py::object a = to_numpy(t, false);
        return dtype.is_none() ? a : a.attr("astype")(dtype, py::arg("copy") = false);
      }, py::arg("dtype") = py::none())
      .def("__dlpack__", [](const Tensor& t, py::object stream) { return to_dlpack(t); },
           py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const Tensor& t) {
        MF_CHECK(t.device().is_cpu(), Error, "Tensor.__dlpack_device__: only CPU tensors can be exported");
        return py::make_tuple(kDLCPU, 0);
      });
  cls.attr("__array_priority__") = 1000;

  m.def("from_numpy", &tensor_from_numpy, py::arg("ndarray"));
  m.def("from_dlpack", &from_dlpack, py::arg("ext_tensor"));
  m.def("to_dlpack", &to_dlpack, py::arg("tensor"));
  m.def("tensor", [](py::handle data, std::optional<DType> dtype, std::optional<Device> device, bool requires_grad) {
    Tensor t = tensor_from_data(data, dtype);
    if (device) t = to(t, *device);  // a device that is not there: check_device's error
    if (requires_grad) t.requires_grad_(true);
    return t;
  }, py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false);
  // GCC 12 reports the std::optional<DType> that pybind11's argument caster
  // holds as maybe used uninitialized when the lambda copies it: a false
  // positive (the caster sets it before the call), silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
  m.def("as_tensor", [](py::handle data, std::optional<DType> dtype, std::optional<Device> device) {
    Tensor t;
    if (py::isinstance<Tensor>(data)) {
      t = data.cast<const Tensor&>();
      if (dtype) t = to(t, *dtype);
    } else if (py::isinstance<py::array>(data)) {
      t = tensor_from_numpy(data);
      if (dtype) t = to(t, *dtype);
    } else {
      t = tensor_from_data(data, dtype);
    }
    return device ? to(t, *device) : t;  // the same tensor when it is there already
  }, py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
#pragma GCC diagnostic pop
}

}  // namespace mf::python
