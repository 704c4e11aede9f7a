// softmax and log_softmax over one dim, and their fused backward ops.
//
// The kernels: backend/cpu/kernels/softmax.cpp (Note [Softmax layouts]),
// Note [Composed device kernels] for other devices.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

int64_t softmax_dim(const TensorList& in, const Attrs& attrs, const char* op) {
  return wrap_dim(attrs.get_int("dim"), std::max<int64_t>(in[0].dim(), 1), op);
}

std::vector<TensorMeta> infer_forward(const TensorList& in, const Attrs& attrs, const char* op) {
  MF_CHECK(is_floating(in[0].dtype()), TypeError, op, ": expected a floating-point input, got ",
           dtype_name(in[0].dtype()));
  softmax_dim(in, attrs, op);
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> infer_backward(const TensorList& in, const Attrs& attrs, const char* op) {
  MF_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), ShapeError, op,
           ": grad and output must have the same shape and dtype, got ", shape_str(in[0].sizes()), " ",
           dtype_name(in[0].dtype()), " and ", shape_str(in[1].sizes()), " ", dtype_name(in[1].dtype()));
  return infer_forward(in, attrs, op);
}

Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  static const OpDef& op = dispatch::op("softmax_backward");
  return dispatch::apply_one(op, {grad, y}, {{"dim", dim}});
}

Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  static const OpDef& op = dispatch::op("log_softmax_backward");
  return dispatch::apply_one(op, {grad, y}, {{"dim", dim}});
}

MF_REGISTER_OP(OpDef{
    .name = "softmax",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_forward(in, attrs, "softmax"); },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{softmax_backward(ctx.grad_outputs[0], ctx.outputs[0], ctx.attrs.get_int("dim"))};
    },
    .save_outputs = 0b1,
    .sbp = sbp::independent_of_attr("dim"),
});

MF_REGISTER_OP(OpDef{
    .name = "log_softmax",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_forward(in, attrs, "log_softmax"); },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{log_softmax_backward(ctx.grad_outputs[0], ctx.outputs[0], ctx.attrs.get_int("dim"))};
    },
    .save_outputs = 0b1,
    .sbp = sbp::independent_of_attr("dim"),
});

// The backward ops are differentiable (double backward), written with ops.
// With s = sum(g * y) over dim, dx = y * (g - s):
//   d<gg, dx>/dg = y * (gg - sum(gg * y))          (softmax_backward(gg, y))
//   d<gg, dx>/dy = gg * (g - s) - g * sum(gg * y)
MF_REGISTER_OP(OpDef{
    .name = "softmax_backward",
    .inputs = {"grad", "output"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_backward(in, attrs, "softmax_backward"); },
    .backward = [](const BackwardContext& ctx) {
      const int64_t dim = ctx.attrs.get_int("dim");
      const Tensor& gg = ctx.grad_outputs[0];
      const Tensor& g = ctx.inputs[0];
      const Tensor& y = ctx.inputs[1];
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = softmax_backward(gg, y, dim);
      if (ctx.needs_input_grad[1]) {
        Tensor s = sum(mul(g, y), {dim}, true);
        grads[1] = sub(mul(gg, sub(g, s)), mul(g, sum(mul(gg, y), {dim}, true)));
      }
      return grads;
    },
    .save_inputs = 0b11,
    .sbp = sbp::independent_of_attr("dim"),
});

// With p = exp(y) and S = sum(g) over dim, dx = g - p * S:
//   d<gg, dx>/dg = gg - sum(gg * p)
//   d<gg, dx>/dy = -gg * p * S
MF_REGISTER_OP(OpDef{
    .name = "log_softmax_backward",
    .inputs = {"grad", "output"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return infer_backward(in, attrs, "log_softmax_backward");
    },
    .backward = [](const BackwardContext& ctx) {
      const int64_t dim = ctx.attrs.get_int("dim");
      const Tensor& gg = ctx.grad_outputs[0];
      const Tensor gg_p = mul(gg, exp(ctx.inputs[1]));
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sub(gg, sum(gg_p, {dim}, true));
      if (ctx.needs_input_grad[1]) grads[1] = neg(mul(gg_p, sum(ctx.inputs[0], {dim}, true)));
      return grads;
    },
    .save_inputs = 0b11,
    .sbp = sbp::independent_of_attr("dim"),
});

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  static const OpDef& op = dispatch::op("softmax");
  return dispatch::apply_one(op, {x}, {{"dim", dim}});
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  static const OpDef& op = dispatch::op("log_softmax");
  return dispatch::apply_one(op, {x}, {{"dim", dim}});
}

}  // namespace mf
