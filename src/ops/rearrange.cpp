// Rearranging copies: tril, triu, flip, roll, pad, repeat,
// repeat_interleave, one_hot. one_hot's CPU kernel:
// backend/cpu/kernels/index_kernels.cpp.
#include <numeric>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

std::vector<TensorMeta> same_meta(const Tensor& t) { return {{t.sizes(), t.dtype(), t.device()}}; }

// --- tril / triu ---------------------------------------------------------------------

// Keeps element (i, j) of every trailing matrix when j - i <= diagonal
// (lower) or j - i >= diagonal (upper); zero bits are 0 in every dtype.
MF_REGISTER_OP(OpDef{
    .name = "triangle",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in[0].dim() >= 2, ShapeError, attrs.get_bool("upper") ? "triu" : "tril",
               ": input tensor must have at least 2 dimensions, got ", in[0].dim());
      return same_meta(in[0]);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const int64_t diagonal = ctx.attrs.get_int("diagonal");
      return TensorList{ctx.attrs.get_bool("upper") ? triu(g, diagonal) : tril(g, diagonal)};
    },
    .sbp = sbp::independent([](const TensorList&, const Attrs&) { return std::vector<int64_t>{-2, -1}; }),
});

// --- flip / roll ----------------------------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "flip",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) { return same_meta(in[0]); },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{flip(ctx.grad_outputs[0], ctx.attrs.get_shape("dims"))};
    },
    .sbp = sbp::independent_of_attr("dims"),
});

// out[(i + shift) mod n] = in[i] along each rolled dim: 2^k block copies.
MF_REGISTER_OP(OpDef{
    .name = "roll",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) { return same_meta(in[0]); },
    .backward = [](const BackwardContext& ctx) {
      const Shape& dims = ctx.attrs.get_shape("dims");
      Shape shifts = ctx.attrs.get_shape("shifts");
      for (size_t j = 0; j < dims.size(); ++j) shifts[j] = -shifts[j];
      return TensorList{roll(ctx.grad_outputs[0], shifts, dims)};
    },
    // Without dims, roll shifts the flattened tensor: every dim is coupled.
    .sbp = sbp::independent([](const TensorList& in, const Attrs& attrs) {
      const Shape& dims = attrs.get_shape("dims");
      if (!dims.empty()) return std::vector<int64_t>(dims.begin(), dims.end());
      std::vector<int64_t> all(size_t(in[0].dim()));
      std::iota(all.begin(), all.end(), int64_t(0));
      return all;
    }),
});

// --- pad --------------------------------------------------------------------------------

// Output size of every dim, from F.pad's (last_lo, last_hi, ...) list.
Shape padded_shape(const Shape& sizes, const Shape& pads) {
  Shape out = sizes;
  const size_t nd = sizes.size();
  for (size_t p = 0; p < pads.size() / 2; ++p) {
    const size_t d = nd - 1 - p;
    // A negative pad crops; cropping more than the input has is refused, so
    // the kernel's offsets stay inside both tensors.
    MF_CHECK(pads[2 * p] >= -sizes[d] && pads[2 * p + 1] >= -sizes[d], ValueError, "pad: negative padding (",
             pads[2 * p], ", ", pads[2 * p + 1], ") removes more than the input's size ", sizes[d], " at dimension ",
             d);
    const int64_t n = checked_add(checked_add(sizes[d], pads[2 * p], "pad", "the padded size"), pads[2 * p + 1],
                                  "pad", "the padded size");
    MF_CHECK(n >= 0, ShapeError, "pad: the input size ", sizes[d], " plus padding ", pads[2 * p], " and ",
             pads[2 * p + 1], " resulted in a negative output size ", n, " at dimension ", d);
    out[d] = n;
  }
  return out;
}

MF_REGISTER_OP(OpDef{
    .name = "pad",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape& pads = attrs.get_shape("pad");
      MF_CHECK(pads.size() % 2 == 0, ValueError, "pad: padding length must be divisible by 2, got ", pads.size());
      MF_CHECK(int64_t(pads.size()) <= 2 * in[0].dim(), ValueError, "pad: padding length ", pads.size(),
               " is too large for a tensor with ", in[0].dim(), " dimensions");
      return std::vector<TensorMeta>{{padded_shape(in[0].sizes(), pads), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      Shape pads = ctx.attrs.get_shape("pad");
      for (auto& p : pads) p = -p;
      return TensorList{pad(ctx.grad_outputs[0], pads, 0.0)};
    },
    // "pad" holds (before, after) pairs from the last dim backwards.
    .sbp = sbp::independent([](const TensorList&, const Attrs& attrs) {
      std::vector<int64_t> padded;
      for (size_t i = 0; i < attrs.get_shape("pad").size() / 2; ++i) padded.push_back(-1 - int64_t(i));
      return padded;
    }),
});

// --- one_hot ---------------------------------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "one_hot",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in[0].dtype() == DType::Int64, TypeError, "one_hot: the op takes an int64 tensor");
      Shape size = in[0].sizes();
      size.push_back(attrs.get_int("num_classes"));
      return std::vector<TensorMeta>{{size, DType::Int64, in[0].device()}};
    },
    .differentiable = false,
    // Each index's row is its own: a split index dim splits the output.
    .sbp = [](const TensorList& in, const std::vector<Shape>&, const Attrs&, int64_t) {
      std::vector<SbpSignature> sigs;
      for (int64_t d = 0; d < in[0].dim(); ++d) sigs.push_back({{Sbp::split(d)}, {Sbp::split(d)}});
      return sigs;
    },
});

}  // namespace

Tensor tril(const Tensor& t, int64_t diagonal) {
  static const OpDef& op = dispatch::op("triangle");
  return dispatch::apply_one(op, {t}, {{"diagonal", diagonal}, {"upper", false}});
}

Tensor triu(const Tensor& t, int64_t diagonal) {
  static const OpDef& op = dispatch::op("triangle");
  return dispatch::apply_one(op, {t}, {{"diagonal", diagonal}, {"upper", true}});
}

Tensor flip(const Tensor& t, const Shape& dims) {
  Shape wrapped;
  std::vector<bool> seen(size_t(std::max<int64_t>(t.dim(), 1)), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, t.dim(), "flip");
    MF_CHECK(!seen[size_t(w)], ValueError, "flip: dim ", w, " appears multiple times in the list of dims");
    seen[size_t(w)] = true;
    if (t.dim() > 0) wrapped.push_back(w);
  }
  static const OpDef& op = dispatch::op("flip");
  return dispatch::apply_one(op, {t}, {{"dims", wrapped}});
}

Tensor roll(const Tensor& t, const Shape& shifts, const Shape& dims) {
  if (dims.empty()) {
    MF_CHECK(shifts.size() == 1, ValueError, "roll: without dims, shifts must have exactly one value, got ",
             shape_str(shifts));
    return reshape(roll(flatten(t), shifts, {0}), t.sizes());
  }
  MF_CHECK(shifts.size() == dims.size(), ValueError, "roll: shifts and dims must align: shifts ", shape_str(shifts),
           ", dims ", shape_str(dims));
  MF_CHECK(t.dim() > 0, IndexError, "roll: cannot roll a 0-d tensor along a dim");
  Shape wrapped, normalized;
  for (size_t j = 0; j < dims.size(); ++j) {
    const int64_t d = wrap_dim(dims[j], t.dim(), "roll");
    const int64_t n = t.sizes()[size_t(d)];
    const int64_t s = n == 0 ? 0 : ((shifts[j] % n) + n) % n;
    // A dim rolled twice rolls by the sum of its shifts.
    auto it = std::find(wrapped.begin(), wrapped.end(), d);
    if (it != wrapped.end()) {
      auto& prev = normalized[size_t(it - wrapped.begin())];
      prev = n == 0 ? 0 : (prev + s) % n;
      continue;
    }
    wrapped.push_back(d);
    normalized.push_back(s);
  }
  static const OpDef& op = dispatch::op("roll");
  return dispatch::apply_one(op, {t}, {{"shifts", normalized}, {"dims", wrapped}});
}

Tensor pad(const Tensor& t, const Shape& pads, double value) {
  static const OpDef& op = dispatch::op("pad");
  Scalar v = is_floating(t.dtype()) ? Scalar(value) : Scalar(int64_t(value));
  if (t.dtype() == DType::Bool) v = Scalar(value != 0.0);
  return dispatch::apply_one(op, {t}, {{"pad", pads}, {"value", v}});
}

Tensor repeat(const Tensor& t, const Shape& repeats) {
  MF_CHECK(int64_t(repeats.size()) >= t.dim(), ShapeError, "repeat: number of dimensions of repeat dims ",
           shape_str(repeats), " can not be smaller than number of dimensions of tensor ", shape_str(t.sizes()));
  for (int64_t r : repeats)
    MF_CHECK(r >= 0, ValueError, "repeat: repeats must be non-negative, got ", shape_str(repeats));
  // (s0, s1, ...) -> (1, s0, 1, s1, ...) -> expand to (r0, s0, r1, s1, ...) -> merge pairs.
  Shape padded(repeats.size() - size_t(t.dim()), 1);
  padded.insert(padded.end(), t.sizes().begin(), t.sizes().end());
  Shape pairs, expanded, result;
  for (size_t d = 0; d < repeats.size(); ++d) {
    pairs.insert(pairs.end(), {1, padded[d]});
    expanded.insert(expanded.end(), {repeats[d], padded[d]});
    result.push_back(checked_mul(repeats[d], padded[d], "repeat", "the repeated size"));
  }
  Tensor out = reshape(expand(reshape(t, pairs), expanded), result);
  return out.shares_storage(t) ? clone(out) : out;  // always a new tensor, as in PyTorch
}

Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim) {
  MF_CHECK(repeats >= 0, ValueError, "repeat_interleave: repeats must be non-negative, got ", repeats);
  Tensor x = dim ? t : flatten(t);
  int64_t d = dim ? wrap_dim(*dim, t.dim(), "repeat_interleave") : 0;
  if (x.dim() == 0) x = reshape(x, {1});
  Shape expanded = x.sizes();
  expanded.insert(expanded.begin() + d + 1, repeats);
  Shape result = x.sizes();
  result[size_t(d)] = checked_mul(result[size_t(d)], repeats, "repeat_interleave", "the repeated size");
  Tensor out = reshape(expand(unsqueeze(x, d + 1), expanded), result);
  return out.shares_storage(t) ? clone(out) : out;
}

Tensor one_hot(const Tensor& t, int64_t num_classes) {
  MF_CHECK(is_integral(t.dtype()), TypeError, "one_hot: one_hot is only applicable to index tensors, got ",
           dtype_name(t.dtype()));
  Tensor x = to(t, DType::Int64);
  if (num_classes == -1) {
    MF_CHECK(x.numel() > 0, ValueError, "one_hot: can not infer the total number of classes from an empty tensor");
    Tensor c = contiguous(x);
    const int64_t* p = c.data<int64_t>();
    auto [lo, hi] = std::minmax_element(p, p + c.numel());
    MF_CHECK(*lo >= 0, IndexError, "one_hot: class values must be non-negative, got ", *lo);
    num_classes = *hi + 1;
  }
  MF_CHECK(num_classes >= 0, ValueError, "one_hot: num_classes must be -1 or non-negative, got ", num_classes);
  static const OpDef& op = dispatch::op("one_hot");
  return dispatch::apply_one(op, {x}, {{"num_classes", num_classes}});
}

}  // namespace mf
