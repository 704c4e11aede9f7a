// Powers and other broadcasting binary math: pow (tensor ** tensor,
// tensor ** scalar, scalar ** tensor), minimum, maximum, atan2.
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "ops/elementwise_common.h"

namespace mf {

using namespace elementwise_detail;

namespace {

MF_REGISTER_OP(OpDef{
    .name = "pow",
    .inputs = {"input", "exponent"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "pow: not supported for bool tensors");
      return infer_broadcast("pow", in);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& a = ctx.inputs[0];
      const Tensor& b = ctx.inputs[1];
      TensorList grads(2);
      // Like PyTorch: no gradient to the base where the exponent is 0, none to
      // the exponent where 0 ** b with b >= 0 (log 0 would give nan).
      if (ctx.needs_input_grad[0])
        grads[0] = sum_to(where(eq(b, 0), Scalar(0), mul(g, mul(b, pow(a, sub(b, 1))))), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) {
        Tensor zero_base = logical_and(eq(a, 0), ge(b, 0));
        grads[1] = sum_to(mul(g, where(zero_base, Scalar(0), mul(ctx.outputs[0], log(a)))), ctx.input_metas[1].sizes);
      }
      return grads;
    },
    .save_inputs = 0b11,
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "pow_scalar",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "pow: not supported for bool tensors");
      Scalar e = attrs.get_scalar("exponent");
      MF_CHECK(is_floating(in[0].dtype()) || (!e.is_floating() && e.to_int() >= 0), ValueError,
               "pow: integers to negative integer powers are not allowed (exponent ", e.str(), " for a ",
               dtype_name(in[0].dtype()), " tensor)");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& x = ctx.inputs[0];
      Scalar e = ctx.attrs.get_scalar("exponent");
      if (e.to_double() == 0.0) return TensorList{zeros_like(g)};
      Scalar e_minus_one = e.is_floating() ? Scalar(e.to_double() - 1.0) : Scalar(e.to_int() - 1);
      Tensor power = e_minus_one.to_double() == 1.0 ? x : pow(x, e_minus_one);
      return TensorList{mul(g, mul(power, e))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// Elementwise max / min; NaN wins, like PyTorch (functors::Max, Min).
// Gradients split evenly on ties (Note in PyTorch's derivatives.yaml for
// maximum).
// Gradient of maximum (kMax) or minimum w.r.t. each input.
template <bool kMax>
TensorList extremum_backward(const BackwardContext& ctx) {
  const Tensor& g = ctx.grad_outputs[0];
  const Tensor& a = ctx.inputs[0];
  const Tensor& b = ctx.inputs[1];
  Tensor shared = where(eq(a, b), mul(g, 0.5), g);
  TensorList grads(2);
  if (ctx.needs_input_grad[0])
    grads[0] = sum_to(masked_fill(shared, kMax ? lt(a, b) : gt(a, b), 0), ctx.input_metas[0].sizes);
  if (ctx.needs_input_grad[1])
    grads[1] = sum_to(masked_fill(shared, kMax ? gt(a, b) : lt(a, b), 0), ctx.input_metas[1].sizes);
  return grads;
}

MF_REGISTER_OP(OpDef{
    .name = "maximum",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_broadcast("maximum", in); },
    .backward = extremum_backward<true>,
    .save_inputs = 0b11,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "minimum",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_broadcast("minimum", in); },
    .backward = extremum_backward<false>,
    .save_inputs = 0b11,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "atan2",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(is_floating(in[0].dtype()), TypeError, "atan2: expected floating-point inputs, got ",
               dtype_name(in[0].dtype()));
      return infer_broadcast("atan2", in);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& a = ctx.inputs[0];
      const Tensor& b = ctx.inputs[1];
      Tensor scale = div(g, add(square(a), square(b)));
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(mul(scale, b), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(neg(mul(scale, a)), ctx.input_metas[1].sizes);
      return grads;
    },
    .save_inputs = 0b11,
    .elementwise = true,
});

}  // namespace

Tensor pow(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("pow");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

Tensor pow(const Tensor& a, Scalar b) {
  static const OpDef& op = dispatch::op("pow_scalar");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt)}, {{"exponent", b}});
}

Tensor pow(Scalar a, const Tensor& b) {
  static const OpDef& op = dispatch::op("pow");
  DType dt = result_type(b, a);
  return dispatch::apply_one(op, {scalar_tensor(a, dt, b.device()), to(b, dt)});
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("maximum");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("minimum");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

Tensor atan2(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("atan2");
  DType dt = floating_result(result_type(a, b));
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

}  // namespace mf
