// Pointwise losses: mse_loss and binary_cross_entropy_with_logits.
// CPU kernels: backend/cpu/kernels/loss.cpp.
#include <cmath>

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

// --- mse_loss ------------------------------------------------------------------------
// Inputs (input, target) of one dtype, broadcast together; output the
// squared errors ("none") or their sum or mean (0-d).

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
