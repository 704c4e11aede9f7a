// Indexing along one dim: index_select, index_add, gather, scatter,
// scatter_add, scatter_reduce. CPU kernels: backend/cpu/kernels/index_kernels.cpp.
#include <vector>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "ops/index_common.h"

namespace mf {
namespace {

using index_detail::Reduce;
using index_detail::reduce_of;

Tensor as_index(const Tensor& index, const char* op) {
  MF_CHECK(index.defined(), Error, op, ": index is undefined");
  MF_CHECK(is_integral(index.dtype()), TypeError, op, ": expected an integer index tensor, got ",
           dtype_name(index.dtype()));
  return to(index.detach(), DType::Int64);
}

Shape with_size(Shape s, int64_t dim, int64_t size) {
  s[size_t(dim)] = size;
  return s;
}

// --- index_select / index_add -----------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "index_select",
    .inputs = {"input", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in[1].dim() == 1 && in[1].dtype() == DType::Int64, ShapeError,
               "index_select: the op takes a 1-d int64 index");
      int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "index_select");
      MF_CHECK(in[0].dim() > 0, ShapeError, "index_select: the op takes a tensor with at least 1 dim");
      return std::vector<TensorMeta>{{with_size(in[0].sizes(), dim, in[1].numel()), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const auto& m = ctx.input_metas[0];
      int64_t dim = ctx.attrs.get_int("dim");
      return TensorList{index_add(zeros(m.sizes, {.dtype = m.dtype, .device = m.device}), dim, ctx.inputs[1],
                                  ctx.grad_outputs[0]),
                        Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

MF_REGISTER_OP(OpDef{
    .name = "index_add",
    .inputs = {"self", "index", "source"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Tensor &self = in[0], &index = in[1], &src = in[2];
      MF_CHECK(index.dim() == 1 && index.dtype() == DType::Int64, ShapeError, "index_add: the op takes a 1-d int64 index");
      MF_CHECK(self.dim() > 0, ShapeError, "index_add: the op takes a tensor with at least 1 dim");
      int64_t dim = wrap_dim(attrs.get_int("dim"), self.dim(), "index_add");
      MF_CHECK(src.dtype() == self.dtype(), TypeError, "index_add: self (", dtype_name(self.dtype()), ") and source (",
               dtype_name(src.dtype()), ") must have the same dtype");
      Shape want = with_size(self.sizes(), dim, index.numel());
      MF_CHECK(src.sizes() == want, ShapeError, "index_add: source of shape ", shape_str(src.sizes()),
               " must have shape ", shape_str(want), " (self's shape with dim ", dim, " set to the index length)");
      return std::vector<TensorMeta>{{self.sizes(), self.dtype(), self.device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      TensorList grads(3);
      const Tensor& g = ctx.grad_outputs[0];
      if (ctx.needs_input_grad[0]) grads[0] = g;
      if (ctx.needs_input_grad[2]) grads[2] = index_select(g, ctx.attrs.get_int("dim"), ctx.inputs[1]);
      return grads;
    },
    .save_inputs = 0b010,
    .sbp = sbp::broadcast_only(),
});

// 0-d tensors index like 1-d tensors of one element.
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? reshape(t, {1}) : t; }

// --- gather / scatter ---------------------------------------------------------------

// gather/scatter shape rules: index has t's number of dims, and
// index.size(d) <= t.size(d) for d != dim (<= src.size(d) for every d).
void check_scatter_gather(const char* op, const Tensor& t, int64_t dim, const Tensor& index, const Tensor* src) {
  MF_CHECK(index.dtype() == DType::Int64, TypeError, op, ": expected an int64 index, got ", dtype_name(index.dtype()));
  MF_CHECK(index.dim() == t.dim(), ShapeError, op, ": index tensor must have the same number of dimensions as the ",
           "input tensor (", index.dim(), " vs ", t.dim(), ")");
  if (src)
    MF_CHECK(src->dim() == index.dim(), ShapeError, op, ": index tensor must have the same number of dimensions as ",
             "the src tensor (", index.dim(), " vs ", src->dim(), ")");
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t n = index.sizes()[size_t(d)];
    MF_CHECK(d == dim || n <= t.sizes()[size_t(d)], ShapeError, op, ": size of index ", shape_str(index.sizes()),
             " exceeds the input size ", shape_str(t.sizes()), " at dimension ", d, " (other than dim ", dim, ")");
    if (src)
      MF_CHECK(n <= src->sizes()[size_t(d)], ShapeError, op, ": size of index ", shape_str(index.sizes()),
               " exceeds the source size ", shape_str(src->sizes()), " at dimension ", d);
  }
  if (src)
    MF_CHECK(src->dtype() == t.dtype(), TypeError, op, ": self (", dtype_name(t.dtype()), ") and src (",
             dtype_name(src->dtype()), ") must have the same dtype");
}

MF_REGISTER_OP(OpDef{
    .name = "gather",
    .inputs = {"input", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "gather");
      check_scatter_gather("gather", in[0], dim, in[1], nullptr);
      return std::vector<TensorMeta>{{in[1].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("gather_backward");
      return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0], ctx.inputs[1]},
                                            {{"dim", ctx.attrs.get_int("dim")}, {"input_sizes", ctx.input_metas[0].sizes}}),
                        Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

// The gradient of gather: zeros of the input's shape, grad added at index.
// (scatter_add into zeros, without reading a tensor of zeros.)
MF_REGISTER_OP(OpDef{
    .name = "gather_backward",
    .inputs = {"grad", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape& sizes = attrs.get_shape("input_sizes");
      Tensor input = make_meta(sizes, in[0].dtype(), in[0].device());
      const int64_t dim = wrap_dim(attrs.get_int("dim"), input.dim(), "gather_backward");
      check_scatter_gather("gather_backward", input, dim, in[1], &in[0]);
      return std::vector<TensorMeta>{{sizes, in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{gather(ctx.grad_outputs[0], ctx.attrs.get_int("dim"), ctx.inputs[1]), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
    .output_shape_attr = "input_sizes",
});

// The gradient of src: grad gathered at index, zero where src is not read.
Tensor scatter_src_grad(const Tensor& grad, int64_t dim, const Tensor& index, const Shape& src_sizes) {
  Tensor g = gather(grad, dim, index);
  if (g.sizes() == src_sizes) return g;
  Shape pads;
  for (int64_t d = int64_t(src_sizes.size()) - 1; d >= 0; --d) {
    pads.push_back(0);
    pads.push_back(src_sizes[size_t(d)] - g.sizes()[size_t(d)]);
  }
  return pad(g, pads);
}

std::vector<TensorMeta> infer_scatter(const char* op, const TensorList& in, const Attrs& attrs) {
  int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), op);
  check_scatter_gather(op, in[0], dim, in[1], in.size() > 2 ? &in[2] : nullptr);
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

MF_REGISTER_OP(OpDef{
    .name = "scatter",
    .inputs = {"self", "index", "src"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_scatter("scatter", in, attrs); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const int64_t dim = ctx.attrs.get_int("dim");
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = scatter(g, dim, ctx.inputs[1], Scalar(0));
      if (ctx.needs_input_grad[2]) grads[2] = scatter_src_grad(g, dim, ctx.inputs[1], ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b010,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "scatter_value",
    .inputs = {"self", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_scatter("scatter", in, attrs); },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{scatter(ctx.grad_outputs[0], ctx.attrs.get_int("dim"), ctx.inputs[1], Scalar(0)), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "scatter_add",
    .inputs = {"self", "index", "src"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_scatter("scatter_add", in, attrs); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = g;
      if (ctx.needs_input_grad[2])
        grads[2] = scatter_src_grad(g, ctx.attrs.get_int("dim"), ctx.inputs[1], ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b010,
    .sbp = sbp::broadcast_only(),
});

// --- scatter_reduce ---------------------------------------------------------------------
// Note [scatter_reduce]: y = self, then every src element is combined into
// y at its index with `reduce` (sum, prod, mean, amax, amin). Without
// include_self, an element that receives any src value starts from the
// reduction's identity instead of self; mean divides by the number of
// values combined (self counting once when included; integers floor). NaN
// wins amax and amin, as in PyTorch.

// PyTorch's scatter_reduce backward, written with ops.
TensorList scatter_reduce_backward(const BackwardContext& ctx) {
  const Tensor& grad = ctx.grad_outputs[0];
  const Tensor &self = ctx.inputs[0], &index = ctx.inputs[1], &src = ctx.inputs[2], &result = ctx.outputs[0];
  const int64_t dim = ctx.attrs.get_int("dim");
  const Reduce reduce = reduce_of(ctx.attrs.get_string("reduce"));
  const bool include_self = ctx.attrs.get_bool("include_self");
  Tensor grad_self, grad_src;
  switch (reduce) {
    case Reduce::Sum:
      grad_self = grad;
      grad_src = gather(grad, dim, index);
      break;
    case Reduce::Mean: {
      Tensor n = include_self ? ones_like(grad) : zeros_like(grad);
      n = scatter_add(n, dim, index, ones_like(src));
      n = masked_fill(n, eq(n, Scalar(0)), Scalar(1));
      grad_self = div(grad, n);
      grad_src = div(gather(grad, dim, index), gather(n, dim, index));
      break;
    }
    case Reduce::Prod: {
      // Zeros are masked so that a single zero's gradient is the product of
      // the others (Note [scatter_reduce]); two or more zeros give 0.
      const Tensor masked_self = masked_fill(self, eq(self, Scalar(0)), Scalar(1));
      const Tensor masked_self_result = scatter_reduce(masked_self, dim, index, src, "prod", include_self);
      grad_self = div(mul(grad, masked_self_result), masked_self);
      const Tensor src_zero = eq(src, Scalar(0));
      const Tensor zeros_at =
          gather(scatter_add(zeros_like(self), dim, index, to(src_zero, self.dtype())), dim, index);
      const Tensor single_zero = logical_and(src_zero, eq(zeros_at, Scalar(1)));
      const Tensor masked_src_result =
          scatter_reduce(self, dim, index, masked_fill(src, single_zero, Scalar(1)), "prod", include_self);
      grad_src = where(single_zero, gather(mul(grad, masked_src_result), dim, index),
                       div(gather(mul(grad, result), dim, index), masked_fill(src, src_zero, Scalar(1))));
      break;
    }
    default: {  // amax, amin: the gradient is shared equally by the values equal to the result
      const Tensor value = gather(result, dim, index);
      const Tensor self_is_result = to(eq(self, result), self.dtype());
      const Tensor src_is_result = to(eq(src, value), self.dtype());
      const Tensor shared = div(grad, scatter_add(self_is_result, dim, index, src_is_result));
      grad_self = mul(self_is_result, shared);
      grad_src = mul(src_is_result, gather(shared, dim, index));
      break;
    }
  }
  if (!include_self) grad_self = scatter(grad_self, dim, index, Scalar(0));
  return {ctx.needs_input_grad[0] ? grad_self : Tensor(), Tensor(), ctx.needs_input_grad[2] ? grad_src : Tensor()};
}

MF_REGISTER_OP(OpDef{
    .name = "scatter_reduce",
    .inputs = {"self", "index", "src"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Reduce r = reduce_of(attrs.get_string("reduce"));
      MF_CHECK(r != Reduce::Mean || in[0].dtype() != kBool, TypeError,
               "scatter_reduce: reduce='mean' is not implemented for bool tensors");
      return infer_scatter("scatter_reduce", in, attrs);
    },
    .backward = scatter_reduce_backward,
    .save_inputs = 0b111,
    .save_outputs = 0b1,
    .sbp = sbp::broadcast_only(),
});

}  // namespace

Tensor scatter_reduce(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self) {
  reduce_of(reduce);
  Tensor idx = as_index(index, "scatter_reduce");
  static const OpDef& op = dispatch::op("scatter_reduce");
  const int64_t d = wrap_dim(dim, t.dim(), "scatter_reduce");
  Attrs attrs{{"dim", d}, {"reduce", reduce}, {"include_self", include_self}};
  const bool zero_d = t.dim() == 0 || idx.dim() == 0 || src.dim() == 0;
  if (!zero_d) return dispatch::apply_one(op, {t, idx, src}, attrs);
  MF_CHECK(t.dim() <= 1 && idx.dim() <= 1 && src.dim() <= 1, ShapeError,
           "scatter_reduce: index tensor must have the same number of dimensions as the input tensor (", idx.dim(),
           " vs ", t.dim(), ")");
  attrs.set("dim", 0);
  Tensor out = dispatch::apply_one(op, {as_1d(t), as_1d(idx), as_1d(src)}, attrs);
  return t.dim() == 0 ? reshape(out, {}) : out;
}

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  Tensor idx = as_index(index, "index_select");
  MF_CHECK(idx.dim() <= 1, ShapeError, "index_select: index is supposed to be a vector, got shape ",
           shape_str(idx.sizes()));
  static const OpDef& op = dispatch::op("index_select");
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "index_select");
    return reshape(dispatch::apply_one(op, {reshape(t, {1}), reshape(idx, {-1})}, {{"dim", 0}}), {});
  }
  return dispatch::apply_one(op, {t, reshape(idx, {-1})}, {{"dim", wrap_dim(dim, t.dim(), "index_select")}});
}

Tensor index_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, Scalar alpha) {
  Tensor idx = as_index(index, "index_add");
  MF_CHECK(idx.dim() <= 1, ShapeError, "index_add: index is supposed to be a vector, got shape ",
           shape_str(idx.sizes()));
  MF_CHECK(is_floating(t.dtype()) || !alpha.is_floating(), TypeError,
           "index_add: for integral input tensors, argument alpha must not be a floating point number");
  Tensor s = alpha.to_double() == 1.0 ? src : mul(src, alpha);
  static const OpDef& op = dispatch::op("index_add");
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "index_add");
    return reshape(dispatch::apply_one(op, {reshape(t, {1}), reshape(idx, {-1}), as_1d(s)}, {{"dim", 0}}), {});
  }
  return dispatch::apply_one(op, {t, reshape(idx, {-1}), s}, {{"dim", wrap_dim(dim, t.dim(), "index_add")}});
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& index) {
  Tensor idx = as_index(index, "gather");
  static const OpDef& op = dispatch::op("gather");
  int64_t d = wrap_dim(dim, t.dim(), "gather");
  if (t.dim() == 0 || idx.dim() == 0) {
    MF_CHECK(t.dim() <= 1 && idx.dim() <= 1, ShapeError, "gather: index tensor must have the same number of ",
             "dimensions as the input tensor (", idx.dim(), " vs ", t.dim(), ")");
    Tensor out = dispatch::apply_one(op, {as_1d(t), as_1d(idx)}, {{"dim", 0}});
    return idx.dim() == 0 ? reshape(out, {}) : out;
  }
  return dispatch::apply_one(op, {t, idx}, {{"dim", d}});
}

namespace {
Tensor scatter_like(const char* name, const Tensor& t, int64_t dim, const Tensor& index, const Tensor* src,
                    std::optional<Scalar> value) {
  Tensor idx = as_index(index, name);
  int64_t d = wrap_dim(dim, t.dim(), name);
  const OpDef& op = dispatch::op(value ? "scatter_value" : name);
  Attrs attrs{{"dim", d}};
  if (value) attrs.set("value", *value);
  const bool zero_d = t.dim() == 0 || idx.dim() == 0 || (src && src->dim() == 0);
  if (zero_d) {
    MF_CHECK(t.dim() <= 1 && idx.dim() <= 1 && (!src || src->dim() <= 1), ShapeError, name,
             ": index tensor must have the same number of dimensions as the input tensor (", idx.dim(), " vs ",
             t.dim(), ")");
    attrs.set("dim", 0);
  }
  TensorList in{zero_d ? as_1d(t) : t, zero_d ? as_1d(idx) : idx};
  if (src) in.push_back(zero_d ? as_1d(*src) : *src);
  Tensor out = dispatch::apply_one(op, in, attrs);
  return t.dim() == 0 ? reshape(out, {}) : out;
}
}  // namespace

Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_like("scatter", t, dim, index, &src, {});
}
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, Scalar value) {
  return scatter_like("scatter", t, dim, index, nullptr, value);
}
Tensor scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_like("scatter_add", t, dim, index, &src, {});
}

}  // namespace mf
