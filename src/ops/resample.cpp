// Resampling ops (Note [Separable resampling] in backend/cpu/kernels/resample.h):
// interpolate's upsample_nearest, upsample_nearest_exact, upsample_linear
// (linear, bilinear and trilinear) and upsample_bicubic2d, and F.pad's
// reflection_pad, replication_pad and circular_pad, each with a *_backward
// op. A backward op is linear in the gradient and the adjoint of its
// forward op, so its own gradient is the forward op (double backward).
// Batch and channel dims (for the pads, every dim that is not padded) may be
// split; the resampled dims are coupled. The CPU kernels
// (backend/cpu/kernels/resample.cpp) and the device kernels take their maps
// from resample_plan::op_axes, defined at the end of this file.
#include "meshflow/ops/resample.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "meshflow/checked_size.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/functional.h"
#include "meshflow/ops/shape.h"
#include "backend/common/resample_plan.h"

namespace mf {
namespace {

using resample_plan::PadMode;
using resample_plan::ResampleAxis;
using resample_plan::UpsampleMode;

std::vector<TensorMeta> meta(const Shape& shape, const Tensor& like) {
  return {{shape, like.dtype(), like.device()}};
}

// --- upsample -------------------------------------------------------------------------------
// Attrs: "output_size" (the spatial sizes), "align_corners", and per spatial
// dim the scale factor the kernels use ("scale_d", "scale_h", "scale_w" for
// the last three; <= 0: none). The backward ops add "input_size".

struct UpsampleKind {
  const char* name;
  UpsampleMode mode;
  int64_t max_dims;  // spatial dims
};

constexpr UpsampleKind kNearest{"upsample_nearest", UpsampleMode::Nearest, 3};
constexpr UpsampleKind kNearestExact{"upsample_nearest_exact", UpsampleMode::NearestExact, 3};
constexpr UpsampleKind kLinear{"upsample_linear", UpsampleMode::Linear, 3};
constexpr UpsampleKind kBicubic{"upsample_bicubic2d", UpsampleMode::Cubic, 2};

const char* scale_name(size_t i, size_t dims) {
  static const char* const names[] = {"scale_d", "scale_h", "scale_w"};
  return names[3 - dims + i];
}

Attrs upsample_attrs(const Shape& output_size, const std::vector<double>& scales, bool align_corners) {
  Attrs a{{"output_size", output_size}, {"align_corners", align_corners}};
  for (size_t i = 0; i < output_size.size(); ++i) a.set(scale_name(i, output_size.size()), scales[i]);
  return a;
}

std::vector<double> scales_of(const Attrs& a) {
  const size_t dims = a.get_shape("output_size").size();
  std::vector<double> scales;
  for (size_t i = 0; i < dims; ++i) scales.push_back(a.get_float(scale_name(i, dims)));
  return scales;
}

// The forward op's attrs from a backward op's.
Attrs forward_attrs(const Attrs& a) {
  return upsample_attrs(a.get_shape("output_size"), scales_of(a), a.get_bool("align_corners"));
}

Shape spatial_sizes(const Shape& sizes) { return Shape(sizes.begin() + 2, sizes.end()); }

// t is (N, C, spatial...) with `sizes` as its spatial sizes: the checks of
// PyTorch's upsample_*d_shape_check (the batch may be empty).
void check_upsample_sizes(const UpsampleKind& kind, const Tensor& t, const Shape& in, const Shape& out,
                          const char* what) {
  const int64_t dims = int64_t(out.size());
  MF_CHECK(dims >= 1 && dims <= kind.max_dims && int64_t(in.size()) == dims, ValueError, kind.name,
           ": expected 1 to ", kind.max_dims, " spatial sizes, got input ", shape_str(in), " and output ",
           shape_str(out));
  MF_CHECK(t.dim() == dims + 2 && t.size(1) > 0 && shape_numel(spatial_sizes(t.sizes())) > 0, ShapeError, kind.name,
           ": non-empty ", dims + 2, "-d ", what, " (N, C, spatial...) expected (N may be 0), got shape ",
           shape_str(t.sizes()));
  for (int64_t d = 0; d < dims; ++d)
    MF_CHECK(in[size_t(d)] > 0 && out[size_t(d)] > 0, ShapeError, kind.name,
             ": input and output sizes should be greater than 0, got input ", shape_str(in), " and output ",
             shape_str(out));
  MF_CHECK(kind.mode == UpsampleMode::Nearest || kind.mode == UpsampleMode::NearestExact || is_floating(t.dtype()),
           TypeError, kind.name, ": expected a floating-point input, got ", dtype_name(t.dtype()));
}

// Note [PyTorch's upsample kernels]: PyTorch 1.13 maps nearest indices in
// two ways. Its nearest_idx copies a dim whose size does not change and
// halves indices for a doubled one, whatever the scale factor; its generic
// forward kernel uses the scale factor there too. The backward kernels use
// nearest_idx, and so does the forward kernel for inputs that are
// channels-last contiguous (4-d and 5-d; for a contiguous tensor: one
// channel or no spatial extent). Its bicubic backward copies when no size
// changes, its forward does not. The ops follow, with the input's strides
// choosing as PyTorch's do, so results and gradients are PyTorch's (in
// those cases a gradient is not exactly the forward's adjoint).
bool channels_last_contiguous(const Tensor& x) {
  if (x.dim() != 4 && x.dim() != 5) return false;
  int64_t expected = 1;
  const int64_t order4[] = {1, 3, 2, 0}, order5[] = {1, 4, 3, 2, 0};
  for (int64_t d : x.dim() == 4 ? std::span<const int64_t>(order4) : std::span<const int64_t>(order5)) {
    if (x.size(d) == 1) continue;
    if (x.strides()[size_t(d)] != expected) return false;
    expected *= x.size(d);
  }
  return true;
}

// Which of PyTorch's kernels the maps follow.
enum class TorchKernel { GenericForward, ChannelsLastForward, Backward };

std::vector<ResampleAxis> upsample_axes(const UpsampleKind& kind, const Shape& in, const Attrs& a, DType dtype,
                                        TorchKernel kernel) {
  const Shape& out = a.get_shape("output_size");
  std::vector<double> scales = scales_of(a);
  for (size_t i = 0; i < out.size(); ++i) {
    const bool nearest_idx = kind.mode == UpsampleMode::Nearest && kernel != TorchKernel::GenericForward &&
                             (out[i] == in[i] || out[i] == 2 * in[i]);
    const bool cubic_copy = kind.mode == UpsampleMode::Cubic && kernel == TorchKernel::Backward && in == out;
    if (nearest_idx || cubic_copy) scales[i] = -1.0;  // the sizes' ratio: 1 or 1/2, exactly
  }
  std::vector<ResampleAxis> axes;
  for (size_t i = 0; i < out.size(); ++i)
    axes.push_back(resample_plan::upsample_axis(kind.mode, in[i], out[i], a.get_bool("align_corners"), scales[i], dtype));
  return axes;
}

// The forward maps: the input's strides choose PyTorch's kernel.
std::vector<ResampleAxis> upsample_forward_axes(const UpsampleKind& kind, const Tensor& x, const Attrs& a) {
  const TorchKernel kernel = channels_last_contiguous(x) ? TorchKernel::ChannelsLastForward : TorchKernel::GenericForward;
  return upsample_axes(kind, spatial_sizes(x.sizes()), a, x.dtype(), kernel);
}

std::string backward_name(const char* name) { return std::string(name) + "_backward"; }

OpDef upsample_op(const UpsampleKind& kind) {
  return OpDef{
      .name = kind.name,
      .inputs = {"input"},
      .infer = [kind](const TensorList& in, const Attrs& a) {
        const Shape& out = a.get_shape("output_size");
        const Tensor& x = in[0];
        check_upsample_sizes(kind, x, x.dim() >= 2 ? spatial_sizes(x.sizes()) : Shape{}, out, "input");
        Shape shape{x.size(0), x.size(1)};
        shape.insert(shape.end(), out.begin(), out.end());
        return meta(shape, x);
      },
      .backward = [kind](const BackwardContext& ctx) {
        Attrs a = ctx.attrs;
        a.set("input_size", spatial_sizes(ctx.input_metas[0].sizes));
        return TensorList{dispatch::apply_one(dispatch::op(backward_name(kind.name)), {ctx.grad_outputs[0]}, a)};
      },
      .sbp = sbp::leading_dims(2),
  };
}

OpDef upsample_backward_op(const UpsampleKind& kind) {
  return OpDef{
      .name = backward_name(kind.name),
      .inputs = {"grad"},
      .infer = [kind](const TensorList& in, const Attrs& a) {
        const Tensor& g = in[0];
        const Shape &out = a.get_shape("output_size"), &input = a.get_shape("input_size");
        check_upsample_sizes(kind, g, input, out, "gradient");
        MF_CHECK(spatial_sizes(g.sizes()) == out, ShapeError, kind.name, "_backward: expected a gradient of spatial ",
                 "sizes ", shape_str(out), ", got shape ", shape_str(g.sizes()));
        Shape shape{g.size(0), g.size(1)};
        shape.insert(shape.end(), input.begin(), input.end());
        return meta(shape, g);
      },
      .backward = [kind](const BackwardContext& ctx) {
        const Attrs a = forward_attrs(ctx.attrs);
        return TensorList{dispatch::apply_one(dispatch::op(kind.name), {ctx.grad_outputs[0]}, a)};
      },
      .sbp = sbp::leading_dims(2),
  };
}

MF_REGISTER_OP(upsample_op(kNearest));
MF_REGISTER_OP(upsample_backward_op(kNearest));
MF_REGISTER_OP(upsample_op(kNearestExact));
MF_REGISTER_OP(upsample_backward_op(kNearestExact));
MF_REGISTER_OP(upsample_op(kLinear));
MF_REGISTER_OP(upsample_backward_op(kLinear));
MF_REGISTER_OP(upsample_op(kBicubic));
MF_REGISTER_OP(upsample_backward_op(kBicubic));

// --- reflect, replicate and circular pads ---------------------------------------------------
// Attr "pad": F.pad's (last_lo, last_hi, second_last_lo, ...); the backward
// ops add "input_size", the padded dims' sizes (first padded dim first).

struct PadKind {
  const char* name;
  PadMode mode;
  const char* mode_name;  // F.pad's
};

constexpr PadKind kReflect{"reflection_pad", PadMode::Reflect, "reflect"};
constexpr PadKind kReplicate{"replication_pad", PadMode::Replicate, "replicate"};
constexpr PadKind kCircular{"circular_pad", PadMode::Circular, "circular"};
constexpr PadKind kPadKinds[] = {kReflect, kReplicate, kCircular};

// The size of a padded dim, with the mode's limits (PyTorch's checks, and
// for circular pads a wrap around the cropped input at most once, past
// which PyTorch reads what it has not written).
int64_t padded_size(const PadKind& kind, int64_t size, int64_t lo, int64_t hi, int64_t dim) {
  constexpr const char* kWhat = "the padded size";
  const int64_t out = checked_add(checked_add(size, lo, kind.name, kWhat), hi, kind.name, kWhat);
  switch (kind.mode) {
    case PadMode::Reflect:
      MF_CHECK(lo < size && hi < size, ValueError, kind.name, ": padding size should be less than the corresponding ",
               "input dimension, but got padding (", lo, ", ", hi, ") at dimension ", dim, " of size ", size);
      [[fallthrough]];
    case PadMode::Replicate:
      MF_CHECK(out >= 1, ShapeError, kind.name, ": input size ", size, " at dimension ", dim,
               " is too small for padding (", lo, ", ", hi, "): the output size would be ", out);
      return out;
    case PadMode::Circular: {
      MF_CHECK(out >= 0, ShapeError, kind.name, ": negative padding (", lo, ", ", hi, ") at dimension ", dim,
               " removes more than the input's size ", size);
      const int64_t kept = size + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0);
      MF_CHECK(out == 0 || (lo <= kept && hi <= kept), ValueError, kind.name, ": padding (", lo, ", ", hi,
               ") at dimension ", dim, " wraps around the input (size ", kept,
               " after negative padding) more than once");
      return out;
    }
  }
  return out;
}

// How many trailing dims of x `pads` pads (1 to 3, leaving at least one).
int64_t padded_dims(const Tensor& x, const Shape& pads, const char* op) {
  const int64_t dims = int64_t(pads.size() / 2);
  MF_CHECK(pads.size() % 2 == 0 && dims >= 1 && dims <= 3 && x.dim() >= dims + 1, ValueError, op,
           ": expected 2, 4 or 6 padding values for a tensor with more dims than padded, got ", pads.size(),
           " for shape ", shape_str(x.sizes()));
  return dims;
}

// Checks x's sizes (PyTorch's: only a batch dim may be empty, and reflect's
// 1-d and 2-d forms also take an empty first dim of an unbatched input) and
// returns the padded shape.
Shape padded_shape(const PadKind& kind, const Tensor& x, const Shape& pads) {
  const int64_t dims = padded_dims(x, pads, kind.name), nd = x.dim();
  const bool batched = nd == dims + 2;
  const int64_t first_nonempty = kind.mode == PadMode::Circular ? nd
                                 : batched || (kind.mode == PadMode::Reflect && dims < 3) ? 1
                                                                                          : 0;
  for (int64_t d = first_nonempty; d < nd; ++d)
    MF_CHECK(x.size(d) > 0, ShapeError, kind.name, ": expected a ", dims + 1, "-d or ", dims + 2,
             "-d (batch mode) input with non-zero sizes except the batch dim, got shape ", shape_str(x.sizes()));
  Shape out = x.sizes();
  for (int64_t p = 0; p < dims; ++p) {
    const int64_t d = nd - 1 - p;
    out[size_t(d)] = padded_size(kind, x.size(d), pads[size_t(2 * p)], pads[size_t(2 * p + 1)], d);
  }
  return out;
}

// in: the padded dims' input sizes, first padded dim first.
std::vector<ResampleAxis> pad_axes(const PadKind& kind, const Shape& in, const Shape& pads) {
  const size_t dims = in.size();
  std::vector<ResampleAxis> axes;
  for (size_t i = 0; i < dims; ++i) {
    const size_t p = dims - 1 - i;
    axes.push_back(resample_plan::pad_axis(kind.mode, in[i], pads[2 * p], pads[2 * p + 1]));
  }
  return axes;
}

Shape last_sizes(const Shape& sizes, size_t n) { return Shape(sizes.end() - int64_t(n), sizes.end()); }

// The padded dims are coupled; every other dim may be split.
SbpRuleFn pad_sbp() {
  return sbp::independent([](const TensorList&, const Attrs& attrs) {
    std::vector<int64_t> padded;
    for (size_t i = 0; i < attrs.get_shape("pad").size() / 2; ++i) padded.push_back(-1 - int64_t(i));
    return padded;
  });
}

OpDef pad_op(const PadKind& kind) {
  return OpDef{
      .name = kind.name,
      .inputs = {"input"},
      .infer = [kind](const TensorList& in, const Attrs& a) {
        return meta(padded_shape(kind, in[0], a.get_shape("pad")), in[0]);
      },
      .backward = [kind](const BackwardContext& ctx) {
        const Shape& pads = ctx.attrs.get_shape("pad");
        const Attrs a{{"pad", pads}, {"input_size", last_sizes(ctx.input_metas[0].sizes, pads.size() / 2)}};
        return TensorList{dispatch::apply_one(dispatch::op(backward_name(kind.name)), {ctx.grad_outputs[0]}, a)};
      },
      .sbp = pad_sbp(),
  };
}

OpDef pad_backward_op(const PadKind& kind) {
  return OpDef{
      .name = backward_name(kind.name),
      .inputs = {"grad"},
      .infer = [kind](const TensorList& in, const Attrs& a) {
        const Tensor& g = in[0];
        const Shape &pads = a.get_shape("pad"), &input = a.get_shape("input_size");
        const int64_t dims = padded_dims(g, pads, kind.name);
        MF_CHECK(int64_t(input.size()) == dims, ValueError, kind.name, "_backward: expected ", dims,
                 " input sizes, got ", shape_str(input));
        Shape shape = g.sizes();
        for (int64_t i = 0; i < dims; ++i) {
          const size_t d = size_t(g.dim() - dims + i), p = size_t(dims - 1 - i);
          const int64_t size = input[size_t(i)];
          MF_CHECK(size >= 0 && padded_size(kind, size, pads[2 * p], pads[2 * p + 1], int64_t(d)) == g.size(int64_t(d)),
                   ShapeError, kind.name, "_backward: a gradient of shape ", shape_str(g.sizes()),
                   " does not fit input sizes ", shape_str(input), " padded by ", shape_str(pads));
          shape[d] = size;
        }
        return meta(shape, g);
      },
      .backward = [kind](const BackwardContext& ctx) {
        return TensorList{dispatch::apply_one(dispatch::op(kind.name), {ctx.grad_outputs[0]},
                                              {{"pad", ctx.attrs.get_shape("pad")}})};
      },
      .sbp = pad_sbp(),
  };
}

MF_REGISTER_OP(pad_op(kReflect));
MF_REGISTER_OP(pad_backward_op(kReflect));
MF_REGISTER_OP(pad_op(kReplicate));
MF_REGISTER_OP(pad_backward_op(kReplicate));
MF_REGISTER_OP(pad_op(kCircular));
MF_REGISTER_OP(pad_backward_op(kCircular));

// --- interpolate ------------------------------------------------------------------------------

// One value per spatial dim from an int-or-list argument, with torch's
// message when a list has the wrong length.
template <typename V, typename List>
List per_dim(const std::variant<V, List>& arg, int64_t dims, const Tensor& x, const char* what, const char* format) {
  if (std::holds_alternative<V>(arg)) return List(size_t(std::max<int64_t>(dims, 0)), std::get<V>(arg));
  const List& values = std::get<List>(arg);
  MF_CHECK(int64_t(values.size()) == dims, ValueError, "interpolate: Input and ", what,
           " must have the same number of spatial dimensions, but got input with spatial dimensions of ",
           shape_str(x.dim() >= 2 ? spatial_sizes(x.sizes()) : Shape{}), " and ", format, " with ", values.size(),
           " values. Please provide input tensor in (N, C, d1, d2, ...,dK) format and ", format,
           " in (o1, o2, ...,oK) format.");
  return values;
}

// floor(size * scale) as an int64 (PyTorch truncates; for the positive
// sizes that pass the ops' checks the two agree).
int64_t scaled_size(int64_t size, double scale) {
  const double v = std::floor(double(size) * scale);
  MF_CHECK(std::isfinite(v) && std::abs(v) < 9.2e18, ValueError, "interpolate: scale_factor ", scale,
           " gives an output size that is not a representable integer for input size ", size);
  return int64_t(v);
}

// PyTorch's NotImplementedError for a mode and an input rank that do not go together.
[[noreturn]] void refuse_mode(const Tensor& x, const std::string& mode) {
  const int64_t needs = mode == "linear" ? 3 : mode == "bilinear" ? 4 : mode == "trilinear" ? 5 : 0;
  if (needs != 0 && x.dim() >= 3 && x.dim() <= 5)
    throw NotImplementedError(detail::concat("interpolate: Got ", x.dim(), "D input, but ", mode, " mode needs ",
                                             needs, "D input"));
  throw NotImplementedError(detail::concat(
      "interpolate: Input Error: Only 3D, 4D and 5D input Tensors supported (got ", x.dim(),
      "D) for the modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact (got ", mode, ")"));
}

}  // namespace

std::vector<ResampleAxis> resample_plan::op_axes(const std::string& op, const TensorList& in, const TensorList&,
                                                 const Attrs& a) {
  const bool backward = op.ends_with("_backward");
  const std::string base = backward ? op.substr(0, op.size() - std::string("_backward").size()) : op;
  for (const UpsampleKind* kind : {&kNearest, &kNearestExact, &kLinear, &kBicubic}) {
    if (base != kind->name) continue;
    if (!backward) return upsample_forward_axes(*kind, in[0], a);
    return upsample_axes(*kind, a.get_shape("input_size"), a, in[0].dtype(), TorchKernel::Backward);
  }
  for (const PadKind& kind : kPadKinds) {
    if (base != kind.name) continue;
    const Shape& pads = a.get_shape("pad");
    return pad_axes(kind, backward ? a.get_shape("input_size") : last_sizes(in[0].sizes(), pads.size() / 2), pads);
  }
  throw Error(::mf::detail::concat("resample: ", op, " is not a resampling op"));
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  MF_CHECK(x.defined(), ValueError, "interpolate: input is undefined");
  const std::string& mode = o.mode;
  const bool nearest_like = mode == "nearest" || mode == "area" || mode == "nearest-exact";
  MF_CHECK(!(nearest_like && o.align_corners), ValueError, "interpolate: align_corners option can only be set with ",
           "the interpolating modes: linear | bilinear | bicubic | trilinear");
  const bool align_corners = o.align_corners.value_or(false);
  const int64_t dims = x.dim() - 2;
  MF_CHECK(!(o.size && o.scale_factor), ValueError, "interpolate: only one of size or scale_factor should be defined");
  MF_CHECK(o.size || o.scale_factor, ValueError, "interpolate: either size or scale_factor should be defined");
  Shape output_size;
  std::vector<double> scales;
  if (o.size) output_size = per_dim(*o.size, dims, x, "output", "output size");
  else scales = per_dim(*o.scale_factor, dims, x, "scale_factor", "scale_factor");
  const bool recompute = o.recompute_scale_factor.value_or(false) || (mode == "area" && !o.size);
  MF_CHECK(!(o.recompute_scale_factor.value_or(false) && o.size), ValueError,
           "interpolate: recompute_scale_factor is not meaningful with an explicit size.");
  if (!o.size) {
    for (size_t i = 0; i < scales.size(); ++i) output_size.push_back(scaled_size(x.size(int64_t(2 + i)), scales[i]));
  }
  // Without a scale factor to pass on (or when recomputed), kernels take their scales from the sizes.
  if (o.size || recompute) scales.assign(output_size.size(), -1.0);
  MF_CHECK(!o.antialias || ((mode == "bilinear" || mode == "bicubic") && x.dim() == 4), ValueError,
           "interpolate: Anti-alias option is only supported for bilinear and bicubic modes");
  MF_CHECK(!o.antialias, NotImplementedError, "interpolate: antialias=True is not supported");

  const UpsampleKind* kind = nullptr;
  if (dims >= 1 && dims <= 3 && mode == "nearest") kind = &kNearest;
  if (dims >= 1 && dims <= 3 && mode == "nearest-exact") kind = &kNearestExact;
  if ((dims == 1 && mode == "linear") || (dims == 2 && mode == "bilinear") || (dims == 3 && mode == "trilinear"))
    kind = &kLinear;
  if (dims == 2 && mode == "bicubic") kind = &kBicubic;
  if (kind != nullptr)
    return dispatch::apply_one(dispatch::op(kind->name), {x}, upsample_attrs(output_size, scales, align_corners));
  if (mode == "area" && dims == 1) return adaptive_avg_pool1d(x, output_size[0]);
  if (mode == "area" && dims == 2) return adaptive_avg_pool2d(x, output_size);
  MF_CHECK(!(mode == "area" && dims == 3), NotImplementedError,
           "interpolate: mode 'area' on a 5-d input (adaptive_avg_pool3d) is not supported");
  refuse_mode(x, mode);
}

Tensor pad(const Tensor& t, const Shape& pads, const std::string& mode, std::optional<double> value) {
  if (mode == "constant") return pad(t, pads, value.value_or(0.0));
  const PadKind* kind = nullptr;
  for (const PadKind& k : kPadKinds)
    if (mode == k.mode_name) kind = &k;
  MF_CHECK(kind != nullptr, NotImplementedError, "pad: unrecognised padding mode '", mode,
           "' (expected 'constant', 'reflect', 'replicate' or 'circular')");
  MF_CHECK(pads.size() % 2 == 0, ValueError, "pad: padding length must be divisible by 2, got ", pads.size());
  MF_CHECK(int64_t(pads.size()) <= 2 * t.dim(), ValueError, "pad: padding length ", pads.size(),
           " is too large for a tensor with ", t.dim(), " dimensions");
  MF_CHECK(!value || *value == 0, ValueError, "pad: padding mode '", mode, "' doesn't take in value argument");
  const int64_t dims = int64_t(pads.size() / 2);
  MF_CHECK(dims >= 1 && dims <= 3 && (t.dim() == dims + 1 || t.dim() == dims + 2), NotImplementedError,
           "pad: mode '", mode, "' pads the last 1, 2 or 3 dims of a 2-d or 3-d, 3-d or 4-d, or 4-d or 5-d input ",
           "(2, 4 or 6 padding values); got ", pads.size(), " padding values for a ", t.dim(), "-d input");
  MF_CHECK(kind->mode != PadMode::Circular || t.dim() == dims + 2, ValueError, "pad: mode 'circular' needs a ",
           "batched (N, C, ...) input: expected ", 2 * (t.dim() - 2), " padding values for shape ",
           shape_str(t.sizes()), ", got ", pads.size());
  return dispatch::apply_one(dispatch::op(kind->name), {t}, {{"pad", pads}});
}

}  // namespace mf
