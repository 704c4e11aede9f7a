// Sum-like reductions: sum, mean, prod, all, any, sum_to.
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/autocast.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "ops/reduce_common.h"

namespace mf {

using namespace reduce_detail;

namespace {

MF_REGISTER_OP(OpDef{
    .name = "sum",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return infer_reduction("sum", in[0], attrs, attrs.get_dtype("dtype"));
    },
    .backward = [](const BackwardContext& ctx) {
      const auto& m = ctx.input_metas[0];
      Shape dims = normalize_dims(ctx.attrs.get_shape("dims"), int64_t(m.sizes.size()), "sum");
      return TensorList{expand_reduced_grad(ctx.grad_outputs[0], m.sizes, dims, ctx.attrs.get_bool("keepdim"))};
    },
    .sbp = sbp::reduce(true, true),
});

MF_REGISTER_OP(OpDef{
    .name = "mean",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(is_floating(in[0].dtype()), TypeError, "mean: could not infer output dtype; input dtype must be ",
               "floating point, got ", dtype_name(in[0].dtype()));
      return infer_reduction("mean", in[0], attrs, in[0].dtype());
    },
    .backward = [](const BackwardContext& ctx) {
      const auto& m = ctx.input_metas[0];
      Shape dims = normalize_dims(ctx.attrs.get_shape("dims"), int64_t(m.sizes.size()), "mean");
      Tensor g = div(ctx.grad_outputs[0], Scalar(double(reduced_count(m.sizes, dims))));
      return TensorList{expand_reduced_grad(g, m.sizes, dims, ctx.attrs.get_bool("keepdim"))};
    },
    .sbp = sbp::reduce(false, true),
});

// Note [prod backward with zeros]: d prod / d x_i is the product of the
// other elements, computed from P, the product of the non-zero elements,
// and Z, the sum of the zero elements (0, but it carries their gradient):
//   no zero:        P / x_i
//   one zero:       P at the zero, Z * P / x_i elsewhere
//   two zeros:      (Z - x_i) * P at the zeros (the other zero times P), 0 elsewhere
//   three or more:  0
// Each case is the product of the others exactly to first order around the
// point, so the result is right for double backward too (PyTorch's formula
// loses the second derivative at zeros). `raw_dims` is the op's attr: {}
// (all) or {dim}.
Tensor prod_backward(const Tensor& grad, const Tensor& x, const Shape& raw_dims, bool keepdim) {
  const Shape dims = normalize_dims(raw_dims, x.dim(), "prod");
  Tensor is_zero = eq(x, 0);
  Tensor zeros_count = sum(is_zero, dims, true);
  Tensor nonzero_x = where(is_zero, Scalar(1.0), x);
  Tensor nonzero_prod = raw_dims.empty() ? reshape(prod(nonzero_x), Shape(size_t(x.dim()), 1))
                                         : prod(nonzero_x, raw_dims[0], true);
  Tensor zero_sum = sum(where(is_zero, x, Scalar(0.0)), dims, true);
  Tensor others = div(nonzero_prod, nonzero_x);
  Tensor at_nonzero =
      where(eq(zeros_count, 0), others, where(eq(zeros_count, 1), mul(zero_sum, others), Scalar(0.0)));
  Tensor at_zero = where(eq(zeros_count, 1), nonzero_prod,
                         where(eq(zeros_count, 2), mul(sub(zero_sum, x), nonzero_prod), Scalar(0.0)));
  return mul(unsqueeze_reduced(grad, dims, keepdim), where(is_zero, at_zero, at_nonzero));
}

MF_REGISTER_OP(OpDef{
    .name = "prod",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return infer_reduction("prod", in[0], attrs, attrs.get_dtype("dtype"));
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{prod_backward(ctx.grad_outputs[0], ctx.inputs[0], ctx.attrs.get_shape("dims"),
                                      ctx.attrs.get_bool("keepdim"))};
    },
    .save_inputs = 0b1,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::reduce(false, false),
});

// uint8 input gives uint8 output, everything else bool (as in PyTorch).
DType logical_out_dtype(DType d) { return d == DType::UInt8 ? DType::UInt8 : DType::Bool; }

MF_REGISTER_OP(OpDef{
    .name = "all",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return infer_reduction("all", in[0], attrs, logical_out_dtype(in[0].dtype()));
    },
    .differentiable = false,
    .sbp = sbp::reduce(false, false),
});

MF_REGISTER_OP(OpDef{
    .name = "any",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return infer_reduction("any", in[0], attrs, logical_out_dtype(in[0].dtype()));
    },
    .differentiable = false,
    .sbp = sbp::reduce(false, false),
});

Shape optional_dim(std::optional<int64_t> dim) { return dim ? Shape{*dim} : Shape{}; }

}  // namespace

Tensor sum(const Tensor& t, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  static const OpDef& op = dispatch::op("sum");
  DType out = dtype.value_or(is_floating(t.dtype()) ? t.dtype() : DType::Int64);
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"keepdim", keepdim}, {"dtype", out}});
}

// Note [Global means]: on a global tensor a mean is a sum divided by the
// count, so that a split reduced dim gives a partial sum (the mean op's
// kernel divides each shard by its own count, so its rule runs a reduced
// split broadcast: data parallelism would gather the whole batch for a
// mean loss). Losses with reduction "mean" do the same.
std::optional<double> global_mean_count(const Tensor& t, const Shape& dims) {
  if (!t.is_global() || !is_floating(t.dtype()) || t.numel() == 0) return std::nullopt;
  double count = 1;
  if (dims.empty()) return double(t.numel());
  std::vector<bool> seen(size_t(t.dim()), false);
  for (int64_t d : dims) {
    const int64_t n = d < 0 ? d + t.dim() : d;
    if (n < 0 || n >= t.dim() || seen[size_t(n)]) return std::nullopt;  // the mean op reports it
    seen[size_t(n)] = true;
    count *= double(t.size(n));
  }
  return count;
}

Tensor mean(const Tensor& t, const Shape& dims, bool keepdim) {
  static const OpDef& op = dispatch::op("mean");
  if (auto count = global_mean_count(t, dims)) return div(sum(t, dims, keepdim, std::nullopt), Scalar(*count));
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"keepdim", keepdim}});
}

Tensor prod(const Tensor& t_in, std::optional<int64_t> dim, bool keepdim) {
  static const OpDef& op = dispatch::op("prod");
  const Tensor t = autocast::cast_for(op, t_in);  // the output dtype follows the autocast input
  DType out = is_floating(t.dtype()) ? t.dtype() : DType::Int64;
  return dispatch::apply_one(op, {t}, {{"dims", optional_dim(dim)}, {"keepdim", keepdim}, {"dtype", out}});
}

Tensor all(const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
  static const OpDef& op = dispatch::op("all");
  return dispatch::apply_one(op, {t}, {{"dims", optional_dim(dim)}, {"keepdim", keepdim}});
}

Tensor any(const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
  static const OpDef& op = dispatch::op("any");
  return dispatch::apply_one(op, {t}, {{"dims", optional_dim(dim)}, {"keepdim", keepdim}});
}

Tensor sum_to(const Tensor& t, const Shape& size) {
  if (t.sizes() == size) return t;
  const int64_t lead = t.dim() - int64_t(size.size());
  MF_CHECK(lead >= 0, ShapeError, "sum_to: cannot sum shape ", shape_str(t.sizes()), " to ", shape_str(size));
  Shape dims;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < lead) dims.push_back(d);
    else if (size[d - lead] == 1 && t.sizes()[d] != 1) dims.push_back(d);
    else
      MF_CHECK(size[d - lead] == t.sizes()[d], ShapeError, "sum_to: cannot sum shape ", shape_str(t.sizes()),
               " to ", shape_str(size));
  }
  if (dims.empty()) return reshape(t, size);
  return reshape(sum(t, dims, true), size);
}

}  // namespace mf
