// Autograd from Python: Tensor.backward/.grad/hooks, grad_fn nodes,
// meshflow.autograd.grad and backward.
#include "bindings.h"

namespace mf::python {
namespace {

// A Python object kept by C++ (a hook, a packed saved tensor): released
// under the GIL whichever thread drops the last reference.
template <typename T>
std::shared_ptr<T> gil_safe(T object) {
  return std::shared_ptr<T>(new T(std::move(object)), [](T* o) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete o;
  });
}

// A Python callable as a TensorHook.
TensorHook python_hook(py::function fn) {
  auto holder = gil_safe(std::move(fn));
  return [holder](const Tensor& grad) -> Tensor {
    py::gil_scoped_acquire gil;
    py::object result = (*holder)(grad);
    if (result.is_none()) return Tensor();
    MF_CHECK(py::isinstance<Tensor>(result), TypeError, "register_hook: the hook must return a Tensor or None, got ",
             public_type_name(result.ptr()));
    return result.cast<Tensor>();
  };
}

// The tensors a Python callable returned, None as undefined.
TensorList tensors_or_none(const py::handle& result, const char* what) {
  TensorList out;
  for (py::handle item : result) {
    if (item.is_none()) {
      out.emplace_back();
      continue;
    }
    MF_CHECK(py::isinstance<Tensor>(item), TypeError, what, ": expected Tensors or None, got ",
             public_type_name(item.ptr()));
    out.push_back(item.cast<Tensor>());
  }
  return out;
}

// Python's with-statement over an RAII guard.
template <typename Guard>
struct ScopedGuard {
  std::optional<Guard> guard;
};

struct RemovableHandle {
  Tensor tensor;
  int id;
  void remove() const { tensor.remove_hook(id); }
};

}  // namespace

void init_autograd(py::module_& m) {
  py::class_<Node, std::shared_ptr<Node>>(m, "Node", "A node of the autograd graph (Tensor.grad_fn).")
      .def("name", &Node::name)
      .def_property_readonly("next_functions", [](const Node& n) {
        py::tuple out(n.next_edges().size());
        for (size_t i = 0; i < n.next_edges().size(); ++i) {
          const Edge& e = n.next_edges()[i];
          out[i] = py::make_tuple(e.fn, e.input_nr);
        }
        return out;
      })
      .def("__repr__", [](const Node& n) { return "<" + n.name() + ">"; });

  py::class_<RemovableHandle>(m, "RemovableHandle")
      .def("remove", &RemovableHandle::remove)
      .def_readonly("id", &RemovableHandle::id);

  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def_property("grad", &Tensor::grad, [](const Tensor& t, const Tensor& g) { t.set_grad(g); })
      .def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool r) { t.requires_grad_(r); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn", &Tensor::grad_fn)
      .def_property_readonly("output_nr", &Tensor::output_nr)
      .def_property_readonly("retains_grad", &Tensor::retains_grad)
      .def("requires_grad_", [](py::object self, bool r) {
        self.cast<Tensor&>().requires_grad_(r);
        return self;
      }, py::arg("requires_grad") = true)
      .def("detach", &Tensor::detach)
      .def("detach_", [](py::object self) {
        self.cast<Tensor&>().detach_();
        return self;
      })
      .def("retain_grad", &Tensor::retain_grad)
      .def("register_hook", [](const Tensor& t, py::function hook) {
        return RemovableHandle{t, t.register_hook(python_hook(std::move(hook)))};
      }, py::arg("hook"))
      .def("register_post_accumulate_grad_hook", [](const Tensor& t, py::function hook) {
        return RemovableHandle{t, t.register_post_accumulate_grad_hook([hook](const Tensor& leaf) { hook(leaf); })};
      }, py::arg("hook"))
      .def("backward", [](const Tensor& t, const Tensor& gradient, std::optional<bool> retain_graph,
                          bool create_graph) {
        t.backward(gradient, retain_graph.value_or(create_graph), create_graph);
      }, py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(), py::arg("create_graph") = false);

  m.def("_autograd_backward", [](const TensorList& tensors, const TensorList& grad_tensors,
                                 std::optional<bool> retain_graph, bool create_graph) {
    autograd::backward(tensors, grad_tensors, retain_graph.value_or(create_graph), create_graph);
  }, py::arg("tensors"), py::arg("grad_tensors"), py::arg("retain_graph"), py::arg("create_graph"));
  py::class_<autograd::DeferredBackward>(m, "_DeferredBackward",
                                          "The weight-gradient half of a split backward (autograd.backward_input).")
      .def("run", &autograd::DeferredBackward::run)
      .def_property_readonly("pending", &autograd::DeferredBackward::pending);
  m.def("_autograd_backward_input", [](const TensorList& outputs, const TensorList& grad_outputs,
                                       const TensorList& inputs) {
    auto [grads, deferred] = autograd::backward_input(outputs, grad_outputs, inputs);
    return py::make_tuple(to_tuple(grads), std::move(deferred));
  }, py::arg("outputs"), py::arg("grad_outputs"), py::arg("inputs"));
  // Note [Saved tensor hooks]: pack returns any Python object, unpack gets it back.
  m.def("_push_saved_tensors_hooks", [](py::function pack, py::function unpack) {
    auto pack_fn = gil_safe(std::move(pack)), unpack_fn = gil_safe(std::move(unpack));
    auto hooks = std::make_shared<SavedTensorHooks>();
    hooks->pack = [pack_fn](const Tensor& t) -> std::shared_ptr<void> {
      py::gil_scoped_acquire gil;
      return gil_safe<py::object>((*pack_fn)(t));
    };
    hooks->unpack = [unpack_fn](const std::shared_ptr<void>& packed) -> Tensor {
      py::gil_scoped_acquire gil;
      py::object result = (*unpack_fn)(*static_cast<py::object*>(packed.get()));
      MF_CHECK(py::isinstance<Tensor>(result), TypeError, "saved_tensors_hooks: the unpack hook must return a ",
               "Tensor, got ", public_type_name(result.ptr()));
      return result.cast<Tensor>();
    };
    autograd::push_saved_tensor_hooks(std::move(hooks));
  }, py::arg("pack_hook"), py::arg("unpack_hook"));
  m.def("_pop_saved_tensors_hooks", &autograd::pop_saved_tensor_hooks);
  using Recomputation = ScopedGuard<autograd::RecomputationGuard>;
  py::class_<Recomputation>(m, "_Recomputation",
                            "with _Recomputation(): a forward recomputed for backward (no running-stat updates).")
      .def(py::init<>())
      .def("__enter__", [](Recomputation& r) { r.guard.emplace(); })
      .def("__exit__", [](Recomputation& r, py::args) { r.guard.reset(); });
  m.def("_in_recomputation", &autograd::in_recomputation);

  // Note [Custom functions]: backward(grad_outputs, needs_input_grad, saved)
  // returns one Tensor or None per input.
  m.def("_autograd_function_link", [](std::string name, const TensorList& inputs, const TensorList& outputs,
                                      const TensorList& saved, std::vector<bool> non_differentiable,
                                      bool materialize_grads, py::function backward) {
    auto backward_fn = gil_safe(std::move(backward));
    autograd::CustomFunction fn;
    fn.name = std::move(name);
    fn.saved = saved;
    fn.non_differentiable = std::move(non_differentiable);
    fn.materialize_grads = materialize_grads;
    fn.backward = [backward_fn, name = fn.name](const TensorList& grads, const std::vector<bool>& needs,
                                                const TensorList& saved_tensors) {
      py::gil_scoped_acquire gil;
      py::object result = (*backward_fn)(to_tuple(grads), py::cast(needs), to_tuple(saved_tensors));
      return tensors_or_none(result, name.c_str());
    };
    return to_tuple(autograd::link(std::move(fn), inputs, outputs));
  }, py::arg("name"), py::arg("inputs"), py::arg("outputs"), py::arg("saved"), py::arg("non_differentiable"),
        py::arg("materialize_grads"), py::arg("backward"));

  // Note [Activation checkpointing]: fn(tensors) runs the function.
  m.def("_checkpoint", [](py::function fn, const TensorList& inputs, bool preserve_rng_state,
                          bool determinism_check) {
    auto run = gil_safe(std::move(fn));
    return to_tuple(autograd::checkpoint([run](const TensorList& tensors) {
      py::gil_scoped_acquire gil;
      return tensors_or_none((*run)(to_tuple(tensors)), "checkpoint");
    }, inputs, {.preserve_rng_state = preserve_rng_state, .determinism_check = determinism_check}));
  }, py::arg("function"), py::arg("inputs"), py::arg("preserve_rng_state"), py::arg("determinism_check"));

  m.def("_autograd_grad", [](const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                             std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
    return to_tuple(autograd::grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused));
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs"), py::arg("retain_graph"),
        py::arg("create_graph"), py::arg("allow_unused"));
}

}  // namespace mf::python
