// Matrix products (include/meshflow/ops/linalg.h).
#include "bindings.h"

namespace mf::python {

void init_linalg(py::module_& m) {
  m.def("matmul", &matmul, py::arg("input"), py::arg("other"));
  m.def("mm", &mm, py::arg("input"), py::arg("mat2"));
  m.def("bmm", &bmm, py::arg("input"), py::arg("mat2"));
  m.def("mv", &mv, py::arg("input"), py::arg("vec"));
  m.def("dot", &dot, py::arg("input"), py::arg("other"));
  m.def("outer", &outer, py::arg("input"), py::arg("vec2"));
  m.def("addmm", &addmm, py::arg("input"), py::arg("mat1"), py::arg("mat2"), py::kw_only(), py::arg("beta") = 1,
        py::arg("alpha") = 1);
  m.def("baddbmm", &baddbmm, py::arg("input"), py::arg("batch1"), py::arg("batch2"), py::kw_only(),
        py::arg("beta") = 1, py::arg("alpha") = 1);
  // torch.einsum(equation, *operands), or the operands as one list or tuple.
  m.def("einsum", [](const std::string& equation, py::args args) {
    TensorList operands;
    if (args.size() == 1 && (py::isinstance<py::list>(args[0]) || py::isinstance<py::tuple>(args[0]))) {
      for (py::handle t : args[0]) operands.push_back(t.cast<Tensor>());
    } else {
      for (py::handle t : args) operands.push_back(t.cast<Tensor>());
    }
    return einsum(equation, operands);
  }, py::arg("equation"));
  add_methods(m, m.attr("Tensor"), {"matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "baddbmm"});
}

}  // namespace mf::python
