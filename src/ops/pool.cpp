// 2-d pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d and
// adaptive_max_pool2d, each with a dedicated gradient op (the max pools
// share theirs). The gradient ops are linear in the gradient, so
// each one's own gradient is its partner (scatter <-> gather, pooling <->
// its adjoint), which gives double backward. Kernels: kernels/cpu/pool.cpp.
#include <limits>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/conv.h"
#include "meshflow/ops/shape.h"
#include "ops/kernels/cpu/pool.h"

namespace mf {
namespace {

// Pool2dArgs as attrs: every field a 2-element Shape (stride filled in).
Shape pair_of(const Shape& v, const char* op, const char* name) {
  MF_CHECK(v.size() == 1 || v.size() == 2, ValueError, op, ": expected ", name, " to have 1 or 2 elements, got ",
           shape_str(v));
  return v.size() == 1 ? Shape{v[0], v[0]} : v;
}

Attrs pool_attrs(const Pool2dArgs& args, const char* op) {
  const Shape kernel = pair_of(args.kernel_size, op, "kernel_size");
  return Attrs{{"kernel_size", kernel},
               {"stride", args.stride.empty() ? kernel : pair_of(args.stride, op, "stride")},
               {"padding", pair_of(args.padding, op, "padding")},
               {"dilation", pair_of(args.dilation, op, "dilation")},
               {"ceil_mode", args.ceil_mode},
               {"count_include_pad", args.count_include_pad}};
}

cpu::PoolParams params_of(const Attrs& a) {
  const Shape &k = a.get_shape("kernel_size"), &s = a.get_shape("stride"), &p = a.get_shape("padding"),
              &d = a.get_shape("dilation");
  return {{k[0], k[1]}, {s[0], s[1]}, {p[0], p[1]}, {d[0], d[1]}, a.get_bool("count_include_pad")};
}

void check_input(const Tensor& x, const char* op) {
  MF_CHECK(x.dim() == 4 && x.size(1) > 0 && x.size(2) > 0 && x.size(3) > 0, ShapeError, op,
           ": expected a 3-d or 4-d input with non-zero channels, height and width (the batch may be empty), ",
           "got shape ", shape_str(x.sizes()));
  MF_CHECK(is_floating(x.dtype()), TypeError, op, ": expected a floating-point input, got ", dtype_name(x.dtype()));
}

// PyTorch's pooling_output_shape: with ceil_mode the last window must start
// inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  constexpr const char* kWhat = "the pooled size";
  const int64_t padded = checked_add(in, checked_mul(2, pad, "pool2d", kWhat), "pool2d", kWhat);
  const int64_t window = checked_mul(dilation, kernel - 1, "pool2d", kWhat);
  const int64_t span = checked_add(padded - window - 1, ceil_mode ? stride - 1 : 0, "pool2d", kWhat);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Shape pooled_shape(const Tensor& x, const Attrs& a, const char* op) {
  check_input(x, op);
  const cpu::PoolParams p = params_of(a);
  for (int i = 0; i < 2; ++i) {
    MF_CHECK(p.kernel[i] > 0, ValueError, op, ": kernel_size must be positive, got (", p.kernel[0], ", ",
             p.kernel[1], ")");
    MF_CHECK(p.stride[i] > 0, ValueError, op, ": stride must be positive, got (", p.stride[0], ", ", p.stride[1], ")");
    MF_CHECK(p.dilation[i] > 0, ValueError, op, ": dilation must be positive, got (", p.dilation[0], ", ",
             p.dilation[1], ")");
    MF_CHECK(p.padding[i] >= 0 && p.padding[i] <= p.kernel[i] / 2, ValueError, op,
             ": padding must be non-negative and at most half of the kernel size, got padding (", p.padding[0], ", ",
             p.padding[1], ") for kernel_size (", p.kernel[0], ", ", p.kernel[1], ")");
  }
  const bool ceil_mode = a.get_bool("ceil_mode");
  Shape out = x.sizes();
  for (int i = 0; i < 2; ++i)
    out[size_t(2 + i)] = pooled_size(x.size(2 + i), p.kernel[i], p.padding[i], p.stride[i], p.dilation[i], ceil_mode);
  MF_CHECK(out[2] >= 1 && out[3] >= 1, ShapeError, op, ": input size (", x.size(1), ", ", x.size(2), ", ", x.size(3),
           ") gives output size (", x.size(1), ", ", out[2], ", ", out[3], "), which is too small; kernel_size (",
           p.kernel[0], ", ", p.kernel[1], "), dilation (", p.dilation[0], ", ", p.dilation[1], "), padding (",
           p.padding[0], ", ", p.padding[1], ")");
  return out;
}

std::vector<TensorMeta> meta(const Shape& shape, const Tensor& like) {
  return {{shape, like.dtype(), like.device()}};
}

Attrs with_input_sizes(const Attrs& from, const Shape& sizes) {
  Attrs a = from;
  a.set("input_sizes", sizes);
  return a;
}

// --- max_pool2d ----------------------------------------------------------------------

Tensor max_scatter(const Tensor& grad, const Tensor& indices, const Shape& input_sizes) {
  static const OpDef& op = dispatch::op("max_pool2d_scatter");
  return dispatch::apply_one(op, {grad, indices}, {{"input_sizes", input_sizes}});
}

Tensor max_gather(const Tensor& t, const Tensor& indices) {
  static const OpDef& op = dispatch::op("max_pool2d_gather");
  return dispatch::apply_one(op, {t, indices});
}

MF_REGISTER_OP(OpDef{
    .name = "max_pool2d",
    .inputs = {"x"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      Shape shape = pooled_shape(in[0], attrs, "max_pool2d");
      MF_CHECK(in[0].size(2) * in[0].size(3) <= std::numeric_limits<int32_t>::max(), ValueError,
               "max_pool2d: input planes of more than 2^31 - 1 elements are not supported, got ", in[0].size(2),
               " x ", in[0].size(3));
      return std::vector<TensorMeta>{{shape, in[0].dtype(), in[0].device()}, {shape, DType::Int64, in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      cpu::max_pool2d_forward(in[0], out[0], out[1], params_of(attrs));
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{max_scatter(ctx.grad_outputs[0], ctx.outputs[1], ctx.input_metas[0].sizes)};
    },
    .save_outputs = 0b10,
    .sbp = sbp::leading_dims(2),
});

// grad_x = grad_y scattered (summed) to the max positions.
MF_REGISTER_OP(OpDef{
    .name = "max_pool2d_scatter",
    .inputs = {"grad", "indices"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return meta(attrs.get_shape("input_sizes"), in[0]); },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs&) {
      cpu::max_pool2d_scatter(in[0], in[1], out[0]);
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{max_gather(ctx.grad_outputs[0], ctx.inputs[1]), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::leading_dims(2),
    .output_shape_attr = "input_sizes",
});

MF_REGISTER_OP(OpDef{
    .name = "max_pool2d_gather",
    .inputs = {"t", "indices"},
    .infer = [](const TensorList& in, const Attrs&) { return meta(in[1].sizes(), in[0]); },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs&) {
      cpu::max_pool2d_gather(in[0], in[1], out[0]);
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{max_scatter(ctx.grad_outputs[0], ctx.inputs[1], ctx.input_metas[0].sizes), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::leading_dims(2),
});

// --- avg_pool2d -----------------------------------------------------------------------

Tensor avg_pool_op(const Tensor& x, const Attrs& attrs) {
  static const OpDef& op = dispatch::op("avg_pool2d");
  return dispatch::apply_one(op, {x}, attrs);
}

MF_REGISTER_OP(OpDef{
    .name = "avg_pool2d",
    .inputs = {"x"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape& d = attrs.get_shape("dilation");
      MF_CHECK(d[0] == 1 && d[1] == 1, ValueError, "avg_pool2d: dilation is not supported, got ", shape_str(d));
      return meta(pooled_shape(in[0], attrs, "avg_pool2d"), in[0]);
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      cpu::avg_pool2d_forward(in[0], out[0], params_of(attrs));
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("avg_pool2d_backward");
      return TensorList{
          dispatch::apply_one(op, {ctx.grad_outputs[0]}, with_input_sizes(ctx.attrs, ctx.input_metas[0].sizes))};
    },
    .sbp = sbp::leading_dims(2),
});

// The adjoint of avg_pool2d (it is linear, so this is its gradient).
MF_REGISTER_OP(OpDef{
    .name = "avg_pool2d_backward",
    .inputs = {"grad"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return meta(attrs.get_shape("input_sizes"), in[0]); },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      cpu::avg_pool2d_backward(in[0], out[0], params_of(attrs));
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{avg_pool_op(ctx.grad_outputs[0], ctx.attrs)}; },
    .sbp = sbp::leading_dims(2),
    .output_shape_attr = "input_sizes",
});

// --- adaptive_avg_pool2d ----------------------------------------------------------------

Tensor adaptive_op(const Tensor& x, const Shape& output_size) {
  static const OpDef& op = dispatch::op("adaptive_avg_pool2d");
  return dispatch::apply_one(op, {x}, {{"output_size", output_size}});
}

MF_REGISTER_OP(OpDef{
    .name = "adaptive_avg_pool2d",
    .inputs = {"x"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_input(in[0], "adaptive_avg_pool2d");
      const Shape& size = attrs.get_shape("output_size");
      MF_CHECK(size.size() == 2 && size[0] >= 0 && size[1] >= 0, ValueError,
               "adaptive_avg_pool2d: output_size must be 1 or 2 non-negative sizes, got ", shape_str(size));
      return meta({in[0].size(0), in[0].size(1), size[0], size[1]}, in[0]);
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs&) {
      cpu::adaptive_avg_pool2d_forward(in[0], out[0]);
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("adaptive_avg_pool2d_backward");
      return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0]}, {{"input_sizes", ctx.input_metas[0].sizes}})};
    },
    .sbp = sbp::leading_dims(2),
});

MF_REGISTER_OP(OpDef{
    .name = "adaptive_avg_pool2d_backward",
    .inputs = {"grad"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return meta(attrs.get_shape("input_sizes"), in[0]); },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs&) {
      cpu::adaptive_avg_pool2d_backward(in[0], out[0]);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      return TensorList{adaptive_op(g, {ctx.input_metas[0].sizes[2], ctx.input_metas[0].sizes[3]})};
    },
    .sbp = sbp::leading_dims(2),
    .output_shape_attr = "input_sizes",
});

// --- adaptive_max_pool2d ----------------------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "adaptive_max_pool2d",
    .inputs = {"x"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_input(in[0], "adaptive_max_pool2d");
      const Shape& size = attrs.get_shape("output_size");
      MF_CHECK(size.size() == 2 && size[0] >= 0 && size[1] >= 0, ValueError,
               "adaptive_max_pool2d: output_size must be 1 or 2 non-negative sizes, got ", shape_str(size));
      MF_CHECK(in[0].size(2) * in[0].size(3) <= std::numeric_limits<int32_t>::max(), ValueError,
               "adaptive_max_pool2d: input planes of more than 2^31 - 1 elements are not supported, got ",
               in[0].size(2), " x ", in[0].size(3));
      const Shape shape{in[0].size(0), in[0].size(1), size[0], size[1]};
      return std::vector<TensorMeta>{{shape, in[0].dtype(), in[0].device()}, {shape, DType::Int64, in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs&) {
      cpu::adaptive_max_pool2d_forward(in[0], out[0], out[1]);
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{max_scatter(ctx.grad_outputs[0], ctx.outputs[1], ctx.input_metas[0].sizes)};
    },
    .save_outputs = 0b10,
    .sbp = sbp::leading_dims(2),
});

// Runs a pooling function on a 3-d (C, H, W) input as a batch of one.
template <typename F>
Tensor unbatched(const Tensor& x, const char* op, const F& fn) {
  MF_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, op, ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, ",
           "got shape ", shape_str(x.sizes()));
  return x.dim() == 3 ? squeeze(fn(unsqueeze(x, 0)), 0) : fn(x);
}

// Runs a max pooling op ({values, indices}) on a 3-d or 4-d input.
TensorList max_pool_op(const char* name, const Tensor& x, const Attrs& attrs) {
  const OpDef& op = dispatch::op(name);
  MF_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, name, ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) ",
           "input, got shape ", shape_str(x.sizes()));
  if (x.dim() == 4) return dispatch::apply(op, {x}, attrs);
  TensorList out = dispatch::apply(op, {unsqueeze(x, 0)}, attrs);
  return {squeeze(out[0], 0), squeeze(out[1], 0)};
}

}  // namespace

TensorList max_pool2d_with_indices(const Tensor& x, const Pool2dArgs& args) {
  return max_pool_op("max_pool2d", x, pool_attrs(args, "max_pool2d"));
}

Tensor max_pool2d(const Tensor& x, const Pool2dArgs& args) { return max_pool2d_with_indices(x, args)[0]; }

Tensor avg_pool2d(const Tensor& x, const Pool2dArgs& args) {
  Attrs attrs = pool_attrs(args, "avg_pool2d");
  return unbatched(x, "avg_pool2d", [&](const Tensor& x4) { return avg_pool_op(x4, attrs); });
}

Tensor adaptive_avg_pool2d(const Tensor& x, const Shape& output_size) {
  MF_CHECK(output_size.size() == 1 || output_size.size() == 2, ValueError,
           "adaptive_avg_pool2d: output_size must be 1 or 2 non-negative sizes, got ", shape_str(output_size));
  Shape size = output_size.size() == 1 ? Shape{output_size[0], output_size[0]} : output_size;
  return unbatched(x, "adaptive_avg_pool2d", [&](const Tensor& x4) { return adaptive_op(x4, size); });
}

TensorList adaptive_max_pool2d_with_indices(const Tensor& x, const OptionalSizes& output_size) {
  MF_CHECK(output_size.size() == 1 || output_size.size() == 2, ValueError,
           "adaptive_max_pool2d: output_size must have 1 or 2 entries, got ", output_size.size());
  MF_CHECK(x.defined() && x.dim() >= 2, ShapeError, "adaptive_max_pool2d: expected a 3-d (C, H, W) or 4-d ",
           "(N, C, H, W) input, got ", x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  Shape size(2);
  for (size_t i = 0; i < 2; ++i) {
    const std::optional<int64_t>& entry = output_size[output_size.size() == 1 ? 0 : i];
    size[i] = entry ? *entry : x.size(x.dim() - 2 + int64_t(i));  // None: the input's size
  }
  return max_pool_op("adaptive_max_pool2d", x, {{"output_size", size}});
}

Tensor adaptive_max_pool2d(const Tensor& x, const OptionalSizes& output_size) {
  return adaptive_max_pool2d_with_indices(x, output_size)[0];
}

TensorList adaptive_max_pool1d_with_indices(const Tensor& x, int64_t output_size) {
  MF_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), ShapeError,
           "adaptive_max_pool1d: expected a 2-d (C, L) or 3-d (N, C, L) input, got ",
           x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  TensorList out = adaptive_max_pool2d_with_indices(unsqueeze(x, -2), {1, output_size});
  return {squeeze(out[0], -2), squeeze(out[1], -2)};
}

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size) {
  return adaptive_max_pool1d_with_indices(x, output_size)[0];
}

}  // namespace mf
