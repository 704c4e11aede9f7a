// Transposed convolution: the "conv_transpose2d" and "conv_transpose3d" ops
// (conv_transpose1d runs as conv_transpose2d over a height of 1). Forward
// and backward are convolution kernels and ops, see Note [Transposed
// convolution]. CPU kernel: backend/cpu/kernels/conv.cpp
// (cpu::conv_transpose_forward).
#include <algorithm>
#include <numeric>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/conv.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "ops/conv_common.h"

namespace mf {

// The attrs of the convolution C whose adjoint the op with attrs `a` is.
Attrs conv_detail::adjoint_conv_attrs(const Attrs& a, const char* op) {
  const Shape &stride = a.get_shape("stride"), &padding = a.get_shape("padding"),
              &output_padding = a.get_shape("output_padding");
  MF_CHECK(output_padding.size() == stride.size() && padding.size() == stride.size(), ValueError, op,
           ": stride ", shape_str(stride), ", padding ", shape_str(padding), " and output_padding ",
           shape_str(output_padding), " must have one entry per spatial dim");
  Shape padding_end(padding.size());
  for (size_t i = 0; i < padding.size(); ++i) {
    MF_CHECK(output_padding[i] >= 0, ValueError, op, ": output_padding must be non-negative, got ",
             shape_str(output_padding));
    padding_end[i] = padding[i] - output_padding[i];
  }
  return conv_attrs(stride, padding, padding_end, a.get_shape("dilation"), a.get_int("groups"));
}

namespace {

using namespace conv_detail;

// Note [Transposed convolution]: y = conv_transpose(x, w) is the adjoint of
// a convolution C = conv(., w) that maps y's shape onto x's: y = C^T x, the
// input gradient of C for grad_y = x. Hence
//   gx = C gy = conv(gy, w),   gw = BW(grad_y = x, input = gy),   gb = sum(gy)
// (Note [Convolution adjoints] in conv.cpp), all ops with their own
// gradients, SBP rules and kernels. output_padding adds op trailing
// elements per spatial dim to y; C maps y onto exactly x's size when its
// padding after the input is padding - output_padding:
//   (Y + p + (p - op) - d (k - 1) - 1) / s + 1 = in  for  Y = (in - 1) s - 2p + d (k - 1) + op + 1.
// That padding is negative when op > p: C then never reads y's last op - p
// elements, and C^T leaves them zero, as PyTorch's transposed convolution does.

const char* op_name(int64_t spatial) { return spatial == 3 ? "conv_transpose3d" : "conv_transpose2d"; }

// Checks the operands and returns the output shape (N, C_out, spatial...).
Shape output_shape(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs) {
  const int64_t spatial = int64_t(attrs.get_shape("stride").size());
  const char* op = op_name(spatial);
  const cpu::ConvParams p = params_of(adjoint_conv_attrs(attrs, op));
  check_operands(op, x, w, p);
  const Shape& output_padding = attrs.get_shape("output_padding");
  const int64_t first = 3 - spatial;
  for (int64_t i = 0; i < spatial; ++i)
    MF_CHECK(output_padding[size_t(i)] < p.stride[first + i] || output_padding[size_t(i)] < p.dilation[first + i],
             ValueError, op, ": output_padding must be smaller than either stride or dilation, got output_padding ",
             shape_str(output_padding), ", stride ", shape_str(attrs.get_shape("stride")), ", dilation ",
             shape_str(attrs.get_shape("dilation")));
  MF_CHECK(w.size(0) > 0 && w.size(0) % p.groups == 0, ShapeError, op, ": weight.shape[0] (the input channels, ",
           w.size(0), ") must be positive and divisible by groups (", p.groups, "); weight shape ",
           shape_str(w.sizes()));
  MF_CHECK(x.size(1) == w.size(0), ShapeError, op, ": the input has ", x.size(1), " channels but weight ",
           shape_str(w.sizes()), " expects ", w.size(0), " (weight.shape[0]); input shape ", shape_str(x.sizes()));
  const int64_t out_channels = checked_mul(w.size(1), p.groups, op, "weight.shape[1] * groups");
  check_bias(op, x, w, bias, out_channels);
  Shape out{x.size(0), out_channels};
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t at = first + i, in = x.size(2 + i);
    MF_CHECK(in > 0, ShapeError, op, ": only the batch may be empty, got input shape ", shape_str(x.sizes()));
    // (in - 1) * s - 2 p + d (k - 1) + op + 1, each term checked.
    int64_t size = checked_mul(in - 1, p.stride[at], op, "the output size");
    size = checked_sub(size, checked_mul(2, p.padding[at], op, "the output size"), op, "the output size");
    size = checked_add(size, checked_mul(p.dilation[at], w.size(2 + i) - 1, op, "the output size"), op,
                       "the output size");
    size = checked_add(size, output_padding[size_t(i)] + 1, op, "the output size");
    out.push_back(size);
  }
  MF_CHECK(std::all_of(out.begin() + 2, out.end(), [](int64_t s) { return s > 0; }), ShapeError, op,
           ": the output size ", shape_str(Shape(out.begin() + 2, out.end())), " for input size ",
           shape_str(Shape(x.sizes().begin() + 2, x.sizes().end())), " is too small");
  return out;
}

// SBP rules: split the batch (x S(0): y S(0), weight and bias broadcast);
// with groups == 1 also the output channels (w S(1), b S(0): y S(1)) or the
// input channels (x S(1), w S(0): y a partial sum, b partial so that it is
// added once). The backward is made of conv ops with their own rules.
std::vector<SbpSignature> transpose_sbp(const TensorList&, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
  const Sbp s0 = Sbp::split(0), s1 = Sbp::split(1), b = Sbp::broadcast(), p = Sbp::partial_sum();
  std::vector<SbpSignature> sigs{{{s0, b, b}, {s0}}};
  if (attrs.get_int("groups") == 1) {
    sigs.push_back({{b, s1, s0}, {s1}});
    sigs.push_back({{s1, s0, p}, {p}});
  }
  return sigs;
}

OpDef conv_transpose_def(int64_t spatial) {
  return OpDef{
      .name = op_name(spatial),
      .inputs = {"x", "weight", "bias"},
      .infer = [](const TensorList& in, const Attrs& attrs) {
        return std::vector<TensorMeta>{{output_shape(in[0], in[1], in[2], attrs), in[0].dtype(), in[0].device()}};
      },
      .backward = [](const BackwardContext& ctx) {
        const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &gy = ctx.grad_outputs[0];
        const Attrs conv = adjoint_conv_attrs(ctx.attrs, "");
        TensorList grads(3);
        if (ctx.needs_input_grad[0]) grads[0] = conv_op(gy, w, Tensor(), conv);
        if (ctx.needs_input_grad[1]) grads[1] = conv_backward_op(x, gy, w, {0, 1, 0}, conv)[1];
        if (ctx.needs_input_grad[2]) {
          Shape dims(size_t(gy.dim() - 1));
          std::iota(dims.begin() + 1, dims.end(), 2);  // (0, 2, 3, ...)
          grads[2] = sum(gy, dims);
        }
        return grads;
      },
      .save_inputs = 0b011,
      .autocast = AutocastPolicy::LowPrecision,
      .sbp = transpose_sbp,
  };
}

MF_REGISTER_OP(conv_transpose_def(2));
MF_REGISTER_OP(conv_transpose_def(3));

// Runs the op for `spatial` (2 or 3) dims on a batched or unbatched x; args
// have 1 or `spatial` entries. lead: neutral entries put before each
// argument (conv_transpose1d's height).
Tensor conv_transpose(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvTransposeArgs& args,
                      int64_t spatial, const char* op, bool lead) {
  static const OpDef& op2 = dispatch::op("conv_transpose2d");
  static const OpDef& op3 = dispatch::op("conv_transpose3d");
  const int64_t own = lead ? 1 : spatial;
  auto arg = [&](const Shape& v, const char* name, int64_t neutral) {
    Shape out = expand_param(v, own, op, name);
    if (lead) out.insert(out.begin(), neutral);
    return out;
  };
  const Attrs attrs{{"stride", arg(args.stride, "stride", 1)},
                    {"padding", arg(args.padding, "padding", 0)},
                    {"output_padding", arg(args.output_padding, "output_padding", 0)},
                    {"dilation", arg(args.dilation, "dilation", 1)},
                    {"groups", args.groups}};
  return with_batch(x, 2 + own, op, [&](const Tensor& batched) {
    if (!lead) return dispatch::apply_one(spatial == 3 ? op3 : op2, {batched, weight, bias}, attrs);
    MF_CHECK(weight.defined() && weight.dim() == 3, ShapeError, op, ": weight must be 3-d (in_channels, "
             "out_channels / groups, kernel_size), got ",
             weight.defined() ? shape_str(weight.sizes()) : std::string("an undefined tensor"));
    return squeeze(dispatch::apply_one(op2, {unsqueeze(batched, 2), unsqueeze(weight, 2), bias}, attrs), 2);
  });
}

}  // namespace

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvTransposeArgs& args) {
  return conv_transpose(x, weight, bias, args, 2, "conv_transpose1d", true);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvTransposeArgs& args) {
  return conv_transpose(x, weight, bias, args, 2, "conv_transpose2d", false);
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvTransposeArgs& args) {
  return conv_transpose(x, weight, bias, args, 3, "conv_transpose3d", false);
}

}  // namespace mf
