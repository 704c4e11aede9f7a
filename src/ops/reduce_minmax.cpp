// Extremum reductions: amax, amin, max/min (over all, or over a dim with
// indices), argmax, argmin. NaN propagates: it beats every number, and the
// index of the first NaN is reported, as in PyTorch.
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "ops/reduce_common.h"

namespace mf {

using namespace reduce_detail;

namespace {

// --- amax / amin / max() / min() ------------------------------------------------------

std::vector<TensorMeta> infer_extremum(const char* name, const TensorList& in, const Attrs& attrs) {
  const Shape& raw = attrs.get_shape("dims");
  Shape dims = normalize_dims(raw, in[0].dim(), name);
  check_reduction_has_identity(name, in[0].sizes(), dims, !raw.empty());
  return infer_reduction(name, in[0], attrs, in[0].dtype());
}

// The gradient of an extremum is split evenly among the elements equal to
// it (NaN counting as equal to a NaN result), like PyTorch's amax/amin.
Tensor extremum_backward(const Tensor& grad, const Tensor& x, const Tensor& result, const Shape& dims, bool keepdim) {
  Tensor r = unsqueeze_reduced(result, dims, keepdim);
  Tensor selected = logical_or(eq(x, r), logical_and(isnan(x), isnan(r)));
  Tensor count = sum(selected, dims, true);
  return where(selected, div(unsqueeze_reduced(grad, dims, keepdim), count), Scalar(0.0));
}

template <bool kMax>
OpDef extremum_op(const char* name) {
  return OpDef{
      .name = name,
      .inputs = {"input"},
      .infer = [name](const TensorList& in, const Attrs& attrs) { return infer_extremum(name, in, attrs); },
      .backward = [name](const BackwardContext& ctx) {
        const Tensor& x = ctx.inputs[0];
        Shape dims = normalize_dims(ctx.attrs.get_shape("dims"), x.dim(), name);
        return TensorList{extremum_backward(ctx.grad_outputs[0], x, ctx.outputs[0], dims, ctx.attrs.get_bool("keepdim"))};
      },
      .save_inputs = 0b1,
      .save_outputs = 0b1,
      .sbp = sbp::reduce(false, false),
  };
}

MF_REGISTER_OP(extremum_op<true>("amax"));
MF_REGISTER_OP(extremum_op<false>("amin"));
// max() and min() over all elements: amax/amin under PyTorch's names.
MF_REGISTER_OP(extremum_op<true>("max"));
MF_REGISTER_OP(extremum_op<false>("min"));

// --- max / min over a dim, argmax / argmin ------------------------------------------

std::vector<TensorMeta> infer_dim_extremum(const char* name, const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), name);
  const Shape dims = x.dim() == 0 ? Shape{} : Shape{dim};
  check_reduction_has_identity(name, x.sizes(), dims, true);
  Shape shape = reduced_shape(x.sizes(), dims, attrs.get_bool("keepdim"));
  return {{shape, x.dtype(), x.device()}, {shape, DType::Int64, x.device()}};
}

// max/min over a dim: the gradient goes to the selected index only.
Tensor dim_extremum_backward(const Tensor& grad, const Tensor& indices, const TensorMeta& input, int64_t dim,
                             bool keepdim) {
  if (input.sizes.empty()) return reshape(grad, {});
  const int64_t n = input.sizes[size_t(dim)];
  Shape line(input.sizes.size(), 1);
  line[size_t(dim)] = n;
  Tensor positions = reshape(arange(n, DType::Int64, input.device), line);
  Tensor selected = eq(unsqueeze_reduced(indices, {dim}, keepdim), positions);
  return where(selected, unsqueeze_reduced(grad, {dim}, keepdim), Scalar(0.0));
}

// max/min over a dim: op "max_dim" reports errors as "max".
template <bool kMax>
OpDef dim_extremum_op(const char* name, const char* error_name) {
  return OpDef{
      .name = name,
      .inputs = {"input"},
      .infer = [error_name](const TensorList& in, const Attrs& attrs) {
        return infer_dim_extremum(error_name, in, attrs);
      },
      .backward = [error_name](const BackwardContext& ctx) {
        const TensorMeta& m = ctx.input_metas[0];
        const int64_t dim = wrap_dim(ctx.attrs.get_int("dim"), int64_t(m.sizes.size()), error_name);
        return TensorList{
            dim_extremum_backward(ctx.grad_outputs[0], ctx.outputs[1], m, dim, ctx.attrs.get_bool("keepdim"))};
      },
      .save_outputs = 0b10,
      .sbp = sbp::reduce(false, false),
  };
}

MF_REGISTER_OP(dim_extremum_op<true>("max_dim", "max"));
MF_REGISTER_OP(dim_extremum_op<false>("min_dim", "min"));

// argmax/argmin: attr "dims" holds the dim, or nothing for the flattened input.
std::vector<TensorMeta> infer_arg(const char* name, const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[0];
  MF_CHECK(x.dtype() != DType::Bool, TypeError, name, ": not implemented for bool tensors");
  const Shape& raw = attrs.get_shape("dims");
  Shape dims = normalize_dims(raw, x.dim(), name);
  // Unlike max(), PyTorch raises IndexError here.
  MF_CHECK(!raw.empty() || x.numel() != 0, IndexError, name,
           "(): Expected reduction dim to be specified for input.numel() == 0.");
  check_reduction_has_identity(name, x.sizes(), dims, !raw.empty());
  return {{reduced_shape(x.sizes(), dims, attrs.get_bool("keepdim")), DType::Int64, x.device()}};
}

template <bool kMax>
OpDef arg_op(const char* name) {
  return OpDef{
      .name = name,
      .inputs = {"input"},
      .infer = [name](const TensorList& in, const Attrs& attrs) { return infer_arg(name, in, attrs); },
      .differentiable = false,
      .sbp = sbp::reduce(false, false),
  };
}

MF_REGISTER_OP(arg_op<true>("argmax"));
MF_REGISTER_OP(arg_op<false>("argmin"));

Tensor apply_extremum(const OpDef& op, const Tensor& t, const Shape& dims, bool keepdim) {
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"keepdim", keepdim}});
}

ValuesIndices apply_dim_extremum(const OpDef& op, const Tensor& t, int64_t dim, bool keepdim) {
  TensorList out = dispatch::apply(op, {t}, {{"dim", dim}, {"keepdim", keepdim}});
  return {out[0], out[1]};
}

Shape optional_dim(std::optional<int64_t> dim) { return dim ? Shape{*dim} : Shape{}; }

}  // namespace

Tensor max(const Tensor& t) {
  static const OpDef& op = dispatch::op("max");
  return apply_extremum(op, t, {}, false);
}
Tensor min(const Tensor& t) {
  static const OpDef& op = dispatch::op("min");
  return apply_extremum(op, t, {}, false);
}
Tensor amax(const Tensor& t, const Shape& dims, bool keepdim) {
  static const OpDef& op = dispatch::op("amax");
  return apply_extremum(op, t, dims, keepdim);
}
Tensor amin(const Tensor& t, const Shape& dims, bool keepdim) {
  static const OpDef& op = dispatch::op("amin");
  return apply_extremum(op, t, dims, keepdim);
}
ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim) {
  static const OpDef& op = dispatch::op("max_dim");
  return apply_dim_extremum(op, t, dim, keepdim);
}
ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim) {
  static const OpDef& op = dispatch::op("min_dim");
  return apply_dim_extremum(op, t, dim, keepdim);
}
Tensor argmax(const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
  static const OpDef& op = dispatch::op("argmax");
  return apply_extremum(op, t, optional_dim(dim), keepdim);
}
Tensor argmin(const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
  static const OpDef& op = dispatch::op("argmin");
  return apply_extremum(op, t, optional_dim(dim), keepdim);
}

}  // namespace mf
