// The gamma family: lgamma, digamma and polygamma(n, x), elementwise on
// floating tensors (integer and bool inputs compute in the default float
// dtype), evaluated in double (backend/common/special_math.h); the kernels
// are the shared elementwise table's (elementwise_functors.h). Each derivative is
// the next function of the family: lgamma' = digamma = polygamma(0),
// polygamma(n)' = polygamma(n + 1).
#include "meshflow/ops/elementwise.h"
#include "ops/elementwise_common.h"

namespace mf {

using namespace elementwise_detail;

namespace {

InferFn infer_floating(const char* op) { return infer_unary(op, is_floating, "a floating-point"); }

Tensor polygamma_of(int64_t n, const Tensor& t);

MF_REGISTER_OP(OpDef{
    .name = "lgamma",
    .inputs = {"input"},
    .infer = infer_floating("lgamma"),
    .backward = [](const BackwardContext& ctx) { return TensorList{mul(ctx.grad_outputs[0], digamma(ctx.inputs[0]))}; },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "digamma",
    .inputs = {"input"},
    .infer = infer_floating("digamma"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{mul(ctx.grad_outputs[0], polygamma_of(1, ctx.inputs[0]))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "polygamma",
    .inputs = {"input"},
    .infer = infer_floating("polygamma"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{mul(ctx.grad_outputs[0], polygamma_of(ctx.attrs.get_int("n") + 1, ctx.inputs[0]))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

Tensor polygamma_of(int64_t n, const Tensor& t) {
  static const OpDef& op = dispatch::op("polygamma");
  return dispatch::apply_one(op, {to(t, floating_result(t.dtype()))}, {{"n", n}});
}

}  // namespace

Tensor lgamma(const Tensor& t) {
  static const OpDef& op = dispatch::op("lgamma");
  return dispatch::apply_one(op, {to(t, floating_result(t.dtype()))});
}

Tensor digamma(const Tensor& t) {
  static const OpDef& op = dispatch::op("digamma");
  return dispatch::apply_one(op, {to(t, floating_result(t.dtype()))});
}

Tensor polygamma(int64_t n, const Tensor& t) {
  MF_CHECK(n >= 0, ValueError, "polygamma: n must be non-negative, got ", n);
  return n == 0 ? digamma(t) : polygamma_of(n, t);
}

}  // namespace mf
