// The reduction ops' kernels, written once over a backend's reduction loops
// (Note [Shared reduction ops] in reduce_ops.h): dtype dispatch, attributes,
// the passes of the two-pass ops (var, logsumexp) and the stores. A backend
// instantiates the table with its reducer R and registers it for its device
// type:
//
//   R::Math                                   the backend's math
//   R::reduce<T>(x, dims, op, store)          store(o, acc) for each flat index
//                                             o of the contiguous output: op
//                                             over x (dtype T) along dims
//                                             (sorted, wrapped)
//   R::reduce_arg<T, kMax>(x, dim, values, indices)
//                                             the first position of the
//                                             extremum along dim (and the
//                                             value, where values is not null)
//   R::copy_cast(dst, src)                    the backend's copy
//
// The ops' schemas, inference, backward and functional API live in
// src/ops/ (reduce.cpp, reduce_minmax.cpp, reduce_stats.cpp).
#pragma once

#include "backend/common/reduce_ops.h"
#include "meshflow/op_def.h"
#include "ops/reduce_common.h"

namespace mf::reduce_kernels {

using namespace reduce_ops;

// Op<M, In, sum_acc_t<Out>> over in[0] into out[0]. Same dtypes, or
// integers/bool into int64, run directly; other pairs cast the input first.
template <typename R, template <typename, typename, typename> class Op>
void sum_like(const char* name, const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), name);
  const DType od = out[0].dtype();
  auto run = [&]<typename In, typename Out>(const Tensor& x) {
    R::template reduce<In>(x, dims, Op<M, In, sum_acc_t<Out>>{}, StoreAs<Out>{static_cast<Out*>(out[0].data_ptr())});
  };
  if (in[0].dtype() == od) {
    dispatch_dtype(od, [&]<typename T>() { run.template operator()<T, T>(in[0]); });
  } else if (od == DType::Int64 && is_integral(in[0].dtype(), true)) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() { run.template operator()<T, int64_t>(in[0]); });
  } else {
    Tensor x = make_empty(in[0].sizes(), od, in[0].device());
    R::copy_cast(x, in[0]);
    dispatch_dtype(od, [&]<typename T>() { run.template operator()<T, T>(x); });
  }
}

template <typename R, bool kAll>
void logical(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), kAll ? "all" : "any");
  dispatch_dtype(in[0].dtype(), [&]<typename T>() {
    if (out[0].dtype() == DType::UInt8)
      R::template reduce<T>(in[0], dims, Logical<M, T, kAll>{}, StoreAs<uint8_t>{static_cast<uint8_t*>(out[0].data_ptr())});
    else
      R::template reduce<T>(in[0], dims, Logical<M, T, kAll>{}, StoreAs<bool>{static_cast<bool*>(out[0].data_ptr())});
  });
}

template <typename R, bool kMax>
void extremum(const char* name, const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), name);
  dispatch_dtype(in[0].dtype(), [&]<typename T>() {
    R::template reduce<T>(in[0], dims, Extremum<M, T, kMax>{}, StoreAs<T>{static_cast<T*>(out[0].data_ptr())});
  });
}

// x viewed so that reducing `dim` is well defined (a 0-d tensor as (1)).
inline Tensor as_reducible(const Tensor& x) {
  return x.dim() == 0 ? make_view(x, {1}, {1}, x.storage_offset()) : x;
}

template <typename R, bool kMax>
void arg(const Tensor& x, int64_t dim, Tensor* values, Tensor& indices) {
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    R::template reduce_arg<T, kMax>(as_reducible(x), dim, values ? static_cast<T*>(values->data_ptr()) : nullptr,
                                    static_cast<int64_t*>(indices.data_ptr()));
  });
}

// argmax/argmin: attr "dims" holds the dim, or nothing for the flattened
// input (an index into it, row-major).
template <typename R, bool kMax>
void argmax(const char* name, const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Shape& raw = attrs.get_shape("dims");
  if (!raw.empty()) {
    arg<R, kMax>(x, wrap_dim(raw[0], x.dim(), name), nullptr, out[0]);
    return;
  }
  Tensor dense = x;
  if (!x.is_contiguous()) {
    dense = make_empty(x.sizes(), x.dtype(), x.device());
    R::copy_cast(dense, x);
  }
  arg<R, kMax>(make_view(dense, {x.numel()}, {1}, dense.storage_offset()), 0, nullptr, out[0]);
}

// A per-output buffer of accumulators on out's device (var's means,
// logsumexp's shifts).
template <typename A>
Tensor per_output(const Tensor& out) {
  return make_empty({out.numel()}, dtype_of<A>(), out.device());
}

// var and std in two passes: the mean, then the squared deviations from it
// (accurate without Welford's serial dependency).
template <typename R, bool kStd>
void var(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const char* name = kStd ? "std" : "var";
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), name);
  const int64_t n = reduce_detail::reduced_count(in[0].sizes(), dims);
  const int64_t denom = std::max<int64_t>(0, n - attrs.get_int("correction"));
  dispatch_floating(in[0].dtype(), name, [&]<typename T>() {
    using A = acc_type<T>;
    Tensor mean = per_output<A>(out[0]);
    A* centre = static_cast<A*>(mean.data_ptr());
    R::template reduce<T>(in[0], dims, Sum<M, T, A>{}, StoreDivided<M, A, false>{centre, A(n)});
    R::template reduce<T>(in[0], dims, SquaredDeviation<M, T>{centre},
                          StoreDivided<M, T, kStd>{static_cast<T*>(out[0].data_ptr()), A(denom)});
  });
}

inline NormKind norm_kind(double p) {
  if (p == 0) return NormKind::Zero;
  if (p == 1) return NormKind::One;
  if (p == 2) return NormKind::Two;
  if (p == std::numeric_limits<double>::infinity()) return NormKind::Inf;
  if (p == -std::numeric_limits<double>::infinity()) return NormKind::NegInf;
  return NormKind::General;
}

template <typename R>
void norm(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), "norm");
  const double p = attrs.get_float("p");
  dispatch_floating(in[0].dtype(), "norm", [&]<typename T>() {
    using A = acc_type<T>;
    T* o = static_cast<T*>(out[0].data_ptr());
    const Tensor& x = in[0];
    // The norm of nothing is 0 for every p, as torch.norm gives (even where
    // the reduction itself has no identity: p = -inf or p < 0): a sum of
    // nothing.
    if (reduce_detail::reduced_count(x.sizes(), dims) == 0) {
      R::template reduce<T>(x, dims, NormSum<M, T, NormKind::Zero>{}, StoreAs<T>{o});
      return;
    }
    switch (norm_kind(p)) {
      case NormKind::Zero: R::template reduce<T>(x, dims, NormSum<M, T, NormKind::Zero>{}, StoreAs<T>{o}); break;
      case NormKind::One: R::template reduce<T>(x, dims, NormSum<M, T, NormKind::One>{}, StoreAs<T>{o}); break;
      case NormKind::Two:
        R::template reduce<T>(x, dims, NormSum<M, T, NormKind::Two>{}, StoreDivided<M, T, true>{o, A(1)});
        break;
      case NormKind::Inf: R::template reduce<T>(x, dims, AbsExtremum<M, T, true>{}, StoreAs<T>{o}); break;
      case NormKind::NegInf: R::template reduce<T>(x, dims, AbsExtremum<M, T, false>{}, StoreAs<T>{o}); break;
      case NormKind::General:
        R::template reduce<T>(x, dims, NormSum<M, T, NormKind::General>{A(p)}, StoreRoot<M, T>{o, A(1.0 / p)});
        break;
    }
  });
}

// logsumexp in two passes: the maximum, then the sum of exp(x - maximum).
template <typename R>
void logsumexp(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), "logsumexp");
  dispatch_floating(in[0].dtype(), "logsumexp", [&]<typename T>() {
    using A = acc_type<T>;
    Tensor shift_buffer = per_output<A>(out[0]);
    A* shift = static_cast<A*>(shift_buffer.data_ptr());
    R::template reduce<T>(in[0], dims, Extremum<M, T, true>{}, StoreShift<M, A>{shift});
    R::template reduce<T>(in[0], dims, SumExp<M, T>{shift}, StoreLogShifted<M, T>{static_cast<T*>(out[0].data_ptr()), shift});
  });
}

template <typename R>
void register_all(DeviceType device) {
  using M = typename R::Math;
  auto set = [device](const char* op, KernelFn kernel) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel));
  };
  // reduce.cpp
  set("sum", [](const TensorList& in, TensorList& out, const Attrs& attrs) { sum_like<R, Sum>("sum", in, out, attrs); });
  set("prod", [](const TensorList& in, TensorList& out, const Attrs& attrs) { sum_like<R, Prod>("prod", in, out, attrs); });
  set("mean", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), "mean");
    const int64_t count = reduce_detail::reduced_count(in[0].sizes(), dims);
    dispatch_floating(in[0].dtype(), "mean", [&]<typename T>() {
      using A = acc_type<T>;
      R::template reduce<T>(in[0], dims, Sum<M, T, A>{}, StoreDivided<M, T, false>{static_cast<T*>(out[0].data_ptr()), A(count)});
    });
  });
  set("all", logical<R, true>);
  set("any", logical<R, false>);

  // reduce_minmax.cpp
  for (const char* name : {"amax", "max"})
    set(name, [name](const TensorList& in, TensorList& out, const Attrs& attrs) { extremum<R, true>(name, in, out, attrs); });
  for (const char* name : {"amin", "min"})
    set(name, [name](const TensorList& in, TensorList& out, const Attrs& attrs) { extremum<R, false>(name, in, out, attrs); });
  set("max_dim", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    arg<R, true>(in[0], wrap_dim(attrs.get_int("dim"), in[0].dim(), "max"), &out[0], out[1]);
  });
  set("min_dim", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    arg<R, false>(in[0], wrap_dim(attrs.get_int("dim"), in[0].dim(), "min"), &out[0], out[1]);
  });
  set("argmax", [](const TensorList& in, TensorList& out, const Attrs& attrs) { argmax<R, true>("argmax", in, out, attrs); });
  set("argmin", [](const TensorList& in, TensorList& out, const Attrs& attrs) { argmax<R, false>("argmin", in, out, attrs); });

  // reduce_stats.cpp
  set("var", var<R, false>);
  set("std", var<R, true>);
  set("norm", norm<R>);
  set("logsumexp", logsumexp<R>);
}

}  // namespace mf::reduce_kernels
