// nn.Module for Python: attribute registration, __call__ with hooks, the
// traversals and state dicts, over mf::nn::Module (see Note [Modules across
// C++ and Python] in meshflow/nn/module.h).
#include "nn_modules.h"

#include <map>
#include <unordered_set>
#include <vector>

namespace mf::python {
namespace {

using nn::Module;
using nn::ModulePtr;

// A Python callable registered as a hook; released under the GIL. It is a
// C++ hook too, so that a C++ layer calling its child (MultiheadAttention's
// out_proj, TransformerEncoderLayer's norm1, ...) runs it; a call from
// Python passes the whole argument tuple instead (see call()).
template <typename Base>
struct PyHook : Base {
  explicit PyHook(py::object f) : callable(std::move(f)) {}
  ~PyHook() override {
    py::gil_scoped_acquire gil;
    callable = py::object();
  }
  py::object callable;
};
using PyForwardHook = PyHook<nn::ForwardHook>;
using PyForwardPreHook = PyHook<nn::ForwardPreHook>;

// A hook's return value as the tensor that replaces the input or output
// (undefined: keep it); a tuple stands for its first element.
Tensor hook_result(const py::object& result) {
  if (result.is_none()) return Tensor();
  if (py::isinstance<py::tuple>(result)) return py::tuple(result)[0].cast<Tensor>();
  return result.cast<Tensor>();
}

// What register_*_hook returns (PyTorch's RemovableHandle).
struct HookHandle {
  std::weak_ptr<Module> module;
  int id;
  void remove() {
    if (auto m = module.lock()) m->remove_hook(id);
  }
};

py::object g_incompatible_keys;  // collections.namedtuple, made once

std::string py_type_name(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

Tensor& as_tensor(py::handle h) { return h.cast<Tensor&>(); }

// The C++ module of a Python object. A subclass whose __init__ has not yet
// called Module.__init__() has none.
// (Checked before casting: a cast would hand out uninitialised memory.)
Module& module_of(py::handle self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  if (!inst->get_value_and_holder().holder_constructed()) {
    throw py::attribute_error("cannot use the attributes of a '" + py_type_name(self) +
                              "' before its Module.__init__() call");
  }
  return self.cast<Module&>();
}

py::list names_list(const std::vector<std::string>& names) {
  py::list out;
  for (const auto& n : names) out.append(n);
  return out;
}

// The children that are set, each module once (as Module::named_children).
std::vector<const nn::Module::Child*> distinct_children(const Module& m) {
  std::vector<const nn::Module::Child*> out;
  std::unordered_set<const Module*> seen;
  for (const auto& c : m.own_children()) {
    if (c.module && seen.insert(c.module.get()).second) out.push_back(&c);
  }
  return out;
}

py::object named_tensors_iter(const nn::NamedTensors& entries) {
  py::list out;
  for (const auto& [name, t] : entries) out.append(py::make_tuple(name, t));
  return py::iter(out);
}

py::object tensors_iter(const TensorList& tensors) {
  py::list out;
  for (const auto& t : tensors) out.append(t);
  return py::iter(out);
}

void set_attr(py::object self, const std::string& name, py::object value) {
  Module& m = module_of(self);
  py::dict dict = py::reinterpret_borrow<py::dict>(PyObject_GenericGetDict(self.ptr(), nullptr));
  Py_DECREF(dict.ptr());  // GenericGetDict returned a new reference; borrow keeps one
  if (py::isinstance<Tensor>(value) && as_tensor(value).impl()->is_parameter()) {
    if (dict.contains(name.c_str())) PyDict_DelItemString(dict.ptr(), name.c_str());
    m.register_parameter(name, as_tensor(value), false);
    return;
  }
  if (py::isinstance<Module>(value)) {
    if (dict.contains(name.c_str())) PyDict_DelItemString(dict.ptr(), name.c_str());
    ModulePtr child = value.cast<ModulePtr>();
    m.register_module(name, child, python_owner(value));
    return;
  }
  if (m.has_parameter(name)) {
    MF_CHECK(value.is_none(), TypeError, "cannot assign '", py_type_name(value), "' as parameter '", name,
             "' (meshflow.nn.Parameter or None expected)");
    m.register_parameter(name, Tensor(), false);
    return;
  }
  if (m.has_buffer(name)) {
    MF_CHECK(value.is_none() || py::isinstance<Tensor>(value), TypeError, "cannot assign '", py_type_name(value),
             "' as buffer '", name, "' (meshflow.Tensor or None expected)");
    bool persistent = true;
    for (const auto& b : m.own_buffers()) {
      if (b.name == name) persistent = b.persistent;
    }
    m.register_buffer(name, value.is_none() ? Tensor() : as_tensor(value), persistent);
    return;
  }
  if (m.has_child(name)) {
    MF_CHECK(value.is_none(), TypeError, "cannot assign '", py_type_name(value), "' as child module '", name,
             "' (meshflow.nn.Module or None expected)");
    m.register_module<Module>(name, nullptr);
    return;
  }
  if (PyObject_GenericSetAttr(self.ptr(), py::str(name).ptr(), value.ptr()) != 0) throw py::error_already_set();
}

py::object get_attr(py::handle self, const std::string& name) {
  const Module& m = module_of(self);
  for (const auto& [n, t] : m.own_parameters()) {
    if (n == name) return py::cast(t);
  }
  for (const auto& b : m.own_buffers()) {
    if (b.name == name) return py::cast(b.tensor);
  }
  for (const auto& c : m.own_children()) {
    if (c.name == name) return module_object(c);
  }
  throw py::attribute_error("'" + py_type_name(self) + "' object has no attribute '" + name + "'");
}

void del_attr(py::object self, const std::string& name) {
  Module& m = module_of(self);
  if (m.has_child(name) || m.has_parameter(name) || m.has_buffer(name)) {
    // PyTorch removes the entry; a layer's own slot stays as None (module.h).
    m.unregister(name);
    return;
  }
  if (PyObject_GenericSetAttr(self.ptr(), py::str(name).ptr(), nullptr) != 0) throw py::error_already_set();
}

// Note [Global module hooks]: torch.nn.modules.module's
// register_module_forward_pre_hook / register_module_forward_hook add hooks
// that every module call from Python runs, before the module's own. They
// are Python callables kept here, in registration order; a module called
// from C++ by its parent runs neither these nor its Python hooks.
struct GlobalHook {
  int id;
  py::object fn;
  bool always_call;
};
struct GlobalHooks {
  std::vector<GlobalHook> pre, post;
  int next_id = 0;
};
GlobalHooks& global_hooks() {
  static auto* hooks = new GlobalHooks();  // never destroyed: its objects outlive the interpreter otherwise
  return *hooks;
}

// forward pre-hooks, forward, forward hooks (global ones first; Python and
// C++ ones).
py::object call(py::object self, py::args args, py::kwargs kwargs) {
  Module& m = self.cast<Module&>();
  const GlobalHooks& global = global_hooks();
  const bool any_global = !global.pre.empty() || !global.post.empty();
  if (m.forward_hooks().empty() && m.forward_pre_hooks().empty() && !any_global) {
    return self.attr("forward")(*args, **kwargs);
  }
  py::tuple inputs = args;
  auto take_inputs = [&inputs](const py::object& result) {
    if (!result.is_none()) inputs = py::isinstance<py::tuple>(result) ? py::tuple(result) : py::make_tuple(result);
  };
  for (const GlobalHook& hook : std::vector(global.pre)) take_inputs(hook.fn(self, inputs));
  for (const auto& [id, hook] : std::vector(m.forward_pre_hooks())) {
    py::object result = py::none();
    if (auto* h = dynamic_cast<PyForwardPreHook*>(hook.get())) {
      result = h->callable(self, inputs);
    } else if (auto* c = dynamic_cast<nn::ForwardPreHook*>(hook.get()); c && inputs.size() == 1) {
      result = py::cast(c->fn(m, inputs[0].cast<Tensor>()));
    }
    take_inputs(result);
  }
  py::object out;
  try {
    out = self.attr("forward")(*inputs, **kwargs);
  } catch (...) {
    // always_call hooks run before the exception propagates (PyTorch's option).
    for (const GlobalHook& hook : std::vector(global.post))
      if (hook.always_call) hook.fn(self, inputs, py::none());
    for (const auto& [id, hook] : std::vector(m.forward_hooks())) {
      auto* h = dynamic_cast<PyForwardHook*>(hook.get());
      if (h && h->always_call) h->callable(self, inputs, py::none());
      else if (auto* c = dynamic_cast<nn::ForwardHook*>(hook.get()); c && c->always_call && inputs.size() == 1)
        c->fn(m, inputs[0].cast<Tensor>(), Tensor());
    }
    throw;
  }
  for (const GlobalHook& hook : std::vector(global.post)) {
    py::object result = hook.fn(self, inputs, out);
    if (!result.is_none()) out = result;
  }
  for (const auto& [id, hook] : std::vector(m.forward_hooks())) {
    py::object result = py::none();
    if (auto* h = dynamic_cast<PyForwardHook*>(hook.get())) {
      result = h->callable(self, inputs, out);
    } else if (auto* c = dynamic_cast<nn::ForwardHook*>(hook.get()); c && inputs.size() == 1) {
      result = py::cast(c->fn(m, inputs[0].cast<Tensor>(), out.cast<Tensor>()));
    }
    if (!result.is_none()) out = result;
  }
  return out;
}

// PyTorch's named_modules over the modules' objects: this module first,
// then each child's, depth first; memo holds the modules already listed
// (not updated without remove_duplicate, as in PyTorch).
void collect_modules(py::handle self, py::set memo, const std::string& prefix, bool remove_duplicate,
                     py::list& out) {
  if (memo.contains(self)) return;
  if (remove_duplicate) memo.add(self);
  out.append(py::make_tuple(prefix, self));
  for (const auto& c : module_of(self).own_children()) {
    if (!c.module) continue;
    collect_modules(module_object(c), memo, prefix.empty() ? c.name : prefix + "." + c.name, remove_duplicate, out);
  }
}

std::string repr(py::handle self) {
  const Module& m = self.cast<const Module&>();
  std::string extra = py::str(self.attr("extra_repr")());
  std::vector<std::string> lines;
  size_t start = 0;
  while (!extra.empty() && start <= extra.size()) {
    size_t nl = extra.find('\n', start);
    lines.push_back(extra.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  for (const auto& c : m.own_children()) {
    std::string child = c.module ? std::string(py::repr(module_object(c))) : "None";
    std::string indented;
    for (char ch : child) {
      indented += ch;
      if (ch == '\n') indented += "  ";
    }
    lines.push_back("(" + c.name + "): " + indented);
  }
  // A C++ layer's own class prints its type name (MultiheadAttention's
  // out_proj is a "NonDynamicallyQuantizableLinear", as in PyTorch); a
  // Python subclass prints its class name.
  const auto* bound = py::detail::get_type_info(typeid(m));
  const bool own_class = bound && py::handle(reinterpret_cast<PyObject*>(bound->type)).is(py::type::of(self));
  std::string out = (own_class ? m.type_name() : py_type_name(self)) + "(";
  if (lines.size() == 1 && m.own_children().empty()) return out + lines[0] + ")";
  if (!lines.empty()) {
    for (const auto& line : lines) out += "\n  " + line;
    out += "\n";
  }
  return out + ")";
}

py::object state_dict(py::handle self, py::object destination, const std::string& prefix, bool keep_vars) {
  const Module& m = self.cast<const Module&>();
  py::object out = destination.is_none() ? py::module_::import("collections").attr("OrderedDict")() : destination;
  std::string pre = prefix;
  if (!pre.empty() && pre.back() == '.') pre.pop_back();
  if (keep_vars) {
    // The tensors themselves: parameters keep requires_grad.
    std::string dotted = pre.empty() ? "" : pre + ".";
    for (const auto& [name, t] : m.named_parameters(true)) out[py::str(dotted + name)] = t;
    for (const auto& [name, t] : m.state_dict()) {
      if (!out.contains(py::str(dotted + name))) out[py::str(dotted + name)] = t;
    }
    return out;
  }
  for (const auto& [name, t] : m.state_dict(pre)) out[py::str(name)] = t;
  return out;
}

py::object load_state_dict(py::handle self, py::handle state, bool strict) {
  Module& m = self.cast<Module&>();
  m.set_type_name(py_type_name(self));
  MF_CHECK(py::isinstance<py::dict>(state) || py::hasattr(state, "items"), TypeError,
           "Expected state_dict to be dict-like, got ", py_type_name(state));
  nn::NamedTensors entries;  // in the dict's order
  for (py::handle item : state.attr("items")()) {
    auto kv = item.cast<py::tuple>();
    std::string key = py::str(kv[0]);
    MF_CHECK(py::isinstance<Tensor>(kv[1]), TypeError, "load_state_dict: entry \"", key,
             "\" is not a meshflow.Tensor (got ", py_type_name(kv[1]), ")");
    entries.emplace_back(key, kv[1].cast<Tensor>());
  }
  nn::LoadResult result = m.load_state_dict(entries, strict);
  return g_incompatible_keys(names_list(result.missing_keys), names_list(result.unexpected_keys));
}

// to(dtype) / to(device) / to(tensor) / to(device, dtype), as nn.Module.to.
py::object module_to(py::object self, py::args args, py::kwargs kwargs) {
  std::optional<DType> dtype;
  std::optional<Device> device;
  auto take = [&](py::handle v) {
    if (py::isinstance<DType>(v)) {
      dtype = v.cast<DType>();
    } else if (py::isinstance<Tensor>(v)) {
      dtype = v.cast<Tensor>().dtype();
      device = v.cast<Tensor>().device();
    } else if (py::isinstance<Device>(v) || py::isinstance<py::str>(v)) {
      device = py::isinstance<Device>(v) ? v.cast<Device>() : Device(std::string(py::str(v)));
    } else if (!v.is_none()) {
      throw TypeError("Module.to: expected a dtype, device or tensor, got " + py_type_name(v));
    }
  };
  for (py::handle a : args) take(a);
  for (auto [k, v] : kwargs) {
    std::string key = py::str(k);
    MF_CHECK(key == "dtype" || key == "device" || key == "non_blocking", TypeError,
             "Module.to() got an unexpected keyword argument '", key, "'");
    if (key != "non_blocking") take(v);
  }
  if (device) self.cast<Module&>().to(*device);
  if (dtype) self.cast<Module&>().to(*dtype);
  return self;
}

template <DType dtype>
py::object convert(py::object self) {
  self.cast<Module&>().to(dtype);
  return self;
}

py::object add_hook(py::object self, py::object fn, bool pre, bool always_call = false) {
  MF_CHECK(PyCallable_Check(fn.ptr()), TypeError, "register_forward_", pre ? "pre_" : "", "hook: the hook must be callable");
  Module& m = self.cast<Module&>();
  int id;
  if (pre) {
    auto hook = std::make_shared<PyForwardPreHook>(std::move(fn));
    hook->fn = [raw = hook.get()](Module& module, const Tensor& input) {
      py::gil_scoped_acquire gil;
      return hook_result(raw->callable(py::cast(module.shared_from_this()), py::make_tuple(input)));
    };
    id = m.register_forward_pre_hook(std::move(hook));
  } else {
    auto hook = std::make_shared<PyForwardHook>(std::move(fn));
    hook->always_call = always_call;
    hook->fn = [raw = hook.get()](Module& module, const Tensor& input, const Tensor& output) {
      py::gil_scoped_acquire gil;
      py::object out = output.defined() ? py::cast(output) : py::none();
      return hook_result(raw->callable(py::cast(module.shared_from_this()), py::make_tuple(input), out));
    };
    id = m.register_forward_hook(std::move(hook));
  }
  return py::cast(HookHandle{m.shared_from_this(), id});
}

}  // namespace

std::shared_ptr<void> python_owner(py::handle obj) {
  auto* held = new py::object(py::reinterpret_borrow<py::object>(obj));
  return std::shared_ptr<void>(held, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
}

py::object new_instance_of(py::handle self) {
  auto* type = reinterpret_cast<PyTypeObject*>(py::type::handle_of(self).ptr());
  py::tuple no_args;
  PyObject* made = type->tp_new(type, no_args.ptr(), nullptr);
  if (made == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(made);
}

void deepcopy_entries(py::handle self, py::handle copy, py::dict memo) {
  memo[py::int_(reinterpret_cast<uintptr_t>(self.ptr()))] = copy;
  py::object deepcopy = py::module_::import("copy").attr("deepcopy");
  const Module& src = module_of(self);
  Module& dst = copy.cast<Module&>();
  for (const auto& [name, t] : src.own_parameters()) {
    if (!t.defined()) continue;
    Tensor c = deepcopy(py::cast(t), memo).cast<Tensor>();
    dst.register_parameter(name, c, c.requires_grad());
  }
  for (const auto& b : src.own_buffers()) {
    if (b.tensor.defined()) dst.register_buffer(b.name, deepcopy(py::cast(b.tensor), memo).cast<Tensor>(), b.persistent);
  }
  for (const auto& c : src.own_children()) {
    if (!c.module) continue;
    py::object child = deepcopy(module_object(c), memo);
    dst.register_module(c.name, child.cast<ModulePtr>(), python_owner(child));
  }
  PyObject* attrs = PyObject_GenericGetDict(self.ptr(), nullptr);
  if (attrs == nullptr) throw py::error_already_set();
  py::dict copied = deepcopy(py::reinterpret_steal<py::dict>(attrs), memo);
  for (auto [key, value] : copied) {
    if (PyObject_GenericSetAttr(copy.ptr(), key.ptr(), value.ptr()) != 0) throw py::error_already_set();
  }
}

py::object module_object(const nn::Module::Child& child) {
  if (!child.module) return py::none();
  if (!child.owner) child.owner = python_owner(py::cast(child.module));
  return *static_cast<py::object*>(child.owner.get());
}

void init_nn_module(py::module_& parent) {
  py::module_ m = parent.def_submodule("_modules", "nn.Module and the layers (see meshflow.nn)");
  g_incompatible_keys = py::module_::import("collections")
                            .attr("namedtuple")("IncompatibleKeys", py::make_tuple("missing_keys", "unexpected_keys"));

  py::class_<HookHandle>(m, "RemovableHandle").def("remove", &HookHandle::remove);

  py::class_<Module, ModulePtr> cls(m, "Module", py::dynamic_attr(), R"(Base class of every layer and model.

Subclasses assign Parameters, buffers and Modules as attributes in __init__
(after super().__init__()) and define forward().)");
  cls.def(py::init([]() { return std::make_shared<Module>(); }))
      .def("__deepcopy__", &deepcopy_module<Module>, py::arg("memo"))
      .def("__setattr__", &set_attr)
      .def("__getattr__", &get_attr)
      .def("__delattr__", &del_attr)
      .def("__call__", &call)
      .def("forward", [](py::handle self, py::args, py::kwargs) -> py::object {
        std::string text = "Module [" + py_type_name(self) + "] is missing the required \"forward\" function";
        PyErr_SetString(PyExc_NotImplementedError, text.c_str());
        throw py::error_already_set();
      })
      .def("__repr__", &repr)
      .def("extra_repr", &Module::extra_repr)
      .def_property(
          "training", &Module::is_training, [](Module& self, bool on) { self.set_training_flag(on); })
      .def("train", [](py::object self, bool mode) {
        self.cast<Module&>().train(mode);
        return self;
      }, py::arg("mode") = true)
      .def("eval", [](py::object self) {
        self.cast<Module&>().eval();
        return self;
      })
      .def("register_parameter", [](Module& self, const std::string& name, py::handle param) {
        MF_CHECK(param.is_none() || (py::isinstance<Tensor>(param) && as_tensor(param).impl()->is_parameter()),
                 TypeError, "cannot assign '", py_type_name(param), "' object to parameter '", name,
                 "' (meshflow.nn.Parameter or None required)");
        self.register_parameter(name, param.is_none() ? Tensor() : as_tensor(param), false);
      }, py::arg("name"), py::arg("param"))
      .def("_swap_parameter", [](Module& self, const std::string& name, py::handle t) {
        return self.swap_parameter(name, t.is_none() ? Tensor() : as_tensor(t));
      }, py::arg("name"), py::arg("tensor"))
      .def("register_buffer", [](Module& self, const std::string& name, const Tensor& tensor, bool persistent) {
        self.register_buffer(name, tensor, persistent);
      }, py::arg("name"), py::arg("tensor"), py::arg("persistent") = true)
      .def("add_module", [](py::object self, const std::string& name, py::object module) {
        set_attr(self, name, module);
      }, py::arg("name"), py::arg("module"))
      .def("register_module", [](py::object self, const std::string& name, py::object module) {
        set_attr(self, name, module);
      }, py::arg("name"), py::arg("module"))
      .def("get_submodule", [](Module& self, const std::string& target) {
        try {
          return self.submodule(target);
        } catch (const ValueError& e) {
          throw py::attribute_error(e.what());  // as PyTorch's get_submodule
        }
      }, py::arg("target"))
      .def("get_parameter", [](Module& self, const std::string& target) {
        size_t dot = target.rfind('.');
        try {
          ModulePtr owner = dot == std::string::npos ? self.shared_from_this() : self.submodule(target.substr(0, dot));
          return owner->parameter(dot == std::string::npos ? target : target.substr(dot + 1));
        } catch (const ValueError& e) {
          throw py::attribute_error(e.what());
        }
      }, py::arg("target"))
      .def("named_parameters", [](const Module& self, const std::string& prefix, bool recurse) {
        return named_tensors_iter(self.named_parameters(recurse, prefix));
      }, py::arg("prefix") = "", py::arg("recurse") = true)
      .def("parameters", [](const Module& self, bool recurse) { return tensors_iter(self.parameters(recurse)); },
           py::arg("recurse") = true)
      .def("named_buffers", [](const Module& self, const std::string& prefix, bool recurse) {
        return named_tensors_iter(self.named_buffers(recurse, prefix));
      }, py::arg("prefix") = "", py::arg("recurse") = true)
      .def("buffers", [](const Module& self, bool recurse) { return tensors_iter(self.buffers(recurse)); },
           py::arg("recurse") = true)
      .def("named_children", [](const Module& self) {
        py::list out;
        for (const nn::Module::Child* c : distinct_children(self)) {
          out.append(py::make_tuple(c->name, module_object(*c)));
        }
        return py::iter(out);
      })
      .def("children", [](const Module& self) {
        py::list out;
        for (const nn::Module::Child* c : distinct_children(self)) out.append(module_object(*c));
        return py::iter(out);
      })
      .def("named_modules", [](py::object self, py::object memo, const std::string& prefix, bool remove_duplicate) {
        py::list out;
        collect_modules(self, memo.is_none() ? py::set() : py::set(memo), prefix, remove_duplicate, out);
        return py::iter(out);
      }, py::arg("memo") = py::none(), py::arg("prefix") = "", py::arg("remove_duplicate") = true)
      .def("modules", [](py::object self) {
        py::list out;
        collect_modules(self, py::set(), "", true, out);
        for (size_t i = 0; i < out.size(); ++i) out[i] = py::tuple(out[i])[1];
        return py::iter(out);
      })
      .def("state_dict", &state_dict, py::arg("destination") = py::none(), py::arg("prefix") = "",
           py::arg("keep_vars") = false)
      .def("load_state_dict", &load_state_dict, py::arg("state_dict"), py::arg("strict") = true)
      .def("zero_grad", &Module::zero_grad, py::arg("set_to_none") = true)
      .def("requires_grad_", [](py::object self, bool requires_grad) {
        self.cast<Module&>().requires_grad_(requires_grad);
        return self;
      }, py::arg("requires_grad") = true)
      .def("to", &module_to)
      .def("float", &convert<DType::Float32>)
      .def("double", &convert<DType::Float64>)
      .def("half", &convert<DType::Float16>)
      .def("bfloat16", &convert<DType::BFloat16>)
      .def("cpu", [](py::object self) {
        self.cast<Module&>().to(Device());
        return self;
      })
      .def("cuda", [](py::object self, py::object device) {
        Device d(DeviceType::CUDA, 0);
        if (py::isinstance<py::int_>(device)) d = Device(DeviceType::CUDA, device.cast<int>());
        else if (!device.is_none()) d = device.cast<Device>();
        MF_CHECK(d.type() == DeviceType::CUDA, ValueError, "Module.cuda: expected a cuda device, got ", d);
        self.cast<Module&>().to(d);
        return self;
      }, py::arg("device") = py::none())
      .def("to_global", [](py::object self, const Placement& placement, py::handle sbp) {
        self.cast<Module&>().to_global(placement, nd_sbp_arg(sbp, placement));
        return self;
      }, py::arg("placement"), py::arg("sbp"))
      .def("apply", [](py::object self, py::object fn) {
        for (py::handle child : self.attr("children")()) child.attr("apply")(fn);
        fn(self);
        return self;
      }, py::arg("fn"))
      .def("register_forward_hook", [](py::object self, py::object hook, bool always_call) {
        return add_hook(self, hook, false, always_call);
      }, py::arg("hook"), py::kw_only(), py::arg("always_call") = false)
      .def("register_forward_pre_hook", [](py::object self, py::object hook) { return add_hook(self, hook, true); },
           py::arg("hook"))
      .def("__dir__", [](py::object self) {
        py::list out = py::reinterpret_steal<py::list>(PyObject_Dir(py::type::handle_of(self).ptr()));
        py::object dict = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(self.ptr(), nullptr));
        for (py::handle k : dict) out.append(k);
        const Module& m = self.cast<const Module&>();
        for (const auto& [n, t] : m.own_parameters()) out.append(n);
        for (const auto& b : m.own_buffers()) out.append(b.name);
        for (const auto& c : m.own_children()) out.append(c.name);
        return out;
      });

  m.def("_add_global_hook", [](py::object fn, bool pre, bool always_call) {
    MF_CHECK(PyCallable_Check(fn.ptr()), TypeError, "register_module_forward_", pre ? "pre_" : "",
             "hook: the hook must be callable");
    GlobalHooks& hooks = global_hooks();
    const int id = hooks.next_id++;
    (pre ? hooks.pre : hooks.post).push_back(GlobalHook{id, std::move(fn), always_call});
    return id;
  }, py::arg("hook"), py::arg("pre"), py::arg("always_call") = false);
  m.def("_remove_global_hook", [](int id) {
    for (auto* list : {&global_hooks().pre, &global_hooks().post})
      std::erase_if(*list, [id](const GlobalHook& h) { return h.id == id; });
  }, py::arg("id"));
  m.def("make_parameter", [](const Tensor& data, bool requires_grad) {
    Tensor p = data.detach();
    p.impl()->set_is_parameter(true);
    p.requires_grad_(requires_grad);
    return p;
  }, py::arg("data"), py::arg("requires_grad") = true);

  m.def("is_parameter", [](const Tensor& t) { return t.defined() && t.impl()->is_parameter(); });

  py::module_ init = m.def_submodule("init", "torch.nn.init's initialisers");
  init.def("calculate_fan_in_and_fan_out", &nn::init::calculate_fan_in_and_fan_out, py::arg("tensor"))
      .def("calculate_gain", &nn::init::calculate_gain, py::arg("nonlinearity"), py::arg("param") = py::none())
      .def("uniform_", &nn::init::uniform_, py::arg("tensor"), py::arg("a") = 0.0, py::arg("b") = 1.0)
      .def("normal_", &nn::init::normal_, py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0)
      .def("constant_", &nn::init::constant_, py::arg("tensor"), py::arg("val"))
      .def("ones_", &nn::init::ones_, py::arg("tensor"))
      .def("zeros_", &nn::init::zeros_, py::arg("tensor"))
      .def("trunc_normal_", &nn::init::trunc_normal_, py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0,
           py::arg("a") = -2.0, py::arg("b") = 2.0)
      .def("xavier_uniform_", &nn::init::xavier_uniform_, py::arg("tensor"), py::arg("gain") = 1.0)
      .def("xavier_normal_", &nn::init::xavier_normal_, py::arg("tensor"), py::arg("gain") = 1.0)
      .def("kaiming_uniform_", &nn::init::kaiming_uniform_, py::arg("tensor"), py::arg("a") = 0.0,
           py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu")
      .def("kaiming_normal_", &nn::init::kaiming_normal_, py::arg("tensor"), py::arg("a") = 0.0,
           py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu")
      .def("orthogonal_", &nn::init::orthogonal_, py::arg("tensor"), py::arg("gain") = 1.0);

  init_nn_layers(m);
  init_nn_rnn(m);
  init_nn_transformer(m);
}

}  // namespace mf::python
