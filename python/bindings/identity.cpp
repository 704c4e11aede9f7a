// One Python object per tensor.
//
// Note [One Python object per tensor]
// A tensor reached twice from Python is the same object, as in PyTorch:
// `m.weight is m.weight`, `p.grad is p.grad`, and an id() or an attribute
// that code keys on a parameter stays valid for as long as the tensor
// lives. The TensorImpl keeps a pointer to its Python object
// (TensorImpl::binding_object), which every cast of that tensor returns.
//
// The object holds the tensor (a Tensor handle, so a reference to the
// impl), and the pointer back is borrowed while Python code holds the
// object. When the object's last Python reference goes while something in
// C++ still holds the impl (a module's parameter slot, an autograd node, an
// optimizer), tensor_dealloc does not free the object: it revives it with
// one reference that the impl now owns, and drops the object's own handle,
// so that there is no cycle. The next cast of the tensor hands that
// reference back to Python and the object holds the tensor again; if the
// impl dies first, its destructor releases the object (under the GIL).
// A tensor that only the object holds dies with it, as before.
//
// Every step that reads or writes the pointer runs under the GIL: casts,
// tensor_dealloc, and release_object (which takes the GIL itself, since a
// tensor may die on any thread). Python subclasses of Tensor are not
// revived (their dealloc runs code of the subclass first); their objects
// still are one per tensor while they live.
#include <Python.h>

#include "bindings.h"

namespace mf::python {
namespace {

PyTypeObject* g_tensor_type = nullptr;
destructor g_base_dealloc = nullptr;

// The Tensor handle that a Tensor object holds.
Tensor& held_tensor(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  return *static_cast<Tensor*>(inst->get_value_and_holder().value_ptr());
}

bool holds_value(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  auto v_h = inst->get_value_and_holder();
  return v_h.value_ptr() != nullptr && v_h.holder_constructed();
}

extern "C" void tensor_dealloc(PyObject* self) {
  if (holds_value(self)) {
    Tensor& t = held_tensor(self);
    if (t.defined() && t.impl()->binding_object() == self) {
      if (Py_TYPE(self) == g_tensor_type && t.impl_ptr().use_count() > 1) {
        Py_SET_REFCNT(self, 1);
        t.impl()->set_binding_object(self, /*owned=*/true);
        // Dropped last: should the impl die here after all (another thread
        // let go of it meanwhile), its destructor releases `self`, which
        // then holds no tensor and is freed below in a nested call.
        Tensor dropped = std::move(t);
        return;
      }
      t.impl()->set_binding_object(nullptr, false);
    }
  }
  g_base_dealloc(self);
}

void release_object(void* object) {
  if (!Py_IsInitialized()) return;  // at exit the object is left to the interpreter
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return;
#else
  if (_Py_IsFinalizing()) return;
#endif
  py::gil_scoped_acquire gil;
  Py_DECREF(static_cast<PyObject*>(object));
}

void* copy_tensor(const void* t) { return new Tensor(*static_cast<const Tensor*>(t)); }
void* move_tensor(const void* t) { return new Tensor(std::move(*const_cast<Tensor*>(static_cast<const Tensor*>(t)))); }

const py::detail::type_info* tensor_type_info() {
  static const py::detail::type_info* info = py::detail::get_type_info(typeid(Tensor));
  return info;
}

}  // namespace

const Tensor* held_tensor_or_null(PyObject* o) {
  if (g_tensor_type == nullptr || !PyObject_TypeCheck(o, g_tensor_type) || !holds_value(o)) return nullptr;
  const Tensor& t = held_tensor(o);
  return t.defined() ? &t : nullptr;
}

py::handle tensor_object(const Tensor& t, bool move) {
  if (!t.defined()) return py::none().release();
  TensorImpl* impl = t.impl();
  if (auto* object = static_cast<PyObject*>(impl->binding_object())) {
    if (impl->owns_binding_object()) {
      // The impl's reference passes to the caller.
      held_tensor(object) = t;
      impl->set_binding_object(object, false);
      return object;
    }
    return py::handle(object).inc_ref();
  }
  py::handle h = py::detail::type_caster_generic::cast(
      &t, move ? py::return_value_policy::move : py::return_value_policy::copy, py::handle(), tensor_type_info(),
      &copy_tensor, &move_tensor);
  if (h) impl->set_binding_object(h.ptr(), false);
  return h;
}

void init_identity(py::handle tensor_class) {
  g_tensor_type = reinterpret_cast<PyTypeObject*>(tensor_class.ptr());
  g_base_dealloc = g_tensor_type->tp_dealloc;
  g_tensor_type->tp_dealloc = &tensor_dealloc;
  set_binding_release(&release_object);
}

}  // namespace mf::python
