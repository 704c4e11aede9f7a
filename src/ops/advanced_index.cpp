// t[indices] and t[indices] = value with NumPy/PyTorch semantics: ints,
// slices, None, Ellipsis, integer index tensors and bool masks.
//
// Note [Index plan]: the basic part of an index (ints, slices, None,
// Ellipsis) is a strided view of t: view dim j reads t's dim src_dims[j]
// (-1: a new axis of size 1) with step steps[j], and every dim d of t starts
// at element starts[d] (an int fixes starts[d] and leaves no view dim). Ints
// are applied first, as PyTorch does (NumPy instead counts them as advanced
// indices when deciding adjacency). Tensor indices index view dims
// [num_pre, num_pre + k); the view dims are ordered so the result is
// pre + B + post (Note [Rows layout]), which folds in PyTorch's rule that
// non-adjacent advanced indices move their dims to the front. The plan is in
// logical coordinates, so the same attrs apply to t and to its gradient.
// The CPU kernels: backend/cpu/kernels/index_kernels.cpp.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "backend/common/index_plan.h"

namespace mf {
namespace {

using index_plan::IndexPlan;
using index_plan::plan_view;
using index_plan::result_shape;
using index_plan::rows_shape_of;

TensorList tail(const TensorList& in, size_t from) { return TensorList(in.begin() + int64_t(from), in.end()); }

// Inputs that are index tensors: bits 2..31 (index_put) or 1..31 (index).
constexpr uint32_t kIndexInputsFrom1 = ~uint32_t(1);
constexpr uint32_t kIndexInputsFrom2 = ~uint32_t(3);

Tensor put_with_plan(const Tensor& self, const Attrs& plan_attrs, const Tensor& value, const TensorList& idx,
                     bool accumulate);
Tensor gather_with_plan(const Tensor& x, const Attrs& plan_attrs, const TensorList& idx);

MF_REGISTER_OP(OpDef{
    .name = "index_view",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{{plan_view(in[0], IndexPlan::from(attrs)).sizes(), in[0].dtype(), in[0].device()}};
    },
    .view = [](const TensorList& in, const Attrs& attrs) { return TensorList{plan_view(in[0], IndexPlan::from(attrs))}; },
    .backward = [](const BackwardContext& ctx) {
      const auto& m = ctx.input_metas[0];
      return TensorList{
          put_with_plan(zeros(m.sizes, {.dtype = m.dtype, .device = m.device}), ctx.attrs, ctx.grad_outputs[0], {}, false)};
    },
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "index",
    .inputs = {"input", "indices"},
    .variadic = true,
    .infer = [](const TensorList& in, const Attrs& attrs) {
      IndexPlan p = IndexPlan::from(attrs);
      plan_view(in[0], p);
      TensorList idx = tail(in, 1);
      return std::vector<TensorMeta>{
          {result_shape(p, rows_shape_of(idx, "index"), int64_t(idx.size())), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const auto& m = ctx.input_metas[0];
      TensorList grads(ctx.input_metas.size());
      grads[0] = put_with_plan(zeros(m.sizes, {.dtype = m.dtype, .device = m.device}), ctx.attrs, ctx.grad_outputs[0],
                               tail(ctx.inputs, 1), true);
      return grads;
    },
    .save_inputs = kIndexInputsFrom1,
    .sbp = sbp::broadcast_only(),
});

// index_put(self, value, indices...): self[plan, indices] = value (+= with
// accumulate); in place, or into a copy of self.
MF_REGISTER_OP(OpDef{
    .name = "index_put",
    .inputs = {"self", "value", "indices"},
    .variadic = true,
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in.size() >= 2, Error, "index_put: expected self and value");
      IndexPlan p = IndexPlan::from(attrs);
      plan_view(in[0], p);
      TensorList idx = tail(in, 2);
      Shape result = result_shape(p, rows_shape_of(idx, "index_put_"), int64_t(idx.size()));
      MF_CHECK(in[1].dtype() == in[0].dtype(), TypeError, "index_put_: value dtype ", dtype_name(in[1].dtype()),
               " must match self dtype ", dtype_name(in[0].dtype()));
      MF_CHECK(broadcast_shapes(in[1].sizes(), result, "index_put_") == result, ShapeError,
               "index_put_: shape mismatch: value tensor of shape ", shape_str(in[1].sizes()),
               " cannot be broadcast to indexing result of shape ", shape_str(result));
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      TensorList idx = tail(ctx.inputs, 2);
      TensorList grads(ctx.input_metas.size());
      if (ctx.needs_input_grad[0])
        grads[0] = ctx.attrs.get_bool("accumulate") ? g
                                                     : put_with_plan(g, ctx.attrs, scalar_tensor(0, g.dtype(), g.device()),
                                                                     idx, false);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(gather_with_plan(g, ctx.attrs, idx), ctx.input_metas[1].sizes);
      return grads;
    },
    .save_inputs = kIndexInputsFrom2,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

Attrs plan_only(const Attrs& attrs) { return IndexPlan::from(attrs).attrs(); }

Tensor put_with_plan(const Tensor& self, const Attrs& plan_attrs, const Tensor& value, const TensorList& idx,
                     bool accumulate) {
  static const OpDef& op = dispatch::op("index_put");
  TensorList in{self, to(value, self.dtype())};
  in.insert(in.end(), idx.begin(), idx.end());
  Attrs attrs = plan_only(plan_attrs);
  attrs.set("accumulate", accumulate);
  return dispatch::apply_one(op, in, attrs);
}

Tensor gather_with_plan(const Tensor& x, const Attrs& plan_attrs, const TensorList& idx) {
  if (idx.empty()) {
    static const OpDef& op = dispatch::op("index_view");
    return dispatch::apply_one(op, {x}, plan_only(plan_attrs));
  }
  static const OpDef& op = dispatch::op("index");
  TensorList in{x};
  in.insert(in.end(), idx.begin(), idx.end());
  return dispatch::apply_one(op, in, plan_only(plan_attrs));
}

// --- normalisation of a user index -------------------------------------------------

struct ViewDim {
  int64_t src, step, size;
  Tensor index;  // int64; undefined for basic dims
};

struct NormalizedIndex {
  IndexPlan plan;
  TensorList indices;  // int64, each of shape rows_shape
  Shape rows_shape;
};

bool is_mask(const Tensor& t) { return t.dtype() == DType::Bool || t.dtype() == DType::UInt8; }

int64_t dims_consumed(const TensorIndex& index, const char* op) {
  if (std::holds_alternative<int64_t>(index) || std::holds_alternative<Slice>(index)) return 1;
  const Tensor* t = std::get_if<Tensor>(&index);
  if (!t) return 0;
  MF_CHECK(t->defined(), IndexError, op, ": an index tensor is undefined");
  if (is_mask(*t)) return t->dim();
  MF_CHECK(is_integral(t->dtype()), IndexError, op,
           ": tensors used as indices must be long, int, byte or bool tensors, got ", dtype_name(t->dtype()));
  return 1;
}

std::string shapes_str(const std::vector<ViewDim>& dims) {
  std::string out;
  for (const auto& v : dims)
    if (v.index.defined()) out += (out.empty() ? "" : ", ") + shape_str(v.index.sizes());
  return out;
}

NormalizedIndex normalize_index(const Tensor& t, const std::vector<TensorIndex>& indices, const char* op) {
  int64_t consumed = 0, ellipses = 0;
  for (const auto& index : indices) {
    consumed += dims_consumed(index, op);
    ellipses += std::holds_alternative<Ellipsis>(index);
  }
  MF_CHECK(ellipses <= 1, IndexError, op, ": an index can only have a single ellipsis ('...')");
  MF_CHECK(consumed <= t.dim(), IndexError, op, ": too many indices for tensor of dimension ", t.dim(), " (got ",
           consumed, ")");
  const Shape& sizes = t.sizes();
  Shape starts(size_t(t.dim()), 0);
  std::vector<ViewDim> dims;
  int64_t d = 0;
  auto keep = [&](int64_t count) {
    for (int64_t c = 0; c < count; ++c, ++d) dims.push_back({d, 1, sizes[size_t(d)], {}});
  };
  for (size_t pos = 0; pos < indices.size(); ++pos) {
    const TensorIndex& index = indices[pos];
    if (const int64_t* i = std::get_if<int64_t>(&index)) {
      const int64_t n = sizes[size_t(d)];
      MF_CHECK(*i >= -n && *i < n, IndexError, op, ": index ", *i, " is out of bounds for dimension ", d,
               " with size ", n);
      starts[size_t(d++)] = *i < 0 ? *i + n : *i;
    } else if (const Slice* s = std::get_if<Slice>(&index)) {
      MF_CHECK(s->step > 0, ValueError, op, ": slice step must be positive, got ", s->step);
      const int64_t n = sizes[size_t(d)];
      int64_t lo = s->start.value_or(0), hi = s->stop.value_or(n);
      if (lo < 0) lo += n;
      if (hi < 0) hi += n;
      lo = std::clamp<int64_t>(lo, 0, n);
      hi = std::clamp<int64_t>(hi, lo, n);
      starts[size_t(d)] = lo;
      dims.push_back({d++, s->step, (hi - lo + s->step - 1) / s->step, {}});
    } else if (std::holds_alternative<NewAxis>(index)) {
      dims.push_back({-1, 0, 1, {}});
    } else if (std::holds_alternative<Ellipsis>(index)) {
      keep(t.dim() - consumed);
    } else {
      const Tensor& idx = std::get<Tensor>(index).detach();
      if (!is_mask(idx)) {
        dims.push_back({d, 1, sizes[size_t(d)], to(idx, DType::Int64)});
        ++d;
      } else if (idx.dim() == 0) {
        // A 0-d mask adds an axis of size 1, kept (true) or emptied (false).
        const bool keep_it = idx.item().to_bool();
        dims.push_back({-1, 0, 1, keep_it ? zeros({1}, {.dtype = DType::Int64, .device = idx.device()})
                                            : empty({0}, {.dtype = DType::Int64, .device = idx.device()})});
      } else {
        for (int64_t j = 0; j < idx.dim(); ++j)
          MF_CHECK(idx.sizes()[size_t(j)] == sizes[size_t(d + j)], IndexError, op, ": the shape of the mask ",
                   shape_str(idx.sizes()), " at index ", pos, " does not match the shape of the indexed tensor ",
                   shape_str(Shape(sizes.begin() + d, sizes.begin() + d + idx.dim())), " at index ", d);
        Tensor nz = nonzero(idx);  // (n, mask.dim())
        for (int64_t j = 0; j < idx.dim(); ++j, ++d) dims.push_back({d, 1, sizes[size_t(d)], select(nz, 1, j)});
      }
    }
  }
  keep(t.dim() - d);

  NormalizedIndex out;
  std::vector<size_t> advanced;
  for (size_t j = 0; j < dims.size(); ++j)
    if (dims[j].index.defined()) advanced.push_back(j);
  std::vector<ViewDim> ordered;
  if (advanced.empty()) {
    ordered = dims;
    out.plan.num_pre = int64_t(dims.size());
  } else {
    for (size_t j : advanced) {
      const Shape& s = dims[j].index.sizes();
      const size_t n = std::max(out.rows_shape.size(), s.size());
      Shape b(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t x = i + out.rows_shape.size() < n ? 1 : out.rows_shape[i + out.rows_shape.size() - n];
        const int64_t y = i + s.size() < n ? 1 : s[i + s.size() - n];
        MF_CHECK(x == y || x == 1 || y == 1, IndexError, op,
                 ": shape mismatch: indexing tensors could not be broadcast together with shapes ", shapes_str(dims));
        b[i] = x == 1 ? y : x;
      }
      out.rows_shape = b;
    }
    const bool adjacent = advanced.back() - advanced.front() + 1 == advanced.size();
    if (adjacent) {
      ordered = dims;
      out.plan.num_pre = int64_t(advanced.front());
    } else {
      for (size_t j : advanced) ordered.push_back(dims[j]);
      for (const auto& v : dims)
        if (!v.index.defined()) ordered.push_back(v);
    }
  }
  for (const auto& v : ordered) {
    out.plan.sizes.push_back(v.size);
    out.plan.src_dims.push_back(v.src);
    out.plan.steps.push_back(v.step);
    if (v.index.defined()) out.indices.push_back(expand(v.index, out.rows_shape));
  }
  out.plan.starts = starts;
  MF_CHECK(out.indices.size() + 2 <= 32, ValueError, op, ": at most 30 index tensors are supported, got ",
           out.indices.size());
  return out;
}

}  // namespace

Tensor index(const Tensor& t, const std::vector<TensorIndex>& indices) {
  // t[mask] with a mask of t's shape: one pass, without the mask's coordinates.
  if (indices.size() == 1)
    if (const Tensor* mask = std::get_if<Tensor>(&indices[0]);
        mask && mask->defined() && is_mask(*mask) && t.dim() > 0 && mask->sizes() == t.sizes())
      return masked_select(t, to(*mask, DType::Bool));
  NormalizedIndex n = normalize_index(t, indices, "index");
  return gather_with_plan(t, n.plan.attrs(), n.indices);
}

Tensor& index_put_(Tensor& t, const std::vector<TensorIndex>& indices, const Tensor& value, bool accumulate) {
  NormalizedIndex n = normalize_index(t, indices, "index_put_");
  for (int64_t d = 0; d < t.dim(); ++d)
    MF_CHECK(t.strides()[size_t(d)] != 0 || t.sizes()[size_t(d)] <= 1, Error,
             "index_put_: unsupported operation: more than one element of the written-to tensor refers to a single ",
             "memory location; clone() the tensor first");
  Tensor v = to(value, t.dtype());
  if (v.shares_storage(t)) v = clone(v);  // a value that aliases t must be read before t is written
  const Shape result = result_shape(n.plan, n.rows_shape, int64_t(n.indices.size()));
  while (v.dim() > int64_t(result.size()) && v.sizes()[0] == 1) v = squeeze(v, 0);
  static const OpDef& op = dispatch::op("index_put");
  TensorList in{t, v};
  in.insert(in.end(), n.indices.begin(), n.indices.end());
  Attrs attrs = n.plan.attrs();
  attrs.set("accumulate", accumulate);
  dispatch::apply_inplace(op, in, attrs);
  return t;
}

Tensor& index_put_(Tensor& t, const std::vector<TensorIndex>& indices, Scalar value) {
  return index_put_(t, indices, scalar_tensor(value, t.dtype(), t.device()), false);
}

}  // namespace mf
