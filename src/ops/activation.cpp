// Activations and clamping: relu, gelu, silu, leaky_relu, elu, softplus,
// clamp (scalar and tensor bounds), and the in-place relu_ / clamp_.
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "backend/common/elementwise_functors.h"
#include "ops/elementwise_common.h"

namespace mf {

using namespace elementwise_detail;

namespace {

using functors::kGeluTanhCoeff;
using functors::kInvSqrt2Pi;
using functors::kSqrt2OverPi;

InferFn infer_floating(const char* op) { return infer_unary(op, is_floating, "a floating-point"); }

// gelu''(x) from ops: phi(x) (2 - x^2) for "none"; for "tanh" (see
// gelu_backward) (1 - t^2) du + x (1 - t^2) (6 c k x - 2 t du^2) / 2.
Tensor gelu_second_derivative(const Tensor& x, const std::string& approximate) {
  Tensor x2 = square(x);
  if (approximate == "tanh") {
    Tensor t = tanh(mul(add(x, mul(mul(x2, x), kGeluTanhCoeff)), kSqrt2OverPi));
    Tensor du = mul(add(mul(x2, 3 * kGeluTanhCoeff), 1.0), kSqrt2OverPi);
    Tensor sech2 = rsub(square(t), 1.0);
    Tensor inner = sub(mul(x, 6 * kSqrt2OverPi * kGeluTanhCoeff), mul(mul(t, square(du)), 2.0));
    return add(mul(sech2, du), mul(mul(mul(x, sech2), inner), 0.5));
  }
  Tensor pdf = mul(exp(mul(x2, -0.5)), kInvSqrt2Pi);
  return mul(pdf, rsub(x2, 2.0));
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  static const OpDef& op = dispatch::op("gelu_backward");
  return dispatch::apply_one(op, {grad, x}, {{"approximate", approximate}});
}

MF_REGISTER_OP(OpDef{
    .name = "relu",
    .inputs = {"input"},
    .infer = infer_unary("relu", is_numeric, "a numeric (non-bool)"),
    // a < 0 ? 0 : a keeps NaN (PyTorch's relu propagates it).
    .backward = [](const BackwardContext& ctx) {
      return TensorList{where(gt(ctx.outputs[0], 0), ctx.grad_outputs[0], Scalar(0))};
    },
    .save_outputs = 0b1,
    .inplace = true,
    .elementwise = true,
});

// gelu(x) = x Phi(x), Phi the standard normal CDF; "tanh" approximates Phi
// by (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2.
MF_REGISTER_OP(OpDef{
    .name = "gelu",
    .inputs = {"input"},
    .infer = infer_floating("gelu"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{gelu_backward(ctx.grad_outputs[0], ctx.inputs[0], ctx.attrs.get_string("approximate"))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// gelu_backward(grad, x) = grad * gelu'(x) in one pass:
//   "none": Phi(x) + x phi(x)
//   "tanh": (1 + t) / 2 + x (1 - t^2) du / 2,  t = tanh(u), u = c (x + k x^3),
//           du = c (1 + 3 k x^2)
// It is linear in grad; its derivative in x is grad * gelu''(x), composed
// from ops (gelu_second_derivative) so that higher derivatives work.
MF_REGISTER_OP(OpDef{
    .name = "gelu_backward",
    .inputs = {"grad", "input"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), ShapeError,
               "gelu_backward: grad ", shape_str(in[0].sizes()), " and input ", shape_str(in[1].sizes()),
               " must have the same shape and dtype");
      return std::vector<TensorMeta>{{in[1].sizes(), in[1].dtype(), in[1].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const std::string& approximate = ctx.attrs.get_string("approximate");
      const Tensor& gg = ctx.grad_outputs[0];
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = gelu_backward(gg, ctx.inputs[1], approximate);
      if (ctx.needs_input_grad[1])
        grads[1] = mul(mul(gg, ctx.inputs[0]), gelu_second_derivative(ctx.inputs[1], approximate));
      return grads;
    },
    .save_inputs = 0b11,
    .elementwise = true,
});

// gelu(x) and gelu_backward(grad, x) as one node: (grad * gelu'(x),
// gelu(x)). Graph mode runs a recomputed GELU this way together with its
// gradient (Note [GELU with its gradient] in graph/fusion.h); each output
// has the bits of its own op (the kernel: backend/common/
// elementwise_kernels.h).
MF_REGISTER_OP(OpDef{
    .name = "gelu_with_backward",
    .inputs = {"grad", "input"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype() && is_floating(in[1].dtype()),
               ShapeError, "gelu_with_backward: grad ", dtype_name(in[0].dtype()), shape_str(in[0].sizes()),
               " and input ", dtype_name(in[1].dtype()), shape_str(in[1].sizes()),
               " must have the same shape and floating-point dtype");
      const TensorMeta meta{in[1].sizes(), in[1].dtype(), in[1].device()};
      return std::vector<TensorMeta>{meta, meta};
    },
    .differentiable = false,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "silu",
    .inputs = {"input"},
    .infer = infer_floating("silu"),
    .backward = [](const BackwardContext& ctx) {
      // s (1 + x (1 - s)), s = sigmoid(x)
      const Tensor& x = ctx.inputs[0];
      Tensor s = sigmoid(x);
      return TensorList{mul(ctx.grad_outputs[0], mul(s, add(mul(x, rsub(s, 1.0)), 1.0)))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "leaky_relu",
    .inputs = {"input"},
    .infer = infer_floating("leaky_relu"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      return TensorList{where(gt(ctx.inputs[0], 0), g, mul(g, ctx.attrs.get_float("negative_slope")))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "elu",
    .inputs = {"input"},
    .infer = infer_floating("elu"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& x = ctx.inputs[0];
      const double alpha = ctx.attrs.get_float("alpha");
      return TensorList{where(gt(x, 0), g, mul(g, mul(exp(x), alpha)))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// softplus(x) = log(1 + exp(beta x)) / beta, and x where beta x > threshold.
MF_REGISTER_OP(OpDef{
    .name = "softplus",
    .inputs = {"input"},
    .infer = infer_floating("softplus"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      Tensor bx = mul(ctx.inputs[0], ctx.attrs.get_float("beta"));
      return TensorList{where(gt(bx, ctx.attrs.get_float("threshold")), g, mul(g, sigmoid(bx)))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// --- clamp ------------------------------------------------------------------------------

// clamp with scalar bounds: min(max(x, lo), hi), NaN kept. Attrs "min" and
// "max" are present only for the bounds given.
MF_REGISTER_OP(OpDef{
    .name = "clamp",
    .inputs = {"input"},
    .infer = infer_unary("clamp", is_numeric, "a numeric (non-bool)"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& x = ctx.inputs[0];
      Tensor keep;
      if (ctx.attrs.has("min")) keep = ge(x, ctx.attrs.get_scalar("min"));
      if (ctx.attrs.has("max")) {
        Tensor below = le(x, ctx.attrs.get_scalar("max"));
        keep = keep.defined() ? logical_and(keep, below) : below;
      }
      return TensorList{where(keep, ctx.grad_outputs[0], Scalar(0))};
    },
    .save_inputs = 0b1,
    .inplace = true,
    .elementwise = true,
});

// One tensor bound: kMin gives max(x, bound), else min(x, bound). The
// gradient reaches x where it is kept (ties included, as in PyTorch) and the
// bound elsewhere.
template <bool kMin>
OpDef clamp_tensor_op(const char* name) {
  return OpDef{
      .name = name,
      .inputs = {"input", kMin ? "min" : "max"},
      .infer = [name](const TensorList& in, const Attrs&) {
        MF_CHECK(in[0].dtype() != DType::Bool, TypeError, name, ": not supported for bool tensors");
        return infer_broadcast(name, in);
      },
      .backward = [](const BackwardContext& ctx) {
        const Tensor& g = ctx.grad_outputs[0];
        Tensor keep = kMin ? ge(ctx.inputs[0], ctx.inputs[1]) : le(ctx.inputs[0], ctx.inputs[1]);
        TensorList grads(2);
        if (ctx.needs_input_grad[0]) grads[0] = sum_to(where(keep, g, Scalar(0)), ctx.input_metas[0].sizes);
        if (ctx.needs_input_grad[1]) grads[1] = sum_to(where(keep, Scalar(0), g), ctx.input_metas[1].sizes);
        return grads;
      },
      .save_inputs = 0b11,
      .elementwise = true,
  };
}

MF_REGISTER_OP(clamp_tensor_op<true>("clamp_min_tensor"));
MF_REGISTER_OP(clamp_tensor_op<false>("clamp_max_tensor"));

const OpDef& op_relu() {
  static const OpDef& op = dispatch::op("relu");
  return op;
}
const OpDef& op_clamp() {
  static const OpDef& op = dispatch::op("clamp");
  return op;
}

// The dtype of clamp(t, min, max) with scalar bounds, and its attrs.
DType clamp_dtype(const Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max, Attrs& attrs) {
  MF_CHECK(min || max, ValueError, "clamp: at least one of 'min' or 'max' must not be None");
  DType dt = t.dtype();
  if (min) {
    dt = result_type(t, *min);
    attrs.set("min", *min);
  }
  if (max) {
    DType with_max = result_type(t, *max);
    dt = promote_types(dt, with_max);
    attrs.set("max", *max);
  }
  if (min) check_scalar_fits(*min, dt, "clamp", "min");
  if (max) check_scalar_fits(*max, dt, "clamp", "max");
  return dt;
}

}  // namespace

Tensor relu(const Tensor& t) { return dispatch::apply_one(op_relu(), {t}); }
Tensor& relu_(Tensor& t) {
  dispatch::apply_inplace(op_relu(), {t});
  return t;
}

Tensor gelu(const Tensor& t, const std::string& approximate) {
  static const OpDef& op = dispatch::op("gelu");
  MF_CHECK(approximate == "none" || approximate == "tanh", ValueError,
           "gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
  return dispatch::apply_one(op, {t}, {{"approximate", approximate}});
}
Tensor silu(const Tensor& t) {
  static const OpDef& op = dispatch::op("silu");
  return dispatch::apply_one(op, {t});
}
Tensor leaky_relu(const Tensor& t, double negative_slope) {
  static const OpDef& op = dispatch::op("leaky_relu");
  return dispatch::apply_one(op, {t}, {{"negative_slope", negative_slope}});
}
Tensor elu(const Tensor& t, double alpha) {
  static const OpDef& op = dispatch::op("elu");
  return dispatch::apply_one(op, {t}, {{"alpha", alpha}});
}
Tensor softplus(const Tensor& t, double beta, double threshold) {
  static const OpDef& op = dispatch::op("softplus");
  return dispatch::apply_one(op, {t}, {{"beta", beta}, {"threshold", threshold}});
}

Tensor clamp(const Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max) {
  Attrs attrs;
  DType dt = clamp_dtype(t, min, max, attrs);
  return dispatch::apply_one(op_clamp(), {to(t, dt)}, attrs);
}
Tensor& clamp_(Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max) {
  Attrs attrs;
  DType dt = clamp_dtype(t, min, max, attrs);
  MF_CHECK(dt == t.dtype() || is_floating(t.dtype()), TypeError, "clamp_: result type ", dtype_name(dt),
           " can't be cast to the desired output type ", dtype_name(t.dtype()));
  dispatch::apply_inplace(op_clamp(), {t}, attrs);
  return t;
}

Tensor clamp(const Tensor& t, const Tensor& min, const Tensor& max) {
  static const OpDef& op_min = dispatch::op("clamp_min_tensor");
  static const OpDef& op_max = dispatch::op("clamp_max_tensor");
  MF_CHECK(min.defined() || max.defined(), ValueError, "clamp: at least one of 'min' or 'max' must not be None");
  DType dt = t.dtype();
  if (min.defined() && max.defined()) dt = common_dtype({&t, &min, &max});
  else dt = result_type(t, min.defined() ? min : max);
  Tensor out = to(t, dt);
  if (min.defined()) out = dispatch::apply_one(op_min, {out, to(min, dt)});
  if (max.defined()) out = dispatch::apply_one(op_max, {out, to(max, dt)});
  return out;
}

}  // namespace mf
