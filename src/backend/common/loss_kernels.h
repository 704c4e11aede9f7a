// Note [Device class losses]
// cross_entropy, nll_loss, their backward ops and cross_entropy's target
// terms (Note [Class-index losses] in src/ops/loss.cpp), written once as
// passes of a backend's reductions R and walks L (reduce_kernels.h,
// index_kernels.h):
//   * cross_entropy's log-sum-exp per row: a row maximum and a sum of
//     shifted exponentials, stored into the lse output;
//   * with label smoothing, sum_c w_c x_ic per row, a reduction whose map
//     reads the class weight at the element's position along the row;
//   * one walk over the rows reads each target (an index out of range is
//     an IndexError, as for the index kernels), and writes the row's loss
//     and weight into float64 buffers;
//   * the reduction ("sum", "mean") sums those buffers; "mean" divides on
//     the device, so no value is read back to the host;
//   * the backward ops walk the (M, C) gradient, reading each row's target,
//     lse and upstream gradient broadcast along the row, and the total
//     weight and the class weights through pointers.
// The pointwise losses (mse_loss, binary_cross_entropy_with_logits) are an
// elementwise pass, and for "sum" and "mean" a float64 buffer of it summed.
// The CPU keeps its fused one-pass kernels (backend/cpu/kernels/loss.cpp).
#pragma once

#include <string>

#include "backend/common/index_kernels.h"
#include "backend/common/reduce_kernels.h"
#include "backend/common/scratch.h"
#include "meshflow/ops/elementwise.h"  // broadcast_shapes

namespace mf::loss_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;
using index_kernels::with_index_check;

struct ClassLoss {
  int64_t ignore_index;
  double smoothing;
  std::string reduction;
  static ClassLoss from(const Attrs& attrs) {
    return {attrs.get_int("ignore_index"), attrs.has("label_smoothing") ? attrs.get_float("label_smoothing") : 0.0,
            attrs.get_string("reduction")};
  }
};

// The class weights (null when absent: all 1) and their sum.
template <typename T>
struct ClassWeights {
  const T* w = nullptr;
  int64_t stride = 0;
  const double* total = nullptr;  // sum of w (with w)
  double count = 0;               // the number of classes (without w)
  template <typename M>
  MF_FORCE_INLINE MF_HOST_DEVICE double at(int64_t c) const {
    return w ? double(M::template to_acc<acc_type<T>>(w[c * stride])) : 1.0;
  }
  MF_FORCE_INLINE MF_HOST_DEVICE double sum() const { return w ? *total : count; }
};

// sum_c w_c x_ic (in double): the smoothing term's row sums.
template <typename M, typename T>
struct WeightedRowSum {
  using Acc = double;
  ClassWeights<T> weights;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return 0.0; }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t, int64_t c) const {
    return double(M::template to_acc<acc_type<T>>(x)) * weights.template at<M>(c);
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
};

// Operands (one row each): 0 the row's loss, 1 its weight (float64), 2 its
// target, 3 the row of x, 4 its lse (cross_entropy only), 5 its smoothing
// sum (with smoothing only).
template <typename M, typename T, bool kCrossEntropy>
struct RowLoss {
  int64_t classes, x_stride, ignore;
  double smoothing;
  ClassWeights<T> weights;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    double* loss = reinterpret_cast<double*>(data[0] + off[0]);
    double* weight = reinterpret_cast<double*>(data[1] + off[1]);
    const int64_t t = *reinterpret_cast<const int64_t*>(data[2] + off[2]);
    const T* x = reinterpret_cast<const T*>(data[3] + off[3]);
    *loss = 0.0, *weight = 0.0;
    if (t == ignore || t < 0 || t >= classes) {
      if (t != ignore) M::record_fault(fault, t);
      if constexpr (kCrossEntropy) *reinterpret_cast<A*>(data[4] + off[4]) = A(0);
      return;
    }
    const double wt = weights.template at<M>(t);
    const A xt = M::template to_acc<A>(x[t * x_stride]);
    if constexpr (!kCrossEntropy) {
      *loss = -wt * double(xt);
    } else {
      const A lse = *reinterpret_cast<const A*>(data[4] + off[4]);
      double v = wt * double(lse - xt);
      if (smoothing > 0) {
        const double s = *reinterpret_cast<const double*>(data[5] + off[5]);
        v = (1 - smoothing) * v + smoothing / double(classes) * (weights.sum() * double(lse) - s);
      }
      *loss = v;
    }
    *weight = wt;
  }
};

struct Quotient {
  MF_FORCE_INLINE MF_HOST_DEVICE double operator()(double a, double b) const { return a / b; }
};

template <typename T>
ClassWeights<T> class_weights(const Tensor& weight, int64_t classes, const Tensor& total) {
  ClassWeights<T> w;
  w.count = double(classes);
  if (!weight.defined()) return w;
  w.w = static_cast<const T*>(weight.data_ptr());
  w.stride = weight.strides()[0];
  w.total = static_cast<const double*>(total.data_ptr());
  return w;
}

// The sum of the class weights into a float64 scalar in scratch
// (undefined without weights).
template <typename R, typename T>
Tensor weight_total(const Tensor& weight, Scratch& taken) {
  if (!weight.defined()) return Tensor();
  Tensor total = taken.take({}, DType::Float64);
  R::template reduce<T>(weight, {0}, reduce_ops::Sum<typename R::Math, T, double>{},
                        reduce_ops::StoreAs<double>{static_cast<double*>(total.data_ptr())}, taken);
  return total;
}

// Inputs (x (M, C), target (M), weight (C)); outputs (loss, [lse (M),] total weight).
template <typename L, typename R, bool kCrossEntropy>
void class_loss(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename R::Math;
  const char* name = kCrossEntropy ? "cross_entropy" : "nll_loss";
  const ClassLoss a = ClassLoss::from(attrs);
  const Tensor &x = in[0], &target = in[1], &weight = in[2];
  const int64_t rows = x.sizes()[0], classes = x.sizes()[1];
  const Device device = x.device();
  Tensor& total_out = out[kCrossEntropy ? 2 : 1];
  // The pieces first (class_loss_scratch), then the reductions.
  Scratch taken(out);
  Tensor row_loss = taken.take({rows}, DType::Float64), row_weight = taken.take({rows}, DType::Float64);
  dispatch_floating(x.dtype(), name, [&]<typename T>() {
    using A = acc_type<T>;
    const bool shifted = kCrossEntropy && rows > 0 && classes > 0, smoothed = kCrossEntropy && a.smoothing > 0;
    Tensor total = weight.defined() ? taken.take({}, DType::Float64) : Tensor();
    const Tensor shift = shifted ? taken.take({rows}, dtype_of<A>()) : Tensor();
    const Tensor smooth = smoothed ? taken.take({rows}, DType::Float64) : row_loss;
    Tensor weight_sum = taken.take({}, DType::Float64);
    Tensor loss_sum = a.reduction == "none" ? Tensor() : taken.take({}, DType::Float64);
    if (weight.defined())
      R::template reduce<T>(weight, {0}, reduce_ops::Sum<M, T, double>{},
                            reduce_ops::StoreAs<double>{static_cast<double*>(total.data_ptr())}, taken);
    const ClassWeights<T> w = class_weights<T>(weight, classes, total);
    Tensor lse = kCrossEntropy ? out[1] : row_loss;
    if (shifted) {
      A* sp = static_cast<A*>(shift.data_ptr());
      R::template reduce<T>(x, {1}, reduce_ops::Extremum<M, T, true>{}, reduce_ops::StoreShift<M, A>{sp}, taken);
      R::template reduce<T>(x, {1}, reduce_ops::SumExp<M, T>{sp},
                            reduce_ops::StoreLogShifted<M, A>{static_cast<A*>(lse.data_ptr()), sp}, taken);
    }
    if (smoothed)
      R::template reduce<T>(x, {1}, WeightedRowSum<M, T>{w},
                            reduce_ops::StoreAs<double>{static_cast<double*>(smooth.data_ptr())}, taken);
    if (rows > 0) {
      const LoopGeometry<6> g = walk_geometry<6>(
          {rows}, {operand(row_loss, {1}), operand(row_weight, {1}), operand(target, target.strides()),
                   operand(x, {x.strides()[0]}), operand(lse, {1}), operand(smooth, {1})},
          name);
      with_index_check<L>(device, name, 1, classes, [&](IndexFault* fault) {
        L::template for_each<6>(device, g, rows,
                                RowLoss<M, T, kCrossEntropy>{classes, x.strides()[1], a.ignore_index, a.smoothing,
                                                             w, fault});
      });
    }
    // The reduction, and the total weight (float64 until stored).
    R::template reduce<double>(row_weight, {0}, reduce_ops::Sum<M, double, double>{},
                               reduce_ops::StoreAs<double>{static_cast<double*>(weight_sum.data_ptr())}, taken);
    elementwise_kernels::copy_cast<L>(total_out, weight_sum);
    if (a.reduction == "none") {
      elementwise_kernels::copy_cast<L>(out[0], row_loss);
      return;
    }
    R::template reduce<double>(row_loss, {0}, reduce_ops::Sum<M, double, double>{},
                               reduce_ops::StoreAs<double>{static_cast<double*>(loss_sum.data_ptr())}, taken);
    if (a.reduction == "sum") elementwise_kernels::copy_cast<L>(out[0], loss_sum);
    else L::template run<T, double, double>(out[0], {&loss_sum, &weight_sum}, Quotient{});
  });
}

// The gradient's scale of a row: the upstream gradient (per row, or one for
// all; the loss's dtype T), over the total weight (the stats dtype
// acc_type<T>) for "mean".
template <typename M, typename T>
struct RowScale {
  const acc_type<T>* total;  // null unless "mean"
  MF_FORCE_INLINE MF_HOST_DEVICE double operator()(const char* grad) const {
    const double g = double(M::template to_acc<acc_type<T>>(*reinterpret_cast<const T*>(grad)));
    return total ? g / double(*total) : g;
  }
};

template <typename M, typename T>
RowScale<M, T> row_scale(const ClassLoss& a, const Tensor& total) {
  return {a.reduction == "mean" ? static_cast<const acc_type<T>*>(total.data_ptr()) : nullptr};
}

// Operands over (M, C): 0 d x (contiguous), 1 x, 2 target, 3 lse, 4 the
// upstream gradient, each of the last three broadcast along the row.
// d x = coef (K p_c - (e / C) w_c) - [c == t] coef (1 - e) w_t, p = softmax(x).
template <typename M, typename T>
struct CrossEntropyGrad {
  int64_t classes, ignore;
  double smoothing;
  ClassWeights<T> weights;
  RowScale<M, T> scale;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    T* d = reinterpret_cast<T*>(data[0] + off[0]);
    const int64_t t = *reinterpret_cast<const int64_t*>(data[2] + off[2]);
    if (t == ignore || t < 0 || t >= classes) {
      if (t != ignore) M::record_fault(fault, t);
      *d = T(0.0f);
      return;
    }
    const int64_t c = off[0] / int64_t(sizeof(T)) % classes;
    const double coef = scale(data[4] + off[4]);
    const double wt = weights.template at<M>(t), e = smoothing, per_class = e / double(classes);
    const A k_p = A(coef * ((1 - e) * wt + per_class * weights.sum()));
    const A x = M::template to_acc<A>(*reinterpret_cast<const T*>(data[1] + off[1]));
    const A lse = *reinterpret_cast<const A*>(data[3] + off[3]);
    A v = k_p * M::exp(x - lse) - A(coef * per_class * weights.template at<M>(c));
    if (c == t) v -= A(coef * (1 - e) * wt);
    *d = T(v);
  }
};

// Inputs (grad, logits, target, weight, lse, total_weight).
template <typename L, typename R>
void cross_entropy_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLoss a = ClassLoss::from(attrs);
  const Tensor &grad = in[0], &x = in[1], &target = in[2], &weight = in[3], &lse = in[4], &total = in[5];
  Tensor& dx = out[0];
  const int64_t rows = x.sizes()[0], classes = x.sizes()[1];
  if (dx.numel() == 0) return;
  MF_CHECK(dx.is_contiguous(), Error, "cross_entropy_backward: expected a contiguous output");
  const Shape grad_strides = a.reduction == "none" ? Shape{grad.strides()[0], 0} : Shape{0, 0};
  const LoopGeometry<5> g = walk_geometry<5>(
      {rows, classes},
      {operand(dx, dx.strides()), operand(x, x.strides()), operand(target, {target.strides()[0], 0}),
       operand(lse, {lse.strides()[0], 0}), operand(grad, grad_strides)},
      "cross_entropy_backward");
  dispatch_floating(x.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using M = typename R::Math;
    Scratch taken(out);
    const Tensor wsum = weight_total<R, T>(weight, taken);
    with_index_check<L>(x.device(), "cross_entropy_backward", 1, classes, [&](IndexFault* fault) {
      L::template for_each<5>(x.device(), g, rows * classes,
                              CrossEntropyGrad<M, T>{classes, a.ignore_index, a.smoothing,
                                                     class_weights<T>(weight, classes, wsum), row_scale<M, T>(a, total),
                                                     fault});
    });
  });
}

// Operands over rows: 0 the row of d x (zeroed), 1 the target, 2 the
// upstream gradient. d x[i, t] = -w_t coef_i.
template <typename M, typename T>
struct NllGrad {
  int64_t classes, ignore, d_stride;
  ClassWeights<T> weights;
  RowScale<M, T> scale;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t t = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    if (t == ignore) return;
    if (t < 0 || t >= classes) {
      M::record_fault(fault, t);
      return;
    }
    reinterpret_cast<T*>(data[0] + off[0])[t * d_stride] = T(-weights.template at<M>(t) * scale(data[2] + off[2]));
  }
};

// Inputs (grad, target, weight, total_weight); output d log_probs (M, C).
template <typename L, typename R>
void nll_loss_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLoss a = ClassLoss::from(attrs);
  const Tensor &grad = in[0], &target = in[1], &weight = in[2], &total = in[3];
  Tensor& dx = out[0];
  elementwise_kernels::fill<L>(dx, Scalar(0));
  const int64_t rows = dx.sizes()[0], classes = dx.sizes()[1];
  if (rows == 0) return;
  const LoopGeometry<3> g = walk_geometry<3>(
      {rows},
      {operand(dx, {dx.strides()[0]}), operand(target, target.strides()),
       operand(grad, a.reduction == "none" ? Shape{grad.strides()[0]} : Shape{0})},
      "nll_loss_backward");
  dispatch_floating(dx.dtype(), "nll_loss_backward", [&]<typename T>() {
    using M = typename R::Math;
    Scratch taken(out);
    const Tensor wsum = weight_total<R, T>(weight, taken);
    with_index_check<L>(dx.device(), "nll_loss_backward", 1, classes, [&](IndexFault* fault) {
      L::template for_each<3>(dx.device(), g, rows,
                              NllGrad<M, T>{classes, a.ignore_index, dx.strides()[1],
                                            class_weights<T>(weight, classes, wsum), row_scale<M, T>(a, total), fault});
    });
  });
}

// Operands over (M, C): 0 Q (contiguous), 1 the target and 2 K, both
// broadcast along the row (each row's K is written C times, with one value).
// K_i = (1 - e) w_t + (e / C) W, Q_ic = (1 - e) w_t [c == t] + (e / C) w_c,
// both 0 for an ignored row.
template <typename M, typename T>
struct TargetTerms {
  int64_t classes, ignore;
  double smoothing;
  ClassWeights<T> weights;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    T* q = reinterpret_cast<T*>(data[0] + off[0]);
    T* k = reinterpret_cast<T*>(data[2] + off[2]);
    const int64_t t = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    if (t == ignore || t < 0 || t >= classes) {
      if (t != ignore) M::record_fault(fault, t);
      *q = T(0.0f), *k = T(0.0f);
      return;
    }
    const int64_t c = off[0] / int64_t(sizeof(T)) % classes;
    const double e = smoothing, wt = weights.template at<M>(t), per_class = e / double(classes);
    *k = T((1 - e) * wt + per_class * weights.sum());
    *q = T(per_class * weights.template at<M>(c) + (c == t ? (1 - e) * wt : 0.0));
  }
};

// Inputs (target (M), weight (C)); outputs K (M, 1) and Q (M, C).
template <typename L, typename R>
void target_terms(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLoss a = ClassLoss::from(attrs);
  const Tensor &target = in[0], &weight = in[1];
  Tensor &k = out[0], &q = out[1];
  const int64_t rows = q.sizes()[0], classes = q.sizes()[1];
  if (q.numel() == 0) return;
  MF_CHECK(q.is_contiguous(), Error, "cross_entropy_target_terms: expected a contiguous output");
  const LoopGeometry<3> g = walk_geometry<3>(
      {rows, classes},
      {operand(q, q.strides()), operand(target, {target.strides()[0], 0}), operand(k, {k.strides()[0], 0})},
      "cross_entropy_target_terms");
  dispatch_floating(q.dtype(), "cross_entropy", [&]<typename T>() {
    Scratch taken(out);
    const Tensor wsum = weight_total<R, T>(weight, taken);
    with_index_check<L>(q.device(), "cross_entropy", 1, classes, [&](IndexFault* fault) {
      L::template for_each<3>(q.device(), g, rows * classes,
                              TargetTerms<typename R::Math, T>{classes, a.ignore_index, a.smoothing,
                                                               class_weights<T>(weight, classes, wsum), fault});
    });
  });
}

// --- pointwise losses --------------------------------------------------------------

template <typename M, typename T>
struct SquaredError {  // in float64, for the sums
  MF_FORCE_INLINE MF_HOST_DEVICE double operator()(T a, T b) const {
    const double d = double(M::template to_acc<acc_type<T>>(a)) - double(M::template to_acc<acc_type<T>>(b));
    return d * d;
  }
};
struct SquaredDifference {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const {
    const A d = a - b;
    return d * d;
  }
};

template <typename M, typename T>
struct StoreMean {  // out = sum / n
  T* out;
  double n;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, double a) const { out[i] = T(a / n); }
};

// The sum (or mean) of a float64 buffer into the 0-d out.
template <typename R, typename T>
void sum_into(Tensor& out, const Tensor& values, bool mean, Scratch& taken) {
  using M = typename R::Math;
  const Tensor flat = make_view(values, {values.numel()}, {1}, values.storage_offset());
  T* o = static_cast<T*>(out.data_ptr());
  if (mean)
    R::template reduce<double>(flat, {0}, reduce_ops::Sum<M, double, double>{}, StoreMean<M, T>{o, double(values.numel())},
                               taken);
  else R::template reduce<double>(flat, {0}, reduce_ops::Sum<M, double, double>{}, reduce_ops::StoreAs<T>{o}, taken);
}

template <typename L, typename R>
void mse_loss(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const std::string& reduction = attrs.get_string("reduction");
  dispatch_floating(in[0].dtype(), "mse_loss", [&]<typename T>() {
    using A = acc_type<T>;
    if (reduction == "none") {
      L::template run<T, T, T>(out[0], {&in[0], &in[1]}, functors::InAcc<A, SquaredDifference>{});
      return;
    }
    Scratch taken(out);
    Tensor squares = taken.take(broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss"), DType::Float64);
    L::template run<double, T, T>(squares, {&in[0], &in[1]}, SquaredError<typename L::Math, T>{});
    sum_into<R, T>(out[0], squares, reduction == "mean", taken);
  });
}

// binary_cross_entropy_with_logits (Note in src/ops/loss_pointwise.cpp):
// w ((1 - t) x + (1 + (pw - 1) t) sp(-x)), sp(z) = max(z, 0) + log1p(exp(-|z|)).
template <typename M>
struct BceWithLogits {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x, A t, A w, A pw) const {
    const A sp = M::select(-x > A(0), -x, A(0)) + M::log1p(M::exp(-M::fabs(x)));
    return w * ((A(1) - t) * x + (A(1) + (pw - A(1)) * t) * sp);
  }
};

// Inputs (x, t, w, pos_weight); w and pos_weight may be undefined (1).
template <typename L>
void bce_with_logits(const TensorList& in, TensorList& out, const Attrs&) {
  dispatch_floating(in[0].dtype(), "binary_cross_entropy_with_logits", [&]<typename T>() {
    using A = acc_type<T>;
    Tensor one;
    if (!in[2].defined() || !in[3].defined()) {
      one = Scratch(out).take({}, in[0].dtype());
      elementwise_kernels::fill<L>(one, Scalar(1));
    }
    const Tensor& w = in[2].defined() ? in[2] : one;
    const Tensor& pw = in[3].defined() ? in[3] : one;
    L::template run<T, T, T, T, T>(out[0], {&in[0], &in[1], &w, &pw}, functors::InAcc<A, BceWithLogits<typename L::Math>>{});
  });
}

// --- scratch ----------------------------------------------------------------------------
// The kernels' ScratchFns (Note [Reduction scratch]): their pieces in the
// order they take them, then the largest share of their reductions.

template <typename R, bool kCrossEntropy>
int64_t class_loss_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const ClassLoss a = ClassLoss::from(attrs);
  const Tensor &x = in[0], &weight = in[2];
  const int64_t rows = x.sizes()[0], classes = x.sizes()[1];
  const bool shifted = kCrossEntropy && rows > 0 && classes > 0, smoothed = kCrossEntropy && a.smoothing > 0;
  ScratchLayout own(kCrossEntropy ? "cross_entropy" : "nll_loss");
  own.add({rows}, DType::Float64).add({rows}, DType::Float64);
  if (weight.defined()) own.add({}, DType::Float64);
  if (shifted) own.add({rows}, reduce_kernels::acc_dtype(x.dtype()));
  if (smoothed) own.add({rows}, DType::Float64);
  own.add({}, DType::Float64);
  if (a.reduction != "none") own.add({}, DType::Float64);
  const Tensor row_sums = make_meta({rows}, DType::Float64, x.device());
  const Tensor& weights = weight.defined() ? weight : row_sums;  // a stand-in when absent
  return reduce_kernels::with_reductions<R>(own, {{weights, {0}}, {row_sums, {0}}, {x, {1}}});
}
// The backward kernels: the class weights' sum.
template <typename R, size_t kWeight>
int64_t weight_total_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  const Tensor& weight = in[kWeight];
  if (!weight.defined()) return 0;
  return reduce_kernels::with_reductions<R>(ScratchLayout("class weights").add({}, DType::Float64), {{weight, {0}}});
}
template <typename R>
int64_t mse_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  if (attrs.get_string("reduction") == "none") return 0;
  const Shape squares = broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss");
  return reduce_kernels::with_reductions<R>(ScratchLayout("mse_loss").add(squares, DType::Float64),
                                            {{make_meta({shape_numel(squares)}, DType::Float64, in[0].device()), {0}}});
}
inline int64_t bce_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  if (in[2].defined() && in[3].defined()) return 0;
  return ScratchLayout("binary_cross_entropy_with_logits").add({}, in[0].dtype()).bytes();
}

template <typename L, typename R>
void register_all(DeviceType device) {
  auto set = [device](const char* op, KernelFn kernel, ScratchFn scratch) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel), std::move(scratch));
  };
  set("cross_entropy", class_loss<L, R, true>, class_loss_scratch<R, true>);
  set("nll_loss", class_loss<L, R, false>, class_loss_scratch<R, false>);
  set("cross_entropy_backward", cross_entropy_backward<L, R>, weight_total_scratch<R, 3>);
  set("nll_loss_backward", nll_loss_backward<L, R>, weight_total_scratch<R, 2>);
  set("cross_entropy_target_terms", target_terms<L, R>, weight_total_scratch<R, 1>);
  set("mse_loss", mse_loss<L, R>, mse_scratch<R>);
  set("binary_cross_entropy_with_logits", bce_with_logits<L>, bce_scratch);
}

}  // namespace mf::loss_kernels
