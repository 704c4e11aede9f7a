// The CPU kernels of the losses (src/ops/loss.cpp, loss_pointwise.cpp):
// nll_loss and cross_entropy over logits (M, C) and int64 targets (M), with
// their fused backward kernels (Note [Class-index losses] in
// src/ops/loss.cpp), and the pointwise mse_loss and
// binary_cross_entropy_with_logits.
#include <cmath>

#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/loops.h"
#include "backend/cpu/kernels/vec_math.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/parallel.h"
#include "ops/loss_common.h"

namespace mf::cpu {
namespace {

using loss_detail::parse_reduction;
using loss_detail::Reduction;

// --- nll_loss and cross_entropy ------------------------------------------------------

struct ClassLossAttrs {
  int64_t ignore_index;
  Reduction reduction;
  double smoothing;
  static ClassLossAttrs from(const Attrs& attrs, const char* op) {
    return {attrs.get_int("ignore_index"), parse_reduction(op, attrs.get_string("reduction")),
            attrs.has("label_smoothing") ? attrs.get_float("label_smoothing") : 0.0};
  }
};

// The values of a floating tensor of any strides, in row-major order, as
// doubles.
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  dispatch_floating(t.dtype(), "loss", [&]<typename S>() {
    const S* p = static_cast<const S*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t offset = 0;
      for (int64_t d = t.dim(), rest = i; d-- > 0; rest /= t.size(d)) offset += rest % t.size(d) * t.stride(d);
      v[size_t(i)] = double(p[offset]);
    }
  });
  return v;
}

std::vector<double> class_weights(const Tensor& weight, int64_t classes) {
  return weight.defined() ? as_doubles(weight) : std::vector<double>(size_t(classes), 1.0);
}

// The target of row i, checked against the class count (ignore_index passes).
inline int64_t checked_target(const int64_t* target, int64_t i, int64_t classes, int64_t ignore_index,
                              const char* op) {
  const int64_t t = target[i];
  MF_CHECK(t == ignore_index || (t >= 0 && t < classes), IndexError, op, ": target ", t, " is out of bounds for ",
           classes, " classes");
  return t;
}

// Rows are processed in fixed chunks (independent of the thread count) whose
// partial sums are added in order: the reduced loss is deterministic.
int64_t rows_per_chunk(int64_t classes) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(classes, 1)); }

// Calls row_loss(i, scratch) -> {loss, weight} for every row (scratch: an
// AccRun<T> owned by the calling task); writes the "none" losses, or the
// reduced loss, into out[0] and the total weight into out[total_index].
template <typename T, typename RowLoss>
void reduce_rows(int64_t rows, int64_t classes, Reduction reduction, TensorList& out, size_t total_index,
                 const RowLoss& row_loss) {
  const int64_t per_chunk = rows_per_chunk(classes);
  const int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  std::vector<double> loss_sum(size_t(chunks), 0.0), weight_sum(size_t(chunks), 0.0);
  T* loss_out = static_cast<T*>(out[0].data_ptr());
  parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    AccRun<T> scratch;
    for (int64_t chunk = cb; chunk < ce; ++chunk) {
      double ls = 0, ws = 0;
      for (int64_t i = chunk * per_chunk; i < std::min(rows, (chunk + 1) * per_chunk); ++i) {
        auto [loss, weight] = row_loss(i, scratch);
        if (reduction == Reduction::None) loss_out[i] = T(loss);
        ls += loss, ws += weight;
      }
      loss_sum[size_t(chunk)] = ls, weight_sum[size_t(chunk)] = ws;
    }
  });
  double total_loss = 0, total_weight = 0;
  for (int64_t c = 0; c < chunks; ++c) total_loss += loss_sum[size_t(c)], total_weight += weight_sum[size_t(c)];
  if (reduction == Reduction::Sum) loss_out[0] = T(total_loss);
  if (reduction == Reduction::Mean) loss_out[0] = T(total_loss / total_weight);
  dispatch_floating(out[total_index].dtype(), "loss", [&]<typename S>() {
    *static_cast<S*>(out[total_index].data_ptr()) = S(total_weight);
  });
}

// Scale of row i's gradient: the upstream gradient, divided by the total
// weight for "mean".
struct RowScale {
  const double* grad;  // one value per row ("none") or one in all
  bool per_row;
  double divisor;
  double at(int64_t i) const { return (per_row ? grad[i] : grad[0]) / divisor; }
};

RowScale row_scale(const std::vector<double>& grad, Reduction reduction, const Tensor& total_weight) {
  return {grad.data(), reduction == Reduction::None,
          reduction == Reduction::Mean ? as_doubles(total_weight)[0] : 1.0};
}

// Inputs (log_probs (M, C), target (M), weight (C)); outputs (loss, total_weight).
void nll_forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLossAttrs a = ClassLossAttrs::from(attrs, "nll_loss");
  Scratch taken(out);
  const Tensor x = dense(in[0], taken), target = dense(in[1], taken);
  const int64_t rows = x.sizes()[0], classes = x.sizes()[1];
  const std::vector<double> w = class_weights(in[2], classes);
  const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
  dispatch_floating(x.dtype(), "nll_loss", [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    reduce_rows<T>(rows, classes, a.reduction, out, 1, [&](int64_t i, AccRun<T>&) -> std::pair<double, double> {
      const int64_t t = checked_target(tp, i, classes, a.ignore_index, "nll_loss");
      if (t == a.ignore_index) return {0.0, 0.0};
      return {-w[size_t(t)] * double(xp[i * classes + t]), w[size_t(t)]};
    });
  });
}

// Inputs (grad, target, weight, total_weight); output d log_probs (M, C).
void nll_backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLossAttrs a = ClassLossAttrs::from(attrs, "nll_loss_backward");
  Scratch taken(out);
  const Tensor target = dense(in[1], taken);
  const int64_t rows = out[0].sizes()[0], classes = out[0].sizes()[1];
  const std::vector<double> w = class_weights(in[2], classes), grad = as_doubles(in[0]);
  const RowScale scale = row_scale(grad, a.reduction, in[3]);
  const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
  dispatch_floating(out[0].dtype(), "nll_loss_backward", [&]<typename T>() {
    T* dp = static_cast<T*>(out[0].data_ptr());
    parallel_for(0, rows, rows_per_chunk(classes), [&](int64_t b, int64_t e) {
      std::fill(dp + b * classes, dp + e * classes, T(0.0f));
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = tp[i];
        if (t != a.ignore_index) dp[i * classes + t] = T(-w[size_t(t)] * scale.at(i));
      }
    });
  });
}

// Inputs (logits (M, C), target (M), weight (C)); outputs (loss, lse (M), total_weight).
void ce_forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLossAttrs a = ClassLossAttrs::from(attrs, "cross_entropy");
  Scratch taken(out);
  const Tensor x = dense(in[0], taken), target = dense(in[1], taken);
  const int64_t rows = x.sizes()[0], classes = x.sizes()[1];
  const std::vector<double> w = class_weights(in[2], classes);
  const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
  const double e = a.smoothing;
  dispatch_floating(x.dtype(), "cross_entropy", [&]<typename T>() {
    using A = acc_type<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    A* lse_out = static_cast<A*>(out[1].data_ptr());
    reduce_rows<T>(rows, classes, a.reduction, out, 2, [&](int64_t i, AccRun<T>& run) -> std::pair<double, double> {
      const int64_t t = checked_target(tp, i, classes, a.ignore_index, "cross_entropy");
      if (t == a.ignore_index) {
        lse_out[i] = A(0);
        return {0.0, 0.0};
      }
      const A* xa = run.load(xp + i * classes, classes);
      const A m = max_run(xa, classes);
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < classes; ++c) s += exp_acc(xa[c] - m);
      const A lse = m + std::log(s);
      lse_out[i] = lse;
      double loss = w[size_t(t)] * double(lse - xa[t]);
      if (e > 0) {
        double smooth = 0;
        const double* wp = w.data();
#pragma omp simd reduction(+ : smooth)
        for (int64_t c = 0; c < classes; ++c) smooth += wp[c] * double(lse - xa[c]);
        loss = (1 - e) * loss + e / double(classes) * smooth;
      }
      return {loss, w[size_t(t)]};
    });
  });
}

// Inputs (grad, logits, target, weight, lse, total_weight); output d logits:
//   coef * ((1 - e) * w_t * (p_c - [c == t]) + (e / C) * (W * p_c - w_c)),
// p = softmax of the row, coef the row's gradient scale.
void ce_backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLossAttrs a = ClassLossAttrs::from(attrs, "cross_entropy_backward");
  Scratch taken(out);
  const Tensor x = dense(in[1], taken), target = dense(in[2], taken), lse = dense(in[4], taken);
  const int64_t rows = x.sizes()[0], classes = x.sizes()[1];
  const std::vector<double> w = class_weights(in[3], classes), grad = as_doubles(in[0]);
  double weight_total = 0;
  for (double v : w) weight_total += v;
  const RowScale scale = row_scale(grad, a.reduction, in[5]);
  const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
  const double e = a.smoothing;
  dispatch_floating(x.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using A = acc_type<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const A* lp = static_cast<const A*>(lse.data_ptr());
    T* dp = static_cast<T*>(out[0].data_ptr());
    std::vector<A> wa(w.begin(), w.end());
    parallel_for(0, rows, rows_per_chunk(classes), [&](int64_t b, int64_t end) {
      AccRun<T> in_run, out_run;
      for (int64_t i = b; i < end; ++i) {
        const int64_t t = tp[i];
        A* da = out_run.scratch(dp + i * classes, classes);
        if (t == a.ignore_index) {
          std::fill(da, da + classes, A(0));
        } else {
          const A* xa = in_run.load(xp + i * classes, classes);
          const double coef = scale.at(i);
          const A k_p = A(coef * ((1 - e) * w[size_t(t)] + e / double(classes) * weight_total));
          const A k_w = A(coef * e / double(classes));
          const A l = lp[i];
          const A* wp = wa.data();
#pragma omp simd
          for (int64_t c = 0; c < classes; ++c) da[c] = k_p * exp_acc(xa[c] - l) - k_w * wp[c];
          da[t] -= A(coef * (1 - e) * w[size_t(t)]);
        }
        out_run.store(da, dp + i * classes, classes);
      }
    });
  });
}

// cross_entropy_target_terms: K (M, 1) and Q (M, C) of cross_entropy's
// gradient written with ops (src/ops/loss.cpp).
void ce_terms_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const ClassLossAttrs a = ClassLossAttrs::from(attrs, "cross_entropy");
  Scratch taken(out);
  const Tensor target = dense(in[0], taken);
  const int64_t rows = out[1].sizes()[0], classes = out[1].sizes()[1];
  const std::vector<double> w = class_weights(in[1], classes);
  double weight_total = 0;
  for (double v : w) weight_total += v;
  const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
  const double e = a.smoothing;
  dispatch_floating(out[0].dtype(), "cross_entropy", [&]<typename T>() {
    T* kp = static_cast<T*>(out[0].data_ptr());
    T* qp = static_cast<T*>(out[1].data_ptr());
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = tp[i];
      T* qr = qp + i * classes;
      if (t == a.ignore_index) {
        kp[i] = T(0.0f);
        std::fill(qr, qr + classes, T(0.0f));
        continue;
      }
      kp[i] = T((1 - e) * w[size_t(t)] + e / double(classes) * weight_total);
      for (int64_t c = 0; c < classes; ++c) qr[c] = T(e / double(classes) * w[size_t(c)]);
      qr[t] = T(double(qr[t]) + (1 - e) * w[size_t(t)]);
    }
  });
}

// --- mse_loss ------------------------------------------------------------------------
// The reduced forms sum fixed chunks in double and add the partial sums in
// order, over both operands broadcast to the common shape as flat arrays.

// Whether t broadcast to a shape of n elements has t's own flat layout (it
// then needs no copy).
bool flat_as_broadcast(const Tensor& t, int64_t n) { return t.numel() == n && t.is_contiguous(); }

// t broadcast to shape, as a flat array: t itself, or a copy in the next
// piece of taken.
Tensor flat_broadcast(const Tensor& t, const Shape& shape, Scratch& taken) {
  if (flat_as_broadcast(t, shape_numel(shape))) return t;
  Tensor c = taken.take(shape, t.dtype());
  copy_cast(c, t);
  return c;
}

int64_t mse_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  if (parse_reduction("mse_loss", attrs.get_string("reduction")) == Reduction::None) return 0;
  const Shape shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss");
  ScratchLayout layout("mse_loss");
  for (const Tensor& t : {in[0], in[1]})
    if (!flat_as_broadcast(t, shape_numel(shape))) layout.add(shape, t.dtype());
  return layout.bytes();
}

void mse_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Reduction r = parse_reduction("mse_loss", attrs.get_string("reduction"));
  dispatch_floating(in[0].dtype(), "mse_loss", [&]<typename T>() {
    using A = acc_type<T>;
    if (r == Reduction::None) {
      elementwise<T, T, T>(out[0], {&in[0], &in[1]}, [](T a, T b) {
        const A d = A(a) - A(b);
        return d * d;
      });
      return;
    }
    const Shape shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss");
    Scratch taken(out);
    const Tensor a = flat_broadcast(in[0], shape, taken), b = flat_broadcast(in[1], shape, taken);
    const T* ap = static_cast<const T*>(a.data_ptr());
    const T* bp = static_cast<const T*>(b.data_ptr());
    const int64_t n = a.numel(), chunks = (n + kGrainSize - 1) / kGrainSize;
    std::vector<double> partial(size_t(chunks), 0.0);
    parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        double s = 0;
        const int64_t end = std::min(n, (c + 1) * kGrainSize);
#pragma omp simd reduction(+ : s)
        for (int64_t i = c * kGrainSize; i < end; ++i) {
          const double d = double(ap[i]) - double(bp[i]);
          s += d * d;
        }
        partial[size_t(c)] = s;
      }
    });
    double total = 0;
    for (double p : partial) total += p;
    *static_cast<T*>(out[0].data_ptr()) = T(r == Reduction::Mean ? total / double(n) : total);
  });
}

// --- binary_cross_entropy_with_logits ------------------------------------------------
// loss = w * ((1 - t) * x + lw * sp(-x)), lw = 1 + (pos_weight - 1) * t,
// sp(z) = log(1 + exp(z)) computed as max(z, 0) + log1p(exp(-|z|)).

// out[i] = sp(-x[i]) over a block. The exp and the log1p run as separate
// loops: fused into one, GCC threads their range checks into branches and
// gives up vectorising.
constexpr int64_t kSoftplusBlock = 256;

template <typename T, typename A = acc_type<T>>
void softplus_neg_block(const T* x, A* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = exp_acc(-std::abs(A(x[i])));
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = std::max(-A(x[i]), A(0)) + log1p_acc(out[i]);
}

// Contiguous x and t; w and pos_weight are expanded to x's shape (ones when
// only the other is given), so the loops below run over plain arrays and
// vectorise. The copies and the ones are pieces of the scratch, in the
// order x, t, w, pos_weight.
int64_t bce_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  ScratchLayout layout("binary_cross_entropy_with_logits");
  add_dense(layout, in[0]);
  add_dense(layout, in[1]);
  if (in[2].defined() || in[3].defined())
    for (const Tensor& p : {in[2], in[3]})
      if (!p.defined() || !flat_as_broadcast(p, in[0].numel()))
        layout.add(in[0].sizes(), p.defined() ? p.dtype() : in[0].dtype());
  return layout.bytes();
}

void bce_kernel(const TensorList& in, TensorList& out, const Attrs&) {
  Scratch taken(out);
  const Tensor x = dense(in[0], taken), t = dense(in[1], taken);
  const bool weighted = in[2].defined() || in[3].defined();
  auto expanded = [&](const Tensor& p) {
    if (p.defined()) return flat_broadcast(p, x.sizes(), taken);
    Tensor ones = taken.take(x.sizes(), x.dtype());
    dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits", [&]<typename T>() {
      std::fill_n(static_cast<T*>(ones.data_ptr()), ones.numel(), T(1.0f));
    });
    return ones;
  };
  const Tensor w = weighted ? expanded(in[2]) : Tensor(), pw = weighted ? expanded(in[3]) : Tensor();
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits", [&]<typename T>() {
    using A = acc_type<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* tp = static_cast<const T*>(t.data_ptr());
    const T* wp = weighted ? static_cast<const T*>(w.data_ptr()) : nullptr;
    const T* pp = weighted ? static_cast<const T*>(pw.data_ptr()) : nullptr;
    T* yp = static_cast<T*>(out[0].data_ptr());
    parallel_for(0, x.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      A sp[kSoftplusBlock];
      for (int64_t i0 = b; i0 < e; i0 += kSoftplusBlock) {
        const int64_t n = std::min(kSoftplusBlock, e - i0);
        const T* xb = xp + i0;
        const T* tb = tp + i0;
        T* yb = yp + i0;
        softplus_neg_block(xb, sp, n);
        if (!weighted) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) yb[i] = T((1 - A(tb[i])) * A(xb[i]) + sp[i]);
          continue;
        }
        const T* wb = wp + i0;
        const T* pb = pp + i0;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          const A tv = A(tb[i]);
          yb[i] = T(A(wb[i]) * ((1 - tv) * A(xb[i]) + (1 + (A(pb[i]) - 1) * tv) * sp[i]));
        }
      }
    });
  });
}

}  // namespace

MF_REGISTER_KERNEL("nll_loss", DeviceType::CPU, nll_forward_kernel, dense_inputs_scratch("nll_loss", {0, 1}));
MF_REGISTER_KERNEL("nll_loss_backward", DeviceType::CPU, nll_backward_kernel,
                   dense_inputs_scratch("nll_loss_backward", {1}));
MF_REGISTER_KERNEL("cross_entropy", DeviceType::CPU, ce_forward_kernel, dense_inputs_scratch("cross_entropy", {0, 1}));
MF_REGISTER_KERNEL("cross_entropy_backward", DeviceType::CPU, ce_backward_kernel,
                   dense_inputs_scratch("cross_entropy_backward", {1, 2, 4}));
MF_REGISTER_KERNEL("cross_entropy_target_terms", DeviceType::CPU, ce_terms_kernel,
                   dense_inputs_scratch("cross_entropy_target_terms", {0}));
MF_REGISTER_KERNEL("mse_loss", DeviceType::CPU, mse_kernel, mse_scratch);
MF_REGISTER_KERNEL("binary_cross_entropy_with_logits", DeviceType::CPU, bce_kernel, bce_scratch);

}  // namespace mf::cpu
