// 2-d and 3-d convolution: the "conv2d" and "conv3d" ops and their gradient
// ops "conv2d_backward" and "conv3d_backward", which compute the gradients
// for x, weight and bias in one call (one reorder of grad_y serves both
// oneDNN directions). The backward ops are themselves differentiable
// (double backward), see Note [Convolution adjoints].
// CPU kernels: backend/cpu/kernels/conv.cpp (on conv_onednn.cpp and conv_im2col.cpp).
#include "meshflow/ops/conv.h"

#include <algorithm>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "ops/conv_common.h"

namespace mf {
namespace conv_detail {

Shape expand_param(const Shape& v, int64_t n, const char* op, const char* name) {
  MF_CHECK(v.size() == 1 || int64_t(v.size()) == n, ValueError, op, ": expected ", name,
           " to be a single integer value or a list of ", n, " values, got ", shape_str(v));
  return v.size() == 1 ? Shape(size_t(n), v[0]) : v;
}

Attrs conv_attrs(const Shape& stride, const Shape& padding, const Shape& padding_end, const Shape& dilation,
                 int64_t groups) {
  Attrs attrs{{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}};
  if (padding_end != padding) attrs.set("padding_end", padding_end);
  return attrs;
}

cpu::ConvParams params_of(const Attrs& attrs) {
  const Shape& s = attrs.get_shape("stride");
  const Shape& p = attrs.get_shape("padding");
  const Shape& pe = attrs.has("padding_end") ? attrs.get_shape("padding_end") : p;
  const Shape& d = attrs.get_shape("dilation");
  cpu::ConvParams out;
  out.spatial = int64_t(s.size());
  MF_CHECK(out.spatial >= 1 && out.spatial <= 3 && p.size() == s.size() && pe.size() == s.size() &&
               d.size() == s.size(), ValueError, "conv: stride ", shape_str(s), ", padding ", shape_str(p),
           " and dilation ", shape_str(d), " must have one entry per spatial dim");
  set_spatial(out.stride, s);
  set_spatial(out.padding, p);
  set_spatial(out.padding_end, pe);
  set_spatial(out.dilation, d);
  out.groups = attrs.get_int("groups");
  return out;
}

namespace {

// Entries [3 - spatial, 3) of a ConvParams array, for messages.
Shape entries(const int64_t (&v)[3], int64_t spatial) { return Shape(v + 3 - spatial, v + 3); }

}  // namespace

void check_operands(const char* op, const Tensor& x, const Tensor& w, const cpu::ConvParams& p) {
  const int64_t dims = 2 + p.spatial;
  MF_CHECK(x.dim() == dims, ShapeError, op, ": expected a ", dims - 1, "-d (unbatched) or ", dims,
           "-d (batched) input, got shape ", shape_str(x.sizes()));
  MF_CHECK(w.dim() == dims, ShapeError, op, ": weight must be ", dims, "-d, got shape ", shape_str(w.sizes()));
  MF_CHECK(is_floating(x.dtype()), TypeError, op, ": expected a floating-point input, got ", dtype_name(x.dtype()));
  MF_CHECK(w.dtype() == x.dtype(), TypeError, op, ": expected weight to have the input's dtype ",
           dtype_name(x.dtype()), ", got ", dtype_name(w.dtype()));
  MF_CHECK(p.groups > 0, ValueError, op, ": groups must be positive, got ", p.groups);
  for (int64_t i = 3 - p.spatial; i < 3; ++i) {
    MF_CHECK(p.stride[i] > 0, ValueError, op, ": stride must be positive, got ",
             shape_str(entries(p.stride, p.spatial)));
    MF_CHECK(p.padding[i] >= 0, ValueError, op, ": padding must be non-negative, got ",
             shape_str(entries(p.padding, p.spatial)));
    MF_CHECK(p.dilation[i] > 0, ValueError, op, ": dilation must be positive, got ",
             shape_str(entries(p.dilation, p.spatial)));
  }
  for (int64_t d = 2; d < dims; ++d)
    MF_CHECK(w.size(d) > 0, ShapeError, op, ": the kernel size must be positive, got weight shape ",
             shape_str(w.sizes()));
}

void check_bias(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, int64_t channels) {
  if (!bias.defined()) return;
  MF_CHECK(bias.dtype() == x.dtype(), TypeError, op, ": expected bias to have the input's dtype ",
           dtype_name(x.dtype()), ", got ", dtype_name(bias.dtype()));
  MF_CHECK(bias.dim() == 1 && bias.size(0) == channels, ShapeError, op, ": expected bias of shape (", channels,
           ") for weight ", shape_str(w.sizes()), ", got ", shape_str(bias.sizes()));
}

namespace {

const char* conv_name(int64_t spatial) { return spatial == 3 ? "conv3d" : "conv2d"; }

// Checks conv's operands and returns the output shape (N, O, spatial...).
Shape conv_output_shape(const Tensor& x, const Tensor& w, const Tensor& bias, const cpu::ConvParams& p) {
  const char* op = conv_name(p.spatial);
  check_operands(op, x, w, p);
  const int64_t out_channels = w.size(0);
  const int64_t in_channels = checked_mul(w.size(1), p.groups, op, "weight.shape[1] * groups");
  MF_CHECK(x.size(1) == in_channels, ShapeError, op, ": the input has ", x.size(1), " channels but weight ",
           shape_str(w.sizes()), " with groups=", p.groups, " expects ", in_channels,
           " (weight.shape[1] * groups); input shape ", shape_str(x.sizes()));
  MF_CHECK(out_channels % p.groups == 0, ShapeError, op, ": out_channels (", out_channels,
           ") must be divisible by groups (", p.groups, "); weight shape ", shape_str(w.sizes()));
  check_bias(op, x, w, bias, out_channels);
  Shape out{x.size(0), out_channels}, padded, kernel;
  for (int64_t i = 0; i < p.spatial; ++i) {
    const int64_t at = 3 - p.spatial + i;
    padded.push_back(checked_add(x.size(2 + i), checked_add(p.padding[at], p.padding_end[at], op, "the padding"), op,
                                 "the padded input size"));
    kernel.push_back(checked_mul(p.dilation[at], w.size(2 + i) - 1, op, "the dilated kernel size") + 1);
  }
  for (int64_t i = 0; i < p.spatial; ++i) {
    MF_CHECK(kernel[size_t(i)] <= padded[size_t(i)], ShapeError, op, ": the kernel size ",
             shape_str(Shape(w.sizes().begin() + 2, w.sizes().end())), " (dilated: ", shape_str(kernel),
             ") can't be greater than the padded input size ", shape_str(padded));
    out.push_back((padded[size_t(i)] - kernel[size_t(i)]) / p.stride[3 - p.spatial + i] + 1);
  }
  return out;
}

// The attrs of a conv op without the backward's output_mask.
Attrs conv_attrs_of(const Attrs& from) {
  Attrs a{{"stride", from.get_shape("stride")},
          {"padding", from.get_shape("padding")},
          {"dilation", from.get_shape("dilation")},
          {"groups", from.get_int("groups")}};
  if (from.has("padding_end")) a.set("padding_end", from.get_shape("padding_end"));
  return a;
}

}  // namespace

Tensor conv_op(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs) {
  static const OpDef& op2 = dispatch::op("conv2d");
  static const OpDef& op3 = dispatch::op("conv3d");
  return dispatch::apply_one(x.dim() == 5 ? op3 : op2, {x, w, bias}, attrs);
}

TensorList conv_backward_op(const Tensor& gy, const Tensor& x, const Tensor& w, const Shape& mask,
                            const Attrs& attrs) {
  static const OpDef& op2 = dispatch::op("conv2d_backward");
  static const OpDef& op3 = dispatch::op("conv3d_backward");
  Attrs a = conv_attrs_of(attrs);
  a.set("output_mask", mask);
  TensorList outs = dispatch::apply(x.dim() == 5 ? op3 : op2, {gy, x, w}, a);
  for (size_t i = 0; i < 3; ++i)
    if (!mask[i]) outs[i] = Tensor();
  return outs;
}

}  // namespace conv_detail

namespace {

using namespace conv_detail;

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
    auto outs = [&](Sbp gx, Sbp gw, Sbp gb) {
      return std::vector<Sbp>{mask[0] ? gx : b, mask[1] ? gw : b, mask[2] ? gb : b};
    };
    sigs.push_back({{s0, s0, b}, outs(s0, p, p)});
    if (channels) {
      sigs.push_back({{s1, b, s0}, outs(p, s0, s0)});
      sigs.push_back({{b, s1, s1}, outs(s1, s1, b)});
    }
    return sigs;
  };
}

// (1, O, 1, ...): a bias gradient's upstream gradient spread over y's shape.
Tensor channel_column(const Tensor& c, int64_t dims) {
  Shape shape(size_t(dims), 1);
  shape[1] = c.size(0);
  return view(c, shape);
}

OpDef conv_def(int64_t spatial) {
  return OpDef{
      .name = conv_name(spatial),
      .inputs = {"x", "weight", "bias"},
      .infer = [](const TensorList& in, const Attrs& attrs) {
        return std::vector<TensorMeta>{
            {conv_output_shape(in[0], in[1], in[2], params_of(attrs)), in[0].dtype(), in[0].device()}};
      },
      .backward = [](const BackwardContext& ctx) {
        const auto& need = ctx.needs_input_grad;
        return conv_backward_op(ctx.grad_outputs[0], ctx.inputs[0], ctx.inputs[1], {need[0], need[1], need[2]},
                                ctx.attrs);
      },
      .save_inputs = 0b011,
      .autocast = AutocastPolicy::LowPrecision,
      .sbp = conv_sbp(false),
      // Each output element sums C_in / groups x kernel products.
      .flops = [](const TensorList& in, const std::vector<Shape>& out, const Attrs&) {
        return 2.0 * double(shape_numel(out[0])) * double(in[1].numel() / std::max<int64_t>(in[1].size(0), 1));
      },
      .flops_kind = FlopsKind::Convolution,
  };
}

// Note [Convolution adjoints]: with y = conv(x, w), the gradients are
// gx = BI(gy, w), the adjoint of conv(., w), and gw = BW(gy, x), the adjoint
// of conv(x, .); gb = sum(gy). Both are bilinear, and
//   <u, BI(gy, w)> = <conv(u, w), gy>,   <v, BW(gy, x)> = <gy, conv(x, v)>,
// so for upstream gradients (u, v, c) of (gx, gw, gb):
//   d/d gy = conv(u, w) + conv(x, v) + c,   d/dx = BI(gy, v),   d/dw = BW(gy, u).
OpDef conv_backward_def(int64_t spatial) {
  return OpDef{
      .name = std::string(conv_name(spatial)) + "_backward",
      .inputs = {"grad_y", "x", "weight"},
      .infer = [](const TensorList& in, const Attrs& attrs) {
        const Shape& mask = attrs.get_shape("output_mask");
        Shape expected = conv_output_shape(in[1], in[2], Tensor(), params_of(attrs));
        MF_CHECK(in[0].sizes() == expected && in[0].dtype() == in[1].dtype(), ShapeError,
                 "conv_backward: grad_y must have the output's shape ", shape_str(expected), " and dtype ",
                 dtype_name(in[1].dtype()), ", got ", shape_str(in[0].sizes()), " ", dtype_name(in[0].dtype()));
        auto meta = [&](size_t i, const Shape& shape) {
          return TensorMeta{mask[i] ? shape : Shape{0}, in[0].dtype(), in[0].device()};
        };
        return std::vector<TensorMeta>{meta(0, in[1].sizes()), meta(1, in[2].sizes()), meta(2, {in[2].size(0)})};
      },
      .backward = [](const BackwardContext& ctx) {
        const Shape& mask = ctx.attrs.get_shape("output_mask");
        const Tensor &gy = ctx.inputs[0], &x = ctx.inputs[1], &w = ctx.inputs[2];
        const Tensor &u = ctx.grad_outputs[0], &v = ctx.grad_outputs[1], &c = ctx.grad_outputs[2];
        const Attrs attrs = conv_attrs_of(ctx.attrs);
        TensorList grads(3);
        if (ctx.needs_input_grad[0]) {
          Tensor g = zeros(gy.sizes(), {.dtype = gy.dtype(), .device = gy.device()});
          if (mask[0]) g = add(g, conv_op(u, w, Tensor(), attrs));
          if (mask[1]) g = add(g, conv_op(x, v, Tensor(), attrs));
          if (mask[2]) g = add(g, channel_column(c, gy.dim()));
          grads[0] = g;
        }
        if (ctx.needs_input_grad[1] && mask[1]) grads[1] = conv_backward_op(gy, x, v, {1, 0, 0}, attrs)[0];
        if (ctx.needs_input_grad[2] && mask[0]) grads[2] = conv_backward_op(gy, u, w, {0, 1, 0}, attrs)[1];
        return grads;
      },
      .save_inputs = 0b111,
      .sbp = conv_sbp(true),
      // grad_x and grad_w each cost what the forward does.
      .flops = [](const TensorList& in, const std::vector<Shape>&, const Attrs& attrs) {
        const Shape& mask = attrs.get_shape("output_mask");
        const double forward = 2.0 * double(in[0].numel()) * double(in[2].numel() / std::max<int64_t>(in[2].size(0), 1));
        return forward * double((mask[0] ? 1 : 0) + (mask[1] ? 1 : 0));
      },
      .flops_kind = FlopsKind::Convolution,
  };
}

MF_REGISTER_OP(conv_def(2));
MF_REGISTER_OP(conv_def(3));
MF_REGISTER_OP(conv_backward_def(2));
MF_REGISTER_OP(conv_backward_def(3));

// conv2d / conv3d: args resolved into the op's attrs (padding='same' as the
// padding PyTorch computes: half the dilated kernel extent before the
// input, the rest after it).
Tensor convolution(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t spatial, const Shape& stride_in,
                   const Shape& padding_in, const Shape& dilation_in, int64_t groups, bool padding_same) {
  const char* op = conv_name(spatial);
  const Shape stride = expand_param(stride_in, spatial, op, "stride");
  const Shape dilation = expand_param(dilation_in, spatial, op, "dilation");
  Shape padding(size_t(spatial), 0), padding_end = padding;
  if (padding_same) {
    MF_CHECK(std::all_of(stride.begin(), stride.end(), [](int64_t s) { return s == 1; }), ValueError, op,
             ": padding='same' is not supported for strided convolutions");
    MF_CHECK(weight.defined() && weight.dim() == 2 + spatial, ShapeError, op, ": weight must be ", 2 + spatial,
             "-d, got ", weight.defined() ? shape_str(weight.sizes()) : std::string("an undefined tensor"));
    for (int64_t i = 0; i < spatial; ++i) {
      MF_CHECK(dilation[size_t(i)] > 0, ValueError, op, ": dilation must be positive, got ", shape_str(dilation));
      const int64_t total = checked_mul(dilation[size_t(i)], weight.size(2 + i) - 1, op, "the padding");
      padding[size_t(i)] = total / 2;
      padding_end[size_t(i)] = total - total / 2;
    }
  } else {
    padding = padding_end = expand_param(padding_in, spatial, op, "padding");
  }
  const Attrs attrs = conv_attrs(stride, padding, padding_end, dilation, groups);
  return with_batch(x, 2 + spatial, op, [&](const Tensor& batched) { return conv_op(batched, weight, bias, attrs); });
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dArgs& args) {
  return convolution(x, weight, bias, 2, args.stride, args.padding, args.dilation, args.groups, args.padding_same);
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvArgs& args) {
  return convolution(x, weight, bias, 3, args.stride, args.padding, args.dilation, args.groups, args.padding_same);
}

}  // namespace mf
