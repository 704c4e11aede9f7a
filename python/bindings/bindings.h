// Shared by the binding files: type casters between Python objects and
// meshflow types, and the init function of each file. The binding layer
// converts types and nothing else; every op's logic lives in the C++ API.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "meshflow/distributed/placement.h"
#include "meshflow/meshflow.h"

namespace py = pybind11;

namespace mf::python {

// The `dim` argument of reductions: None (all dims), an int, or a sequence.
struct DimsArg {
  Shape dims;
};
// An int or a sequence of ints; an int n stands for (n, n) as in PyTorch's
// _pair (stride=2 for conv2d means (2, 2)).
struct PairArg {
  Shape values;
};

// The name of o's type for messages, as users spell it: "Tensor" for
// meshflow's own types (never "meshflow._C.Tensor"), "numpy.ndarray", "str".
std::string public_type_name(PyObject* o);

// A size given as separate ints or as one sequence: view(2, 3), view((2, 3)).
Shape shape_from_args(const py::args& args, const char* op);
// A 0-d tensor holding s with the dtype `like op s` gives, so that an op
// with only a tensor form (bitwise_and, remainder of a scalar by a tensor)
// promotes a Python number the way PyTorch does.
Tensor wrap_scalar(const Tensor& like, Scalar s);
// Python index (int, slice, None, Ellipsis, bool, tensor, list, numpy
// array, tuple of these) to the entries of mf::index.
std::vector<TensorIndex> to_indices(py::handle index);
// A tensor copied from nested sequences, numbers, numpy arrays or tensors.
Tensor tensor_from_data(py::handle data, std::optional<DType> dtype);
// A tensor sharing a numpy array's memory (the array stays alive with it).
Tensor tensor_from_numpy(py::handle array);
// The Python type of Tensor.shape (meshflow.Size) and of (values, indices)
// results; both are set by the package at import.
py::handle size_type();
py::handle values_indices_type();
// A Python list for TensorList results that PyTorch returns as tuples.
py::tuple to_tuple(const TensorList& tensors);
// An sbp argument (one sbp or a tuple of them) for placement; a single sbp
// on an n-D mesh stands for that sbp on every axis.
NdSbp nd_sbp_arg(py::handle sbp, const Placement& placement);
// Throws unless t's data is readable on the host (not a global or traced
// tensor); op names the caller.
void check_host_data(const Tensor& t, const char* op);
// An nd-sbp as a tuple of meshflow.sbp values (one per mesh axis).
py::object sbp_tuple(const NdSbp& sbp);
// An int argument (an index object, not a bool).
bool is_int_arg(py::handle v);
// A size argument of the convolutions and their layers: an int or a
// sequence of ints; an int n gives {n}, which the C++ API expands to every
// spatial dim.
Shape sizes_arg(py::handle value, const char* op, const char* arg);
// An adaptive pooling output size: an int, or a sequence of ints and Nones
// (None: the input's size).
OptionalSizes optional_sizes_arg(py::handle value, const char* op);
// Adds module functions `names` of m to Tensor as methods (self = input).
void add_methods(py::module_& m, py::handle tensor_class, std::initializer_list<const char*> names);

// The Python object of t (None when undefined): the one object of that
// tensor, made on first use (Note [One Python object per tensor] in
// identity.cpp). With move, a new object takes t's handle.
py::handle tensor_object(const Tensor& t, bool move);
// Installs that identity on the Tensor class; called once at import.
void init_identity(py::handle tensor_class);
// The tensor a Tensor object (or an object of a Python subclass) holds, or
// null for any other object.
const Tensor* held_tensor_or_null(PyObject* o);

// Note [Fast calls] in fast_calls.cpp: Tensor attributes to replace by
// direct C entry points once every binding is defined. A null function
// sends calls with that operand type to the replaced pybind11 function.
void fast_binary(const char* name, Tensor (*tensor)(const Tensor&, const Tensor&), Tensor (*scalar)(const Tensor&, Scalar));
void fast_inplace(const char* name, void (*tensor)(Tensor&, const Tensor&), void (*scalar)(Tensor&, Scalar));
void fast_unary(const char* name, Tensor (*f)(const Tensor&));
void install_fast_calls(py::handle tensor_class);

void init_types(py::module_& m);
void init_tensor(py::module_& m);
void init_interop(py::module_& m);
void init_autograd(py::module_& m);
void init_creation(py::module_& m);
void init_elementwise(py::module_& m);
void init_operators(py::module_& m);
void init_reduce(py::module_& m);
void init_shape(py::module_& m);
void init_linalg(py::module_& m);
void init_nn(py::module_& m);
void init_io(py::module_& m);
void init_optim(py::module_& m);
void init_nn_module(py::module_& m);
void init_global(py::module_& m);
void init_data(py::module_& m);
void init_distributed(py::module_& m);
void init_graph(py::module_& m);
void init_amp(py::module_& m);

}  // namespace mf::python

namespace pybind11::detail {

// A Tensor argument also accepts None (an undefined tensor: "no bias"), and an
// undefined tensor result is returned as None (a leaf's .grad before backward).
// The caster looks the registered Tensor type up once instead of on every
// argument and result (see bench/python_overhead.py).
template <>
class type_caster<mf::Tensor> : public type_caster_generic {
 public:
  static constexpr auto name = const_name<mf::Tensor>();

  type_caster() : type_caster_generic(tensor_type()) {}

  bool load(handle src, bool convert) {
    if (src.is_none()) {
      value = &undefined();
      return true;
    }
    return type_caster_generic::load(src, convert);
  }
  // Every result is the tensor's one Python object (Note [One Python object
  // per tensor] in identity.cpp), whatever the policy asked.
  static handle cast(const mf::Tensor& t, return_value_policy, handle) {
    return mf::python::tensor_object(t, false);
  }
  static handle cast(mf::Tensor&& t, return_value_policy, handle) { return mf::python::tensor_object(t, true); }
  static handle cast(const mf::Tensor* t, return_value_policy, handle) {
    if (t == nullptr) return none().release();
    return mf::python::tensor_object(*t, false);
  }

  template <typename T>
  using cast_op_type = detail::cast_op_type<T>;
  operator mf::Tensor*() { return static_cast<mf::Tensor*>(value); }  // NOLINT: pybind11's caster interface
  operator mf::Tensor&() {                                              // NOLINT
    if (value == nullptr) throw reference_cast_error();
    return *static_cast<mf::Tensor*>(value);
  }

 private:
  static const type_info* tensor_type() {
    static const type_info* registered = nullptr;
    if (registered == nullptr) registered = get_type_info(typeid(mf::Tensor));
    return registered;
  }
  static mf::Tensor& undefined() {
    static mf::Tensor t;
    return t;
  }
};

// A Tensor is never moved out of its Python object (pybind11 does so for
// `obj.cast<Tensor>()` on an object's last reference): the object must keep
// its handle until it dies to clear the tensor's pointer to it.
template <>
struct move_if_unreferenced<mf::Tensor, void> : std::false_type {};

// A Shape converts as std::vector<int64_t> does: from a sequence of ints,
// to a list (Note [Inline shapes] in meshflow/small_vector.h).
template <>
struct type_caster<mf::Shape> : list_caster<mf::Shape, int64_t> {};
// A TensorList converts as std::vector<Tensor> does.
template <>
struct type_caster<mf::TensorList> : list_caster<mf::TensorList, mf::Tensor> {};

// Python bool, int and float (and NumPy scalars, one-element tensors).
template <>
struct type_caster<mf::Scalar> {
  PYBIND11_TYPE_CASTER(mf::Scalar, const_name("Number"));
  bool load(handle src, bool convert);
  static handle cast(const mf::Scalar& s, return_value_policy, handle) {
    if (s.is_bool()) return bool_(s.to_bool()).release();
    if (s.is_integral()) return PyLong_FromLongLong(s.to_int());
    return PyFloat_FromDouble(s.to_double());
  }
};

template <>
struct type_caster<mf::python::DimsArg> {
  PYBIND11_TYPE_CASTER(mf::python::DimsArg, const_name("Optional[Union[int, Sequence[int]]]"));
  bool load(handle src, bool convert);
};

template <>
struct type_caster<mf::python::PairArg> {
  PYBIND11_TYPE_CASTER(mf::python::PairArg, const_name("Union[int, Sequence[int]]"));
  bool load(handle src, bool convert);
};

// (values, indices) results: a named tuple, like torch.return_types.max.
template <>
struct type_caster<mf::ValuesIndices> {
  PYBIND11_TYPE_CASTER(mf::ValuesIndices, const_name("ValuesIndices"));
  bool load(handle, bool) { return false; }
  static handle cast(const mf::ValuesIndices& v, return_value_policy, handle) {
    return mf::python::values_indices_type()(v.values, v.indices).release();
  }
};

}  // namespace pybind11::detail
