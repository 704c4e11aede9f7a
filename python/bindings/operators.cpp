// Python operators on Tensor: + - * / // % ** @, reflected and in-place
// forms, comparisons, unary - ~ abs, and & | ^ << >>.
#include <pybind11/numpy.h>

#include "bindings.h"

namespace mf::python {
namespace {

py::object not_implemented() { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }

// Binds `name` for (Tensor, Tensor), (Tensor, number) and (Tensor, NumPy
// array, as PyTorch reads it: a tensor); any other operand type returns
// NotImplemented so that Python tries the reflected operator.
template <typename TensorFn, typename ScalarFn>
void def_operator(py::class_<Tensor>& cls, const char* name, TensorFn f, ScalarFn g) {
  cls.def(name, [f](const Tensor& a, const Tensor& b) -> py::object {
    if (!b.defined()) return not_implemented();
    return py::cast(f(a, b));
  }, py::is_operator());
  cls.def(name, [g](const Tensor& a, Scalar b) { return g(a, b); }, py::is_operator());
  cls.def(name, [f](const Tensor& a, const py::array& b) { return f(a, tensor_from_numpy(b)); }, py::is_operator());
  fast_binary(name, +f, +g);
}

// Reflected operators: `number op tensor` and `array op tensor` (f is the
// forward operator).
template <typename TensorFn, typename ScalarFn>
void def_reflected(py::class_<Tensor>& cls, const char* name, TensorFn f, ScalarFn g) {
  cls.def(name, [g](const Tensor& a, Scalar b) { return g(a, b); }, py::is_operator());
  cls.def(name, [f](const Tensor& a, const py::array& b) { return f(tensor_from_numpy(b), a); }, py::is_operator());
  fast_binary(name, nullptr, +g);
}

template <typename TensorFn, typename ScalarFn>
void def_inplace(py::class_<Tensor>& cls, const char* name, TensorFn f, ScalarFn g) {
  cls.def(name, [f](py::object self, const Tensor& b) -> py::object {
    if (!b.defined()) return not_implemented();
    f(self.cast<Tensor&>(), b);
    return self;
  }, py::is_operator());
  cls.def(name, [g](py::object self, Scalar b) {
    g(self.cast<Tensor&>(), b);
    return self;
  }, py::is_operator());
  fast_inplace(name, +f, +g);
}

}  // namespace

void init_operators(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  using T = const Tensor&;
  def_operator(cls, "__add__", [](T a, T b) { return add(a, b); }, [](T a, Scalar b) { return add(a, b); });
  def_operator(cls, "__sub__", [](T a, T b) { return sub(a, b); }, [](T a, Scalar b) { return sub(a, b); });
  def_operator(cls, "__mul__", [](T a, T b) { return mul(a, b); }, [](T a, Scalar b) { return mul(a, b); });
  def_operator(cls, "__truediv__", [](T a, T b) { return div(a, b); }, [](T a, Scalar b) { return div(a, b); });
  def_operator(cls, "__floordiv__", [](T a, T b) { return floor_divide(a, b); },
               [](T a, Scalar b) { return div(a, b, "floor"); });
  def_operator(cls, "__mod__", [](T a, T b) { return remainder(a, b); }, [](T a, Scalar b) { return remainder(a, b); });
  def_operator(cls, "__pow__", [](T a, T b) { return pow(a, b); }, [](T a, Scalar b) { return pow(a, b); });
  def_operator(cls, "__eq__", [](T a, T b) { return eq(a, b); }, [](T a, Scalar b) { return eq(a, b); });
  def_operator(cls, "__ne__", [](T a, T b) { return ne(a, b); }, [](T a, Scalar b) { return ne(a, b); });
  def_operator(cls, "__lt__", [](T a, T b) { return lt(a, b); }, [](T a, Scalar b) { return lt(a, b); });
  def_operator(cls, "__le__", [](T a, T b) { return le(a, b); }, [](T a, Scalar b) { return le(a, b); });
  def_operator(cls, "__gt__", [](T a, T b) { return gt(a, b); }, [](T a, Scalar b) { return gt(a, b); });
  def_operator(cls, "__ge__", [](T a, T b) { return ge(a, b); }, [](T a, Scalar b) { return ge(a, b); });
  def_operator(cls, "__and__", [](T a, T b) { return bitwise_and(a, b); },
               [](T a, Scalar b) { return bitwise_and(a, wrap_scalar(a, b)); });
  def_operator(cls, "__or__", [](T a, T b) { return bitwise_or(a, b); },
               [](T a, Scalar b) { return bitwise_or(a, wrap_scalar(a, b)); });
  def_operator(cls, "__xor__", [](T a, T b) { return bitwise_xor(a, b); },
               [](T a, Scalar b) { return bitwise_xor(a, wrap_scalar(a, b)); });
  def_operator(cls, "__lshift__", [](T a, T b) { return bitwise_left_shift(a, b); },
               [](T a, Scalar b) { return bitwise_left_shift(a, b); });
  def_operator(cls, "__rshift__", [](T a, T b) { return bitwise_right_shift(a, b); },
               [](T a, Scalar b) { return bitwise_right_shift(a, b); });
  cls.def("__matmul__", [](T a, T b) -> py::object {
    if (!b.defined()) return not_implemented();
    return py::cast(matmul(a, b));
  }, py::is_operator());
  fast_binary("__matmul__", [](T a, T b) { return matmul(a, b); }, nullptr);

  def_reflected(cls, "__radd__", [](T a, T b) { return add(a, b); }, [](T a, Scalar b) { return add(a, b); });
  def_reflected(cls, "__rsub__", [](T a, T b) { return sub(a, b); }, [](T a, Scalar b) { return rsub(a, b); });
  def_reflected(cls, "__rmul__", [](T a, T b) { return mul(a, b); }, [](T a, Scalar b) { return mul(a, b); });
  def_reflected(cls, "__rtruediv__", [](T a, T b) { return div(a, b); }, [](T a, Scalar b) { return b / a; });
  def_reflected(cls, "__rfloordiv__", [](T a, T b) { return floor_divide(a, b); },
                [](T a, Scalar b) { return div(wrap_scalar(a, b), a, "floor"); });
  def_reflected(cls, "__rmod__", [](T a, T b) { return remainder(a, b); },
                [](T a, Scalar b) { return remainder(wrap_scalar(a, b), a); });
  def_reflected(cls, "__rpow__", [](T a, T b) { return pow(a, b); }, [](T a, Scalar b) { return pow(b, a); });
  def_reflected(cls, "__rand__", [](T a, T b) { return bitwise_and(a, b); },
                [](T a, Scalar b) { return bitwise_and(wrap_scalar(a, b), a); });
  def_reflected(cls, "__ror__", [](T a, T b) { return bitwise_or(a, b); },
                [](T a, Scalar b) { return bitwise_or(wrap_scalar(a, b), a); });
  def_reflected(cls, "__rxor__", [](T a, T b) { return bitwise_xor(a, b); },
                [](T a, Scalar b) { return bitwise_xor(wrap_scalar(a, b), a); });
  def_reflected(cls, "__rlshift__", [](T a, T b) { return bitwise_left_shift(a, b); },
                [](T a, Scalar b) { return bitwise_left_shift(wrap_scalar(a, b), a); });
  def_reflected(cls, "__rrshift__", [](T a, T b) { return bitwise_right_shift(a, b); },
                [](T a, Scalar b) { return bitwise_right_shift(wrap_scalar(a, b), a); });

  def_inplace(cls, "__iadd__", [](Tensor& a, T b) { add_(a, b); }, [](Tensor& a, Scalar b) { add_(a, b); });
  def_inplace(cls, "__isub__", [](Tensor& a, T b) { sub_(a, b); }, [](Tensor& a, Scalar b) { sub_(a, b); });
  def_inplace(cls, "__imul__", [](Tensor& a, T b) { mul_(a, b); }, [](Tensor& a, Scalar b) { mul_(a, b); });
  def_inplace(cls, "__itruediv__", [](Tensor& a, T b) { div_(a, b); }, [](Tensor& a, Scalar b) { div_(a, b); });
  def_inplace(cls, "__ilshift__", [](Tensor& a, T b) { copy_(a, bitwise_left_shift(a, b)); },
              [](Tensor& a, Scalar b) { copy_(a, bitwise_left_shift(a, b)); });
  def_inplace(cls, "__irshift__", [](Tensor& a, T b) { copy_(a, bitwise_right_shift(a, b)); },
              [](Tensor& a, Scalar b) { copy_(a, bitwise_right_shift(a, b)); });

  cls.def("__neg__", [](T a) { return neg(a); })
      .def("__pos__", [](T a) { return a; })
      .def("__abs__", [](T a) { return abs(a); })
      .def("__invert__", [](T a) { return bitwise_not(a); });
  fast_unary("__neg__", [](T a) { return neg(a); });
  fast_unary("__abs__", [](T a) { return abs(a); });
}

}  // namespace mf::python
