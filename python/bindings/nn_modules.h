// Shared by the nn.Module binding files.
#pragma once

#include <memory>

#include "bindings.h"
#include "meshflow/nn.h"

namespace mf::python {

// A handle that keeps a Python object alive while a C++ parent holds the
// module it wraps (Note [Modules across C++ and Python]).
std::shared_ptr<void> python_owner(py::handle obj);
// The Python object of a child: the one registered from Python, or a
// wrapper of the C++ module.
py::object module_object(const nn::Module::Child& child);

void init_nn_layers(py::module_& m);

}  // namespace mf::python
