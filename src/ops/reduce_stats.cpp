// Statistical reductions: var, std, norm, logsumexp. var and logsumexp run
// two passes over the input (a per-output centre, then the reduction around
// it), which keeps them accurate without Welford's serial dependency.
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "backend/common/reduce_ops.h"
#include "ops/reduce_common.h"

namespace mf {

using namespace reduce_detail;

namespace {

using reduce_ops::NormKind;

NormKind norm_kind(double p) {
  if (p == 0) return NormKind::Zero;
  if (p == 1) return NormKind::One;
  if (p == 2) return NormKind::Two;
  if (std::isinf(p)) return p > 0 ? NormKind::Inf : NormKind::NegInf;
  return NormKind::General;
}

void check_floating(const char* op, DType dtype, const char* what) {
  MF_CHECK(is_floating(dtype), TypeError, op, ": ", what, ", got ", dtype_name(dtype));
}

// --- var / std ------------------------------------------------------------------------

// d var / d x_i = 2 (x_i - mean) / (n - correction).
Tensor var_backward(const Tensor& grad, const Tensor& x, const Attrs& attrs, const char* name) {
  const Shape dims = normalize_dims(attrs.get_shape("dims"), x.dim(), name);
  const bool keepdim = attrs.get_bool("keepdim");
  const int64_t denom = std::max<int64_t>(0, reduced_count(x.sizes(), dims) - attrs.get_int("correction"));
  Tensor centred = sub(x, mean(x, dims, true));
  return mul(mul(unsqueeze_reduced(grad, dims, keepdim), centred), Scalar(2.0 / double(denom)));
}

std::vector<TensorMeta> infer_var(const char* name, const TensorList& in, const Attrs& attrs) {
  check_floating(name, in[0].dtype(), "std and var only support floating point dtypes");
  return infer_reduction(name, in[0], attrs, in[0].dtype());
}

MF_REGISTER_OP(OpDef{
    .name = "var",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_var("var", in, attrs); },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{var_backward(ctx.grad_outputs[0], ctx.inputs[0], ctx.attrs, "var")};
    },
    .save_inputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

MF_REGISTER_OP(OpDef{
    .name = "std",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_var("std", in, attrs); },
    // std = sqrt(var): d std = d var / (2 std).
    .backward = [](const BackwardContext& ctx) {
      return TensorList{
          var_backward(div(ctx.grad_outputs[0], mul(ctx.outputs[0], 2.0)), ctx.inputs[0], ctx.attrs, "std")};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

// --- norm -----------------------------------------------------------------------------

// PyTorch's norm_backward: where the norm is 0 the gradient is 0 (p >= 1),
// infinity norms split the gradient among the elements of largest (or
// smallest) magnitude.
Tensor norm_backward(const Tensor& grad, const Tensor& x, const Tensor& result, const Attrs& attrs) {
  const double p = attrs.get_float("p");
  const Shape dims = normalize_dims(attrs.get_shape("dims"), x.dim(), "norm");
  const bool keepdim = attrs.get_bool("keepdim");
  Tensor g = unsqueeze_reduced(grad, dims, keepdim);
  Tensor norm = unsqueeze_reduced(result, dims, keepdim);
  switch (norm_kind(p)) {
    case NormKind::Zero: return zeros_like(x);
    case NormKind::One: return mul(sign(x), g);
    case NormKind::Two: return mul(g, masked_fill(div(x, norm), eq(norm, 0), 0.0));
    case NormKind::Inf:
    case NormKind::NegInf: {
      Tensor magnitude = abs(x);
      Tensor selected = logical_or(eq(magnitude, norm), isnan(magnitude));
      return mul(sign(x), where(selected, div(g, sum(selected, dims, true)), Scalar(0.0)));
    }
    case NormKind::General: break;
  }
  if (p < 1.0) {
    Tensor scaled = masked_fill(mul(sign(x), pow(abs(x), p - 1)), eq(x, 0), 0.0);
    return mul(mul(scaled, g), pow(norm, 1 - p));
  }
  Tensor scaled = p < 2.0 ? mul(sign(x), pow(abs(x), p - 1)) : mul(x, pow(abs(x), p - 2));
  return mul(scaled, masked_fill(div(g, pow(norm, p - 1)), eq(norm, 0), 0.0));
}

MF_REGISTER_OP(OpDef{
    .name = "norm",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_floating("norm", in[0].dtype(), "input dtype should be floating point");
      return infer_reduction("norm", in[0], attrs, in[0].dtype());
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{norm_backward(ctx.grad_outputs[0], ctx.inputs[0], ctx.outputs[0], ctx.attrs)};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

// --- logsumexp ------------------------------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "logsumexp",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_floating("logsumexp", in[0].dtype(), "expected a floating-point input");
      return infer_reduction("logsumexp", in[0], attrs, in[0].dtype());
    },
    // d logsumexp / d x_i = softmax(x)_i = exp(x_i - logsumexp(x)).
    .backward = [](const BackwardContext& ctx) {
      const Tensor& x = ctx.inputs[0];
      const Shape dims = normalize_dims(ctx.attrs.get_shape("dims"), x.dim(), "logsumexp");
      const bool keepdim = ctx.attrs.get_bool("keepdim");
      Tensor softmax = exp(sub(x, unsqueeze_reduced(ctx.outputs[0], dims, keepdim)));
      return TensorList{mul(unsqueeze_reduced(ctx.grad_outputs[0], dims, keepdim), softmax)};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

}  // namespace

Tensor var(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  static const OpDef& op = dispatch::op("var");
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"correction", correction}, {"keepdim", keepdim}});
}

Tensor std(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  static const OpDef& op = dispatch::op("std");
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"correction", correction}, {"keepdim", keepdim}});
}

Tensor norm(const Tensor& t, double p, const Shape& dims, bool keepdim) {
  static const OpDef& op = dispatch::op("norm");
  return dispatch::apply_one(op, {t}, {{"p", p}, {"dims", dims}, {"keepdim", keepdim}});
}

Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim) {
  static const OpDef& op = dispatch::op("logsumexp");
  // Integers and bool compute in the default dtype, as in PyTorch.
  Tensor x = is_floating(t.dtype()) ? t : to(t, default_dtype());
  return dispatch::apply_one(op, {x}, {{"dims", dims}, {"keepdim", keepdim}});
}

}  // namespace mf
