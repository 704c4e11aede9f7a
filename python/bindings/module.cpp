// meshflow._C: the module, the error mapping, the casters shared by the
// other binding files, and the small value types (dtype, device, generator).
#include "bindings.h"
#include "meshflow/backend.h"
#include "meshflow/cpu_blas.h"
#include "meshflow/version.h"

#include <cstring>

namespace mf::python {

void init_one_embedding(py::module_& m);  // one_embedding.cpp
void init_profiler(py::module_& m);       // profiler.cpp
void init_auto_parallel(py::module_& m);  // auto_parallel.cpp
namespace {

// Set once by meshflow/__init__.py and kept for the life of the process.
PyObject* g_size_type = nullptr;
PyObject* g_values_indices_type = nullptr;

void set_type(PyObject*& slot, py::object type) {
  Py_XDECREF(slot);
  slot = type.release().ptr();
}

py::handle registered_type(PyObject* slot, const char* what) {
  MF_CHECK(slot != nullptr, Error, "meshflow._C: ", what,
           " is not set; import the meshflow package rather than meshflow._C");
  return slot;
}

py::dict stats_dict(const AllocatorStats& s) {
  py::dict d;
  d["allocated_bytes"] = s.allocated_bytes;
  d["peak_allocated_bytes"] = s.peak_allocated_bytes;
  d["reserved_bytes"] = s.reserved_bytes;
  d["num_allocations"] = s.num_allocations;
  d["num_cache_hits"] = s.num_cache_hits;
  return d;
}

std::string device_repr(const Device& d) {
  if (d.is_cpu()) return "device(type='cpu')";
  return "device(type='" + std::string(device_type_name(d.type())) + "', index=" + std::to_string(d.index()) + ")";
}

// Note [Python exception classes]: each mf error class has a Python class in
// meshflow.errors. TypeError, IndexError, ValueError and NotImplementedError
// derive from the builtin of that name *and* from meshflow.errors.Error, a
// RuntimeError, so
// code written for PyTorch (which raises RuntimeError for most bad
// arguments) and code that expects the precise class both catch them.
struct ErrorClasses {
  PyObject* error;
  PyObject* shape;
  PyObject* type;
  PyObject* index;
  PyObject* value;
  PyObject* not_implemented;
  PyObject* distributed;
  PyObject* out_of_memory;
  PyObject* checkpoint;
  PyObject* linalg;
};
ErrorClasses g_errors{};

PyObject* new_error_class(py::module_& m, const char* name, const char* doc, py::tuple bases) {
  const std::string qualified = std::string("meshflow.errors.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.attr(name) = py::reinterpret_borrow<py::object>(cls);
  return cls;  // the reference is kept for the life of the process
}

void init_errors(py::module_& parent) {
  py::module_ m = parent.def_submodule("_errors", "exception classes of meshflow (see meshflow.errors)");
  auto base = [](PyObject* cls) { return py::reinterpret_borrow<py::object>(cls); };
  g_errors.error = new_error_class(m, "Error", "Base of every meshflow error; a RuntimeError.",
                                   py::make_tuple(base(PyExc_RuntimeError)));
  g_errors.shape = new_error_class(m, "ShapeError", "Shapes that do not fit together.",
                                   py::make_tuple(base(g_errors.error)));
  g_errors.type = new_error_class(m, "TypeError", "A dtype an op does not support, or a wrong argument type.",
                                  py::make_tuple(base(PyExc_TypeError), base(g_errors.error)));
  g_errors.index = new_error_class(m, "IndexError", "A dimension or index out of range.",
                                   py::make_tuple(base(PyExc_IndexError), base(g_errors.error)));
  g_errors.value = new_error_class(m, "ValueError", "An argument value that is not allowed.",
                                   py::make_tuple(base(PyExc_ValueError), base(g_errors.error)));
  g_errors.not_implemented =
      new_error_class(m, "NotImplementedError", "A mode or case an op does not implement.",
                      py::make_tuple(base(PyExc_NotImplementedError), base(g_errors.error)));
  g_errors.distributed = new_error_class(m, "DistributedError", "A failure between processes.",
                                         py::make_tuple(base(g_errors.error)));
  g_errors.out_of_memory = new_error_class(m, "OutOfMemoryError", "An allocation the device cannot serve.",
                                           py::make_tuple(base(g_errors.error)));
  g_errors.checkpoint = new_error_class(m, "CheckpointError", "A recomputed forward that differs from the first.",
                                        py::make_tuple(base(g_errors.error)));
  g_errors.linalg = new_error_class(m, "LinAlgError", "A matrix that is singular, not positive-definite, or on "
                                    "which a decomposition did not converge.", py::make_tuple(base(g_errors.error)));
}

void translate_error(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const TypeError& e) {
    PyErr_SetString(g_errors.type, e.what());
  } catch (const IndexError& e) {
    PyErr_SetString(g_errors.index, e.what());
  } catch (const ValueError& e) {
    PyErr_SetString(g_errors.value, e.what());
  } catch (const NotImplementedError& e) {
    PyErr_SetString(g_errors.not_implemented, e.what());
  } catch (const ShapeError& e) {
    PyErr_SetString(g_errors.shape, e.what());
  } catch (const DistributedError& e) {
    PyErr_SetString(g_errors.distributed, e.what());
  } catch (const OutOfMemoryError& e) {
    PyErr_SetString(g_errors.out_of_memory, e.what());
  } catch (const CheckpointError& e) {
    PyErr_SetString(g_errors.checkpoint, e.what());
  } catch (const LinAlgError& e) {
    PyErr_SetString(g_errors.linalg, e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_errors.error, e.what());
  } catch (const std::bad_alloc& e) {
    // Host memory for a kernel's own scratch or a container ran out.
    PyErr_SetString(g_errors.out_of_memory, "CPU out of memory: a host allocation failed (std::bad_alloc)");
  }
}

}  // namespace

py::handle size_type() { return registered_type(g_size_type, "the Size type"); }
py::handle values_indices_type() { return registered_type(g_values_indices_type, "the (values, indices) type"); }

std::string public_type_name(PyObject* o) {
  const char* name = Py_TYPE(o)->tp_name;  // "module.Qualname" or a builtin's "name"
  const std::string_view text(name);
  const size_t dot = text.rfind('.');
  if (text.rfind("meshflow.", 0) == 0 && dot != std::string_view::npos) return std::string(text.substr(dot + 1));
  return std::string(text);
}

Shape shape_from_args(const py::args& args, const char* op) {
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) {
    py::detail::make_caster<Shape> sequence;
    MF_CHECK(sequence.load(args[0], true), TypeError, op, ": size must be a sequence of ints or ints, got ",
             public_type_name(args[0].ptr()));
    return py::detail::cast_op<Shape&&>(std::move(sequence));
  }
  Shape shape;
  shape.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    py::detail::make_caster<int64_t> value;
    MF_CHECK(value.load(args[i], true), TypeError, op, ": size must be ints, got ",
             public_type_name(args[i].ptr()), " at position ", i);
    shape.push_back(py::detail::cast_op<int64_t>(value));
  }
  return shape;
}

Tensor wrap_scalar(const Tensor& like, Scalar s) { return scalar_tensor(s, result_type(like, s), like.device()); }

py::tuple to_tuple(const TensorList& tensors) {
  py::tuple out(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) out[i] = py::cast(tensors[i]);
  return out;
}

void add_methods(py::module_& m, py::handle tensor_class, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    py::object function = m.attr(name);
    py::object method = py::reinterpret_steal<py::object>(PyInstanceMethod_New(function.ptr()));
    if (!method) throw py::error_already_set();
    py::setattr(tensor_class, name, method);
  }
}

void init_types(py::module_& m) {
  auto dtype = py::enum_<DType>(m, "dtype", "The element type of a tensor (meshflow.float32, ...).");
  for (int i = 0; i < kNumDTypes; ++i) {
    DType d = DType(i);
    dtype.value(dtype_name(d), d);
    m.attr(dtype_name(d)) = d;
  }
  dtype.attr("__repr__") =
      py::cpp_function([](DType d) { return "meshflow." + std::string(dtype_name(d)); }, py::name("__repr__"),
                       py::is_method(dtype));
  dtype.attr("__str__") = dtype.attr("__repr__");
  dtype.def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); })
      .def_property_readonly("is_signed", [](DType d) { return d != DType::Bool && d != DType::UInt8; })
      .def_property_readonly("itemsize", [](DType d) { return itemsize(d); });
  m.def("get_default_dtype", &default_dtype);
  m.def("set_default_dtype", &set_default_dtype, py::arg("d"));
  m.def("promote_types", &promote_types, py::arg("type1"), py::arg("type2"));

  py::class_<Device>(m, "device", "Where a tensor lives: meshflow.device('cpu').")
      .def(py::init<const std::string&>(), py::arg("type"))
      .def(py::init([](const std::string& type, int index) { return Device(type + ":" + std::to_string(index)); }),
           py::arg("type"), py::arg("index"))
      .def_property_readonly("type", [](const Device& d) { return device_type_name(d.type()); })
      .def_property_readonly("index", &Device::index)
      .def("__repr__", &device_repr)
      .def("__str__", &Device::str)
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const Device& d) { return py::hash(py::str(d.str())); });
  py::implicitly_convertible<std::string, Device>();

  init_identity(py::class_<Tensor>(m, "Tensor", "A strided n-dimensional array with autograd (see meshflow.tensor)."));

  py::class_<Generator>(m, "Generator", "The counter-based (Philox) random generator.")
      .def(py::init([](const Device& device) {
        MF_CHECK(device.is_cpu(), ValueError, "Generator: only cpu generators exist, got device ", device.str());
        return new Generator();
      }), py::arg("device") = Device())
      .def("manual_seed", [](py::object self, uint64_t seed) {
        self.cast<Generator&>().manual_seed(seed);
        return self;
      }, py::arg("seed"))
      .def("initial_seed", &Generator::seed)
      .def("get_state", [](const Generator& g) { return py::make_tuple(g.seed(), g.offset()); })
      .def("set_state", [](Generator& g, std::pair<uint64_t, uint64_t> s) { g.set_state(s.first, s.second); },
           py::arg("state"));
  m.attr("default_generator") = py::cast(&default_generator(), py::return_value_policy::reference);
  m.def("manual_seed", [](uint64_t seed) {
    manual_seed(seed);
    return py::cast(&default_generator(), py::return_value_policy::reference);
  }, py::arg("seed"));
  m.def("initial_seed", [] { return default_generator().seed(); });

  m.attr("_version") = version();
  m.attr("_git_revision") = git_revision();
  m.def("_build_info", [] {
    py::dict info;
    for (const auto& [name, value] : build_info()) info[py::str(name)] = value;
    return info;
  });
  m.def("get_num_threads", &get_num_threads);
  m.def("set_num_threads", &set_num_threads, py::arg("num"));

  m.def("is_grad_enabled", &GradMode::is_enabled);
  m.def("_set_grad_enabled", &GradMode::set_enabled, py::arg("mode"));

  m.def("memory_stats", [](const Device& d) { return stats_dict(memory_stats(d)); }, py::arg("device") = Device());
  m.def("memory_allocated", [](const Device& d) { return memory_stats(d).allocated_bytes; },
        py::arg("device") = Device());
  m.def("max_memory_allocated", [](const Device& d) { return memory_stats(d).peak_allocated_bytes; },
        py::arg("device") = Device());
  m.def("memory_reserved", [](const Device& d) { return memory_stats(d).reserved_bytes; },
        py::arg("device") = Device());
  m.def("reset_peak_memory_stats", &reset_peak_memory_stats, py::arg("device") = Device());
  m.def("empty_cache", &empty_cache, py::arg("device") = Device());

  // The CPU's GEMM libraries (Note [Choosing a GEMM library]): what
  // meshflow.backends.cpu and meshflow.backends.mkl read.
  m.def("_preferred_blas_library", [](const std::optional<std::string>& name) {
    if (name) cpu::set_preferred_blas_library(cpu::parse_blas_library(*name));
    return std::string(cpu::blas_library_name(cpu::preferred_blas_library()));
  }, py::arg("name") = py::none());
  m.def("_blas_choices", [] {
    py::list out;
    for (const cpu::BlasChoice& c : cpu::blas_choices()) {
      py::dict d, seconds;
      d["dtype"] = std::string(dtype_name(c.dtype));
      d["batch"] = c.batch;
      d["n"] = c.n;
      d["m"] = c.m;
      d["k"] = c.k;
      d["a_transposed"] = c.a_transposed;
      d["b_transposed"] = c.b_transposed;
      d["threads"] = c.threads;
      d["library"] = std::string(cpu::blas_library_name(c.library));
      for (const auto& [library, s] : c.seconds) seconds[py::str(cpu::blas_library_name(library))] = s;
      d["seconds"] = seconds;
      out.append(d);
    }
    return out;
  });
  m.def("_clear_blas_choices", &cpu::clear_blas_choices);
  m.def("_mkl_available", &cpu::mkl_available);
  m.def("_mkl_version", &cpu::mkl_version);
  m.def("_mkl_search_report", &cpu::mkl_search_report);

  // Device backends (Note [Device backends]): what meshflow.cuda and
  // meshflow.backends read.
  auto device_type = [](const std::string& name) { return Device(name).type(); };
  m.def("_backend_built", [=](const std::string& type) { return has_backend(device_type(type)); }, py::arg("type"));
  m.def("_device_count", [=](const std::string& type) {
    const DeviceType t = device_type(type);
    return has_backend(t) ? get_backend(t).device_count() : 0;
  }, py::arg("type"));
  // Note [Emulated device]: for tests on a machine without a GPU.
  m.def("_emulate_cuda", &emulate_cuda, py::arg("devices") = 2);
  m.def("_check_device", [](const Device& d, const std::string& op) { check_device(d, op.c_str()); },
        py::arg("device"), py::arg("op"));
  m.def("_device_properties", [](const Device& d) {
    check_device(d, "get_device_properties");
    const DeviceProperties p = get_backend(d.type()).properties(d.index());
    return py::dict(py::arg("name") = p.name, py::arg("total_memory") = p.total_memory, py::arg("major") = p.major,
                    py::arg("minor") = p.minor, py::arg("multi_processor_count") = p.multi_processor_count);
  }, py::arg("device"));
  m.def("_memory_info", [](const Device& d) {
    check_device(d, "mem_get_info");
    return get_backend(d.type()).memory_info(d.index());
  }, py::arg("device"));
  m.def("_synchronize", [](const Device& d) { get_backend(d.type()).synchronize(d.index()); }, py::arg("device"));
  m.def("_op_coverage", [] {
    const auto missing = OpRegistry::instance().validate();
    py::dict out;
    for (int type = 0; type < kNumDeviceTypes; ++type) out[device_type_name(DeviceType(type))] = missing[size_t(type)];
    return out;
  });
  py::class_<Stream>(m, "_Stream")
      .def(py::init([](const Device& d) {
        check_device(d, "Stream");
        return get_backend(d.type()).create_stream(d.index());
      }), py::arg("device"))
      .def_static("current", [](const Device& d) { return get_backend(d.type()).current_stream(d.index()); })
      .def_static("default", [](const Device& d) { return Stream{d, 0}; })
      .def_property_readonly("device", [](const Stream& s) { return s.device; })
      .def_property_readonly("stream_id", [](const Stream& s) { return s.id; })
      .def("set_current", [](const Stream& s) { get_backend(s.device.type()).set_current_stream(s); })
      .def("synchronize", [](const Stream& s) { get_backend(s.device.type()).synchronize_stream(s); })
      .def("__eq__", [](const Stream& a, const Stream& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const Stream& s) { return py::hash(py::make_tuple(s.device.str(), s.id)); });
  py::class_<DeviceEvent>(m, "_Event")
      .def(py::init([](const Device& d, bool timing) {
        check_device(d, "Event");
        return get_backend(d.type()).create_event(d.index(), timing);
      }), py::arg("device"), py::arg("enable_timing"))
      .def("record", &DeviceEvent::record, py::arg("stream"))
      .def("block", &DeviceEvent::block, py::arg("stream"))
      .def("query", &DeviceEvent::query)
      .def("synchronize", &DeviceEvent::synchronize)
      .def("elapsed_ms", &DeviceEvent::elapsed_ms, py::arg("end"));

  m.def("_set_size_type", [](py::object t) { set_type(g_size_type, std::move(t)); });
  m.def("_set_values_indices_type", [](py::object t) { set_type(g_values_indices_type, std::move(t)); });
}

}  // namespace mf::python

namespace pybind11::detail {

bool type_caster<mf::Scalar>::load(handle src, bool convert) {
  PyObject* o = src.ptr();
  if (PyBool_Check(o)) {
    value = mf::Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) return false;
    value = mf::Scalar(int64_t(v));
    return true;
  }
  if (PyFloat_Check(o)) {
    value = mf::Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  if (!convert) return false;
  if (std::strcmp(Py_TYPE(o)->tp_name, "numpy.bool_") == 0) {
    value = mf::Scalar(PyObject_IsTrue(o) == 1);
    return true;
  }
  if (isinstance<mf::Tensor>(src)) {
    const auto& t = src.cast<const mf::Tensor&>();
    if (t.numel() != 1) return false;
    value = t.item();
    return true;
  }
  if (PyIndex_Check(o)) {
    object index = reinterpret_steal<object>(PyNumber_Index(o));
    if (index) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
      if (overflow != 0) return false;
      value = mf::Scalar(int64_t(v));
      return true;
    }
    PyErr_Clear();  // a float that also defines __index__ (a 0-d float tensor of another library)
  }
  if (Py_TYPE(o)->tp_as_number && Py_TYPE(o)->tp_as_number->nb_float) {
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    value = mf::Scalar(v);
    return true;
  }
  return false;
}

bool type_caster<mf::python::DimsArg>::load(handle src, bool convert) {
  value.dims.clear();
  if (src.is_none()) return true;
  if (PyBool_Check(src.ptr())) return false;
  if (PyLong_Check(src.ptr()) || (convert && PyIndex_Check(src.ptr()))) {
    make_caster<int64_t> dim;
    if (!dim.load(src, convert)) return false;
    value.dims.push_back(cast_op<int64_t>(dim));
    return true;
  }
  make_caster<mf::Shape> dims;
  if (!dims.load(src, convert)) return false;
  value.dims = cast_op<mf::Shape&&>(std::move(dims));
  return true;
}

bool type_caster<mf::python::PairArg>::load(handle src, bool convert) {
  value.values.clear();
  if (PyBool_Check(src.ptr()) || src.is_none()) return false;
  if (PyLong_Check(src.ptr()) || (convert && PyIndex_Check(src.ptr()))) {
    make_caster<int64_t> v;
    if (!v.load(src, convert)) return false;
    value.values = {cast_op<int64_t>(v), cast_op<int64_t>(v)};
    return true;
  }
  make_caster<mf::Shape> values;
  if (!values.load(src, convert)) return false;
  value.values = cast_op<mf::Shape&&>(std::move(values));
  return true;
}

}  // namespace pybind11::detail

PYBIND11_MODULE(_C, m) {
  using namespace mf::python;
  m.doc() = "meshflow C++ core (use the meshflow package)";
  init_errors(m);
  py::register_exception_translator(&translate_error);
  init_types(m);
  init_tensor(m);
  init_interop(m);
  init_autograd(m);
  init_creation(m);
  init_elementwise(m);
  init_operators(m);
  init_reduce(m);
  init_shape(m);
  init_linalg(m);
  init_nn(m);
  init_io(m);
  init_optim(m);
  init_nn_module(m);
  init_global(m);
  init_data(m);
  init_distributed(m);
  init_graph(m);
  init_one_embedding(m);
  init_profiler(m);
  init_auto_parallel(m);
  init_amp(m);
  install_fast_calls(m.attr("Tensor"));  // last: it wraps what the others defined
}
