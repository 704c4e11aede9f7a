// The reduction ops' kernels, written once over a backend's reduction loops
// (Note [Shared reduction ops] in reduce_ops.h): dtype dispatch, attributes,
// the passes of the two-pass ops (var, logsumexp) and the stores. A backend
// instantiates the table with its reducer R and registers it for its device
// type:
//
//   R::Math                                   the backend's math
//   R::reduce<T>(x, dims, op, store, taken)   store(o, acc) for each flat index
//                                             o of the contiguous output: op
//                                             over x (dtype T) along dims
//                                             (sorted, wrapped)
//   R::reduce_arg<T, kMax>(x, dim, values, indices, taken)
//                                             the first position of the
//                                             extremum along dim (and the
//                                             value, where values is not null)
//   R::scratch_bytes(x, dims)                 what one reduction takes from
//                                             `taken`, the kernel's scratch
//                                             (Note [Reduction scratch])
//   R::copy_cast(dst, src)                    the backend's copy
//
// The ops' schemas, inference, backward and functional API live in
// src/ops/ (reduce.cpp, reduce_minmax.cpp, reduce_stats.cpp).
#pragma once

#include "backend/common/reduce_ops.h"
#include "backend/common/reduce_geometry.h"
#include "backend/common/scratch.h"
#include "meshflow/op_def.h"
#include "ops/reduce_common.h"

namespace mf::reduce_kernels {

using namespace reduce_ops;

// The accumulator dtype of a floating dtype (acc_type).
inline DType acc_dtype(DType dtype) { return dtype == DType::Float64 ? DType::Float64 : DType::Float32; }

// A kernel's scratch (Note [Reduction scratch]): its own pieces, then the
// largest share of its reductions, each of x (a layout) over dims.
template <typename R>
int64_t with_reductions(ScratchLayout own, std::initializer_list<std::pair<Tensor, Shape>> reductions) {
  int64_t most = 0;
  for (const auto& [x, dims] : reductions) most = std::max(most, R::scratch_bytes(x, dims));
  return own.add_bytes(most).bytes();
}

// Op<M, In, sum_acc_t<Out>> over in[0] into out[0]. Same dtypes, or
// integers/bool into int64, run directly; other pairs cast the input first.
template <typename R, template <typename, typename, typename> class Op>
void sum_like(const char* name, const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), name);
  const DType od = out[0].dtype();
  Scratch taken(out);
  auto run = [&]<typename In, typename Out>(const Tensor& x) {
    R::template reduce<In>(x, dims, Op<M, In, sum_acc_t<Out>>{}, StoreAs<Out>{static_cast<Out*>(out[0].data_ptr())},
                           taken);
  };
  if (in[0].dtype() == od) {
    dispatch_dtype(od, [&]<typename T>() { run.template operator()<T, T>(in[0]); });
  } else if (od == DType::Int64 && is_integral(in[0].dtype(), true)) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() { run.template operator()<T, int64_t>(in[0]); });
  } else {
    Tensor x = taken.take(in[0].sizes(), od);
    R::copy_cast(x, in[0]);
    dispatch_dtype(od, [&]<typename T>() { run.template operator()<T, T>(x); });
  }
}

template <typename R, bool kAll>
void logical(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), kAll ? "all" : "any");
  Scratch taken(out);
  dispatch_dtype(in[0].dtype(), [&]<typename T>() {
    if (out[0].dtype() == DType::UInt8)
      R::template reduce<T>(in[0], dims, Logical<M, T, kAll>{}, StoreAs<uint8_t>{static_cast<uint8_t*>(out[0].data_ptr())},
                            taken);
    else
      R::template reduce<T>(in[0], dims, Logical<M, T, kAll>{}, StoreAs<bool>{static_cast<bool*>(out[0].data_ptr())},
                            taken);
  });
}

template <typename R, bool kMax>
void extremum(const char* name, const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), name);
  Scratch taken(out);
  dispatch_dtype(in[0].dtype(), [&]<typename T>() {
    R::template reduce<T>(in[0], dims, Extremum<M, T, kMax>{}, StoreAs<T>{static_cast<T*>(out[0].data_ptr())}, taken);
  });
}

// x viewed so that reducing `dim` is well defined (a 0-d tensor as (1)).
inline Tensor as_reducible(const Tensor& x) {
  return x.dim() == 0 ? make_view(x, {1}, {1}, x.storage_offset()) : x;
}

template <typename R, bool kMax>
void arg(const Tensor& x, int64_t dim, Tensor* values, Tensor& indices, Scratch& taken) {
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    R::template reduce_arg<T, kMax>(as_reducible(x), dim, values ? static_cast<T*>(values->data_ptr()) : nullptr,
                                    static_cast<int64_t*>(indices.data_ptr()), taken);
  });
}

// argmax/argmin: attr "dims" holds the dim, or nothing for the flattened
// input (an index into it, row-major).
template <typename R, bool kMax>
void argmax(const char* name, const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Shape& raw = attrs.get_shape("dims");
  Scratch taken(out);
  if (!raw.empty()) {
    arg<R, kMax>(x, wrap_dim(raw[0], x.dim(), name), nullptr, out[0], taken);
    return;
  }
  Tensor dense = x;
  if (!x.is_contiguous()) {
    dense = taken.take(x.sizes(), x.dtype());
    R::copy_cast(dense, x);
  }
  arg<R, kMax>(make_view(dense, {x.numel()}, {1}, dense.storage_offset()), 0, nullptr, out[0], taken);
}

// A per-output buffer of accumulators (var's means, logsumexp's shifts).
template <typename A>
Tensor per_output(const Tensor& out, Scratch& taken) {
  return taken.take({out.numel()}, dtype_of<A>());
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
  Scratch taken(out);
  dispatch_floating(in[0].dtype(), name, [&]<typename T>() {
    using A = acc_type<T>;
    Tensor mean = per_output<A>(out[0], taken);
    A* centre = static_cast<A*>(mean.data_ptr());
    R::template reduce<T>(in[0], dims, Sum<M, T, A>{}, StoreDivided<M, A, false>{centre, A(n)}, taken);
    R::template reduce<T>(in[0], dims, SquaredDeviation<M, T>{centre},
                          StoreDivided<M, T, kStd>{static_cast<T*>(out[0].data_ptr()), A(denom)}, taken);
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
  Scratch taken(out);
  dispatch_floating(in[0].dtype(), "norm", [&]<typename T>() {
    using A = acc_type<T>;
    T* o = static_cast<T*>(out[0].data_ptr());
    const Tensor& x = in[0];
    // The norm of nothing is 0 for every p, as torch.norm gives (even where
    // the reduction itself has no identity: p = -inf or p < 0): a sum of
    // nothing.
    if (reduce_detail::reduced_count(x.sizes(), dims) == 0) {
      R::template reduce<T>(x, dims, NormSum<M, T, NormKind::Zero>{}, StoreAs<T>{o}, taken);
      return;
    }
    switch (norm_kind(p)) {
      case NormKind::Zero: R::template reduce<T>(x, dims, NormSum<M, T, NormKind::Zero>{}, StoreAs<T>{o}, taken); break;
      case NormKind::One: R::template reduce<T>(x, dims, NormSum<M, T, NormKind::One>{}, StoreAs<T>{o}, taken); break;
      case NormKind::Two:
        R::template reduce<T>(x, dims, NormSum<M, T, NormKind::Two>{}, StoreDivided<M, T, true>{o, A(1)}, taken);
        break;
      case NormKind::Inf: R::template reduce<T>(x, dims, AbsExtremum<M, T, true>{}, StoreAs<T>{o}, taken); break;
      case NormKind::NegInf: R::template reduce<T>(x, dims, AbsExtremum<M, T, false>{}, StoreAs<T>{o}, taken); break;
      case NormKind::General:
        R::template reduce<T>(x, dims, NormSum<M, T, NormKind::General>{A(p)}, StoreRoot<M, T>{o, A(1.0 / p)}, taken);
        break;
    }
  });
}

// logsumexp in two passes: the maximum, then the sum of exp(x - maximum).
template <typename R>
void logsumexp(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), "logsumexp");
  Scratch taken(out);
  dispatch_floating(in[0].dtype(), "logsumexp", [&]<typename T>() {
    using A = acc_type<T>;
    Tensor shift_buffer = per_output<A>(out[0], taken);
    A* shift = static_cast<A*>(shift_buffer.data_ptr());
    R::template reduce<T>(in[0], dims, Extremum<M, T, true>{}, StoreShift<M, A>{shift}, taken);
    R::template reduce<T>(in[0], dims, SumExp<M, T>{shift}, StoreLogShifted<M, T>{static_cast<T*>(out[0].data_ptr()), shift},
                          taken);
  });
}

// The kernels' ScratchFns (Note [Reduction scratch]).
template <typename R>
int64_t over_dims_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  return with_reductions<R>(ScratchLayout("reduction"),
                            {{in[0], reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), "reduction")}});
}
// sum, prod: a cast copy where sum_like makes one.
template <typename R>
int64_t sum_like_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), x.dim(), "sum");
  const DType od = out[0].dtype;
  if (x.dtype() == od || (od == DType::Int64 && is_integral(x.dtype(), true)))
    return with_reductions<R>(ScratchLayout("sum"), {{x, dims}});
  return with_reductions<R>(ScratchLayout("sum").add(x.sizes(), od), {{make_meta(x.sizes(), od, x.device()), dims}});
}
// var, std, logsumexp: a buffer of accumulators per output.
template <typename R>
int64_t per_output_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), "reduction");
  return with_reductions<R>(ScratchLayout("reduction").add({shape_numel(out[0].sizes)}, acc_dtype(in[0].dtype())),
                            {{in[0], dims}});
}
// max_dim, min_dim: the attr "dim".
template <typename R>
int64_t over_dim_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  return with_reductions<R>(ScratchLayout("max"),
                            {{as_reducible(in[0]), {wrap_dim(attrs.get_int("dim"), in[0].dim(), "max")}}});
}
// argmax, argmin: over a dim, or over the flattened input (a dense copy
// first where it is strided).
template <typename R>
int64_t argmax_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Shape& raw = attrs.get_shape("dims");
  if (!raw.empty()) return with_reductions<R>(ScratchLayout("argmax"), {{as_reducible(x), {wrap_dim(raw[0], x.dim(), "argmax")}}});
  ScratchLayout own("argmax");
  if (!x.is_contiguous()) own.add(x.sizes(), x.dtype());
  return with_reductions<R>(own, {{make_meta({x.numel()}, x.dtype(), x.device()), {0}}});
}

template <typename R>
void register_all(DeviceType device) {
  using M = typename R::Math;
  auto set = [device](const char* op, KernelFn kernel, ScratchFn scratch) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel), std::move(scratch));
  };
  // reduce.cpp
  set("sum", [](const TensorList& in, TensorList& out, const Attrs& attrs) { sum_like<R, Sum>("sum", in, out, attrs); },
      sum_like_scratch<R>);
  set("prod", [](const TensorList& in, TensorList& out, const Attrs& attrs) { sum_like<R, Prod>("prod", in, out, attrs); },
      sum_like_scratch<R>);
  set("mean", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const Shape dims = reduce_detail::normalize_dims(attrs.get_shape("dims"), in[0].dim(), "mean");
    const int64_t count = reduce_detail::reduced_count(in[0].sizes(), dims);
    Scratch taken(out);
    dispatch_floating(in[0].dtype(), "mean", [&]<typename T>() {
      using A = acc_type<T>;
      R::template reduce<T>(in[0], dims, Sum<M, T, A>{},
                            StoreDivided<M, T, false>{static_cast<T*>(out[0].data_ptr()), A(count)}, taken);
    });
  }, over_dims_scratch<R>);
  set("all", logical<R, true>, over_dims_scratch<R>);
  set("any", logical<R, false>, over_dims_scratch<R>);

  // reduce_minmax.cpp
  for (const char* name : {"amax", "max"})
    set(name, [name](const TensorList& in, TensorList& out, const Attrs& attrs) { extremum<R, true>(name, in, out, attrs); },
        over_dims_scratch<R>);
  for (const char* name : {"amin", "min"})
    set(name, [name](const TensorList& in, TensorList& out, const Attrs& attrs) { extremum<R, false>(name, in, out, attrs); },
        over_dims_scratch<R>);
  set("max_dim", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    Scratch taken(out);
    arg<R, true>(in[0], wrap_dim(attrs.get_int("dim"), in[0].dim(), "max"), &out[0], out[1], taken);
  }, over_dim_scratch<R>);
  set("min_dim", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    Scratch taken(out);
    arg<R, false>(in[0], wrap_dim(attrs.get_int("dim"), in[0].dim(), "min"), &out[0], out[1], taken);
  }, over_dim_scratch<R>);
  set("argmax", [](const TensorList& in, TensorList& out, const Attrs& attrs) { argmax<R, true>("argmax", in, out, attrs); },
      argmax_scratch<R>);
  set("argmin", [](const TensorList& in, TensorList& out, const Attrs& attrs) { argmax<R, false>("argmin", in, out, attrs); },
      argmax_scratch<R>);

  // reduce_stats.cpp
  set("var", var<R, false>, per_output_scratch<R>);
  set("std", var<R, true>, per_output_scratch<R>);
  set("norm", norm<R>, over_dims_scratch<R>);
  set("logsumexp", logsumexp<R>, per_output_scratch<R>);
}

}  // namespace mf::reduce_kernels
