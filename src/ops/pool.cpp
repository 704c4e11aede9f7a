// 2-d and 3-d pooling: max_pool2d/3d, avg_pool2d/3d, adaptive_avg_pool2d/3d
// and adaptive_max_pool2d, each with a dedicated gradient op (the max
// pools share theirs, which work for any rank). The gradient ops are linear
// in the gradient, so each one's own gradient is its partner (scatter <->
// gather, pooling <-> its adjoint), which gives double backward.
// Kernels: backend/cpu/kernels/pool.cpp.
#include <algorithm>
#include <limits>
#include <string>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/conv.h"
#include "meshflow/ops/shape.h"
#include "ops/conv_common.h"

namespace mf {
namespace {

using conv_detail::expand_param;

std::string op_name(const char* kind, int64_t spatial) { return kind + std::to_string(spatial) + "d"; }

// Pooling args as attrs: every size `spatial` entries (stride filled in).
template <typename Args>
Attrs pool_attrs(const Args& args, int64_t spatial, const char* op) {
  const Shape kernel = expand_param(args.kernel_size, spatial, op, "kernel_size");
  return Attrs{{"kernel_size", kernel},
               {"stride", args.stride.empty() ? kernel : expand_param(args.stride, spatial, op, "stride")},
               {"padding", expand_param(args.padding, spatial, op, "padding")},
               {"dilation", expand_param(args.dilation, spatial, op, "dilation")},
               {"ceil_mode", args.ceil_mode},
               {"count_include_pad", args.count_include_pad}};
}

// Checks a batched input (N, C, spatial...) with non-empty C and spatial dims.
void check_input(const Tensor& x, int64_t spatial, const std::string& op) {
  bool ok = x.dim() == 2 + spatial;
  for (int64_t d = 1; ok && d < x.dim(); ++d) ok = x.size(d) > 0;
  MF_CHECK(ok, ShapeError, op, ": expected a ", spatial + 1, "-d or ", spatial + 2,
           "-d input with non-zero channels and spatial sizes (the batch may be empty), got shape ",
           shape_str(x.sizes()));
  MF_CHECK(is_floating(x.dtype()), TypeError, op, ": expected a floating-point input, got ", dtype_name(x.dtype()));
}

// The max pools' indices are int32 positions inside the kernels.
void check_plane_size(const Tensor& x, const std::string& op) {
  int64_t plane = 1;
  for (int64_t d = 2; d < x.dim(); ++d) plane *= x.size(d);  // a real tensor's: no overflow
  MF_CHECK(plane <= std::numeric_limits<int32_t>::max(), ValueError, op,
           ": input planes of more than 2^31 - 1 elements are not supported, got shape ", shape_str(x.sizes()));
}

// PyTorch's pooling_output_shape: with ceil_mode the last window must start
// inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  constexpr const char* kWhat = "the pooled size";
  const int64_t padded = checked_add(in, checked_mul(2, pad, "pool", kWhat), "pool", kWhat);
  const int64_t window = checked_mul(dilation, kernel - 1, "pool", kWhat);
  const int64_t span = checked_add(padded - window - 1, ceil_mode ? stride - 1 : 0, "pool", kWhat);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Shape pooled_shape(const Tensor& x, const Attrs& a, int64_t spatial, const std::string& op) {
  check_input(x, spatial, op);
  const Shape &k = a.get_shape("kernel_size"), &s = a.get_shape("stride"), &p = a.get_shape("padding"),
              &d = a.get_shape("dilation");
  MF_CHECK(int64_t(k.size()) == spatial && s.size() == k.size() && p.size() == k.size() && d.size() == k.size(),
           ValueError, op, ": kernel_size, stride, padding and dilation must have ", spatial, " entries");
  for (size_t i = 0; i < k.size(); ++i) {
    MF_CHECK(k[i] > 0, ValueError, op, ": kernel_size must be positive, got ", shape_str(k));
    MF_CHECK(s[i] > 0, ValueError, op, ": stride must be positive, got ", shape_str(s));
    MF_CHECK(d[i] > 0, ValueError, op, ": dilation must be positive, got ", shape_str(d));
    MF_CHECK(p[i] >= 0 && p[i] <= k[i] / 2, ValueError, op,
             ": padding must be non-negative and at most half of the kernel size, got padding ", shape_str(p),
             " for kernel_size ", shape_str(k));
  }
  const bool ceil_mode = a.get_bool("ceil_mode");
  Shape out = x.sizes();
  for (size_t i = 0; i < k.size(); ++i) {
    out[2 + i] = pooled_size(x.size(2 + int64_t(i)), k[i], p[i], s[i], d[i], ceil_mode);
    MF_CHECK(out[2 + i] >= 1, ShapeError, op, ": input size ", shape_str(Shape(x.sizes().begin() + 1, x.sizes().end())),
             " gives output size ", shape_str(Shape(out.begin() + 1, out.end())), ", which is too small; kernel_size ",
             shape_str(k), ", dilation ", shape_str(d), ", padding ", shape_str(p));
  }
  return out;
}

std::vector<TensorMeta> meta(const Shape& shape, const Tensor& like) {
  return {{shape, like.dtype(), like.device()}};
}

// {values, indices} metas of a max pool.
std::vector<TensorMeta> max_metas(const Shape& shape, const Tensor& like) {
  return {{shape, like.dtype(), like.device()}, {shape, DType::Int64, like.device()}};
}

Attrs with_input_sizes(const Attrs& from, const Shape& sizes) {
  Attrs a = from;
  a.set("input_sizes", sizes);
  return a;
}

int64_t spatial_of(const Attrs& a, const char* key) { return int64_t(a.get_shape(key).size()); }

// --- max pooling ---------------------------------------------------------------------

Tensor max_scatter(const Tensor& grad, const Tensor& indices, const Shape& input_sizes) {
  static const OpDef& op = dispatch::op("max_pool2d_scatter");
  return dispatch::apply_one(op, {grad, indices}, {{"input_sizes", input_sizes}});
}

Tensor max_gather(const Tensor& t, const Tensor& indices) {
  static const OpDef& op = dispatch::op("max_pool2d_gather");
  return dispatch::apply_one(op, {t, indices});
}

// The gradient of a max pool (values, indices) -> x.
TensorList max_backward(const BackwardContext& ctx) {
  return TensorList{max_scatter(ctx.grad_outputs[0], ctx.outputs[1], ctx.input_metas[0].sizes)};
}

OpDef max_pool_def(int64_t spatial) {
  return OpDef{
      .name = op_name("max_pool", spatial),
      .inputs = {"x"},
      .infer = [](const TensorList& in, const Attrs& attrs) {
        const int64_t spatial = spatial_of(attrs, "kernel_size");
        const std::string op = op_name("max_pool", spatial);
        Shape shape = pooled_shape(in[0], attrs, spatial, op);
        check_plane_size(in[0], op);
        return max_metas(shape, in[0]);
      },
      .backward = max_backward,
      .save_outputs = 0b10,
      .sbp = sbp::leading_dims(2),
  };
}

MF_REGISTER_OP(max_pool_def(2));
MF_REGISTER_OP(max_pool_def(3));

// grad_x = grad_y scattered (summed) to the max positions (any rank).
MF_REGISTER_OP(OpDef{
    .name = "max_pool2d_scatter",
    .inputs = {"grad", "indices"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return meta(attrs.get_shape("input_sizes"), in[0]); },
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
    .backward = [](const BackwardContext& ctx) {
      return TensorList{max_scatter(ctx.grad_outputs[0], ctx.inputs[1], ctx.input_metas[0].sizes), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::leading_dims(2),
});

MF_REGISTER_OP(OpDef{
    .name = "adaptive_max_pool2d",
    .inputs = {"x"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_input(in[0], 2, "adaptive_max_pool2d");
      const Shape& size = attrs.get_shape("output_size");
      MF_CHECK(size.size() == 2 && size[0] >= 0 && size[1] >= 0, ValueError,
               "adaptive_max_pool2d: output_size must be 1 or 2 non-negative sizes, got ", shape_str(size));
      check_plane_size(in[0], "adaptive_max_pool2d");
      return max_metas({in[0].size(0), in[0].size(1), size[0], size[1]}, in[0]);
    },
    .backward = max_backward,
    .save_outputs = 0b10,
    .sbp = sbp::leading_dims(2),
});

// --- average pooling -----------------------------------------------------------------

Tensor avg_pool_op(const Tensor& x, const Attrs& attrs) {
  static const OpDef& op2 = dispatch::op("avg_pool2d");
  static const OpDef& op3 = dispatch::op("avg_pool3d");
  return dispatch::apply_one(spatial_of(attrs, "kernel_size") == 3 ? op3 : op2, {x}, attrs);
}

OpDef avg_pool_def(int64_t spatial) {
  return OpDef{
      .name = op_name("avg_pool", spatial),
      .inputs = {"x"},
      .infer = [](const TensorList& in, const Attrs& attrs) {
        const int64_t spatial = spatial_of(attrs, "kernel_size");
        const std::string op = op_name("avg_pool", spatial);
        const Shape& d = attrs.get_shape("dilation");
        MF_CHECK(std::all_of(d.begin(), d.end(), [](int64_t v) { return v == 1; }), ValueError, op,
                 ": dilation is not supported, got ", shape_str(d));
        return meta(pooled_shape(in[0], attrs, spatial, op), in[0]);
      },
      .backward = [](const BackwardContext& ctx) {
        const OpDef& op = dispatch::op(op_name("avg_pool", spatial_of(ctx.attrs, "kernel_size")) + "_backward");
        return TensorList{
            dispatch::apply_one(op, {ctx.grad_outputs[0]}, with_input_sizes(ctx.attrs, ctx.input_metas[0].sizes))};
      },
      .sbp = sbp::leading_dims(2),
  };
}

// The adjoint of avg_pool (it is linear, so this is its gradient).
OpDef avg_pool_backward_def(int64_t spatial) {
  return OpDef{
      .name = op_name("avg_pool", spatial) + "_backward",
      .inputs = {"grad"},
      .infer = [](const TensorList& in, const Attrs& attrs) { return meta(attrs.get_shape("input_sizes"), in[0]); },
      .backward = [](const BackwardContext& ctx) { return TensorList{avg_pool_op(ctx.grad_outputs[0], ctx.attrs)}; },
      .sbp = sbp::leading_dims(2),
      .output_shape_attr = "input_sizes",
  };
}

MF_REGISTER_OP(avg_pool_def(2));
MF_REGISTER_OP(avg_pool_def(3));
MF_REGISTER_OP(avg_pool_backward_def(2));
MF_REGISTER_OP(avg_pool_backward_def(3));

// --- adaptive average pooling ------------------------------------------------------------

Tensor adaptive_op(const Tensor& x, const Shape& output_size) {
  static const OpDef& op2 = dispatch::op("adaptive_avg_pool2d");
  static const OpDef& op3 = dispatch::op("adaptive_avg_pool3d");
  return dispatch::apply_one(output_size.size() == 3 ? op3 : op2, {x}, {{"output_size", output_size}});
}

OpDef adaptive_avg_def(int64_t spatial) {
  return OpDef{
      .name = op_name("adaptive_avg_pool", spatial),
      .inputs = {"x"},
      .infer = [](const TensorList& in, const Attrs& attrs) {
        const int64_t spatial = spatial_of(attrs, "output_size");
        const std::string op = op_name("adaptive_avg_pool", spatial);
        check_input(in[0], spatial, op);
        const Shape& size = attrs.get_shape("output_size");
        MF_CHECK(std::all_of(size.begin(), size.end(), [](int64_t s) { return s >= 0; }), ValueError, op,
                 ": output_size must be 1 or ", spatial, " non-negative sizes, got ", shape_str(size));
        Shape shape{in[0].size(0), in[0].size(1)};
        shape.insert(shape.end(), size.begin(), size.end());
        return meta(shape, in[0]);
      },
      .backward = [](const BackwardContext& ctx) {
        const OpDef& op = dispatch::op(op_name("adaptive_avg_pool", spatial_of(ctx.attrs, "output_size")) + "_backward");
        return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0]}, {{"input_sizes", ctx.input_metas[0].sizes}})};
      },
      .sbp = sbp::leading_dims(2),
  };
}

OpDef adaptive_avg_backward_def(int64_t spatial) {
  return OpDef{
      .name = op_name("adaptive_avg_pool", spatial) + "_backward",
      .inputs = {"grad"},
      .infer = [](const TensorList& in, const Attrs& attrs) { return meta(attrs.get_shape("input_sizes"), in[0]); },
      .backward = [](const BackwardContext& ctx) {
        const Shape& sizes = ctx.input_metas[0].sizes;
        return TensorList{adaptive_op(ctx.grad_outputs[0], Shape(sizes.begin() + 2, sizes.end()))};
      },
      .sbp = sbp::leading_dims(2),
      .output_shape_attr = "input_sizes",
  };
}

MF_REGISTER_OP(adaptive_avg_def(2));
MF_REGISTER_OP(adaptive_avg_def(3));
MF_REGISTER_OP(adaptive_avg_backward_def(2));
MF_REGISTER_OP(adaptive_avg_backward_def(3));

// fn(x) for a batched x (spatial + 2 dims); an unbatched x runs as a batch
// of one. Every output of fn loses the batch dim again.
template <typename F>
TensorList with_batch(const Tensor& x, int64_t spatial, const std::string& op, const F& fn) {
  MF_CHECK(x.defined() && (x.dim() == spatial + 1 || x.dim() == spatial + 2), ShapeError, op, ": expected a ",
           spatial + 1, "-d or ", spatial + 2, "-d (batched) input, got ",
           x.defined() ? "shape " + shape_str(x.sizes()) : std::string("an undefined tensor"));
  if (x.dim() == spatial + 2) return fn(x);
  TensorList out = fn(unsqueeze(x, 0));
  for (Tensor& t : out) t = squeeze(t, 0);
  return out;
}

TensorList max_pool(const Tensor& x, const Attrs& attrs, int64_t spatial, const char* kind) {
  const std::string op = op_name(kind, spatial);
  return with_batch(x, spatial, op, [&](const Tensor& b) { return dispatch::apply(dispatch::op(op), {b}, attrs); });
}

Tensor avg_pool(const Tensor& x, const Attrs& attrs, int64_t spatial) {
  return with_batch(x, spatial, op_name("avg_pool", spatial), [&](const Tensor& b) {
    return TensorList{avg_pool_op(b, attrs)};
  })[0];
}

// Sizes of 1 or `spatial` entries, an empty entry the input's size there.
Shape resolved_output_size(const Tensor& x, const OptionalSizes& output_size, int64_t spatial, const std::string& op) {
  MF_CHECK(output_size.size() == 1 || int64_t(output_size.size()) == spatial, ValueError, op,
           ": output_size must have 1 or ", spatial, " entries, got ", output_size.size());
  MF_CHECK(x.defined() && x.dim() >= spatial, ShapeError, op, ": expected a ", spatial + 1, "-d or ", spatial + 2,
           "-d input, got ", x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  Shape size(static_cast<size_t>(spatial), 0);
  for (int64_t i = 0; i < spatial; ++i) {
    const std::optional<int64_t>& entry = output_size[output_size.size() == 1 ? 0 : size_t(i)];
    size[size_t(i)] = entry ? *entry : x.size(x.dim() - spatial + i);  // None: the input's size
  }
  return size;
}

}  // namespace

TensorList max_pool2d_with_indices(const Tensor& x, const Pool2dArgs& args) {
  return max_pool(x, pool_attrs(args, 2, "max_pool2d"), 2, "max_pool");
}

Tensor max_pool2d(const Tensor& x, const Pool2dArgs& args) { return max_pool2d_with_indices(x, args)[0]; }

Tensor avg_pool2d(const Tensor& x, const Pool2dArgs& args) {
  return avg_pool(x, pool_attrs(args, 2, "avg_pool2d"), 2);
}

Tensor adaptive_avg_pool2d(const Tensor& x, const Shape& output_size) {
  MF_CHECK(output_size.size() == 1 || output_size.size() == 2, ValueError,
           "adaptive_avg_pool2d: output_size must be 1 or 2 non-negative sizes, got ", shape_str(output_size));
  const Shape size = output_size.size() == 1 ? Shape{output_size[0], output_size[0]} : output_size;
  return with_batch(x, 2, "adaptive_avg_pool2d", [&](const Tensor& b) { return TensorList{adaptive_op(b, size)}; })[0];
}

TensorList max_pool3d_with_indices(const Tensor& x, const Pool3dArgs& args) {
  return max_pool(x, pool_attrs(args, 3, "max_pool3d"), 3, "max_pool");
}

Tensor max_pool3d(const Tensor& x, const Pool3dArgs& args) { return max_pool3d_with_indices(x, args)[0]; }

Tensor avg_pool3d(const Tensor& x, const Pool3dArgs& args) {
  return avg_pool(x, pool_attrs(args, 3, "avg_pool3d"), 3);
}

Tensor adaptive_avg_pool3d(const Tensor& x, const OptionalSizes& output_size) {
  const Shape size = resolved_output_size(x, output_size, 3, "adaptive_avg_pool3d");
  return with_batch(x, 3, "adaptive_avg_pool3d", [&](const Tensor& b) { return TensorList{adaptive_op(b, size)}; })[0];
}

TensorList adaptive_max_pool2d_with_indices(const Tensor& x, const OptionalSizes& output_size) {
  const Attrs attrs{{"output_size", resolved_output_size(x, output_size, 2, "adaptive_max_pool2d")}};
  return max_pool(x, attrs, 2, "adaptive_max_pool");
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
