// Note [Composed device kernels]
// softmax, log_softmax, layer_norm, group_norm and batch_norm (and their
// backward ops)
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
#include "backend/common/elementwise_kernels.h"
#include "backend/common/index_kernels.h"
#include "backend/common/reduce_kernels.h"
#include "backend/common/reduce_ops.h"
#include "backend/common/scratch.h"
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

// x itself when contiguous, else a contiguous copy (in scratch) by the
// backend's copy.
template <typename R>
Tensor dense(const Tensor& x, Scratch& taken) {
  if (x.is_contiguous()) return x;
  Tensor c = taken.take(x.sizes(), x.dtype());
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
inline Shape kept_shape(const Tensor& x, int64_t dim) {
  Shape kept = x.sizes();
  kept[size_t(dim)] = 1;
  return kept;
}
template <typename A>
RowStat row_stat(const Tensor& x, int64_t dim, Scratch& taken) {
  const Shape kept = kept_shape(x, dim);
  RowStat s;
  s.buffer = taken.take(kept, dtype_of<A>());
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
  Scratch taken(out);
  dispatch_floating(x.dtype(), kLog ? "log_softmax" : "softmax", [&]<typename T>() {
    using A = acc_type<T>;
    const RowStat m = row_stat<A>(x, dim, taken), s = row_stat<A>(x, dim, taken);
    A* mp = static_cast<A*>(m.buffer.data_ptr());
    R::template reduce<T>(x, {dim}, reduce_ops::Extremum<M, T, true>{}, reduce_ops::StoreAs<A>{mp}, taken);
    R::template reduce<T>(x, {dim}, reduce_ops::SumExp<M, T>{mp},
                          reduce_ops::StoreAs<A>{static_cast<A*>(s.buffer.data_ptr())}, taken);
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
  Scratch taken(out);
  dispatch_floating(y.dtype(), kLog ? "log_softmax_backward" : "softmax_backward", [&]<typename T>() {
    using A = acc_type<T>;
    const RowStat s = row_stat<A>(y, dim, taken);
    const reduce_ops::StoreAs<A> store{static_cast<A*>(s.buffer.data_ptr())};
    if constexpr (kLog) {
      R::template reduce<T>(g, {dim}, reduce_ops::Sum<M, T, A>{}, store, taken);
      L::template run<T, T, T, A>(dx, {&g, &y, &s.broadcast}, InAcc<A, LogSoftmaxBackwardFromSum<M>>{});
    } else {
      Tensor gy = taken.take(y.sizes(), dtype_of<A>());
      L::template run<A, T, T>(gy, {&g, &y}, InAcc<A, functors::Mul>{});
      R::template reduce<A>(gy, {dim}, reduce_ops::Sum<M, A, A>{}, store, taken);
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
Tensor param_view(const Tensor& p, const NormLayout& l, const Tensor& fallback, Scratch& taken) {
  if (!p.defined()) return view_as(fallback, l.sizes(), {0, 0, 0, 0});
  return view_as(dense<R>(p, taken), l.sizes(), {0, l.segments, 1, 0});
}
template <typename L, typename T>
Tensor constant(T value, const Tensor& like, Scratch& taken) {
  Tensor c = taken.take({1}, like.dtype());
  L::template run<T>(c, {}, functors::Constant<T>{value});
  return c;
}

// inputs (x, weight, bias); outputs (y, mean, rstd)
template <typename L, typename R>
void norm(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const NormLayout l = norm_layout(in[0], attrs);
  Scratch taken(out);
  dispatch_floating(in[0].dtype(), "norm", [&]<typename T>() {
    using A = acc_type<T>;
    // The pieces first (norm_scratch), then the reductions.
    const Tensor x = dense<R>(in[0], taken);
    const Tensor one = constant<L>(T(1.0f), x, taken), zero = constant<L>(T(0.0f), x, taken);
    const Tensor w4 = param_view<R>(in[1], l, one, taken), b4 = param_view<R>(in[2], l, zero, taken);
    A* mean = static_cast<A*>(out[1].data_ptr());
    // Rows of no elements: mean 0 and rstd 1 / sqrt(eps), as the CPU gives.
    const A n = A(std::max<int64_t>(l.row_size(), 1));
    if (l.n * l.groups > 0) {
      const Tensor rows = rows_view(x, l);
      R::template reduce<T>(rows, {1}, reduce_ops::Sum<M, T, A>{}, reduce_ops::StoreDivided<M, A, false>{mean, n},
                            taken);
      R::template reduce<T>(rows, {1}, reduce_ops::SquaredDeviation<M, T>{mean},
                            StoreRstd<M, A>{static_cast<A*>(out[2].data_ptr()), n, A(attrs.get_float("eps"))}, taken);
    }
    if (out[0].numel() == 0) return;
    const Tensor x4 = norm_view(x, l), m4 = stat_view(out[1], l), r4 = stat_view(out[2], l);
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
  Scratch taken(out);
  dispatch_floating(in[1].dtype(), "norm_backward", [&]<typename T>() {
    using A = acc_type<T>;
    if (in[1].numel() == 0) {
      if (attrs.get_bool("need_affine"))
        for (int k : {1, 2}) L::template run<T>(out[size_t(k)], {}, functors::Constant<T>{T(0.0f)});
      return;
    }
    // The pieces first (norm_backward_scratch), then the reductions.
    const bool need_input = attrs.get_bool("need_input"), need_affine = attrs.get_bool("need_affine");
    const Tensor g = dense<R>(in[0], taken), x = dense<R>(in[1], taken);
    const Tensor one = constant<L>(T(1.0f), x, taken);
    const Tensor mean = dense<R>(in[2], taken), rstd = dense<R>(in[3], taken);
    const Tensor g4 = norm_view(g, l), x4 = norm_view(x, l), m4 = stat_view(mean, l), r4 = stat_view(rstd, l);
    const Tensor w4 = param_view<R>(in[4], l, one, taken);
    // The two row means of dx, from temporaries of x's shape in A; the
    // affine gradients' terms.
    Tensor terms, a, b, gx;
    if (need_input) {
      terms = taken.take(l.sizes(), dtype_of<A>());
      a = taken.take({l.n * l.groups}, dtype_of<A>());
      b = taken.take({l.n * l.groups}, dtype_of<A>());
    }
    if (need_affine) gx = taken.take(l.sizes(), dtype_of<A>());
    if (need_input) {
      const A n = A(l.row_size());
      const Tensor terms_rows = rows_view(terms, l);
      L::template run<A, T, T>(terms, {&g4, &w4}, InAcc<A, functors::Mul>{});
      R::template reduce<A>(terms_rows, {1}, reduce_ops::Sum<M, A, A>{},
                            reduce_ops::StoreDivided<M, A, false>{static_cast<A*>(a.data_ptr()), n}, taken);
      L::template run<A, T, T, A, A, T>(terms, {&g4, &x4, &m4, &r4, &w4}, InAcc<A, NormGradWXhat>{});
      R::template reduce<A>(terms_rows, {1}, reduce_ops::Sum<M, A, A>{},
                            reduce_ops::StoreDivided<M, A, false>{static_cast<A*>(b.data_ptr()), n}, taken);
      const Tensor a4 = stat_view(a, l), b4 = stat_view(b, l);
      Tensor dx4 = norm_view(out[0], l);
      L::template run<T, T, T, A, A, T, A, A>(dx4, {&g4, &x4, &m4, &r4, &w4, &a4, &b4}, InAcc<A, NormGradInput>{});
    }
    if (need_affine) {
      // Summed over N and U: one value per (group, segment), the weights' order.
      L::template run<A, T, T, A, A>(gx, {&g4, &x4, &m4, &r4}, InAcc<A, NormGradXhat>{});
      R::template reduce<A>(gx, {0, 3}, reduce_ops::Sum<M, A, A>{},
                            reduce_ops::StoreAs<T>{static_cast<T*>(out[1].data_ptr())}, taken);
      R::template reduce<T>(g4, {0, 3}, reduce_ops::Sum<M, T, A>{},
                            reduce_ops::StoreAs<T>{static_cast<T*>(out[2].data_ptr())}, taken);
    }
  });
}

// --- batch_norm -----------------------------------------------------------------------
// (src/ops/batch_norm.cpp) Per-channel statistics in float64, as the CPU
// kernels keep them: sums over every dim but the channel dim (1), a walk
// over the channels for the running statistics and the affine
// coefficients, and elementwise passes reading the coefficients broadcast.
// The backward's sum of g (x - mean) goes through a float64 buffer of x's
// shape.

template <typename M, typename T>
struct SquaredFromMean {  // (x - mean[c])^2 in float64
  using Acc = double;
  const double* mean;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return 0.0; }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t c) const {
    const double d = double(M::template to_acc<acc_type<T>>(x)) - mean[c];
    return d * d;
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
};
struct StoreScaled {  // out[c] = a * factor
  double* out;
  double factor;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, double a) const { out[i] = a * factor; }
};
template <typename M, typename T>
struct GradCentered {  // g (x - mean), in float64
  MF_FORCE_INLINE MF_HOST_DEVICE double operator()(T g, T x, double mean) const {
    return double(M::template to_acc<acc_type<T>>(g)) * (double(M::template to_acc<acc_type<T>>(x)) - mean);
  }
};
template <typename M, typename T>
struct ScaleShift {  // x scale + shift
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T x, double scale, double shift) const {
    return T(double(M::template to_acc<acc_type<T>>(x)) * scale + shift);
  }
};
template <typename M, typename T>
struct ChannelAffine {  // g alpha + x beta + gamma
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T g, T x, double alpha, double beta, double gamma) const {
    return T(double(M::template to_acc<acc_type<T>>(g)) * alpha + double(M::template to_acc<acc_type<T>>(x)) * beta +
             gamma);
  }
};

// A per-channel vector (any strides) read as float64; `fallback` when absent.
template <typename M, typename V>
struct ChannelVector {
  V* p = nullptr;
  int64_t stride = 0;
  double fallback = 0;
  MF_FORCE_INLINE MF_HOST_DEVICE double at(int64_t c) const {
    return p ? double(M::template to_acc<acc_type<V>>(p[c * stride])) : fallback;
  }
  MF_FORCE_INLINE MF_HOST_DEVICE void set(int64_t c, double v) const { p[c * stride] = V(v); }
};
template <typename M, typename V>
ChannelVector<M, V> channel_vector(const Tensor& t, double fallback) {
  if (!t.defined()) return {nullptr, 0, fallback};
  return {static_cast<V*>(t.data_ptr()), t.strides()[0], fallback};
}

// Operands over the channels (float64 buffers): 0 the batch mean, 1 the
// biased batch variance (training only), 2 scale, 3 shift; 4 the mean
// used and 5 its invstd (stats dtype S). Running statistics (dtype Rs)
// are updated in training.
template <typename M, typename T, typename S, typename Rs>
struct ChannelStats {
  ChannelVector<M, T> w, b;
  ChannelVector<M, Rs> running_mean, running_var;
  bool training;
  double eps, momentum, count;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t c = off[0] / int64_t(sizeof(double));
    double mu, invstd;
    if (training) {
      const double var = *reinterpret_cast<const double*>(data[1] + off[1]);
      mu = *reinterpret_cast<const double*>(data[0] + off[0]);
      invstd = 1.0 / M::sqrt(var + eps);
      if (running_mean.p && count > 1) {
        running_mean.set(c, (1 - momentum) * running_mean.at(c) + momentum * mu);
        running_var.set(c, (1 - momentum) * running_var.at(c) + momentum * var * count / (count - 1));
      }
    } else {
      mu = running_mean.at(c);
      invstd = 1.0 / M::sqrt(running_var.at(c) + eps);
    }
    const double scale = invstd * w.at(c);
    *reinterpret_cast<double*>(data[2] + off[2]) = scale;
    *reinterpret_cast<double*>(data[3] + off[3]) = b.at(c) - mu * scale;
    *reinterpret_cast<S*>(data[4] + off[4]) = S(mu);
    *reinterpret_cast<S*>(data[5] + off[5]) = S(invstd);
  }
};

// Every dim of x but the channel dim (1).
inline Shape all_but_channels(const Tensor& x) {
  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}
// A (C) vector viewed broadcast over x.
inline Tensor over_channels(const Tensor& v, const Tensor& x) {
  Shape strides(size_t(x.dim()), 0);
  strides[1] = v.strides()[0];
  return view_as(v, x.sizes(), strides);
}
inline Tensor channel_buffer(int64_t c, Scratch& taken) { return taken.take({c}, DType::Float64); }

// Inputs (x, weight, bias, running_mean, running_var); outputs (y, mean, invstd).
template <typename L, typename R>
void batch_norm(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Tensor& x = in[0];
  const bool training = attrs.get_bool("training");
  const int64_t channels = x.sizes()[1];
  if (channels == 0) return;
  const double count = double(x.numel() / channels);
  const Device device = x.device();
  Scratch taken(out);
  Tensor mean = channel_buffer(channels, taken), var = channel_buffer(channels, taken);
  Tensor scale = channel_buffer(channels, taken), shift = channel_buffer(channels, taken);
  dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
    using S = acc_type<T>;
    if (training) {
      const Shape dims = all_but_channels(x);
      double* mp = static_cast<double*>(mean.data_ptr());
      const double inverse = count > 0 ? 1.0 / count : 0.0;
      R::template reduce<T>(x, dims, reduce_ops::Sum<M, T, double>{}, StoreScaled{mp, inverse}, taken);
      R::template reduce<T>(x, dims, SquaredFromMean<M, T>{mp}, StoreScaled{static_cast<double*>(var.data_ptr()), inverse},
                            taken);
    }
    auto run = [&]<typename Rs>() {
      const ChannelStats<M, T, S, Rs> stats{channel_vector<M, T>(in[1], 1.0),  channel_vector<M, T>(in[2], 0.0),
                                            channel_vector<M, Rs>(in[3], 0.0), channel_vector<M, Rs>(in[4], 1.0),
                                            training, attrs.get_float("eps"), attrs.get_float("momentum"), count};
      const LoopGeometry<6> g = index_kernels::walk_geometry<6>(
          {channels},
          {index_kernels::operand(mean, {1}), index_kernels::operand(var, {1}), index_kernels::operand(scale, {1}),
           index_kernels::operand(shift, {1}), index_kernels::operand(out[1], out[1].strides()),
           index_kernels::operand(out[2], out[2].strides())},
          "batch_norm");
      L::template for_each<6>(device, g, channels, stats);
    };
    if (in[3].defined())
      dispatch_floating(in[3].dtype(), "batch_norm", [&]<typename Rs>() { run.template operator()<Rs>(); });
    else
      run.template operator()<T>();
    const Tensor sc = over_channels(scale, x), sh = over_channels(shift, x);
    L::template run<T, T, double, double>(out[0], {&x, &sc, &sh}, ScaleShift<M, T>{});
  });
}

// Inputs (grad, x, mean, invstd, weight); outputs (dx, dweight, dbias),
// each empty when not asked for. With M values per channel, sg = sum(g),
// sgx = sum(g (x - mean)) invstd, alpha = w invstd:
//   dx = g alpha + x beta + gamma, beta = -alpha invstd sgx / M (0 in eval),
//   gamma = -alpha sg / M - beta mean (0 in eval); dw = sgx, db = sg.
template <typename M, typename T, typename S>
struct BackwardCoefficients {
  ChannelVector<M, S> mean, invstd;
  ChannelVector<M, T> w;
  bool training;
  double count;
  // Operands over the channels (float64): 0 sg, 1 sgx (scaled by invstd
  // here), 2 alpha, 3 beta, 4 gamma.
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t c = off[0] / int64_t(sizeof(double));
    const double sg = *reinterpret_cast<const double*>(data[0] + off[0]);
    double& sgx = *reinterpret_cast<double*>(data[1] + off[1]);
    sgx *= invstd.at(c);
    const double alpha = w.at(c) * invstd.at(c);
    double beta = 0, gamma = 0;
    if (training) {
      beta = -alpha * invstd.at(c) * sgx / count;
      gamma = -alpha * sg / count - beta * mean.at(c);
    }
    *reinterpret_cast<double*>(data[2] + off[2]) = alpha;
    *reinterpret_cast<double*>(data[3] + off[3]) = beta;
    *reinterpret_cast<double*>(data[4] + off[4]) = gamma;
  }
};

template <typename L, typename R>
void batch_norm_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const Tensor &g = in[0], &x = in[1];
  const bool training = attrs.get_bool("training");
  const bool need_input = attrs.get_bool("need_input"), need_affine = attrs.get_bool("need_affine");
  const int64_t channels = x.sizes()[1];
  if (channels == 0) return;
  const double count = double(x.numel() / channels);
  const Device device = x.device();
  const bool reduced = training || need_affine;
  Scratch taken(out);
  Tensor sg = channel_buffer(channels, taken), sgx = channel_buffer(channels, taken);
  Tensor alpha = channel_buffer(channels, taken), beta = channel_buffer(channels, taken),
         gamma = channel_buffer(channels, taken);
  // The mean as float64, broadcast over x, for the centred products.
  Tensor mean64, products;
  if (reduced) mean64 = channel_buffer(channels, taken), products = taken.take(x.sizes(), DType::Float64);
  dispatch_floating(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using S = acc_type<T>;
    const ChannelVector<M, S> mean_v = channel_vector<M, S>(in[2], 0.0), invstd_v = channel_vector<M, S>(in[3], 1.0);
    if (reduced) {
      const Shape dims = all_but_channels(x);
      R::template reduce<T>(g, dims, reduce_ops::Sum<M, T, double>{}, StoreScaled{static_cast<double*>(sg.data_ptr()), 1.0},
                            taken);
      elementwise_kernels::copy_cast<L>(mean64, in[2]);
      const Tensor mean_b = over_channels(mean64, x);
      L::template run<double, T, T, double>(products, {&g, &x, &mean_b}, GradCentered<M, T>{});
      R::template reduce<double>(products, dims, reduce_ops::Sum<M, double, double>{},
                                 StoreScaled{static_cast<double*>(sgx.data_ptr()), 1.0}, taken);
    } else {
      elementwise_kernels::fill<L>(sg, Scalar(0));
      elementwise_kernels::fill<L>(sgx, Scalar(0));
    }
    const LoopGeometry<5> walk = index_kernels::walk_geometry<5>(
        {channels},
        {index_kernels::operand(sg, {1}), index_kernels::operand(sgx, {1}), index_kernels::operand(alpha, {1}),
         index_kernels::operand(beta, {1}), index_kernels::operand(gamma, {1})},
        "batch_norm_backward");
    L::template for_each<5>(device, walk, channels,
                            BackwardCoefficients<M, T, S>{mean_v, invstd_v, channel_vector<M, T>(in[4], 1.0), training,
                                                          count});
    if (need_input) {
      const Tensor a = over_channels(alpha, x), b = over_channels(beta, x), c = over_channels(gamma, x);
      L::template run<T, T, T, double, double, double>(out[0], {&g, &x, &a, &b, &c}, ChannelAffine<M, T>{});
    }
    if (need_affine) {
      elementwise_kernels::copy_cast<L>(out[1], sgx);
      elementwise_kernels::copy_cast<L>(out[2], sg);
    }
  });
}

// --- scratch ----------------------------------------------------------------------------
// The kernels' ScratchFns (Note [Reduction scratch]): their pieces in the
// order they take them, then the largest share of their reductions.

using reduce_kernels::acc_dtype;
using reduce_kernels::with_reductions;

template <typename R>
int64_t softmax_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const Tensor x = at_least_1d(in[0]);
  const int64_t dim = softmax_dim(in[0], attrs);
  const Shape kept = kept_shape(x, dim);
  const DType acc = acc_dtype(x.dtype());
  return with_reductions<R>(ScratchLayout("softmax").add(kept, acc).add(kept, acc), {{x, {dim}}});
}
template <typename R, bool kLog>
int64_t softmax_backward_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const Tensor g = at_least_1d(in[0]), y = at_least_1d(in[1]);
  const int64_t dim = softmax_dim(in[0], attrs);
  const DType acc = acc_dtype(y.dtype());
  ScratchLayout own("softmax_backward");
  own.add(kept_shape(y, dim), acc);
  if (kLog) return with_reductions<R>(own, {{g, {dim}}});
  own.add(y.sizes(), acc);
  return with_reductions<R>(own, {{make_meta(y.sizes(), acc, y.device()), {dim}}});
}
template <typename R>
int64_t norm_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const NormLayout l = norm_layout(in[0], attrs);
  const DType dtype = in[0].dtype();
  ScratchLayout own("norm");
  add_dense(own, in[0]).add({1}, dtype).add({1}, dtype);
  add_dense(add_dense(own, in[1]), in[2]);
  if (l.n * l.groups == 0) return own.bytes();
  return with_reductions<R>(own, {{make_meta({l.n * l.groups, l.row_size()}, dtype, in[0].device()), {1}}});
}
template <typename R>
int64_t norm_backward_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  if (in[1].numel() == 0) return 0;
  const NormLayout l = norm_layout(in[1], attrs);
  const DType dtype = in[1].dtype(), acc = acc_dtype(dtype);
  const Device device = in[1].device();
  ScratchLayout own("norm_backward");
  add_dense(add_dense(own, in[0]), in[1]).add({1}, dtype);
  add_dense(add_dense(add_dense(own, in[2]), in[3]), in[4]);
  const bool need_input = attrs.get_bool("need_input"), need_affine = attrs.get_bool("need_affine");
  if (need_input) own.add(l.sizes(), acc).add({l.n * l.groups}, acc).add({l.n * l.groups}, acc);
  if (need_affine) own.add(l.sizes(), acc);
  const Tensor rows = make_meta({l.n * l.groups, l.row_size()}, acc, device);
  const Tensor terms = make_meta(l.sizes(), acc, device), grads = make_meta(l.sizes(), dtype, device);
  if (need_input && need_affine) return with_reductions<R>(own, {{rows, {1}}, {terms, {0, 3}}, {grads, {0, 3}}});
  if (need_input) return with_reductions<R>(own, {{rows, {1}}});
  if (need_affine) return with_reductions<R>(own, {{terms, {0, 3}}, {grads, {0, 3}}});
  return own.bytes();
}
template <typename R>
int64_t batch_norm_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const Tensor& x = in[0];
  const int64_t channels = x.sizes()[1];
  if (channels == 0) return 0;
  ScratchLayout own("batch_norm");
  for (int k = 0; k < 4; ++k) own.add({channels}, DType::Float64);
  if (!attrs.get_bool("training")) return own.bytes();
  return with_reductions<R>(own, {{x, all_but_channels(x)}});
}
template <typename R>
int64_t batch_norm_backward_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const Tensor& x = in[1];
  const int64_t channels = x.sizes()[1];
  if (channels == 0) return 0;
  ScratchLayout own("batch_norm_backward");
  for (int k = 0; k < 5; ++k) own.add({channels}, DType::Float64);
  if (!attrs.get_bool("training") && !attrs.get_bool("need_affine")) return own.bytes();
  own.add({channels}, DType::Float64).add(x.sizes(), DType::Float64);
  const Shape dims = all_but_channels(x);
  return with_reductions<R>(own, {{in[0], dims}, {make_meta(x.sizes(), DType::Float64, x.device()), dims}});
}

template <typename L, typename R>
void register_all(DeviceType device) {
  auto set = [device](const char* op, KernelFn kernel, ScratchFn scratch) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel), std::move(scratch));
  };
  set("softmax", softmax<L, R, false>, softmax_scratch<R>);
  set("log_softmax", softmax<L, R, true>, softmax_scratch<R>);
  set("softmax_backward", softmax_backward<L, R, false>, softmax_backward_scratch<R, false>);
  set("log_softmax_backward", softmax_backward<L, R, true>, softmax_backward_scratch<R, true>);
  for (const char* op : {"layer_norm", "group_norm"}) set(op, norm<L, R>, norm_scratch<R>);
  for (const char* op : {"layer_norm_backward", "group_norm_backward"})
    set(op, norm_backward<L, R>, norm_backward_scratch<R>);
  set("batch_norm", batch_norm<L, R>, batch_norm_scratch<R>);
  set("batch_norm_backward", batch_norm_backward<L, R>, batch_norm_backward_scratch<R>);
}

}  // namespace mf::composed_kernels
