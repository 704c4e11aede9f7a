// cumsum and cumprod: inclusive prefix sums or products along a dim (or
// suffix sums, the "reverse" form cumsum's backward uses). Floats
// accumulate in double, 16-bit floats in float and integers in wrapping
// 64-bit, like PyTorch's CPU kernels. CPU kernels: backend/cpu/kernels/scan.cpp.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

MF_REGISTER_OP(OpDef{
    .name = "cumsum",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      wrap_dim(attrs.get_int("dim"), in[0].dim(), "cumsum");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      // d/dx_j of sum_i g_i * prefix_i(x) is the suffix sum of g from j.
      static const OpDef& op = dispatch::op("cumsum");
      return TensorList{dispatch::apply_one(
          op, {ctx.grad_outputs[0]},
          {{"dim", ctx.attrs.get_int("dim")}, {"reverse", !ctx.attrs.get_bool("reverse")}})};
    },
    .sbp = sbp::independent_of_attr("dim"),
});

// d/dx_i of sum_j g_j y_j with y_j = x_0 ... x_j is
//   (x_0 ... x_{i-1}) * S_i,  S_i = g_i + x_{i+1} S_{i+1},  S_{n-1} = g_{n-1},
// computed per row of contiguous (rows, n) grad and input.
MF_REGISTER_OP(OpDef{
    .name = "cumprod_backward",
    .inputs = {"grad", "input"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[1].sizes(), in[1].dtype(), in[1].device()}};
    },
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "cumprod",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      wrap_dim(attrs.get_int("dim"), in[0].dim(), "cumprod");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    // Rows along dim, contiguous, through cumprod_backward (first-order only).
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("cumprod_backward");
      const Tensor& x = ctx.inputs[0];
      if (x.dim() == 0) return TensorList{ctx.grad_outputs[0]};
      const int64_t dim = wrap_dim(ctx.attrs.get_int("dim"), x.dim(), "cumprod");
      const Tensor g = contiguous(transpose(ctx.grad_outputs[0], dim, -1));
      const Tensor xr = contiguous(transpose(x, dim, -1));
      return TensorList{transpose(dispatch::apply_one(op, {g, xr}), dim, -1)};
    },
    .save_inputs = 0b1,
    .sbp = sbp::independent_of_attr("dim"),
});

}  // namespace

Tensor cumprod(const Tensor& t, int64_t dim, std::optional<DType> dtype) {
  static const OpDef& op = dispatch::op("cumprod");
  Tensor x = to(t, dtype.value_or(is_floating(t.dtype()) ? t.dtype() : DType::Int64));
  return dispatch::apply_one(op, {x}, {{"dim", dim}});
}

Tensor cumsum(const Tensor& t, int64_t dim, std::optional<DType> dtype) {
  static const OpDef& op = dispatch::op("cumsum");
  Tensor x = to(t, dtype.value_or(is_floating(t.dtype()) ? t.dtype() : DType::Int64));
  return dispatch::apply_one(op, {x}, {{"dim", dim}, {"reverse", false}});
}

}  // namespace mf
