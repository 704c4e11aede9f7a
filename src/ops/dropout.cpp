// dropout: zeroes each element with probability p and scales the others by
// 1 / (1 - p). The mask comes from Philox (generator.h): element i is kept
// when word i % 4 of philox(seed, offset + i / 4) is below (1 - p) * 2^32
// (24 random bits), so the mask depends only on (seed, offset, i), never on
// the thread count; the op's attrs hold seed and offset, so a traced graph
// replays the same mask. CPU kernels: backend/cpu/kernels/dropout.cpp.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/generator.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"
#include "ops/random_common.h"

namespace mf {
namespace {

Tensor dropout_backward(const Tensor& grad, const Tensor& mask, double scale) {
  static const OpDef& op = dispatch::op("dropout_backward");
  return dispatch::apply_one(op, {grad, mask}, {{"scale", scale}});
}

MF_REGISTER_OP(OpDef{
    .name = "dropout",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) {
      const Tensor& x = in[0];
      return std::vector<TensorMeta>{{x.sizes(), x.dtype(), x.device()}, {x.sizes(), kBool, x.device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const double p = ctx.attrs.get_float("p");
      return TensorList{dropout_backward(ctx.grad_outputs[0], ctx.outputs[1], p < 1 ? 1.0 / (1.0 - p) : 0.0)};
    },
    .save_outputs = 0b10,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "dropout_backward",
    .inputs = {"grad", "mask"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[1].dtype() == kBool && in[1].sizes() == in[0].sizes(), ShapeError,
               "dropout_backward: mask must be a bool tensor of the gradient's shape ", shape_str(in[0].sizes()),
               ", got ", dtype_name(in[1].dtype()), " ", shape_str(in[1].sizes()));
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{dropout_backward(ctx.grad_outputs[0], ctx.inputs[1], ctx.attrs.get_float("scale")), Tensor()};
    },
    .save_inputs = 0b10,
    .elementwise = true,
});

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training) {
  static const OpDef& op = dispatch::op("dropout");
  MF_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return x;
  MF_CHECK(is_floating(x.dtype()), TypeError, "dropout: expected a floating-point input, got ", dtype_name(x.dtype()));
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.reserve(uint64_t(random_detail::dropout_counters(x.numel())));
  return dispatch::apply(op, {x}, {{"p", p}, {"seed", int64_t(seed)}, {"offset", int64_t(offset)}})[0];
}

}  // namespace mf
