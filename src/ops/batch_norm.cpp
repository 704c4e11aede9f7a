// batch_norm: per-channel statistics over (N, *) of an (N, C, *) input,
// with a fused forward kernel (which also updates the running statistics
// in training) and a fused backward op for input, weight and bias. CPU
// kernels: backend/cpu/kernels/batch_norm.cpp (Note [Channel layouts]).
#include "meshflow/autograd.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

DType stats_dtype(DType d) { return is_reduced_floating(d) ? kFloat32 : d; }

// The backward written with ops, used while the graph of the gradient is
// recorded (Note [Twice-differentiable norm backward] in norm.cpp): the
// training statistics are recomputed from x; eval uses the saved running
// statistics, which are constants.
TensorList composite_backward(const BackwardContext& ctx) {
  const Tensor& g = ctx.grad_outputs[0];
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[1];
  Shape dims{0}, channel_view{x.sizes()[1]};  // reduced dims; (C, 1, ..., 1)
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d), channel_view.push_back(1);
  Tensor mu, rstd;
  if (ctx.attrs.get_bool("training")) {
    mu = mean(x, dims, true);
    Tensor centered = sub(x, mu);
    rstd = rsqrt(add(mean(mul(centered, centered), dims, true), ctx.attrs.get_float("eps")));
  } else {
    mu = to(reshape(ctx.outputs[1], channel_view), x.dtype());
    rstd = to(reshape(ctx.outputs[2], channel_view), x.dtype());
  }
  Tensor xhat = mul(sub(x, mu), rstd);
  TensorList grads(5);
  if (ctx.needs_input_grad[0]) {
    Tensor gw = w.defined() ? mul(g, reshape(w, channel_view)) : g;
    grads[0] = ctx.attrs.get_bool("training")
                   ? mul(rstd, sub(sub(gw, mean(gw, dims, true)), mul(xhat, mean(mul(gw, xhat), dims, true))))
                   : mul(gw, rstd);
  }
  if (ctx.needs_input_grad[1]) grads[1] = sum(mul(g, xhat), dims);
  if (ctx.needs_input_grad[2]) grads[2] = sum(g, dims);
  return grads;
}

MF_REGISTER_OP(OpDef{
    .name = "batch_norm",
    .inputs = {"input", "weight", "bias", "running_mean", "running_var"},
    .infer = [](const TensorList& in, const Attrs&) {
      const Tensor& x = in[0];
      const Shape stats{x.sizes()[1]};
      return std::vector<TensorMeta>{{x.sizes(), x.dtype(), x.device()},
                                     {stats, stats_dtype(x.dtype()), x.device()},
                                     {stats, stats_dtype(x.dtype()), x.device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("batch_norm_backward");
      if (GradMode::is_enabled()) return composite_backward(ctx);
      const bool need_input = ctx.needs_input_grad[0];
      const bool need_affine = ctx.needs_input_grad[1] || ctx.needs_input_grad[2];
      Attrs attrs = ctx.attrs;
      attrs.set("need_input", need_input).set("need_affine", need_affine);
      TensorList g = dispatch::apply(
          op, {ctx.grad_outputs[0], ctx.inputs[0], ctx.outputs[1], ctx.outputs[2], ctx.inputs[1]}, attrs);
      return TensorList{need_input ? g[0] : Tensor(), ctx.needs_input_grad[1] ? g[1] : Tensor(),
                        ctx.needs_input_grad[2] ? g[2] : Tensor(), Tensor(), Tensor()};
    },
    .save_inputs = 0b00011,
    .save_outputs = 0b110,
    .mutates = 0b11000,  // running_mean and running_var, when given in training
    .sbp = sbp::broadcast_only(),
});

// Inputs (grad, x, mean, invstd, weight); outputs (dx, dweight, dbias),
// each empty when not asked for.
MF_REGISTER_OP(OpDef{
    .name = "batch_norm_backward",
    .inputs = {"grad", "input", "mean", "invstd", "weight"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& x = in[1];
      const Shape ws = attrs.get_bool("need_affine") ? Shape{x.sizes()[1]} : Shape{0};
      return std::vector<TensorMeta>{{attrs.get_bool("need_input") ? x.sizes() : Shape{0}, x.dtype(), x.device()},
                                     {ws, x.dtype(), x.device()},
                                     {ws, x.dtype(), x.device()}};
    },
    .differentiable = false,
    // Channels are normalised on their own: split channels (x dim 1, the
    // per-channel tensors dim 0) split every output. The forward runs
    // broadcast: it updates the running statistics in place.
    .sbp = [](const TensorList&, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
      const Sbp c = Sbp::split(0), x = Sbp::split(1);
      const Sbp gx = attrs.get_bool("need_input") ? x : Sbp::broadcast();
      return std::vector<SbpSignature>{{{x, x, c, c, c}, {gx, c, c}}};
    },
});

void check_channel_arg(const char* name, const Tensor& t, int64_t channels) {
  if (!t.defined()) return;
  MF_CHECK(t.dim() == 1 && t.sizes()[0] == channels, ShapeError, "batch_norm: ", name, " should contain ", channels,
           " elements (one per channel), got shape ", shape_str(t.sizes()));
  MF_CHECK(is_floating(t.dtype()), TypeError, "batch_norm: ", name, " must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  static const OpDef& op = dispatch::op("batch_norm");
  MF_CHECK(is_floating(x.dtype()), TypeError, "batch_norm: expected a floating-point input, got ",
           dtype_name(x.dtype()));
  MF_CHECK(x.dim() >= 2, ShapeError, "batch_norm: expected an input of shape (N, C) or (N, C, *), got ",
           shape_str(x.sizes()));
  MF_CHECK(eps >= 0, ValueError, "batch_norm: eps must be non-negative, got ", eps);
  const int64_t channels = x.sizes()[1];
  check_channel_arg("weight", weight, channels);
  check_channel_arg("bias", bias, channels);
  check_channel_arg("running_mean", running_mean, channels);
  check_channel_arg("running_var", running_var, channels);
  MF_CHECK(running_mean.defined() == running_var.defined(), ValueError,
           "batch_norm: running_mean and running_var must be given together");
  if (training) {
    int64_t per_channel = x.numel() / std::max<int64_t>(channels, 1);
    MF_CHECK(per_channel > 1 || x.numel() == 0, ValueError,
             "batch_norm: expected more than 1 value per channel when training, got input of shape ",
             shape_str(x.sizes()));
  } else {
    MF_CHECK(running_mean.defined(), ValueError, "batch_norm: running_mean and running_var must be defined in "
             "evaluation mode (training=false)");
  }
  // A forward recomputed for backward (activation checkpointing) updated
  // the running statistics already when it first ran.
  const bool update = training && running_mean.defined() && !autograd::in_recomputation();
  TensorList out = dispatch::apply(op,
                                   {x, weight.defined() ? to(weight, x.dtype()) : weight,
                                    bias.defined() ? to(bias, x.dtype()) : bias,
                                    update || !training ? running_mean : Tensor(),
                                    update || !training ? running_var : Tensor()},
                                   {{"training", training}, {"momentum", momentum}, {"eps", eps}});
  return out[0];
}

}  // namespace mf
