// Note [Composed device kernels]
// softmax, log_softmax, layer_norm and group_norm (and their backward ops)
// written once as passes of a backend's reductions R and elementwise loops L
// (reduce_kernels.h, elementwise_kernels.h): each row statistic (a maximum,
// a sum of exponentials, a mean, a variance) is a reduction into a small
// per-row buffer, and each output an elementwise pass that reads the
// buffers broadcast over the row. A backend without fused kernels of its own
// registers them (the CUDA backend does); the CPU keeps its fused one-pass
// kernels (backend/cpu/kernels/softmax.cpp, norm.cpp). Statistics compute
// in acc_type<T>.
#pragma once

#include "backend/common/elementwise_functors.h"
#include "backend/common/reduce_ops.h"
#include "meshflow/op_def.h"
#include "meshflow/tensor.h"

namespace mf::composed_kernels {

using functors::InAcc;

// --- per-element math -----------------------------------------------------------------

template <typename M>
struct SoftmaxFromStats {  // x, the row's maximum, its sum of exp(x - maximum)
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x, A m, A s) const { return M::exp(x - m) / s; }
};
template <typename M>
struct LogSoftmaxFromStats {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x, A m, A s) const { return x - (m + M::log(s)); }
};
// softmax: dx = y (g - sum(g y));  log_softmax: dx = g - exp(y) sum(g).
struct SoftmaxBackwardFromSum {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A g, A y, A s) const { return y * (g - s); }
};
template <typename M>
struct LogSoftmaxBackwardFromSum {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A g, A y, A s) const { return g - M::exp(y) * s; }
};

// Row normalisation (Note [Row normalisation] in src/ops/norm.cpp), with
// xhat = (x - mean) rstd and w, b the element's affine parameters.
struct NormAffine {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x, A m, A rs, A w, A b) const { return (x - m) * rs * w + b; }
};
struct NormGradXhat {  // g xhat (the weight's gradient terms)
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A g, A x, A m, A rs) const { return g * (x - m) * rs; }
};
struct NormGradWXhat {  // g w xhat
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A g, A x, A m, A rs, A w) const { return g * w * (x - m) * rs; }
};
// dx = rstd (g w - mean(g w) - xhat mean(g w xhat)), a and b the two means.
struct NormGradInput {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A g, A x, A m, A rs, A w, A a, A b) const {
    return rs * (g * w - a - (x - m) * rs * b);
  }
};
template <typename M, typename A>
struct StoreRstd {  // 1 / sqrt(sum of squared deviations / n + eps)
  A* out;
  A n, eps;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, A ss) const { out[i] = A(1) / M::sqrt(ss / n + eps); }
};

// --- helpers --------------------------------------------------------------------------

// x itself when contiguous, else a contiguous copy by the backend's copy.
template <typename R>
Tensor dense(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor c = make_empty(x.sizes(), x.dtype(), x.device());
  R::copy_cast(c, x);
  return c;
}

// A contiguous tensor viewed with `sizes` and the given element strides.
inline Tensor view_as(const Tensor& t, const Shape& sizes, const Shape& strides) {
  return make_view(t, sizes, strides, t.storage_offset());
}

// A per-row buffer of x's shape with `dim` of size 1, and its view
// broadcast back over x.
struct RowStat {
  Tensor buffer, broadcast;
};
template <typename A>
RowStat row_stat(const Tensor& x, int64_t dim) {
  Shape kept = x.sizes();
  kept[size_t(dim)] = 1;
  RowStat s;
  s.buffer = make_empty(kept, dtype_of<A>(), x.device());
  Shape strides = contiguous_strides(kept);
  strides[size_t(dim)] = 0;
  s.broadcast = view_as(s.buffer, x.sizes(), strides);
  return s;
}

inline int64_t softmax_dim(const Tensor& x, const Attrs& attrs) {
  return wrap_dim(attrs.get_int("dim"), std::max<int64_t>(x.dim(), 1), "softmax");
}
// x viewed with at least one dim (a 0-d tensor as (1)).
inline Tensor at_least_1d(const Tensor& x) { return x.dim() == 0 ? view_as(x, {1}, {1}) : x; }

// --- softmax --------------------------------------------------------------------------

template <typename L, typename R, bool kLog>
void softmax(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  if (out[0].numel() == 0) return;
  const Tensor x = at_least_1d(in[0]);
  Tensor y = at_least_1d(out[0]);
  const int64_t dim = softmax_dim(in[0], attrs);
  dispatch_floating(x.dtype(), kLog ? "log_softmax" : "softmax", [&]<typename T>() {
    using A = acc_type<T>;
    const RowStat m = row_stat<A>(x, dim), s = row_stat<A>(x, dim);
    A* mp = static_cast<A*>(m.buffer.data_ptr());
    R::template reduce<T>(x, {dim}, reduce_ops::Extremum<M, T, true>{}, reduce_ops::StoreAs<A>{mp});
    R::template reduce<T>(x, {dim}, reduce_ops::SumExp<M, T>{mp}, reduce_ops::StoreAs<A>{static_cast<A*>(s.buffer.data_ptr())});
    if constexpr (kLog) L::template run<T, T, A, A>(y, {&x, &m.broadcast, &s.broadcast}, InAcc<A, LogSoftmaxFromStats<M>>{});
    else L::template run<T, T, A, A>(y, {&x, &m.broadcast, &s.broadcast}, InAcc<A, SoftmaxFromStats<M>>{});
  });
}

// inputs (grad, output)
template <typename L, typename R, bool kLog>
void softmax_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  if (out[0].numel() == 0) return;
  const Tensor g = at_least_1d(in[0]), y = at_least_1d(in[1]);
  Tensor dx = at_least_1d(out[0]);
  const int64_t dim = softmax_dim(in[0], attrs);
  dispatch_floating(y.dtype(), kLog ? "log_softmax_backward" : "softmax_backward", [&]<typename T>() {
    using A = acc_type<T>;
    const RowStat s = row_stat<A>(y, dim);
    const reduce_ops::StoreAs<A> store{static_cast<A*>(s.buffer.data_ptr())};
    if constexpr (kLog) {
      R::template reduce<T>(g, {dim}, reduce_ops::Sum<M, T, A>{}, store);
      L::template run<T, T, T, A>(dx, {&g, &y, &s.broadcast}, InAcc<A, LogSoftmaxBackwardFromSum<M>>{});
    } else {
      Tensor gy = make_empty(y.sizes(), dtype_of<A>(), y.device());
      L::template run<A, T, T>(gy, {&g, &y}, InAcc<A, functors::Mul>{});
      R::template reduce<A>(gy, {dim}, reduce_ops::Sum<M, A, A>{}, store);
      L::template run<T, T, T, A>(dx, {&g, &y, &s.broadcast}, InAcc<A, SoftmaxBackwardFromSum>{});
    }
  });
}

// --- layer_norm and group_norm --------------------------------------------------------

// Note [Row normalisation]'s layout as a 4-d view (N, G, S, U) of the
// contiguous x: N = rows / G, G groups, S segments, U the run. The row
// statistics (N * G of them) broadcast over (S, U), the weights (G * S of
// them) over N and U.
struct NormLayout {
  int64_t n = 1, groups = 1, segments = 1, run = 1;
  Shape sizes() const { return {n, groups, segments, run}; }
  int64_t row_size() const { return segments * run; }
};
inline NormLayout norm_layout(const Tensor& x, const Attrs& attrs) {
  NormLayout l;
  if (attrs.has("num_groups")) {
    l.groups = attrs.get_int("num_groups");
    l.n = x.sizes()[0];
    l.segments = x.sizes()[1] / l.groups;
    for (int64_t d = 2; d < x.dim(); ++d) l.run *= x.sizes()[size_t(d)];
  } else {
    const int64_t k = attrs.get_int("normalized_ndim");
    l.n = 1, l.segments = 1;
    for (int64_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? l.n : l.segments) *= x.sizes()[size_t(d)];
  }
  return l;
}
inline Tensor rows_view(const Tensor& x, const NormLayout& l) {
  return view_as(x, {l.n * l.groups, l.row_size()}, {l.row_size(), 1});
}
inline Tensor norm_view(const Tensor& x, const NormLayout& l) { return view_as(x, l.sizes(), contiguous_strides(l.sizes())); }
inline Tensor stat_view(const Tensor& s, const NormLayout& l) { return view_as(s, l.sizes(), {l.groups, 1, 0, 0}); }
// The affine parameter p (one per weight, contiguous), or `fallback` (one
// element) everywhere when p is undefined.
template <typename R>
Tensor param_view(const Tensor& p, const NormLayout& l, const Tensor& fallback) {
  if (!p.defined()) return view_as(fallback, l.sizes(), {0, 0, 0, 0});
  return view_as(dense<R>(p), l.sizes(), {0, l.segments, 1, 0});
}
template <typename L, typename T>
Tensor constant(T value, const Tensor& like) {
  Tensor c = make_empty({1}, like.dtype(), like.device());
  L::template run<T>(c, {}, functors::Constant<T>{value});
  return c;
}

// inputs (x, weight, bias); outputs (y, mean, rstd)
template <typename L, typename R>
void norm(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const NormLayout l = norm_layout(in[0], attrs);
  dispatch_floating(in[0].dtype(), "norm", [&]<typename T>() {
    using A = acc_type<T>;
    const Tensor x = dense<R>(in[0]);
    A* mean = static_cast<A*>(out[1].data_ptr());
    // Rows of no elements: mean 0 and rstd 1 / sqrt(eps), as the CPU gives.
    const A n = A(std::max<int64_t>(l.row_size(), 1));
    if (l.n * l.groups > 0) {
      const Tensor rows = rows_view(x, l);
      R::template reduce<T>(rows, {1}, reduce_ops::Sum<M, T, A>{}, reduce_ops::StoreDivided<M, A, false>{mean, n});
      R::template reduce<T>(rows, {1}, reduce_ops::SquaredDeviation<M, T>{mean},
                            StoreRstd<M, A>{static_cast<A*>(out[2].data_ptr()), n, A(attrs.get_float("eps"))});
    }
    if (out[0].numel() == 0) return;
    const Tensor one = constant<L>(T(1.0f), x), zero = constant<L>(T(0.0f), x);
    const Tensor x4 = norm_view(x, l), m4 = stat_view(out[1], l), r4 = stat_view(out[2], l);
    const Tensor w4 = param_view<R>(in[1], l, one), b4 = param_view<R>(in[2], l, zero);
    Tensor y4 = norm_view(out[0], l);
    L::template run<T, T, A, A, T, T>(y4, {&x4, &m4, &r4, &w4, &b4}, InAcc<A, NormAffine>{});
  });
}

// inputs (grad, x, mean, rstd, weight); outputs (dx, dweight, dbias), each
// empty when not asked for (attrs need_input, need_affine).
template <typename L, typename R>
void norm_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const NormLayout l = norm_layout(in[1], attrs);
  dispatch_floating(in[1].dtype(), "norm_backward", [&]<typename T>() {
    using A = acc_type<T>;
    if (in[1].numel() == 0) {
      if (attrs.get_bool("need_affine"))
        for (int k : {1, 2}) L::template run<T>(out[size_t(k)], {}, functors::Constant<T>{T(0.0f)});
      return;
    }
    const Tensor g = dense<R>(in[0]), x = dense<R>(in[1]);
    const Tensor one = constant<L>(T(1.0f), x);
    const Tensor mean = dense<R>(in[2]), rstd = dense<R>(in[3]);
    const Tensor g4 = norm_view(g, l), x4 = norm_view(x, l), m4 = stat_view(mean, l), r4 = stat_view(rstd, l);
    const Tensor w4 = param_view<R>(in[4], l, one);
    if (attrs.get_bool("need_input")) {
      // The two row means of dx, from temporaries of x's shape in A.
      Tensor terms = make_empty(l.sizes(), dtype_of<A>(), x.device());
      Tensor a = make_empty({l.n * l.groups}, dtype_of<A>(), x.device());
      Tensor b = make_empty({l.n * l.groups}, dtype_of<A>(), x.device());
      const A n = A(l.row_size());
      const Tensor terms_rows = rows_view(terms, l);
      L::template run<A, T, T>(terms, {&g4, &w4}, InAcc<A, functors::Mul>{});
      R::template reduce<A>(terms_rows, {1}, reduce_ops::Sum<M, A, A>{},
                            reduce_ops::StoreDivided<M, A, false>{static_cast<A*>(a.data_ptr()), n});
      L::template run<A, T, T, A, A, T>(terms, {&g4, &x4, &m4, &r4, &w4}, InAcc<A, NormGradWXhat>{});
      R::template reduce<A>(terms_rows, {1}, reduce_ops::Sum<M, A, A>{},
                            reduce_ops::StoreDivided<M, A, false>{static_cast<A*>(b.data_ptr()), n});
      const Tensor a4 = stat_view(a, l), b4 = stat_view(b, l);
      Tensor dx4 = norm_view(out[0], l);
      L::template run<T, T, T, A, A, T, A, A>(dx4, {&g4, &x4, &m4, &r4, &w4, &a4, &b4}, InAcc<A, NormGradInput>{});
    }
    if (attrs.get_bool("need_affine")) {
      // Summed over N and U: one value per (group, segment), the weights' order.
      Tensor gx = make_empty(l.sizes(), dtype_of<A>(), x.device());
      L::template run<A, T, T, A, A>(gx, {&g4, &x4, &m4, &r4}, InAcc<A, NormGradXhat>{});
      R::template reduce<A>(gx, {0, 3}, reduce_ops::Sum<M, A, A>{}, reduce_ops::StoreAs<T>{static_cast<T*>(out[1].data_ptr())});
      R::template reduce<T>(g4, {0, 3}, reduce_ops::Sum<M, T, A>{}, reduce_ops::StoreAs<T>{static_cast<T*>(out[2].data_ptr())});
    }
  });
}

template <typename L, typename R>
void register_all(DeviceType device) {
  auto set = [device](const char* op, KernelFn kernel) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel));
  };
  set("softmax", softmax<L, R, false>);
  set("log_softmax", softmax<L, R, true>);
  set("softmax_backward", softmax_backward<L, R, false>);
  set("log_softmax_backward", softmax_backward<L, R, true>);
  for (const char* op : {"layer_norm", "group_norm"}) set(op, norm<L, R>);
  for (const char* op : {"layer_norm_backward", "group_norm_backward"}) set(op, norm_backward<L, R>);
}

}  // namespace mf::composed_kernels
