// Autograd from Python: Tensor.backward/.grad/hooks, grad_fn nodes,
// meshflow.autograd.grad and backward.
#include "bindings.h"

namespace mf::python {
namespace {

// A Python callable as a TensorHook. The callable is released under the GIL
// whichever thread drops the last copy of the hook.
TensorHook python_hook(py::function fn) {
  std::shared_ptr<py::function> holder(new py::function(std::move(fn)), [](py::function* f) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete f;
  });
  return [holder](const Tensor& grad) -> Tensor {
    py::gil_scoped_acquire gil;
    py::object result = (*holder)(grad);
    if (result.is_none()) return Tensor();
    MF_CHECK(py::isinstance<Tensor>(result), TypeError, "register_hook: the hook must return a Tensor or None, got ",
             public_type_name(result.ptr()));
    return result.cast<Tensor>();
  };
}

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
  m.def("_autograd_grad", [](const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                             std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
    return to_tuple(autograd::grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused));
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs"), py::arg("retain_graph"),
        py::arg("create_graph"), py::arg("allow_unused"));
}

}  // namespace mf::python
