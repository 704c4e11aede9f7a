// View ops: outputs share storage with the input (Note [Views]: the view
// function computes sizes/strides/offset; backward reshapes, permutes or
// scatters the gradient back).
#include <numeric>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "backend/cpu/kernels/loops.h"

namespace mf {
namespace {

// Resolves one -1 and checks the element count.
Shape infer_size(const Shape& size, int64_t numel, const char* op) {
  Shape out = size;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MF_CHECK(infer_at < 0, ValueError, op, ": only one dimension can be inferred (-1), got ", shape_str(size));
      infer_at = int64_t(i);
    } else {
      MF_CHECK(out[i] >= 0, ValueError, op, ": invalid shape dimension ", out[i], " in ", shape_str(size));
      known = checked_mul(known, out[i], op, "the number of elements of the shape");
    }
  }
  if (infer_at >= 0) {
    MF_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": shape ", shape_str(size),
             " is invalid for input of size ", numel);
    out[size_t(infer_at)] = numel / known;
  } else {
    MF_CHECK(known == numel, ShapeError, op, ": shape ", shape_str(size), " is invalid for input of size ", numel);
  }
  return out;
}

// Strides that view `t` as `size` without copying, if they exist
// (PyTorch's computeStride): each run of merged old dims must map onto a
// run of new dims.
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& size) {
  Shape strides(size.size());
  if (old_sizes.empty()) {
    std::fill(strides.begin(), strides.end(), 1);
    return strides;
  }
  int64_t numel = shape_numel(old_sizes);
  if (numel == 0) return contiguous_strides(size);
  int64_t view_d = int64_t(size.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    if (d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || size[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= size[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

Tensor reshape_grad(const BackwardContext& ctx) { return reshape(ctx.grad_outputs[0], ctx.input_metas[0].sizes); }

// SBP rules (Note [SBP signatures]). view(size): a split dim stays split
// where the output has a dim that starts at the same offset (the product of
// the dims before it) and either has the same size, or merges this dim with
// the ones after it, or is the first of the dims this one unfolds into, when
// the split divides evenly (each rank's part then stays one balanced block,
// as when linear folds (N, T, E) into (N * T, E) and back).
std::vector<SbpSignature> view_sbp(const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t parts) {
  const Shape& from = in[0].shape();
  const Shape& to = outs[0];
  std::vector<SbpSignature> sigs;
  // An empty tensor has nothing to split (and a 0 size would divide below).
  if (std::find(from.begin(), from.end(), 0) != from.end() || std::find(to.begin(), to.end(), 0) != to.end()) {
    sigs.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
    return sigs;
  }
  int64_t before_in = 1;
  for (size_t d = 0; d < from.size(); ++d) {
    int64_t before_out = 1;
    for (size_t e = 0; e < to.size(); ++e) {
      if (before_out == before_in && from[d] > 1) {
        int64_t merged = 1;
        size_t last = d;
        while (last < from.size() && merged * from[last] <= to[e] && to[e] % (merged * from[last]) == 0) {
          merged *= from[last++];
          if (merged == to[e]) break;
        }
        int64_t unfolded = 1;
        for (size_t f = e; f < to.size() && unfolded < from[d]; ++f) unfolded *= to[f];
        const bool same = to[e] == from[d];
        const bool merges = last > d && merged == to[e] && from[d] % parts == 0;
        const bool unfolds = unfolded == from[d] && to[e] % parts == 0;
        if (same || merges || unfolds) sigs.push_back({{Sbp::split(int64_t(d))}, {Sbp::split(int64_t(e))}});
        break;
      }
      before_out *= to[e];
    }
    before_in *= from[d];
  }
  sigs.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return sigs;
}

// permute(dims): a split follows its dim.
std::vector<SbpSignature> permute_sbp(const TensorList& in, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
  const Shape& perm = attrs.get_shape("dims");
  std::vector<SbpSignature> sigs;
  for (size_t out_d = 0; out_d < perm.size(); ++out_d) {
    const int64_t d = perm[out_d] < 0 ? perm[out_d] + in[0].dim() : perm[out_d];
    sigs.push_back({{Sbp::split(d)}, {Sbp::split(int64_t(out_d))}});
  }
  sigs.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return sigs;
}

// expand(size): dims that are not expanded keep their split; a partial sum
// stays one (each rank expands its part).
std::vector<SbpSignature> expand_sbp(const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t) {
  const Tensor& x = in[0];
  const int64_t nd = int64_t(outs[0].size());
  std::vector<SbpSignature> sigs;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t e = d + (nd - x.dim());
    if (x.size(d) == outs[0][size_t(e)] && x.size(d) > 1) sigs.push_back({{Sbp::split(d)}, {Sbp::split(e)}});
  }
  sigs.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return sigs;
}

MF_REGISTER_OP(OpDef{
    .name = "view",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{{infer_size(attrs.get_shape("size"), in[0].numel(), "view"), in[0].dtype(), in[0].device()}};
    },
    .view = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& t = in[0];
      Shape size = infer_size(attrs.get_shape("size"), t.numel(), "view");
      auto strides = view_strides(t.sizes(), t.strides(), size);
      MF_CHECK(strides.has_value(), Error, "view: view size ", shape_str(size), " is not compatible with input ",
               "tensor's size ", shape_str(t.sizes()), " and stride ", shape_str(t.strides()),
               " (at least one dimension spans across two contiguous subspaces); use reshape instead");
      return TensorList{make_view(t, size, *strides, t.storage_offset())};
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{reshape_grad(ctx)}; },
    .sbp = view_sbp,
    .output_shape_attr = "size",
});

MF_REGISTER_OP(OpDef{
    .name = "permute",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape& dims = attrs.get_shape("dims");
      MF_CHECK(int64_t(dims.size()) == in[0].dim(), ShapeError, "permute: number of dims in dims (", dims.size(),
               ") doesn't match the tensor's number of dims (", in[0].dim(), ")");
      Shape size;
      for (int64_t d : dims) size.push_back(in[0].sizes()[wrap_dim(d, in[0].dim(), "permute")]);
      return std::vector<TensorMeta>{{size, in[0].dtype(), in[0].device()}};
    },
    .view = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& t = in[0];
      const Shape& dims = attrs.get_shape("dims");
      MF_CHECK(int64_t(dims.size()) == t.dim(), ShapeError, "permute: number of dims in dims (", dims.size(),
               ") doesn't match the tensor's number of dims (", t.dim(), ")");
      Shape size(dims.size()), stride(dims.size());
      std::vector<bool> seen(dims.size(), false);
      for (size_t i = 0; i < dims.size(); ++i) {
        int64_t d = wrap_dim(dims[i], t.dim(), "permute");
        MF_CHECK(!seen[size_t(d)], ValueError, "permute: repeated dim ", d, " in ", shape_str(dims));
        seen[size_t(d)] = true;
        size[i] = t.sizes()[d];
        stride[i] = t.strides()[d];
      }
      return TensorList{make_view(t, size, stride, t.storage_offset())};
    },
    .backward = [](const BackwardContext& ctx) {
      const Shape& dims = ctx.attrs.get_shape("dims");
      int64_t n = int64_t(dims.size());
      Shape inverse(dims.size());
      for (int64_t i = 0; i < n; ++i) inverse[size_t(wrap_dim(dims[i], n, "permute"))] = i;
      return TensorList{permute(ctx.grad_outputs[0], inverse)};
    },
    .sbp = permute_sbp,
});

MF_REGISTER_OP(OpDef{
    .name = "expand",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{{attrs.get_shape("size"), in[0].dtype(), in[0].device()}};
    },
    .view = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& t = in[0];
      const Shape& want = attrs.get_shape("size");
      const int64_t nd = int64_t(want.size()), lead = nd - t.dim();
      MF_CHECK(lead >= 0, ShapeError, "expand: the number of sizes provided (", nd,
               ") must be greater or equal to the number of dimensions in the tensor (", t.dim(), ")");
      Shape size(want.size()), stride(want.size());
      for (int64_t i = 0; i < nd; ++i) {
        if (i < lead) {
          MF_CHECK(want[i] >= 0, ValueError, "expand: -1 is not allowed in a leading, non-existing dimension ", i);
          size[i] = want[i];
          stride[i] = 0;
          continue;
        }
        int64_t have = t.sizes()[i - lead];
        int64_t w = want[i] == -1 ? have : want[i];
        MF_CHECK(have == w || have == 1, ShapeError, "expand: the expanded size of the tensor (", w,
                 ") must match the existing size (", have, ") at non-singleton dimension ", i,
                 "; target sizes ", shape_str(want), ", tensor sizes ", shape_str(t.sizes()));
        size[i] = w;
        stride[i] = have == w ? t.strides()[i - lead] : 0;
      }
      return TensorList{make_view(t, size, stride, t.storage_offset())};
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{sum_to(ctx.grad_outputs[0], ctx.input_metas[0].sizes)};
    },
    .sbp = expand_sbp,
    .output_shape_attr = "size",
});

// Gradient of a strided slice: zeros with the slice filled from grad.
MF_REGISTER_OP(OpDef{
    .name = "slice_backward",
    .inputs = {"grad"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{{attrs.get_shape("input_sizes"), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Attrs& a = ctx.attrs;
      int64_t start = a.get_int("start"), step = a.get_int("step");
      int64_t len = ctx.input_metas[0].sizes[size_t(a.get_int("dim"))];
      return TensorList{slice(ctx.grad_outputs[0], a.get_int("dim"), start, start + len * step, step)};
    },
    .sbp = sbp::independent_of_attr("dim"),
    .output_shape_attr = "input_sizes",
});

MF_REGISTER_OP(OpDef{
    .name = "slice",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      Shape size = in[0].sizes();
      size[size_t(attrs.get_int("dim"))] = attrs.get_int("length");
      return std::vector<TensorMeta>{{size, in[0].dtype(), in[0].device()}};
    },
    .view = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& t = in[0];
      int64_t dim = attrs.get_int("dim"), start = attrs.get_int("start"), step = attrs.get_int("step");
      Shape size = t.sizes(), stride = t.strides();
      size[size_t(dim)] = attrs.get_int("length");
      // A step past the end leaves one element, whose stride is never used.
      if (size[size_t(dim)] > 1) stride[size_t(dim)] = checked_mul(stride[size_t(dim)], step, "slice", "the stride");
      return TensorList{make_view(t, size, stride, t.storage_offset() + start * t.strides()[size_t(dim)])};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("slice_backward");
      const Attrs& a = ctx.attrs;
      return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0]},
                                            {{"input_sizes", ctx.input_metas[0].sizes}, {"dim", a.get_int("dim")},
                                             {"start", a.get_int("start")}, {"step", a.get_int("step")}})};
    },
    .sbp = sbp::independent_of_attr("dim"),
});

}  // namespace

Tensor view(const Tensor& t, const Shape& size) {
  static const OpDef& op = dispatch::op("view");
  return dispatch::apply_one(op, {t}, {{"size", size}});
}

Tensor reshape(const Tensor& t, const Shape& size) {
  Shape resolved = infer_size(size, t.numel(), "reshape");
  if (resolved == t.sizes()) return t;
  if (view_strides(t.sizes(), t.strides(), resolved)) return view(t, resolved);
  return view(clone(t), resolved);
}

Tensor permute(const Tensor& t, const Shape& dims) {
  static const OpDef& op = dispatch::op("permute");
  return dispatch::apply_one(op, {t}, {{"dims", dims}});
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  if (t.dim() == 0) {
    wrap_dim(dim0, 0, "transpose");
    wrap_dim(dim1, 0, "transpose");
    return t;
  }
  int64_t a = wrap_dim(dim0, t.dim(), "transpose"), b = wrap_dim(dim1, t.dim(), "transpose");
  Shape dims(size_t(t.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[size_t(a)], dims[size_t(b)]);
  return permute(t, dims);
}

Tensor t(const Tensor& x) {
  MF_CHECK(x.dim() <= 2, ShapeError, "t: expects a tensor with <= 2 dimensions, but self is ", x.dim(), "D");
  return x.dim() < 2 ? x : transpose(x, 0, 1);
}

Tensor expand(const Tensor& t, const Shape& size) {
  if (size == t.sizes()) return t;
  static const OpDef& op = dispatch::op("expand");
  return dispatch::apply_one(op, {t}, {{"size", size}});
}
Tensor expand_as(const Tensor& t, const Tensor& other) { return expand(t, other.sizes()); }
Tensor broadcast_to(const Tensor& t, const Shape& size) { return expand(t, size); }

Tensor slice(const Tensor& t, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  MF_CHECK(t.dim() > 0, IndexError, "slice: cannot slice a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "slice");
  MF_CHECK(step > 0, ValueError, "slice: step must be positive, got ", step);
  int64_t n = t.sizes()[size_t(d)];
  int64_t s = start.value_or(0), e = end.value_or(n);
  if (s < 0) s += n;
  if (e < 0) e += n;
  s = std::clamp<int64_t>(s, 0, n);
  e = std::clamp<int64_t>(e, s, n);
  int64_t length = (e - s + step - 1) / step;
  static const OpDef& op = dispatch::op("slice");
  return dispatch::apply_one(op, {t}, {{"dim", d}, {"start", s}, {"step", step}, {"length", length}});
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  MF_CHECK(t.dim() > 0, IndexError, "narrow: cannot narrow a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "narrow");
  int64_t n = t.sizes()[size_t(d)];
  MF_CHECK(start >= -n && start <= n, IndexError, "narrow: start (", start, ") is out of range for dimension ", d,
           " of size ", n);
  if (start < 0) start += n;
  MF_CHECK(length >= 0 && start + length <= n, IndexError, "narrow: start (", start, ") + length (", length,
           ") exceeds dimension size (", n, ")");
  return slice(t, d, start, start + length, 1);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  MF_CHECK(t.dim() > 0, IndexError, "select: cannot select on a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "select");
  int64_t n = t.sizes()[size_t(d)];
  MF_CHECK(index >= -n && index < n, IndexError, "select: index ", index, " is out of bounds for dimension ", d,
           " with size ", n);
  if (index < 0) index += n;
  return squeeze(slice(t, d, index, index + 1, 1), d);
}

Tensor squeeze(const Tensor& t, std::optional<int64_t> dim) {
  Shape size;
  if (dim) {
    if (t.dim() == 0) {
      wrap_dim(*dim, 0, "squeeze");
      return t;
    }
    int64_t d = wrap_dim(*dim, t.dim(), "squeeze");
    if (t.sizes()[size_t(d)] != 1) return t;
    size = t.sizes();
    size.erase(size.begin() + d);
  } else {
    for (int64_t s : t.sizes())
      if (s != 1) size.push_back(s);
    if (int64_t(size.size()) == t.dim()) return t;
  }
  return view(t, size);
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  int64_t d = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape size = t.sizes();
  size.insert(size.begin() + d, 1);
  return view(t, size);
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  if (t.dim() == 0) return reshape(t, {1});
  int64_t s = wrap_dim(start_dim, t.dim(), "flatten"), e = wrap_dim(end_dim, t.dim(), "flatten");
  MF_CHECK(s <= e, ValueError, "flatten: start_dim (", s, ") cannot come after end_dim (", e, ")");
  if (s == e) return t;
  Shape size(t.sizes().begin(), t.sizes().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n = checked_mul(n, t.sizes()[size_t(d)], "flatten", "the flattened size");
  size.push_back(n);
  size.insert(size.end(), t.sizes().begin() + e + 1, t.sizes().end());
  return reshape(t, size);
}

Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes) {
  MF_CHECK(t.dim() > 0, IndexError, "unflatten: dimension specified as ", dim, " but tensor has no dimensions");
  int64_t d = wrap_dim(dim, t.dim(), "unflatten");
  Shape inner = infer_size(sizes, t.sizes()[size_t(d)], "unflatten");
  Shape size(t.sizes().begin(), t.sizes().begin() + d);
  size.insert(size.end(), inner.begin(), inner.end());
  size.insert(size.end(), t.sizes().begin() + d + 1, t.sizes().end());
  return view(t, size);
}

}  // namespace mf
