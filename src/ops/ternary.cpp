// Selection and three-operand ops: where, masked_fill, lerp, addcmul, addcdiv.
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "ops/elementwise_common.h"

namespace mf {

using namespace elementwise_detail;

namespace {

// --- where(condition, a, b) -------------------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "where",
    .inputs = {"condition", "input", "other"},
    .infer = [](const TensorList& in, const Attrs&) {
      // uint8 conditions are accepted like PyTorch 1.13 does (deprecated there).
      MF_CHECK(in[0].dtype() == DType::Bool || in[0].dtype() == DType::UInt8, TypeError,
               "where: expected condition to be a boolean tensor, got a tensor with dtype ", dtype_name(in[0].dtype()));
      MF_CHECK(in[1].dtype() == in[2].dtype(), TypeError, "where: expected input and other to have one dtype, got ",
               dtype_name(in[1].dtype()), " and ", dtype_name(in[2].dtype()),
               " (the functional API promotes; the op takes one dtype)");
      Shape shape = broadcast_shapes(broadcast_shapes(in[0].sizes(), in[1].sizes(), "where"), in[2].sizes(), "where");
      return std::vector<TensorMeta>{{shape, in[1].dtype(), in[1].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& c = ctx.inputs[0];
      TensorList grads(3);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(where(c, g, Scalar(0)), ctx.input_metas[1].sizes);
      if (ctx.needs_input_grad[2]) grads[2] = sum_to(where(c, Scalar(0), g), ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// --- masked_fill(input, mask, value) ---------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "masked_fill",
    .inputs = {"input", "mask", "value"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[1].dtype() == DType::Bool, TypeError,
               "masked_fill: only supports boolean masks, but got mask with dtype ", dtype_name(in[1].dtype()));
      MF_CHECK(in[2].dim() == 0, ShapeError,
               "masked_fill: only supports a 0-dimensional value tensor, but got tensor with ", in[2].dim(),
               " dimension(s)");
      MF_CHECK(in[2].dtype() == in[0].dtype(), TypeError, "masked_fill: expected value of dtype ",
               dtype_name(in[0].dtype()), ", got ", dtype_name(in[2].dtype()));
      return std::vector<TensorMeta>{
          {broadcast_shapes(in[0].sizes(), in[1].sizes(), "masked_fill"), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& mask = ctx.inputs[1];
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(masked_fill(g, mask, Scalar(0)), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[2]) grads[2] = sum(where(mask, g, Scalar(0)));
      return grads;
    },
    .save_inputs = 0b10,
    .inplace = true,
    .elementwise = true,
});

// --- lerp(start, end, weight) ----------------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "lerp",
    .inputs = {"input", "end"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(is_floating(in[0].dtype()), TypeError, "lerp: expected floating-point tensors, got ",
               dtype_name(in[0].dtype()));
      MF_CHECK(in[1].dtype() == in[0].dtype(), TypeError, "lerp: expected dtype ", dtype_name(in[0].dtype()),
               " for `end` but got dtype ", dtype_name(in[1].dtype()));
      return infer_broadcast("lerp", in);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const double w = ctx.attrs.get_float("weight");
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(mul(g, 1.0 - w), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(mul(g, w), ctx.input_metas[1].sizes);
      return grads;
    },
    .elementwise = true,
});

// --- addcmul / addcdiv: input + value * t1 (* or /) t2 --------------------------------

template <bool kDivide>
std::vector<TensorMeta> infer_addc(const TensorList& in, const Attrs&) {
  const char* name = kDivide ? "addcdiv" : "addcmul";
  MF_CHECK(in[0].dtype() != DType::Bool, TypeError, name, ": not supported for bool tensors");
  MF_CHECK(!kDivide || is_floating(in[0].dtype()), TypeError,
           "addcdiv: integer division with addcdiv is not supported; use addcmul(input, tensor1, 1 / tensor2) ",
           "or a floating dtype, got ", dtype_name(in[0].dtype()));
  return infer_broadcast(name, in);
}

MF_REGISTER_OP(OpDef{
    .name = "addcmul",
    .inputs = {"input", "tensor1", "tensor2"},
    .infer = infer_addc<false>,
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      Scalar v = ctx.attrs.get_scalar("value");
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(g, ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(mul(mul(g, ctx.inputs[2]), v), ctx.input_metas[1].sizes);
      if (ctx.needs_input_grad[2]) grads[2] = sum_to(mul(mul(g, ctx.inputs[1]), v), ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b110,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "addcdiv",
    .inputs = {"input", "tensor1", "tensor2"},
    .infer = infer_addc<true>,
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& a = ctx.inputs[1];
      const Tensor& b = ctx.inputs[2];
      Scalar v = ctx.attrs.get_scalar("value");
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(g, ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(mul(div(g, b), v), ctx.input_metas[1].sizes);
      if (ctx.needs_input_grad[2])
        grads[2] = sum_to(neg(mul(div(mul(g, a), square(b)), v)), ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b110,
    .elementwise = true,
});

Tensor apply_addc(const OpDef& op, const Tensor& t, const Tensor& a, const Tensor& b, Scalar value) {
  DType dt = common_dtype({&t, &a, &b});
  MF_CHECK(is_floating(dt) || !value.is_floating(), TypeError, op.name,
           ": for integral input tensors, argument value must not be a floating point number");
  return dispatch::apply_one(op, {to(t, dt), to(a, dt), to(b, dt)}, {{"value", value}});
}

const OpDef& op_masked_fill() {
  static const OpDef& op = dispatch::op("masked_fill");
  return op;
}

}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("where");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {condition, to(a, dt), to(b, dt)});
}
Tensor where(const Tensor& condition, const Tensor& a, Scalar b) {
  DType dt = result_type(a, b);
  return where(condition, a, scalar_tensor(b, dt, a.device()));
}
Tensor where(const Tensor& condition, Scalar a, const Tensor& b) {
  DType dt = result_type(b, a);
  return where(condition, scalar_tensor(a, dt, b.device()), b);
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, Scalar value) {
  check_scalar_fits(value, t.dtype(), "masked_fill", "value");
  return dispatch::apply_one(op_masked_fill(), {t, mask, scalar_tensor(value, t.dtype(), t.device())});
}
Tensor masked_fill(const Tensor& t, const Tensor& mask, const Tensor& value) {
  MF_CHECK(value.dim() == 0, ShapeError,
           "masked_fill: only supports a 0-dimensional value tensor, but got tensor with ", value.dim(),
           " dimension(s)");
  return dispatch::apply_one(op_masked_fill(), {t, mask, to(value, t.dtype())});
}
Tensor& masked_fill_(Tensor& t, const Tensor& mask, Scalar value) {
  check_scalar_fits(value, t.dtype(), "masked_fill_", "value");
  dispatch::apply_inplace(op_masked_fill(), {t, mask, scalar_tensor(value, t.dtype(), t.device())});
  return t;
}

Tensor lerp(const Tensor& a, const Tensor& b, Scalar weight) {
  static const OpDef& op = dispatch::op("lerp");
  return dispatch::apply_one(op, {a, b}, {{"weight", weight.to_double()}});
}

Tensor addcmul(const Tensor& t, const Tensor& a, const Tensor& b, Scalar value) {
  static const OpDef& op = dispatch::op("addcmul");
  return apply_addc(op, t, a, b, value);
}
Tensor addcdiv(const Tensor& t, const Tensor& a, const Tensor& b, Scalar value) {
  static const OpDef& op = dispatch::op("addcdiv");
  return apply_addc(op, t, a, b, value);
}

}  // namespace mf
