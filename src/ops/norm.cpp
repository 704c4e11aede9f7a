// layer_norm and group_norm: fused forward kernels that also return the
// per-row mean and rstd, and fused backward ops for input, weight and bias.
//
// Note [Row normalisation]: both ops normalise contiguous rows of x and
// differ only in how the affine weight lines up with a row. A row is
// `segments` runs of `run` elements; run k of row r uses weight
// (r % groups) * segments + k.
//   layer_norm: rows = prod(leading dims), segments = prod(normalized_shape),
//               run = 1, groups = 1 (every element has its own weight)
//   group_norm: rows = N * G, segments = C / G, run = prod(spatial dims),
//               groups = G (one weight per channel)
// The kernels: backend/cpu/kernels/norm.cpp (statistics and gradient sums
// in double), Note [Composed device kernels] for other devices.
#include <cmath>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

// --- ops -----------------------------------------------------------------------------

DType stats_dtype(DType d) { return is_reduced_floating(d) ? kFloat32 : d; }

// Shape of the per-row statistics: layer_norm (leading dims), group_norm (N, G).
Shape stats_shape(const Tensor& x, const Attrs& attrs) {
  if (attrs.has("num_groups")) return {x.sizes()[0], attrs.get_int("num_groups")};
  return Shape(x.sizes().begin(), x.sizes().end() - attrs.get_int("normalized_ndim"));
}

Shape affine_shape(const Tensor& x, const Attrs& attrs) {
  if (attrs.has("num_groups")) return {x.sizes()[1]};
  return Shape(x.sizes().end() - attrs.get_int("normalized_ndim"), x.sizes().end());
}

std::vector<TensorMeta> infer_forward(const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Shape stats = stats_shape(x, attrs);
  return {{x.sizes(), x.dtype(), x.device()},
          {stats, stats_dtype(x.dtype()), x.device()},
          {stats, stats_dtype(x.dtype()), x.device()}};
}


// Inputs (grad, x, mean, rstd, weight); outputs (dx, dweight, dbias), each
// empty when not asked for (attrs need_input, need_affine).
std::vector<TensorMeta> infer_backward(const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[1];
  const bool affine = attrs.get_bool("need_affine");
  const Shape ws = affine ? affine_shape(x, attrs) : Shape{0};
  return {{attrs.get_bool("need_input") ? x.sizes() : Shape{0}, x.dtype(), x.device()},
          {ws, x.dtype(), x.device()},
          {ws, x.dtype(), x.device()}};
}


// Note [Twice-differentiable norm backward]: while the graph of a gradient
// is being recorded (create_graph, i.e. grad mode on inside backward), the
// norm ops' backward is written with ops, recomputing the statistics from
// x, so that the gradient can be differentiated again. Otherwise one call of
// the fused backward op does the work.
TensorList composite_norm_backward(const BackwardContext& ctx) {
  const Tensor& g = ctx.grad_outputs[0];
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[1];
  const bool group = ctx.attrs.has("num_groups");
  const Shape rows = group ? Shape{x.sizes()[0] * ctx.attrs.get_int("num_groups"), -1}
                           : Shape{-1, shape_numel(affine_shape(x, ctx.attrs))};
  // Weight and bias line up with x's trailing dims (layer_norm) or dim 1.
  Shape param_view = affine_shape(x, ctx.attrs);
  Shape param_dims;  // dims of x summed for the weight and bias gradients
  if (group) {
    param_view.resize(size_t(x.dim() - 1), 1);
    for (int64_t d = 0; d < x.dim(); ++d)
      if (d != 1) param_dims.push_back(d);
  }
  auto reduce_to_param = [&](const Tensor& t) {
    return group ? sum(t, param_dims) : sum_to(t, affine_shape(x, ctx.attrs));
  };
  Tensor x2 = reshape(x, rows);
  Tensor centered = sub(x2, mean(x2, {1}, true));
  Tensor rstd = rsqrt(add(mean(mul(centered, centered), {1}, true), ctx.attrs.get_float("eps")));
  Tensor xhat2 = mul(centered, rstd);
  Tensor xhat = reshape(xhat2, x.sizes());
  TensorList grads(3);
  if (ctx.needs_input_grad[0]) {
    Tensor gw2 = reshape(w.defined() ? mul(g, reshape(w, param_view)) : g, rows);
    Tensor dx2 = mul(rstd, sub(sub(gw2, mean(gw2, {1}, true)), mul(xhat2, mean(mul(gw2, xhat2), {1}, true))));
    grads[0] = reshape(dx2, x.sizes());
  }
  if (ctx.needs_input_grad[1]) grads[1] = reduce_to_param(mul(g, xhat));
  if (ctx.needs_input_grad[2]) grads[2] = reduce_to_param(g);
  return grads;
}

TensorList norm_backward(const BackwardContext& ctx, const OpDef& backward_op) {
  if (GradMode::is_enabled()) return composite_norm_backward(ctx);
  const bool need_input = ctx.needs_input_grad[0];
  const bool need_affine = ctx.needs_input_grad[1] || ctx.needs_input_grad[2];
  Attrs attrs = ctx.attrs;
  attrs.set("need_input", need_input).set("need_affine", need_affine);
  TensorList g = dispatch::apply(
      backward_op, {ctx.grad_outputs[0], ctx.inputs[0], ctx.outputs[1], ctx.outputs[2], ctx.inputs[1]}, attrs);
  return {need_input ? g[0] : Tensor(), ctx.needs_input_grad[1] ? g[1] : Tensor(),
          ctx.needs_input_grad[2] ? g[2] : Tensor()};
}

// SBP rules: rows are normalised on their own, so a split of a dim before
// the normalised ones (group_norm: the batch dim) splits the output and the
// statistics; the weight and bias gradients of split rows are partial sums.
// Outputs not asked for (empty) stay broadcast.
SbpRuleFn norm_sbp(bool backward) {
  return [backward](const TensorList& in, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
    const Tensor& x = in[backward ? 1 : 0];
    const int64_t free = attrs.has("num_groups") ? 1 : x.dim() - attrs.get_int("normalized_ndim");
    std::vector<SbpSignature> sigs;
    for (int64_t d = 0; d < free; ++d) {
      const Sbp s = Sbp::split(d);
      if (!backward) {
        sigs.push_back({{s, Sbp::broadcast(), Sbp::broadcast()}, {s, s, s}});
      } else {
        const Sbp gx = attrs.get_bool("need_input") ? s : Sbp::broadcast();
        sigs.push_back({{s, s, s, s, Sbp::broadcast()}, {gx, Sbp::partial_sum(), Sbp::partial_sum()}});
      }
    }
    return sigs;
  };
}

MF_REGISTER_OP(OpDef{
    .name = "layer_norm",
    .inputs = {"input", "weight", "bias"},
    .infer = infer_forward,
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("layer_norm_backward");
      return norm_backward(ctx, op);
    },
    .save_inputs = 0b011,
    .save_outputs = 0b110,
    .sbp = norm_sbp(false),
});

MF_REGISTER_OP(OpDef{
    .name = "layer_norm_backward",
    .inputs = {"grad", "input", "mean", "rstd", "weight"},
    .infer = infer_backward,
    .differentiable = false,
    .sbp = norm_sbp(true),
});

MF_REGISTER_OP(OpDef{
    .name = "group_norm",
    .inputs = {"input", "weight", "bias"},
    .infer = infer_forward,
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("group_norm_backward");
      return norm_backward(ctx, op);
    },
    .save_inputs = 0b011,
    .save_outputs = 0b110,
    .sbp = norm_sbp(false),
});

MF_REGISTER_OP(OpDef{
    .name = "group_norm_backward",
    .inputs = {"grad", "input", "mean", "rstd", "weight"},
    .infer = infer_backward,
    .differentiable = false,
    .sbp = norm_sbp(true),
});

// weight/bias checked against `expected` and cast to x's dtype.
Tensor affine_arg(const char* op, const char* name, const Tensor& t, const Shape& expected, DType dtype) {
  if (!t.defined()) return t;
  MF_CHECK(t.sizes() == expected, ShapeError, op, ": ", name, " must have shape ", shape_str(expected), ", got ",
           shape_str(t.sizes()));
  MF_CHECK(is_floating(t.dtype()), TypeError, op, ": ", name, " must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
  return to(t, dtype);
}

void check_floating(const char* op, const Tensor& x) {
  MF_CHECK(is_floating(x.dtype()), TypeError, op, ": expected a floating-point input, got ", dtype_name(x.dtype()));
}

void check_eps(const char* op, double eps) {
  MF_CHECK(eps >= 0, ValueError, op, ": eps must be non-negative, got ", eps);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  static const OpDef& op = dispatch::op("layer_norm");
  check_floating("layer_norm", x);
  check_eps("layer_norm", eps);
  const int64_t k = int64_t(normalized_shape.size());
  MF_CHECK(k <= x.dim() && Shape(x.sizes().end() - k, x.sizes().end()) == normalized_shape, ShapeError,
           "layer_norm: normalized_shape ", shape_str(normalized_shape),
           " must equal the trailing dims of the input, got input of shape ", shape_str(x.sizes()));
  for (int64_t d : normalized_shape)
    MF_CHECK(d > 0, ShapeError, "layer_norm: normalized_shape must contain positive sizes, got ",
             shape_str(normalized_shape));
  return dispatch::apply(op,
                         {x, affine_arg("layer_norm", "weight", weight, normalized_shape, x.dtype()),
                          affine_arg("layer_norm", "bias", bias, normalized_shape, x.dtype())},
                         {{"normalized_ndim", k}, {"eps", eps}})[0];
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  static const OpDef& op = dispatch::op("group_norm");
  check_floating("group_norm", x);
  check_eps("group_norm", eps);
  MF_CHECK(x.dim() >= 2, ShapeError, "group_norm: expected an input of shape (N, C, *), got ", shape_str(x.sizes()));
  MF_CHECK(num_groups > 0, ValueError, "group_norm: num_groups must be positive, got ", num_groups);
  const int64_t channels = x.sizes()[1];
  MF_CHECK(channels % num_groups == 0, ShapeError, "group_norm: expected the number of channels (", channels,
           ") to be divisible by num_groups (", num_groups, "); input shape ", shape_str(x.sizes()));
  return dispatch::apply(op,
                         {x, affine_arg("group_norm", "weight", weight, {channels}, x.dtype()),
                          affine_arg("group_norm", "bias", bias, {channels}, x.dtype())},
                         {{"num_groups", num_groups}, {"eps", eps}})[0];
}

}  // namespace mf
