// Classification losses: nll_loss and cross_entropy, with PyTorch's
// semantics (ignore_index, class weights, label smoothing, reductions).
//
// Note [Class-index losses]: the functional layer moves the class dim last
// and flattens, so the ops see logits (M, C) and int64 targets (M); the
// loss of "none" is reshaped back to the target's shape afterwards. With
// w the class weights (ones when absent), W = sum(w), e = label_smoothing
// and lse_i = logsumexp(x_i), a non-ignored row i with target t costs
//   cross_entropy: (1 - e) * w_t * (lse_i - x_it) + (e / C) * sum_c w_c * (lse_i - x_ic)
//   nll_loss:      -w_t * x_it
// and an ignored row costs 0. "mean" divides the sum by the total weight
// sum_i w_{t_i} over non-ignored rows (for both terms, as PyTorch does);
// with every row ignored that is 0 / 0 = nan, as in PyTorch.
// The forward ops also return the total weight (and cross_entropy the
// per-row lse) for their fused backward ops. CPU kernels:
// backend/cpu/kernels/loss.cpp.
#include <cmath>

#include "meshflow/autocast.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "ops/loss_common.h"

namespace mf {

using loss_detail::parse_reduction;
using loss_detail::Reduction;

namespace {

DType stats_dtype(DType d) { return is_reduced_floating(d) ? kFloat32 : d; }

std::vector<TensorMeta> infer_class_loss(const TensorList& in, const Attrs& attrs, const char* op,
                                         bool with_lse) {
  const Tensor& x = in[0];
  MF_CHECK(x.dim() == 2 && in[1].dim() == 1 && in[1].sizes()[0] == x.sizes()[0] && in[1].dtype() == kInt64,
           ShapeError, op, ": the op takes logits (M, C) and int64 targets (M), got ", shape_str(x.sizes()), " and ",
           dtype_name(in[1].dtype()), " ", shape_str(in[1].sizes()));
  const Reduction r = parse_reduction(op, attrs.get_string("reduction"));
  std::vector<TensorMeta> metas{{r == Reduction::None ? Shape{x.sizes()[0]} : Shape{}, x.dtype(), x.device()}};
  if (with_lse) metas.push_back({{x.sizes()[0]}, stats_dtype(x.dtype()), x.device()});
  metas.push_back({{}, stats_dtype(x.dtype()), x.device()});
  return metas;
}

// --- nll_loss ------------------------------------------------------------------------
// Inputs (log_probs (M, C), target (M), weight (C)); outputs (loss, total_weight).

Tensor nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& weight, const Tensor& total_weight,
                         int64_t classes, const Attrs& attrs) {
  static const OpDef& op = dispatch::op("nll_loss_backward");
  Attrs a = attrs;
  a.set("num_classes", classes);
  return dispatch::apply_one(op, {grad, target, weight, total_weight}, a);
}

void check_no_weight_grad(const BackwardContext& ctx, const char* op) {
  MF_CHECK(!ctx.needs_input_grad[2], Error, op, ": the derivative for 'weight' is not implemented");
}

// SBP rules. Rows (dim 0 of the scores and of the target) are independent:
// with reduction "none" the loss rows split, with "sum" the loss and the
// total weight are partial sums. "mean" divides by the total weight of all
// rows, so the forward runs broadcast; its backward gets that total as an
// input (total_weight) and splits rows again.
std::vector<SbpSignature> class_loss_sbp(const TensorList& in, const std::vector<Shape>& outs, const Attrs& attrs,
                                         int64_t) {
  const std::string& reduction = attrs.get_string("reduction");
  if (reduction == "mean" || in[0].dim() < 2) return {};
  const Sbp rows = Sbp::split(0);
  std::vector<Sbp> out{reduction == "none" ? rows : Sbp::partial_sum()};
  if (outs.size() == 3) out.push_back(rows);  // cross_entropy's log-sum-exp per row
  out.push_back(Sbp::partial_sum());           // total weight
  return {{{rows, rows, Sbp::broadcast()}, out}};
}

// (grad, scores, target, weight, [lse,] total_weight): grad and lse are
// per row unless the loss was reduced.
std::vector<SbpSignature> class_loss_backward_sbp(const TensorList& in, const std::vector<Shape>&, const Attrs&,
                                                  int64_t) {
  const int64_t rows = in[1].dim() >= 1 ? in[1].size(0) : -1;
  if (in[2].dim() < 1 || rows < 0) return {};
  std::vector<Sbp> sbp;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    const bool per_row = i == 1 || i == 2 || (i != 3 && t.defined() && t.dim() >= 1 && t.size(0) == rows);
    sbp.push_back(per_row ? Sbp::split(0) : Sbp::broadcast());
  }
  return {{sbp, {Sbp::split(0)}}};
}

MF_REGISTER_OP(OpDef{
    .name = "nll_loss",
    .inputs = {"log_probs", "target", "weight"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_class_loss(in, attrs, "nll_loss", false); },
    .backward = [](const BackwardContext& ctx) {
      check_no_weight_grad(ctx, "nll_loss");
      return TensorList{nll_loss_backward(ctx.grad_outputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[1],
                                          ctx.input_metas[0].sizes[1], ctx.attrs),
                        Tensor(), Tensor()};
    },
    .save_inputs = 0b110,
    .save_outputs = 0b10,
    .autocast = AutocastPolicy::Fp32,
    .sbp = class_loss_sbp,
});

// Linear in grad: its derivative w.r.t. grad is nll_loss of the incoming
// gradient (same targets, weights and reduction).
MF_REGISTER_OP(OpDef{
    .name = "nll_loss_backward",
    .inputs = {"grad", "target", "weight", "total_weight"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{
          {{in[1].sizes()[0], attrs.get_int("num_classes")}, in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("nll_loss");
      TensorList grads(4);
      if (ctx.needs_input_grad[0])
        grads[0] = dispatch::apply(op, {ctx.grad_outputs[0], ctx.inputs[1], ctx.inputs[2]}, ctx.attrs)[0];
      return grads;
    },
    .save_inputs = 0b0110,
    .sbp = [](const TensorList& in, const std::vector<Shape>&, const Attrs&, int64_t) {
      if (in[1].dim() < 1) return std::vector<SbpSignature>{};
      const Sbp rows = Sbp::split(0);
      const Sbp grad = in[0].dim() >= 1 ? rows : Sbp::broadcast();
      return std::vector<SbpSignature>{{{grad, rows, Sbp::broadcast(), Sbp::broadcast()}, {rows}}};
    },
});

// --- cross_entropy -------------------------------------------------------------------
// Inputs (logits (M, C), target (M), weight (C)); outputs (loss, lse (M), total_weight).

// The constants of cross_entropy's gradient written with ops,
//   d logits = coef * (K * softmax(logits) - Q),
// K_i = (1 - e) * w_t + (e / C) * W and Q_ic = (1 - e) * w_t * [c == t] + (e / C) * w_c
// (both zero for ignored rows). Inputs (target (M), weight (C)); outputs
// K (M, 1) and Q (M, C) of dtype.
MF_REGISTER_OP(OpDef{
    .name = "cross_entropy_target_terms",
    .inputs = {"target", "weight"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const DType dt = attrs.get_dtype("dtype");
      const int64_t rows = in[0].sizes()[0];
      return std::vector<TensorMeta>{{{rows, 1}, dt, in[0].device()},
                                     {{rows, attrs.get_int("num_classes")}, dt, in[0].device()}};
    },
    .differentiable = false,
    .sbp = [](const TensorList& in, const std::vector<Shape>&, const Attrs&, int64_t) {
      if (in[0].dim() < 1) return std::vector<SbpSignature>{};
      return std::vector<SbpSignature>{{{Sbp::split(0), Sbp::broadcast()}, {Sbp::split(0), Sbp::split(0)}}};
    },
});

// cross_entropy's backward written with ops (twice differentiable), used
// while the graph of a gradient is recorded (create_graph).
Tensor ce_composite_backward(const BackwardContext& ctx) {
  static const OpDef& op = dispatch::op("cross_entropy_target_terms");
  const Tensor& g = ctx.grad_outputs[0];
  const Tensor& x = ctx.inputs[0];
  Attrs attrs = ctx.attrs;
  attrs.set("num_classes", x.sizes()[1]).set("dtype", x.dtype());
  TensorList terms = dispatch::apply(op, {ctx.inputs[1], ctx.inputs[2]}, attrs);
  Tensor dx = sub(mul(terms[0], softmax(x, 1)), terms[1]);
  switch (parse_reduction("cross_entropy", ctx.attrs.get_string("reduction"))) {
    case Reduction::None: return mul(dx, unsqueeze(g, 1));
    case Reduction::Sum: return mul(dx, g);
    case Reduction::Mean: return mul(dx, div(g, to(ctx.outputs[2], g.dtype())));
  }
  return dx;
}

MF_REGISTER_OP(OpDef{
    .name = "cross_entropy",
    .inputs = {"logits", "target", "weight"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return infer_class_loss(in, attrs, "cross_entropy", true);
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("cross_entropy_backward");
      check_no_weight_grad(ctx, "cross_entropy");
      if (GradMode::is_enabled()) return TensorList{ce_composite_backward(ctx), Tensor(), Tensor()};
      Tensor dx = dispatch::apply_one(op,
                                      {ctx.grad_outputs[0], ctx.inputs[0], ctx.inputs[1], ctx.inputs[2],
                                       ctx.outputs[1], ctx.outputs[2]},
                                      ctx.attrs);
      return TensorList{dx, Tensor(), Tensor()};
    },
    .save_inputs = 0b111,
    .save_outputs = 0b110,
    .autocast = AutocastPolicy::Fp32,
    .sbp = class_loss_sbp,
});

MF_REGISTER_OP(OpDef{
    .name = "cross_entropy_backward",
    .inputs = {"grad", "logits", "target", "weight", "lse", "total_weight"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[1].sizes(), in[1].dtype(), in[1].device()}};
    },
    .differentiable = false,
    .sbp = class_loss_backward_sbp,
});

// --- functional ----------------------------------------------------------------------

struct FlatClassInput {
  Tensor logits;  // (M, C)
  Tensor target;  // (M) int64
  Shape loss_shape;  // the shape of a "none" loss
};

// Checks logits (C), (N, C) or (N, C, d1, ...) against class-index targets
// (), (N) or (N, d1, ...) and moves the class dim last (Note [Class-index losses]).
FlatClassInput flatten_class_input(const char* op, const Tensor& logits, const Tensor& target) {
  MF_CHECK(is_floating(logits.dtype()), TypeError, op, ": expected floating-point input, got ",
           dtype_name(logits.dtype()));
  MF_CHECK(logits.dim() >= 1, ShapeError, op, ": expected input of shape (C), (N, C) or (N, C, d1, ...), got a 0-d tensor");
  MF_CHECK(is_integral(target.dtype()), TypeError, op,
           ": expected class-index targets of an integer dtype (or probabilities of the input's shape), got ",
           dtype_name(target.dtype()));
  Shape expected = logits.sizes();
  expected.erase(expected.begin() + (logits.dim() == 1 ? 0 : 1));
  MF_CHECK(target.sizes() == expected, ShapeError, op, ": expected target of shape ", shape_str(expected),
           " for input of shape ", shape_str(logits.sizes()), ", got ", shape_str(target.sizes()));
  const int64_t classes = logits.sizes()[logits.dim() == 1 ? 0 : 1];
  FlatClassInput flat{logits, reshape(to(target, kInt64), {-1}), expected};
  if (logits.dim() == 1) {
    flat.logits = unsqueeze(logits, 0);
  } else if (logits.dim() > 2) {
    Shape perm{0};
    for (int64_t d = 2; d < logits.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    flat.logits = reshape(permute(logits, perm), {-1, classes});
  }
  return flat;
}

Tensor checked_class_weight(const char* op, const Tensor& weight, int64_t classes, DType dtype) {
  if (!weight.defined()) return weight;
  MF_CHECK(weight.dim() == 1 && weight.sizes()[0] == classes, ShapeError, op,
           ": weight should be defined for all ", classes, " classes or no classes, got weight of shape ",
           shape_str(weight.sizes()));
  MF_CHECK(is_floating(weight.dtype()), TypeError, op, ": weight must be a floating-point tensor, got ",
           dtype_name(weight.dtype()));
  return to(weight, dtype);
}

// cross_entropy with class probabilities as targets (composite, so every
// input, the target included, gets gradients).
Tensor cross_entropy_probabilities(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                   int64_t ignore_index, Reduction reduction, double smoothing) {
  MF_CHECK(target.sizes() == logits.sizes(), ShapeError,
           "cross_entropy: probability targets must have the input's shape ", shape_str(logits.sizes()), ", got ",
           shape_str(target.sizes()));
  MF_CHECK(ignore_index < 0, ValueError, "cross_entropy: ignore_index (", ignore_index,
           ") is not supported for probability targets");
  MF_CHECK(logits.dim() >= 1, ShapeError, "cross_entropy: expected input of shape (C), (N, C) or (N, C, d1, ...), got a 0-d tensor");
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  const int64_t classes = logits.sizes()[size_t(class_dim)];
  Tensor p = to(target, logits.dtype());
  if (smoothing > 0) p = add(mul(p, 1.0 - smoothing), smoothing / double(classes));
  Tensor terms = mul(log_softmax(logits, class_dim), p);
  if (weight.defined()) {
    Shape wshape(size_t(logits.dim()), 1);
    wshape[size_t(class_dim)] = classes;
    terms = mul(terms, reshape(weight, wshape));
  }
  Tensor per_sample = neg(sum(terms, {class_dim}));
  switch (reduction) {
    case Reduction::None: return per_sample;
    case Reduction::Sum: return sum(per_sample);
    case Reduction::Mean: return div(sum(per_sample), double(per_sample.numel()));
  }
  return per_sample;
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                const std::string& reduction) {
  static const OpDef& op = dispatch::op("nll_loss");
  const Reduction r = parse_reduction("nll_loss", reduction);
  FlatClassInput flat = flatten_class_input("nll_loss", log_probs, target);
  Tensor w = checked_class_weight("nll_loss", weight, flat.logits.sizes()[1], log_probs.dtype());
  // A global mean is the sum over the total weight (Note [Global means] in
  // reduce.cpp).
  if (r == Reduction::Mean && (log_probs.is_global() || target.is_global())) {
    TensorList sum = dispatch::apply(op, {flat.logits, flat.target, w}, {{"ignore_index", ignore_index}, {"reduction", std::string("sum")}});
    return div(sum[0], sum.back());
  }
  Tensor loss = dispatch::apply(op, {flat.logits, flat.target, w},
                                {{"ignore_index", ignore_index}, {"reduction", reduction}})[0];
  return r == Reduction::None ? reshape(loss, flat.loss_shape) : loss;
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     const std::string& reduction, double label_smoothing) {
  static const OpDef& op = dispatch::op("cross_entropy");
  // Probability targets take a composite path: float32 under autocast too.
  const Tensor logits = autocast::cast_for(op, logits_in);
  const Reduction r = parse_reduction("cross_entropy", reduction);
  MF_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
           "cross_entropy: label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  MF_CHECK(is_floating(logits.dtype()), TypeError, "cross_entropy: expected floating-point input, got ",
           dtype_name(logits.dtype()));
  if (logits.dim() >= 1 && is_floating(target.dtype())) {
    const int64_t classes = logits.sizes()[logits.dim() == 1 ? 0 : 1];
    Tensor w = checked_class_weight("cross_entropy", weight, classes, logits.dtype());
    return cross_entropy_probabilities(logits, target, w, ignore_index, r, label_smoothing);
  }
  FlatClassInput flat = flatten_class_input("cross_entropy", logits, target);
  Tensor w = checked_class_weight("cross_entropy", weight, flat.logits.sizes()[1], logits.dtype());
  if (r == Reduction::Mean && (logits.is_global() || target.is_global())) {
    TensorList sum = dispatch::apply(op, {flat.logits, flat.target, w},
                                     {{"ignore_index", ignore_index},
                                      {"reduction", std::string("sum")},
                                      {"label_smoothing", label_smoothing}});
    return div(sum[0], sum.back());
  }
  Tensor loss = dispatch::apply(op, {flat.logits, flat.target, w},
                                {{"ignore_index", ignore_index},
                                 {"reduction", reduction},
                                 {"label_smoothing", label_smoothing}})[0];
  return r == Reduction::None ? reshape(loss, flat.loss_shape) : loss;
}

}  // namespace mf
