// Shared pieces of the elementwise op files: inference for same-dtype
// broadcasting ops and kernel builders over the dtype of input 0.
#pragma once

#include <limits>

#include "meshflow/dispatch.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "backend/cpu/kernels/loops.h"

namespace mf::elementwise_detail {

// The dtype a floating function (exp, sqrt, true division) of a tensor of
// dtype d computes in: integers and bool go to the default float dtype, like
// PyTorch's int-to-float promotion.
inline DType floating_result(DType d) { return is_floating(d) ? d : default_dtype(); }

// result_type over any number of tensors (addcmul, clamp): dimensioned
// tensors outrank 0-d ones within a category, as in the two-tensor form.
DType common_dtype(std::initializer_list<const Tensor*> tensors);

// Throws like PyTorch's Scalar::to<T> when a Scalar used as a value of an
// integer dtype (clamp bounds, masked_fill values) is out of its range,
// instead of wrapping it silently.
inline void check_scalar_fits(Scalar s, DType dtype, const char* op, const char* arg) {
  if (!is_integral(dtype)) return;
  const double v = s.to_double();
  bool fits = true;
  dispatch_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (s.is_floating())
        fits = v >= double(std::numeric_limits<T>::min()) && v <= double(std::numeric_limits<T>::max());
      else
        fits = s.to_int() >= int64_t(std::numeric_limits<T>::min()) &&
               (std::is_same_v<T, int64_t> || s.to_int() <= int64_t(std::numeric_limits<T>::max()));
    }
  });
  MF_CHECK(fits, Error, op, ": value ", s.str(), " of ", arg, " cannot be converted to type ", dtype_name(dtype),
           " without overflow");
}

inline bool is_numeric(DType d) { return d != DType::Bool; }
inline bool is_integral_or_bool(DType d) { return !is_floating(d); }

// Infers a unary op whose output has the input's shape and dtype (or
// out_dtype); `accepts` says which input dtypes the kernel takes and
// `expected` names them for the error.
inline InferFn infer_unary(const char* op, bool (*accepts)(DType), const char* expected,
                           std::optional<DType> out_dtype = {}) {
  return [=](const TensorList& in, const Attrs&) {
    MF_CHECK(accepts(in[0].dtype()), TypeError, op, ": expected ", expected, " tensor, got ",
             dtype_name(in[0].dtype()));
    return std::vector<TensorMeta>{{in[0].sizes(), out_dtype.value_or(in[0].dtype()), in[0].device()}};
  };
}

// Infers a broadcasting op whose inputs share one dtype; the output has that
// dtype, or out_dtype when given (comparisons: bool).
inline std::vector<TensorMeta> infer_broadcast(const char* op, const TensorList& in,
                                               std::optional<DType> out_dtype = {}) {
  Shape shape = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i) {
    MF_CHECK(in[i].dtype() == in[0].dtype(), TypeError, op, ": expected all inputs to have dtype ",
             dtype_name(in[0].dtype()), ", got ", dtype_name(in[i].dtype()), " for input ", i,
             " (the functional API promotes; OpDefs take one dtype)");
    shape = broadcast_shapes(shape, in[i].sizes(), op);
  }
  return {{shape, out_dtype.value_or(in[0].dtype()), in[0].device()}};
}

// CPU kernel builders of the ops whose kernels are not in the shared table
// (backend/common/elementwise_kernels.h) yet: special functions, gamma.
using cpu::binary_loop;

// out = f(a) in acc_type<T> for the floating dtypes (float for the 16-bit
// ones, so std:: functions run their float versions).
template <typename F>
KernelFn floating_unary_kernel(const char* name, F f) {
  return [f, name](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_floating(in[0].dtype(), name, [&]<typename T>() {
      using A = acc_type<T>;
      cpu::elementwise<T, T>(out[0], {&in[0]}, [&](T a) __attribute__((flatten)) { return f(A(a)); });
    });
  };
}

template <typename F>
KernelFn floating_binary_kernel(const char* name, F f) {
  return [f, name](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_floating(in[0].dtype(), name, [&]<typename T>() {
      using A = acc_type<T>;
      binary_loop<T, T, T>(out[0], in[0], in[1], [&](T a, T b) __attribute__((flatten)) { return f(A(a), A(b)); });
    });
  };
}

}  // namespace mf::elementwise_detail
