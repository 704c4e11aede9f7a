// Matrix products and torch.linalg (include/meshflow/ops/linalg.h). The
// torch.linalg functions live in meshflow._C._linalg; meshflow/linalg.py
// exports them and wraps the multi-result ones in named tuples.
#include "bindings.h"

namespace mf::python {
namespace {

std::optional<Shape> dims_if_given(const std::optional<DimsArg>& dim) {
  return dim ? std::optional<Shape>(dim->dims) : std::nullopt;
}

void init_torch_linalg(py::module_& m) {
  py::module_ l = m.def_submodule("_linalg", "torch.linalg (see meshflow.linalg)");
  l.def("vector_norm", [](const Tensor& x, double ord, const DimsArg& dim, bool keepdim, std::optional<DType> dtype) {
    return linalg::vector_norm(x, ord, dim.dims, keepdim, dtype);
  }, py::arg("x"), py::arg("ord") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("dtype") = py::none());
  l.def("matrix_norm", [](const Tensor& A, const linalg::NormOrder& ord, const DimsArg& dim, bool keepdim,
                          std::optional<DType> dtype) { return linalg::matrix_norm(A, ord, dim.dims, keepdim, dtype); },
        py::arg("A"), py::arg("ord") = "fro", py::arg("dim") = py::make_tuple(-2, -1), py::arg("keepdim") = false,
        py::kw_only(), py::arg("dtype") = py::none());
  l.def("norm", [](const Tensor& A, const std::optional<linalg::NormOrder>& ord, const std::optional<DimsArg>& dim,
                   bool keepdim, std::optional<DType> dtype) {
    return linalg::norm(A, ord, dims_if_given(dim), keepdim, dtype);
  }, py::arg("A"), py::arg("ord") = py::none(), py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("dtype") = py::none());
  l.def("det", &linalg::det, py::arg("A"));
  l.def("slogdet", [](const Tensor& A) {
    linalg::SlogdetResult r = linalg::slogdet(A);
    return py::make_tuple(r.sign, r.logabsdet);
  }, py::arg("A"));
  l.def("inv", &linalg::inv, py::arg("A"));
  l.def("solve", &linalg::solve, py::arg("A"), py::arg("B"), py::kw_only(), py::arg("left") = true);
  l.def("cholesky", &linalg::cholesky, py::arg("A"), py::kw_only(), py::arg("upper") = false);
  l.def("qr", [](const Tensor& A, const std::string& mode) {
    linalg::QRResult r = linalg::qr(A, mode);
    return py::make_tuple(r.Q, r.R);
  }, py::arg("A"), py::arg("mode") = "reduced");
  l.def("svd", [](const Tensor& A, bool full_matrices) {
    linalg::SVDResult r = linalg::svd(A, full_matrices);
    return py::make_tuple(r.U, r.S, r.Vh);
  }, py::arg("A"), py::arg("full_matrices") = true);
  l.def("svdvals", &linalg::svdvals, py::arg("A"));
  l.def("eigh", [](const Tensor& A, const std::string& UPLO) {
    linalg::EighResult r = linalg::eigh(A, UPLO);
    return py::make_tuple(r.eigenvalues, r.eigenvectors);
  }, py::arg("A"), py::arg("UPLO") = "L");
  l.def("eigvalsh", &linalg::eigvalsh, py::arg("A"), py::arg("UPLO") = "L");
}

}  // namespace

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
  // torch's top-level names of torch.linalg functions (torch.slogdet, with
  // its named tuple, is in meshflow/__init__.py).
  m.def("det", &linalg::det, py::arg("input"));
  m.def("logdet", &logdet, py::arg("input"));
  m.def("inverse", &linalg::inv, py::arg("input"));
  m.def("cholesky", &linalg::cholesky, py::arg("input"), py::arg("upper") = false);
  add_methods(m, m.attr("Tensor"), {"matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "baddbmm", "det", "logdet",
                                    "inverse", "cholesky"});
  init_torch_linalg(m);
}

}  // namespace mf::python
