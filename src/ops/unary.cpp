// Unary math: abs sign exp log log1p expm1 sqrt rsqrt square reciprocal sin
// cos tanh sigmoid erf floor ceil round trunc.
//
// Floating functions of integer or bool tensors compute in the default float
// dtype (exp of an int64 tensor is float32, as in PyTorch); the functional
// API casts, so their kernels only see floating inputs. The kernels are the
// shared functors of backend/common/elementwise_functors.h, computed in
// acc_type<T> (float for float32, float16 and bfloat16).
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "ops/elementwise_common.h"

namespace mf {

using namespace elementwise_detail;

namespace {

constexpr double kTwoOverSqrtPi = 1.1283791670955126;  // d/dx erf(x) = 2/sqrt(pi) exp(-x^2)

// Gradient zero almost everywhere (rounding, sign).
TensorList zero_grad(const BackwardContext& ctx) { return TensorList{zeros_like(ctx.grad_outputs[0])}; }

InferFn infer_floating(const char* op) { return infer_unary(op, is_floating, "a floating-point"); }

MF_REGISTER_OP(OpDef{
    .name = "abs",
    .inputs = {"input"},
    .infer = infer_unary("abs", is_numeric, "a numeric (non-bool)"),
    .backward = [](const BackwardContext& ctx) { return TensorList{mul(ctx.grad_outputs[0], sign(ctx.inputs[0]))}; },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "sign",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = zero_grad,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "exp",
    .inputs = {"input"},
    .infer = infer_floating("exp"),
    .backward = [](const BackwardContext& ctx) { return TensorList{mul(ctx.grad_outputs[0], ctx.outputs[0])}; },
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "log",
    .inputs = {"input"},
    .infer = infer_floating("log"),
    .backward = [](const BackwardContext& ctx) { return TensorList{div(ctx.grad_outputs[0], ctx.inputs[0])}; },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "log1p",
    .inputs = {"input"},
    .infer = infer_floating("log1p"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{div(ctx.grad_outputs[0], add(ctx.inputs[0], 1))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "expm1",
    .inputs = {"input"},
    .infer = infer_floating("expm1"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{mul(ctx.grad_outputs[0], add(ctx.outputs[0], 1))};
    },
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "sqrt",
    .inputs = {"input"},
    .infer = infer_floating("sqrt"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{div(ctx.grad_outputs[0], mul(ctx.outputs[0], 2))};
    },
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "rsqrt",
    .inputs = {"input"},
    .infer = infer_floating("rsqrt"),
    .backward = [](const BackwardContext& ctx) {
      // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
      return TensorList{mul(ctx.grad_outputs[0], mul(pow(ctx.outputs[0], 3), -0.5))};
    },
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "reciprocal",
    .inputs = {"input"},
    .infer = infer_floating("reciprocal"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{neg(mul(ctx.grad_outputs[0], square(ctx.outputs[0])))};
    },
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "sin",
    .inputs = {"input"},
    .infer = infer_floating("sin"),
    .backward = [](const BackwardContext& ctx) { return TensorList{mul(ctx.grad_outputs[0], cos(ctx.inputs[0]))}; },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "cos",
    .inputs = {"input"},
    .infer = infer_floating("cos"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{neg(mul(ctx.grad_outputs[0], sin(ctx.inputs[0])))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "tanh",
    .inputs = {"input"},
    .infer = infer_floating("tanh"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{mul(ctx.grad_outputs[0], rsub(square(ctx.outputs[0]), 1))};
    },
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "sigmoid",
    .inputs = {"input"},
    .infer = infer_floating("sigmoid"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& y = ctx.outputs[0];
      return TensorList{mul(ctx.grad_outputs[0], mul(y, rsub(y, 1)))};
    },
    .save_outputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "erf",
    .inputs = {"input"},
    .infer = infer_floating("erf"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& x = ctx.inputs[0];
      return TensorList{mul(ctx.grad_outputs[0], mul(exp(neg(square(x))), kTwoOverSqrtPi))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// Rounding of floating tensors (integer tensors are returned as copies by the
// functional API).
OpDef rounding_op(const char* name) {
  return OpDef{
      .name = name,
      .inputs = {"input"},
      .infer = infer_floating(name),
      .backward = zero_grad,
      .elementwise = true,
  };
}

MF_REGISTER_OP(rounding_op("floor"));
MF_REGISTER_OP(rounding_op("ceil"));
// Half to even, like PyTorch.
MF_REGISTER_OP(rounding_op("round"));
MF_REGISTER_OP(rounding_op("trunc"));

// A floating function of t: integers and bool are cast to the float dtype.
Tensor apply_floating(const OpDef& op, const Tensor& t) {
  return dispatch::apply_one(op, {to(t, floating_result(t.dtype()))});
}

// A rounding function: the identity on integers (a copy, as PyTorch returns).
Tensor apply_rounding(const OpDef& op, const Tensor& t) {
  MF_CHECK(t.dtype() != DType::Bool, TypeError, op.name, ": not supported for bool tensors");
  if (!is_floating(t.dtype())) return clone(t);
  return dispatch::apply_one(op, {t});
}

}  // namespace

Tensor abs(const Tensor& t) {
  static const OpDef& op = dispatch::op("abs");
  return dispatch::apply_one(op, {t});
}
Tensor sign(const Tensor& t) {
  static const OpDef& op = dispatch::op("sign");
  return dispatch::apply_one(op, {t});
}
Tensor exp(const Tensor& t) {
  static const OpDef& op = dispatch::op("exp");
  return apply_floating(op, t);
}
Tensor log(const Tensor& t) {
  static const OpDef& op = dispatch::op("log");
  return apply_floating(op, t);
}
Tensor log1p(const Tensor& t) {
  static const OpDef& op = dispatch::op("log1p");
  return apply_floating(op, t);
}
Tensor expm1(const Tensor& t) {
  static const OpDef& op = dispatch::op("expm1");
  return apply_floating(op, t);
}
Tensor sqrt(const Tensor& t) {
  static const OpDef& op = dispatch::op("sqrt");
  return apply_floating(op, t);
}
Tensor rsqrt(const Tensor& t) {
  static const OpDef& op = dispatch::op("rsqrt");
  return apply_floating(op, t);
}
// x * x through pow, so bool gives int64 as in PyTorch.
Tensor square(const Tensor& t) { return pow(t, 2); }
Tensor reciprocal(const Tensor& t) {
  static const OpDef& op = dispatch::op("reciprocal");
  return apply_floating(op, t);
}
Tensor sin(const Tensor& t) {
  static const OpDef& op = dispatch::op("sin");
  return apply_floating(op, t);
}
Tensor cos(const Tensor& t) {
  static const OpDef& op = dispatch::op("cos");
  return apply_floating(op, t);
}
Tensor tanh(const Tensor& t) {
  static const OpDef& op = dispatch::op("tanh");
  return apply_floating(op, t);
}
Tensor sigmoid(const Tensor& t) {
  static const OpDef& op = dispatch::op("sigmoid");
  return apply_floating(op, t);
}
Tensor erf(const Tensor& t) {
  static const OpDef& op = dispatch::op("erf");
  return apply_floating(op, t);
}
Tensor floor(const Tensor& t) {
  static const OpDef& op = dispatch::op("floor");
  return apply_rounding(op, t);
}
Tensor ceil(const Tensor& t) {
  static const OpDef& op = dispatch::op("ceil");
  return apply_rounding(op, t);
}
Tensor round(const Tensor& t) {
  static const OpDef& op = dispatch::op("round");
  return apply_rounding(op, t);
}
Tensor trunc(const Tensor& t) {
  static const OpDef& op = dispatch::op("trunc");
  return apply_rounding(op, t);
}

}  // namespace mf
