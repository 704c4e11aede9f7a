// 2-d convolution: the "conv2d" op and its gradient op "conv2d_backward",
// which computes the gradients for x, weight and bias in one call (one
// reorder of grad_y serves both oneDNN directions). conv2d_backward is
// itself differentiable (double backward), see Note [Convolution adjoints].
// Kernels: kernels/cpu/conv_onednn.cpp and conv_im2col.cpp.
#include "meshflow/ops/conv.h"

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "ops/kernels/cpu/conv.h"

namespace mf {
namespace {

// A 2-element Shape from 1 or 2 elements.
Shape pair_of(const Shape& v, const char* name) {
  MF_CHECK(v.size() == 1 || v.size() == 2, ValueError, "conv2d: expected ", name, " to have 1 or 2 elements, got ",
           shape_str(v));
  return v.size() == 1 ? Shape{v[0], v[0]} : v;
}

cpu::ConvParams params_of(const Attrs& attrs) {
  const Shape& s = attrs.get_shape("stride");
  const Shape& p = attrs.get_shape("padding");
  const Shape& d = attrs.get_shape("dilation");
  return {{s[0], s[1]}, {p[0], p[1]}, {d[0], d[1]}, attrs.get_int("groups")};
}

// Checks conv2d's operands and returns the output shape (N, O, OH, OW).
Shape conv_output_shape(const Tensor& x, const Tensor& w, const Tensor& bias, const cpu::ConvParams& p) {
  MF_CHECK(x.dim() == 4, ShapeError, "conv2d: expected a 3-d (unbatched) or 4-d (batched) input, got shape ",
           shape_str(x.sizes()));
  MF_CHECK(w.dim() == 4, ShapeError, "conv2d: weight must be 4-d (out_channels, in_channels / groups, kH, kW), got ",
           "shape ", shape_str(w.sizes()));
  MF_CHECK(is_floating(x.dtype()), TypeError, "conv2d: expected a floating-point input, got ", dtype_name(x.dtype()));
  MF_CHECK(w.dtype() == x.dtype(), TypeError, "conv2d: expected weight to have the input's dtype ",
           dtype_name(x.dtype()), ", got ", dtype_name(w.dtype()));
  MF_CHECK(p.groups > 0, ValueError, "conv2d: groups must be positive, got ", p.groups);
  for (int i = 0; i < 2; ++i) {
    MF_CHECK(p.stride[i] > 0, ValueError, "conv2d: stride must be positive, got (", p.stride[0], ", ", p.stride[1], ")");
    MF_CHECK(p.padding[i] >= 0, ValueError, "conv2d: padding must be non-negative, got (", p.padding[0], ", ",
             p.padding[1], ")");
    MF_CHECK(p.dilation[i] > 0, ValueError, "conv2d: dilation must be positive, got (", p.dilation[0], ", ",
             p.dilation[1], ")");
  }
  const int64_t out_channels = w.size(0);
  const int64_t in_channels = checked_mul(w.size(1), p.groups, "conv2d", "weight.shape[1] * groups");
  MF_CHECK(x.size(1) == in_channels, ShapeError, "conv2d: the input has ", x.size(1), " channels but weight ",
           shape_str(w.sizes()), " with groups=", p.groups, " expects ", in_channels,
           " (weight.shape[1] * groups); input shape ", shape_str(x.sizes()));
  MF_CHECK(out_channels % p.groups == 0, ShapeError, "conv2d: out_channels (", out_channels,
           ") must be divisible by groups (", p.groups, "); weight shape ", shape_str(w.sizes()));
  MF_CHECK(w.size(2) > 0 && w.size(3) > 0, ShapeError, "conv2d: the kernel size must be positive, got weight shape ",
           shape_str(w.sizes()));
  if (bias.defined()) {
    MF_CHECK(bias.dtype() == x.dtype(), TypeError, "conv2d: expected bias to have the input's dtype ",
             dtype_name(x.dtype()), ", got ", dtype_name(bias.dtype()));
    MF_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, ShapeError, "conv2d: expected bias of shape (",
             out_channels, ") for weight ", shape_str(w.sizes()), ", got ", shape_str(bias.sizes()));
  }
  Shape out{x.size(0), out_channels, 0, 0}, padded(2), kernel(2);
  for (int i = 0; i < 2; ++i) {
    padded[i] = checked_add(x.size(2 + i), checked_mul(2, p.padding[i], "conv2d", "the padded input size"), "conv2d",
                            "the padded input size");
    kernel[i] = checked_mul(p.dilation[i], w.size(2 + i) - 1, "conv2d", "the dilated kernel size") + 1;
  }
  for (int i = 0; i < 2; ++i) {
    MF_CHECK(kernel[i] <= padded[i], ShapeError, "conv2d: the kernel size (", w.size(2), ", ", w.size(3),
             ") (dilated: ", kernel[0], ", ", kernel[1], ") can't be greater than the padded input size (", padded[0],
             ", ", padded[1], ")");
    out[size_t(2 + i)] = (padded[i] - kernel[i]) / p.stride[i] + 1;
  }
  return out;
}

Attrs conv_attrs(const Attrs& from) {
  return Attrs{{"stride", from.get_shape("stride")},
               {"padding", from.get_shape("padding")},
               {"dilation", from.get_shape("dilation")},
               {"groups", from.get_int("groups")}};
}

Tensor conv_op(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs) {
  static const OpDef& op = dispatch::op("conv2d");
  return dispatch::apply_one(op, {x, w, bias}, attrs);
}

// The gradients {x, weight, bias} for the outputs selected by mask (the
// others undefined).
TensorList conv_backward_op(const Tensor& gy, const Tensor& x, const Tensor& w, const Shape& mask, const Attrs& attrs) {
  static const OpDef& op = dispatch::op("conv2d_backward");
  Attrs a = conv_attrs(attrs);
  a.set("output_mask", mask);
  TensorList outs = dispatch::apply(op, {gy, x, w}, a);
  for (size_t i = 0; i < 3; ++i)
    if (!mask[i]) outs[i] = Tensor();
  return outs;
}

// SBP rules. Forward y = conv(x, w) + b: split the batch (x S(0)), the
// output channels (w and b S(0): y S(1)) or the input channels (x and w
// S(1): y a partial sum, with b partial so that it is added once). The
// backward splits the same ways: a split batch gives partial weight and
// bias gradients, split output channels a partial input gradient. Channel
// splits need groups == 1 (a shard of the channels is not a set of whole
// groups). Outputs not asked for (empty) stay broadcast.
SbpRuleFn conv_sbp(bool backward) {
  return [backward](const TensorList&, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
    const Sbp s0 = Sbp::split(0), s1 = Sbp::split(1), b = Sbp::broadcast(), p = Sbp::partial_sum();
    const bool channels = attrs.get_int("groups") == 1;
    std::vector<SbpSignature> sigs;
    if (!backward) {
      sigs.push_back({{s0, b, b}, {s0}});
      if (channels) {
        sigs.push_back({{b, s0, s0}, {s1}});
        sigs.push_back({{s1, s1, p}, {p}});
      }
      return sigs;
    }
    const Shape& mask = attrs.get_shape("output_mask");
    auto outs = [&](Sbp gx, Sbp gw, Sbp gb) { return std::vector<Sbp>{mask[0] ? gx : b, mask[1] ? gw : b, mask[2] ? gb : b}; };
    sigs.push_back({{s0, s0, b}, outs(s0, p, p)});
    if (channels) {
      sigs.push_back({{s1, b, s0}, outs(p, s0, s0)});
      sigs.push_back({{b, s1, s1}, outs(s1, s1, b)});
    }
    return sigs;
  };
}

MF_REGISTER_OP(OpDef{
    .name = "conv2d",
    .inputs = {"x", "weight", "bias"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{
          {conv_output_shape(in[0], in[1], in[2], params_of(attrs)), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      cpu::conv2d_forward(in[0], in[1], in[2], out[0], params_of(attrs));
    },
    .backward = [](const BackwardContext& ctx) {
      const auto& need = ctx.needs_input_grad;
      return conv_backward_op(ctx.grad_outputs[0], ctx.inputs[0], ctx.inputs[1], {need[0], need[1], need[2]},
                              ctx.attrs);
    },
    .save_inputs = 0b011,
    .autocast = AutocastPolicy::LowPrecision,
    .sbp = conv_sbp(false),
});

// Note [Convolution adjoints]: with y = conv(x, w), the gradients are
// gx = BI(gy, w), the adjoint of conv(., w), and gw = BW(gy, x), the adjoint
// of conv(x, .); gb = sum(gy). Both are bilinear, and
//   <u, BI(gy, w)> = <conv(u, w), gy>,   <v, BW(gy, x)> = <gy, conv(x, v)>,
// so for upstream gradients (u, v, c) of (gx, gw, gb):
//   d/d gy = conv(u, w) + conv(x, v) + c,   d/dx = BI(gy, v),   d/dw = BW(gy, u).
MF_REGISTER_OP(OpDef{
    .name = "conv2d_backward",
    .inputs = {"grad_y", "x", "weight"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape& mask = attrs.get_shape("output_mask");
      Shape expected = conv_output_shape(in[1], in[2], Tensor(), params_of(attrs));
      MF_CHECK(in[0].sizes() == expected && in[0].dtype() == in[1].dtype(), ShapeError,
               "conv2d_backward: grad_y must have the output's shape ", shape_str(expected), " and dtype ",
               dtype_name(in[1].dtype()), ", got ", shape_str(in[0].sizes()), " ", dtype_name(in[0].dtype()));
      auto meta = [&](size_t i, const Shape& shape) {
        return TensorMeta{mask[i] ? shape : Shape{0}, in[0].dtype(), in[0].device()};
      };
      return std::vector<TensorMeta>{meta(0, in[1].sizes()), meta(1, in[2].sizes()), meta(2, {in[2].size(0)})};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const Shape& mask = attrs.get_shape("output_mask");
      cpu::conv2d_backward(in[0], in[1], in[2], mask[0] ? &out[0] : nullptr, mask[1] ? &out[1] : nullptr,
                           mask[2] ? &out[2] : nullptr, params_of(attrs));
    },
    .backward = [](const BackwardContext& ctx) {
      const Shape& mask = ctx.attrs.get_shape("output_mask");
      const Tensor &gy = ctx.inputs[0], &x = ctx.inputs[1], &w = ctx.inputs[2];
      const Tensor &u = ctx.grad_outputs[0], &v = ctx.grad_outputs[1], &c = ctx.grad_outputs[2];
      const Attrs attrs = conv_attrs(ctx.attrs);
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) {
        Tensor g = zeros(gy.sizes(), {.dtype = gy.dtype()});
        if (mask[0]) g = add(g, conv_op(u, w, Tensor(), attrs));
        if (mask[1]) g = add(g, conv_op(x, v, Tensor(), attrs));
        if (mask[2]) g = add(g, view(c, {1, c.size(0), 1, 1}));
        grads[0] = g;
      }
      if (ctx.needs_input_grad[1] && mask[1]) grads[1] = conv_backward_op(gy, x, v, {1, 0, 0}, attrs)[0];
      if (ctx.needs_input_grad[2] && mask[0]) grads[2] = conv_backward_op(gy, u, w, {0, 1, 0}, attrs)[1];
      return grads;
    },
    .save_inputs = 0b111,
    .sbp = conv_sbp(true),
});

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dArgs& args) {
  MF_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError,
           "conv2d: expected a 3-d (unbatched) or 4-d (batched) input, got shape ", shape_str(x.sizes()));
  Attrs attrs{{"stride", pair_of(args.stride, "stride")},
              {"padding", pair_of(args.padding, "padding")},
              {"dilation", pair_of(args.dilation, "dilation")},
              {"groups", args.groups}};
  if (x.dim() == 3) return squeeze(conv_op(unsqueeze(x, 0), weight, bias, attrs), 0);
  return conv_op(x, weight, bias, attrs);
}

}  // namespace mf
