// Direct CPython entry points for the Tensor operators and methods called
// most often from Python.
//
// Note [Fast calls]
// A pybind11 call builds a function_call (two heap vectors), tries each
// overload in turn, and loads every argument through its type caster: for
// `a + b` on small tensors that was about a quarter of the time. The hottest
// entries of Tensor (the arithmetic and comparison operators and the unary
// math methods) are replaced, at import, by method descriptors of plain
// C functions with METH_FASTCALL. Each handles the argument types of the
// common call (a Tensor, or a Python bool, int or float, which the pybind11
// overloads read as a Scalar the same way) and hands every other call, with
// its arguments unchanged, to the pybind11 function it replaced. So calls
// with NumPy operands, None or keywords, calls that pybind11 answers with
// NotImplemented (foreign types), and the error messages all behave as they
// did. Results are the tensor's one Python object (Note [One Python object
// per tensor]) and C++ exceptions are translated by pybind11's translators,
// so a fast call is indistinguishable from the call it replaces.
#include <Python.h>

#include <array>
#include <deque>
#include <string>
#include <utility>

#include "bindings.h"

namespace mf::python {
namespace {

using TensorFn = Tensor (*)(const Tensor&, const Tensor&);
using ScalarFn = Tensor (*)(const Tensor&, Scalar);
using InplaceTensorFn = void (*)(Tensor&, const Tensor&);
using InplaceScalarFn = void (*)(Tensor&, Scalar);
using UnaryFn = Tensor (*)(const Tensor&);

enum class Kind { Binary, Inplace, Unary };

struct Entry {
  std::string name;
  Kind kind = Kind::Unary;
  TensorFn tensor = nullptr;  // null: Tensor operands take the fallback
  ScalarFn scalar = nullptr;
  InplaceTensorFn inplace_tensor = nullptr;
  InplaceScalarFn inplace_scalar = nullptr;
  UnaryFn unary = nullptr;
  PyObject* fallback = nullptr;  // the replaced attribute (a strong reference, kept for the process)
};

constexpr size_t kMaxEntries = 128;
std::array<Entry, kMaxEntries> g_entries;
size_t g_count = 0;
std::array<PyMethodDef, kMaxEntries> g_defs{};
std::deque<std::string> g_docs;  // ml_doc must outlive the type

Entry& next_entry(const char* name, Kind kind) {
  if (g_count == kMaxEntries) throw std::logic_error("fast_calls: too many entries");
  Entry& e = g_entries[g_count++];
  e.name = name;
  e.kind = kind;
  return e;
}

// The C++ exception being handled as a Python error, the way pybind11's
// dispatcher raises it.
PyObject* raise_current() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (...) {
    auto& local = py::detail::get_local_internals().registered_exception_translators;
    if (py::detail::apply_exception_translators(local)) return nullptr;
    auto& global = py::detail::get_internals().registered_exception_translators;
    if (py::detail::apply_exception_translators(global)) return nullptr;
    PyErr_SetString(PyExc_SystemError, "meshflow: an exception escaped the exception translators");
    return nullptr;
  }
}

// The number argument of a binary operator, read as type_caster<Scalar>
// reads it before any conversion: false for other types and for ints
// outside int64 (the fallback reports those).
bool plain_scalar(PyObject* o, Scalar& out) {
  if (PyBool_Check(o)) {
    out = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    out = Scalar(int64_t(v));
    return true;
  }
  if (PyFloat_Check(o)) {
    out = Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  return false;
}

PyObject* call_fallback(const Entry& e, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                        PyObject* kwnames) {
  // fallback(self, *args, **kwargs): the replaced attribute, called unbound.
  constexpr Py_ssize_t kStack = 8;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw + 1 > kStack) {
    py::tuple positional(nargs + 1);
    positional[0] = py::reinterpret_borrow<py::object>(self);
    for (Py_ssize_t i = 0; i < nargs; ++i) positional[size_t(i + 1)] = py::reinterpret_borrow<py::object>(args[i]);
    py::dict kwargs;
    for (Py_ssize_t i = 0; i < nkw; ++i)
      kwargs[PyTuple_GET_ITEM(kwnames, i)] = py::reinterpret_borrow<py::object>(args[nargs + i]);
    return PyObject_Call(e.fallback, positional.ptr(), kwargs.ptr());
  }
  PyObject* stack[kStack];
  stack[0] = self;
  for (Py_ssize_t i = 0; i < nargs + nkw; ++i) stack[i + 1] = args[i];
  return PyObject_Vectorcall(e.fallback, stack, size_t(nargs + 1), kwnames);
}

template <size_t I>
PyObject* fast_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Entry& e = g_entries[I];
  const Tensor* a = held_tensor_or_null(self);
  if (a == nullptr || kwnames != nullptr || nargs != (e.kind == Kind::Unary ? 0 : 1))
    return call_fallback(e, self, args, nargs, kwnames);
  try {
    switch (e.kind) {
      case Kind::Unary:
        return tensor_object(e.unary(*a), true).ptr();
      case Kind::Binary: {
        Scalar s;
        if (const Tensor* b = held_tensor_or_null(args[0]); b != nullptr && e.tensor != nullptr)
          return tensor_object(e.tensor(*a, *b), true).ptr();
        if (e.scalar != nullptr && plain_scalar(args[0], s)) return tensor_object(e.scalar(*a, s), true).ptr();
        break;
      }
      case Kind::Inplace: {
        Scalar s;
        Tensor& target = const_cast<Tensor&>(*a);
        if (const Tensor* b = held_tensor_or_null(args[0]); b != nullptr && e.inplace_tensor != nullptr) {
          e.inplace_tensor(target, *b);
          return Py_NewRef(self);
        }
        if (e.inplace_scalar != nullptr && plain_scalar(args[0], s)) {
          e.inplace_scalar(target, s);
          return Py_NewRef(self);
        }
        break;
      }
    }
  } catch (...) {
    return raise_current();
  }
  return call_fallback(e, self, args, nargs, kwnames);
}

template <size_t... I>
constexpr std::array<PyCFunctionWithKeywords, sizeof...(I)> make_table(std::index_sequence<I...>) {
  return {reinterpret_cast<PyCFunctionWithKeywords>(reinterpret_cast<void (*)()>(&fast_call<I>))...};
}
const auto g_functions = make_table(std::make_index_sequence<kMaxEntries>{});

}  // namespace

void fast_binary(const char* name, TensorFn tensor, ScalarFn scalar) {
  Entry& e = next_entry(name, Kind::Binary);
  e.tensor = tensor;
  e.scalar = scalar;
}

void fast_inplace(const char* name, InplaceTensorFn tensor, InplaceScalarFn scalar) {
  Entry& e = next_entry(name, Kind::Inplace);
  e.inplace_tensor = tensor;
  e.inplace_scalar = scalar;
}

void fast_unary(const char* name, UnaryFn f) {
  Entry& e = next_entry(name, Kind::Unary);
  e.unary = f;
}

void install_fast_calls(py::handle tensor_class) {
  auto* type = reinterpret_cast<PyTypeObject*>(tensor_class.ptr());
  for (size_t i = 0; i < g_count; ++i) {
    Entry& e = g_entries[i];
    if (!py::hasattr(tensor_class, e.name.c_str())) continue;  // a module function only
    py::object current = tensor_class.attr(py::str(e.name));
    e.fallback = current.release().ptr();
    py::object doc = py::getattr(py::reinterpret_borrow<py::object>(e.fallback), "__doc__", py::none());
    g_docs.push_back(doc.is_none() ? std::string() : doc.cast<std::string>());
    PyMethodDef& def = g_defs[i];
    def.ml_name = e.name.c_str();
    def.ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(g_functions[i]));
    def.ml_flags = METH_FASTCALL | METH_KEYWORDS;
    def.ml_doc = g_docs.back().empty() ? nullptr : g_docs.back().c_str();
    py::object descriptor = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, &def));
    if (!descriptor) throw py::error_already_set();
    py::setattr(tensor_class, e.name.c_str(), descriptor);
  }
}

}  // namespace mf::python
