// Sorting along a dim: sort (stable), argsort, topk. NaN orders above every
// number, as in PyTorch; equal values keep their input order, so results are
// deterministic. Backward scatters the gradient to the returned indices.
// CPU kernels: backend/cpu/kernels/sort.cpp.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

Shape with_size(Shape s, int64_t dim, int64_t size) {
  s[size_t(dim)] = size;
  return s;
}

// Gradient of values taken at `indices` along dim from a tensor of `sizes`.
Tensor scatter_to_indices(const BackwardContext& ctx) {
  const auto& m = ctx.input_metas[0];
  return scatter(zeros(m.sizes, {.dtype = ctx.grad_outputs[0].dtype(), .device = m.device}), ctx.attrs.get_int("dim"),
                 ctx.outputs[1], ctx.grad_outputs[0]);
}

MF_REGISTER_OP(OpDef{
    .name = "sort",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      wrap_dim(attrs.get_int("dim"), in[0].dim(), "sort");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()},
                                     {in[0].sizes(), DType::Int64, in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{scatter_to_indices(ctx)}; },
    .save_outputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

MF_REGISTER_OP(OpDef{
    .name = "topk",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "topk");
      const int64_t k = attrs.get_int("k"), n = in[0].sizes()[size_t(dim)];
      MF_CHECK(k >= 0 && k <= n, IndexError, "topk: selected index k (", k, ") is out of range for dimension ", dim,
               " of size ", n);
      Shape size = with_size(in[0].sizes(), dim, k);
      return std::vector<TensorMeta>{{size, in[0].dtype(), in[0].device()}, {size, DType::Int64, in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{scatter_to_indices(ctx)}; },
    .save_outputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

ValuesIndices as_pair(TensorList outs) { return {std::move(outs[0]), std::move(outs[1])}; }

}  // namespace

ValuesIndices sort(const Tensor& t, int64_t dim, bool descending) {
  static const OpDef& op = dispatch::op("sort");
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "sort");
    auto r = as_pair(dispatch::apply(op, {reshape(t, {1})}, {{"dim", 0}, {"descending", descending}}));
    return {reshape(r.values, {}), reshape(r.indices, {})};
  }
  return as_pair(dispatch::apply(op, {t}, {{"dim", wrap_dim(dim, t.dim(), "sort")}, {"descending", descending}}));
}

Tensor argsort(const Tensor& t, int64_t dim, bool descending) { return sort(t, dim, descending).indices; }

ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
  static const OpDef& op = dispatch::op("topk");
  Attrs attrs{{"k", k}, {"dim", 0}, {"largest", largest}, {"sorted", sorted}};
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "topk");
    auto r = as_pair(dispatch::apply(op, {reshape(t, {1})}, attrs));
    if (k == 0) return r;
    return {reshape(r.values, {}), reshape(r.indices, {})};
  }
  attrs.set("dim", wrap_dim(dim, t.dim(), "topk"));
  return as_pair(dispatch::apply(op, {t}, attrs));
}

}  // namespace mf
