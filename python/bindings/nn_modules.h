// Shared by the nn.Module binding files.
#pragma once

#include <memory>
#include <optional>

#include "bindings.h"
#include "meshflow/nn.h"

namespace mf::python {

// A handle that keeps a Python object alive while a C++ parent holds the
// module it wraps (Note [Modules across C++ and Python]).
std::shared_ptr<void> python_owner(py::handle obj);
// The Python object of a child: the one registered from Python, or the
// object made for the C++ module when it was first reached (and kept).
py::object module_object(const nn::Module::Child& child);

// copy.deepcopy of a module, for each bound module class M. The copy is an
// object of self's Python type (a subclass too) holding a shallow copy of
// self's M (its fields), whose tensors, children and Python attributes
// deepcopy_entries then replaces by deep copies, sharing memo, so that tied
// tensors and shared children stay shared in the copy as in PyTorch.
py::object new_instance_of(py::handle self);
void deepcopy_entries(py::handle self, py::handle copy, py::dict memo);

template <typename M>
py::object deepcopy_module(py::handle self, py::dict memo) {
  const M& src = self.cast<const M&>();
  MF_CHECK(typeid(src) == typeid(M), TypeError, "deepcopy: a ", src.type_name(), " bound as ", typeid(M).name(),
           " has no copy");
  std::shared_ptr<M> held = nn::Module::shallow_copy(src);
  py::object copy = new_instance_of(self);
  auto* inst = reinterpret_cast<py::detail::instance*>(copy.ptr());
  auto v_h = inst->get_value_and_holder(py::detail::get_type_info(typeid(M)));
  v_h.value_ptr() = held.get();
  v_h.type->init_instance(inst, &held);
  deepcopy_entries(self, copy, memo);
  return copy;
}

// The class of a bound layer: attributes allowed, and its own copy.deepcopy.
template <typename M>
using Class = py::class_<M, nn::Module, std::shared_ptr<M>>;

template <typename M>
Class<M> layer(py::module_& m, const char* name, const char* doc = "") {
  Class<M> cls(m, name, py::dynamic_attr(), doc);
  cls.def("__deepcopy__", &deepcopy_module<M>, py::arg("memo"));
  return cls;
}
// The same for a layer derived from another bound layer.
template <typename M, typename Base>
py::class_<M, Base, std::shared_ptr<M>> sublayer(py::module_& m, const char* name) {
  py::class_<M, Base, std::shared_ptr<M>> cls(m, name, py::dynamic_attr());
  cls.def("__deepcopy__", &deepcopy_module<M>, py::arg("memo"));
  return cls;
}

// torch.nn layers take device= and dtype= factory arguments.
template <typename M>
std::shared_ptr<M> made(std::shared_ptr<M> m, const std::optional<Device>& device, std::optional<DType> dtype) {
  if (dtype) m->to(*dtype);
  if (device) m->to(*device);  // a device that is not there: check_device's error
  return m;
}

void init_nn_layers(py::module_& m);
// The recurrent layers and cells (nn_rnn.cpp).
void init_nn_rnn(py::module_& m);
// The Transformer family (nn_transformer.cpp).
void init_nn_transformer(py::module_& m);
// Conv3d, ConvTranspose1d/2d/3d, AdaptiveMaxPool1d/2d (nn_conv_layers.cpp).
void bind_conv_layers(py::module_& m);

}  // namespace mf::python
