// Checkpoints (include/meshflow/io.h): safetensors files of named tensors,
// and state trees as Python None/bool/int/float/str/Tensor/list/dict.
#include "bindings.h"
#include "meshflow/io.h"

namespace mf::python {
namespace {

io::Value to_value(py::handle o, int depth) {
  PyObject* p = o.ptr();
  if (o.is_none()) return {};
  if (PyBool_Check(p)) return io::Value(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    MF_CHECK(overflow == 0, ValueError, "save: the integer ", py::str(o).cast<std::string>(),
             " does not fit in int64");
    return io::Value(int64_t(v));
  }
  if (PyFloat_Check(p)) return io::Value(PyFloat_AS_DOUBLE(p));
  if (PyUnicode_Check(p)) return io::Value(o.cast<std::string>());
  if (py::isinstance<Tensor>(o)) return io::Value(o.cast<Tensor>());
  const bool nested = PyDict_Check(p) || PyList_Check(p) || PyTuple_Check(p);
  MF_CHECK(!nested || depth < io::kMaxValueDepth, ValueError, "save: lists and dicts are nested deeper than ",
           io::kMaxValueDepth, " levels (is a list inside itself?)");
  if (PyDict_Check(p)) {
    io::Value::Map map;
    for (auto [key, value] : py::reinterpret_borrow<py::dict>(o)) {
      // int keys (an optimizer state dict's parameter indices) are stored as their text
      const bool int_key = PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr());
      MF_CHECK(PyUnicode_Check(key.ptr()) || int_key, TypeError, "save: dict keys must be str or int, got ",
               public_type_name(key.ptr()));
      map.emplace(int_key ? std::to_string(key.cast<int64_t>()) : key.cast<std::string>(), to_value(value, depth + 1));
    }
    return io::Value(std::move(map));
  }
  if (PyList_Check(p) || PyTuple_Check(p)) {
    io::Value::List list;
    for (py::handle item : o) list.push_back(to_value(item, depth + 1));
    return io::Value(std::move(list));
  }
  py::detail::make_caster<Scalar> number;  // NumPy scalars
  if (number.load(o, true)) {
    const Scalar s = py::detail::cast_op<Scalar>(number);
    return s.is_bool() ? io::Value(s.to_bool()) : s.is_integral() ? io::Value(s.to_int()) : io::Value(s.to_double());
  }
  throw TypeError(detail::concat("save: can't store an object of type ", public_type_name(p),
                                 " (store None, bool, int, float, str, Tensor, list, tuple or dict)"));
}

py::object from_value(const io::Value& v) {
  switch (v.kind()) {
    case io::Value::Kind::None: return py::none();
    case io::Value::Kind::Bool: return py::bool_(v.as_bool());
    case io::Value::Kind::Int: return py::int_(v.as_int());
    case io::Value::Kind::Double: return py::float_(v.as_double());
    case io::Value::Kind::String: return py::str(v.as_string());
    case io::Value::Kind::Tensor: return py::cast(v.as_tensor());
    case io::Value::Kind::List: {
      py::list out;
      for (const io::Value& item : v.as_list()) out.append(from_value(item));
      return out;
    }
    case io::Value::Kind::Map: {
      py::dict out;
      for (const auto& [key, item] : v.as_map()) out[py::str(key)] = from_value(item);
      return out;
    }
  }
  throw Error("load: unknown value kind");
}

}  // namespace

void init_io(py::module_& parent) {
  py::module_ m = parent.def_submodule("_io", "checkpoints (see meshflow.io)");
  m.def("save_file", &io::save_file, py::arg("tensors"), py::arg("filename"), py::arg("metadata"));
  m.def("load_file", &io::load_file, py::arg("filename"), py::arg("verify") = true);
  m.def("save", [](py::handle obj, const std::string& path) { io::save(to_value(obj, 0), path); }, py::arg("obj"),
        py::arg("f"));
  py::class_<io::SafetensorsReader>(m, "SafetensorsReader")
      .def(py::init<const std::string&, bool>(), py::arg("filename"), py::arg("verify") = true)
      .def("tensors", &io::SafetensorsReader::tensors)
      .def("metadata", &io::SafetensorsReader::metadata)
      .def("read_box",
           [](const io::SafetensorsReader& r, const std::string& name, const Shape& offsets, const Shape& sizes,
              Tensor dst, size_t buffer_bytes) {
             py::gil_scoped_release release;
             return r.read_box(name, offsets, sizes, dst, buffer_bytes);
           },
           py::arg("name"), py::arg("offsets"), py::arg("sizes"), py::arg("dst"), py::arg("buffer_bytes"));
  m.def("load", [](const std::string& path, bool verify) { return from_value(io::load(path, verify)); },
        py::arg("f"), py::arg("verify") = true);
}

}  // namespace mf::python
