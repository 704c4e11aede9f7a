// Pointwise losses: mse_loss and binary_cross_entropy_with_logits.
#include <cmath>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/loops.h"
#include "backend/cpu/kernels/vec_math.h"
#include "ops/loss_common.h"

namespace mf {

using loss_detail::parse_reduction;
using loss_detail::Reduction;

namespace {

// --- mse_loss ------------------------------------------------------------------------
// Inputs (input, target) of one dtype, broadcast together; output the
// squared errors ("none") or their sum or mean (0-d). The reduced forms sum
// fixed chunks in double and add the partial sums in order.

void mse_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Reduction r = parse_reduction("mse_loss", attrs.get_string("reduction"));
  dispatch_floating(in[0].dtype(), "mse_loss", [&]<typename T>() {
    using A = acc_type<T>;
    if (r == Reduction::None) {
      cpu::elementwise<T, T, T>(out[0], {&in[0], &in[1]}, [](T a, T b) {
        const A d = A(a) - A(b);
        return d * d;
      });
      return;
    }
    const Shape shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss");
    Tensor a = contiguous(expand(in[0].detach(), shape)), b = contiguous(expand(in[1].detach(), shape));
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

// SBP rules: elementwise with reduction "none"; with "sum" each rank sums
// its part (split along any dim of the broadcast shape) into a partial sum;
// "mean" divides by the whole count and runs broadcast.
std::vector<SbpSignature> pointwise_loss_sbp(const TensorList& in, const std::vector<Shape>& outs, const Attrs& attrs,
                                             int64_t parts) {
  static const SbpRuleFn each = sbp::elementwise();
  const std::string& reduction = attrs.get_string("reduction");
  if (reduction == "none") return each(in, outs, attrs, parts);
  if (reduction == "mean") return {};
  Shape shape = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].defined()) shape = broadcast_shapes(shape, in[i].sizes());
  std::vector<SbpSignature> sigs = each(in, {shape}, attrs, parts);
  for (SbpSignature& s : sigs) s.outputs = {Sbp::partial_sum()};
  return sigs;
}

MF_REGISTER_OP(OpDef{
    .name = "mse_loss",
    .inputs = {"input", "target"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss");
      const bool none = parse_reduction("mse_loss", attrs.get_string("reduction")) == Reduction::None;
      return std::vector<TensorMeta>{{none ? shape : Shape{}, in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = mse_kernel,
    // d/dinput = 2 * (input - target) * g (/ n for "mean"), summed back to
    // each input's shape; written with ops, so it is twice differentiable.
    .backward = [](const BackwardContext& ctx) {
      const Tensor& x = ctx.inputs[0];
      const Tensor& t = ctx.inputs[1];
      const Reduction r = parse_reduction("mse_loss", ctx.attrs.get_string("reduction"));
      Tensor d = sub(x, t);
      double factor = 2.0;
      if (r == Reduction::Mean) factor /= double(std::max<int64_t>(d.numel(), 1));
      Tensor grad = mul(d, mul(ctx.grad_outputs[0], factor));
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(grad, ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = neg(sum_to(grad, ctx.input_metas[1].sizes));
      return grads;
    },
    .save_inputs = 0b11,
    .autocast = AutocastPolicy::Fp32,
    .sbp = pointwise_loss_sbp,
});

// --- binary_cross_entropy_with_logits ------------------------------------------------
// Per element, with sp(z) = log(1 + exp(z)) computed as max(z, 0) + log1p(exp(-|z|)),
// lw = 1 + (pos_weight - 1) * t:
//   loss = w * ((1 - t) * x + lw * sp(-x))
//   d/dx = w * ((1 - t) - lw * sigmoid(-x))
//   d/dt = w * (-x + (pos_weight - 1) * sp(-x))
//   d/dpos_weight = w * t * sp(-x)
//   d/dw = loss / w
// The forward op takes (x, t, w, pos_weight); w and pos_weight broadcast to
// x's shape and may be undefined (1). Reductions use sum and mean.

// out[i] = sp(-x[i]) over a block. The exp and the log1p run as separate
// loops: fused into one, GCC threads their range checks into branches and
// gives up vectorising.
constexpr int64_t kSoftplusBlock = 256;

template <typename T, typename A = acc_type<T>>
void softplus_neg_block(const T* x, A* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = cpu::exp_acc(-std::abs(A(x[i])));
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = std::max(-A(x[i]), A(0)) + cpu::log1p_acc(out[i]);
}

// Contiguous x and t; w and pos_weight are expanded to x's shape (ones when
// only the other is given), so the loops below run over plain arrays and
// vectorise.
void bce_kernel(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor x = contiguous(in[0].detach()), t = contiguous(in[1].detach());
  const bool weighted = in[2].defined() || in[3].defined();
  auto expanded = [&](const Tensor& p) {
    return contiguous(p.defined() ? expand(p.detach(), x.sizes()) : full(x.sizes(), 1, {.dtype = x.dtype()}));
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

Tensor bce_elementwise(const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw) {
  static const OpDef& op = dispatch::op("binary_cross_entropy_with_logits");
  return dispatch::apply_one(op, {x, t, w, pw});
}

MF_REGISTER_OP(OpDef{
    .name = "binary_cross_entropy_with_logits",
    .inputs = {"input", "target", "weight", "pos_weight"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = bce_kernel,
    // Written with ops, so it is twice differentiable.
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& x = ctx.inputs[0];
      const Tensor& t = ctx.inputs[1];
      const Tensor& w = ctx.inputs[2];
      const Tensor& pw = ctx.inputs[3];
      const Tensor gw = w.defined() ? mul(g, w) : g;
      const auto& needs = ctx.needs_input_grad;
      TensorList grads(4);
      if (needs[0]) {
        Tensor lw_sigmoid = sigmoid(neg(x));
        if (pw.defined()) lw_sigmoid = mul(add(mul(sub(pw, 1.0), t), 1.0), lw_sigmoid);
        grads[0] = sum_to(mul(gw, sub(rsub(t, 1.0), lw_sigmoid)), ctx.input_metas[0].sizes);
      }
      if (needs[1] || needs[3]) {
        const Tensor sp = softplus(neg(x));
        if (needs[1]) {
          Tensor d = neg(x);
          if (pw.defined()) d = add(d, mul(sub(pw, 1.0), sp));
          grads[1] = sum_to(mul(gw, d), ctx.input_metas[1].sizes);
        }
        if (needs[3]) grads[3] = sum_to(mul(gw, mul(t, sp)), ctx.input_metas[3].sizes);
      }
      if (needs[2]) grads[2] = sum_to(mul(g, bce_elementwise(x, t, Tensor(), pw)), ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b1111,
    .autocast = AutocastPolicy::Fp32,
    .elementwise = true,
});

Tensor reduce_loss(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::None: return loss;
    case Reduction::Sum: return sum(loss);
    case Reduction::Mean: return mean(loss);
  }
  return loss;
}

// Checks that t (if defined) broadcasts to `shape` and casts it to dtype.
Tensor broadcastable_arg(const char* op, const char* name, const Tensor& t, const Shape& shape, DType dtype) {
  if (!t.defined()) return t;
  MF_CHECK(is_floating(t.dtype()), TypeError, op, ": ", name, " must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
  MF_CHECK(broadcast_shapes(t.sizes(), shape, op) == shape, ShapeError, op, ": ", name, " of shape ",
           shape_str(t.sizes()), " must broadcast to the input's shape ", shape_str(shape));
  return to(t, dtype);
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  static const OpDef& op = dispatch::op("mse_loss");
  parse_reduction("mse_loss", reduction);
  const DType dt = result_type(input, target);
  MF_CHECK(is_floating(dt), TypeError, "mse_loss: expected floating-point input and target, got ",
           dtype_name(input.dtype()), " and ", dtype_name(target.dtype()));
  // A global mean is a sum over the count (Note [Global means] in reduce.cpp).
  if (reduction == "mean" && (input.is_global() || target.is_global())) {
    const Shape shape = broadcast_shapes(input.sizes(), target.sizes(), "mse_loss");
    if (shape_numel(shape) > 0)
      return div(dispatch::apply_one(op, {to(input, dt), to(target, dt)}, {{"reduction", std::string("sum")}}),
                 Scalar(double(shape_numel(shape))));
  }
  return dispatch::apply_one(op, {to(input, dt), to(target, dt)}, {{"reduction", reduction}});
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, const std::string& reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  const Reduction r = parse_reduction(op, reduction);
  MF_CHECK(is_floating(input.dtype()), TypeError, op, ": expected a floating-point input, got ",
           dtype_name(input.dtype()));
  MF_CHECK(target.sizes() == input.sizes(), ValueError, op, ": target size ", shape_str(target.sizes()),
           " must be the same as input size ", shape_str(input.sizes()));
  const DType dt = input.dtype();
  Tensor loss = bce_elementwise(input, to(target, dt), broadcastable_arg(op, "weight", weight, input.sizes(), dt),
                                broadcastable_arg(op, "pos_weight", pos_weight, input.sizes(), dt));
  return reduce_loss(loss, r);
}

}  // namespace mf
