// Matrix products: matmul (torch.matmul semantics), mm, bmm, mv, dot, outer,
// addmm, baddbmm and linear. Two ops carry them all: "matmul" (a @ b over
// broadcast batch dims, both operands at least 2-d) and "addmm"
// (beta * t + alpha * a @ b); 1-d operands become matrices through views, so
// their gradients come from the views' backward. CPU kernels:
// backend/cpu/kernels/gemm.cpp.
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/linalg.h"

#include "meshflow/autocast.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/global.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

void check_dtypes(const char* op, const Tensor& a, const Tensor& b) {
  MF_CHECK(a.dtype() == b.dtype(), TypeError, op, ": expected a and b to have the same dtype, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  MF_CHECK(a.dtype() != DType::Bool, TypeError, op, ": not supported for bool tensors");
}

// The inner dims must agree: a.shape[-1] against b's row dim (b.shape[-2],
// or b.shape[0] for a vector).
void check_inner(const char* op, const Tensor& a, const Tensor& b) {
  const int64_t k = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  MF_CHECK(k == kb, ShapeError, op, ": a.shape[-1] (", k, ") must equal ", b.dim() == 1 ? "b.shape[0]" : "b.shape[-2]",
           " (", kb, "); shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()));
}

// (broadcast batch..., n, m) for a (..., n, k) @ b (..., k, m).
Shape batched_shape(const char* op, const Tensor& a, const Tensor& b) {
  MF_CHECK(a.dim() >= 2 && b.dim() >= 2, ShapeError, op, ": expected matrices (at least 2-d), got shapes ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  check_inner(op, a, b);
  Shape batch_a(a.sizes().begin(), a.sizes().end() - 2), batch_b(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch_a_b;
  try {
    batch_a_b = broadcast_shapes(batch_a, batch_b, op);
  } catch (const ShapeError&) {
    throw ShapeError(detail::concat(op, ": the batch dims of a ", shape_str(batch_a), " and b ", shape_str(batch_b),
                                    " do not broadcast; shapes ", shape_str(a.sizes()), " and ",
                                    shape_str(b.sizes())));
  }
  Shape out = batch_a_b;
  out.push_back(a.size(-2));
  out.push_back(b.size(-1));
  return out;
}

// True when a tensor of shape `from` expands to `to`.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

Tensor matrix_transpose(const Tensor& t) { return transpose(t, -1, -2); }

const OpDef& op_matmul() {
  static const OpDef& op = dispatch::op("matmul");
  return op;
}
const OpDef& op_addmm() {
  static const OpDef& op = dispatch::op("addmm");
  return op;
}

// a @ b through the "matmul" op (both at least 2-d).
Tensor batched_matmul(const Tensor& a, const Tensor& b) { return dispatch::apply_one(op_matmul(), {a, b}); }

// Operands as the autocast layer hands them to op, cast before the views the
// functions below take of them (Note [Autocast] in autocast.h).
Tensor autocast_operand(const OpDef& op, const Tensor& t) {
  return autocast::any_enabled() ? autocast::cast_for(op, t) : t;
}

// mv and dot follow their inputs' dtype under autocast, as in PyTorch.
void follow_inputs(std::optional<AutocastGuard>& guard, const Tensor& t) {
  if (autocast::any_enabled()) guard.emplace(t.device().type(), std::nullopt, false);
}

Tensor scaled(const Tensor& t, Scalar s) { return s.to_double() == 1.0 ? t : mul(t, s); }

// True for the transpose of a contiguous matrix (weight.t() in linear).
// For a global tensor the choice decides which collectives backward runs, so
// it must be the same on every rank of its placement: it reads this rank's
// shard, which is only decisive when every rank's shard has at least two
// elements along both dims (a shard with one row looks contiguous where the
// others look transposed); otherwise, and on a rank outside the placement
// (which runs none of it), it is false.
bool is_transposed_matrix(const Tensor& t) {
  if (t.dim() != 2 || t.size(0) < 2 || t.size(1) < 2) return false;
  if (!t.is_global()) return t.stride(0) == 1 && t.stride(1) == t.size(0);
  const Tensor& local = global_to_local(t);
  if (!local.defined()) return false;
  const Placement& placement = placement_of(t);
  const NdSbp& sbp = sbp_of(t);
  for (int64_t d = 0; d < 2; ++d) {
    int64_t parts = 1;
    for (size_t a = 0; a < sbp.size(); ++a)
      if (sbp[a].is_split() && sbp[a].axis() == d) parts *= placement.hierarchy()[a];
    if (t.size(d) < 2 * parts) return false;
  }
  return local.stride(0) == 1 && local.stride(1) == local.size(0);
}

// Gradients of alpha * (a @ b) for a and b, summed over broadcast batch dims.
// Note [Gradient layout]: the gradient of an operand stored transposed is
// computed as the transpose of a contiguous product, (g^T a)^T instead of
// a^T g, so it has the operand's layout: linear's weight.t() then hands the
// weight a contiguous gradient, with no transposing copy when it is
// accumulated or read by the optimizer.
TensorList matmul_grads(const BackwardContext& ctx, const Tensor& a, const Tensor& b, size_t ia, size_t ib,
                        Scalar alpha) {
  const Tensor& g = ctx.grad_outputs[0];
  TensorList grads(ctx.needs_input_grad.size());
  if (ctx.needs_input_grad[ia]) {
    Tensor ga = is_transposed_matrix(a) && g.dim() == 2
                    ? matrix_transpose(batched_matmul(b, matrix_transpose(g)))
                    : batched_matmul(g, matrix_transpose(b));
    grads[ia] = sum_to(scaled(ga, alpha), ctx.input_metas[ia].sizes);
  }
  if (ctx.needs_input_grad[ib]) {
    Tensor gb = is_transposed_matrix(b) && g.dim() == 2
                    ? matrix_transpose(batched_matmul(matrix_transpose(g), a))
                    : batched_matmul(matrix_transpose(a), g);
    grads[ib] = sum_to(scaled(gb, alpha), ctx.input_metas[ib].sizes);
  }
  return grads;
}

MF_REGISTER_OP(OpDef{
    .name = "matmul",
    .inputs = {"a", "b"},
    .infer = [](const TensorList& in, const Attrs&) {
      check_dtypes("matmul", in[0], in[1]);
      return std::vector<TensorMeta>{{batched_shape("matmul", in[0], in[1]), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) { return matmul_grads(ctx, ctx.inputs[0], ctx.inputs[1], 0, 1, 1); },
    .save_inputs = 0b11,
    .autocast = AutocastPolicy::LowPrecision,
    .sbp = sbp::matmul(false),
    .flops = [](const TensorList& in, const std::vector<Shape>& out, const Attrs&) {
      return 2.0 * double(shape_numel(out[0])) * double(in[0].size(-1));
    },
});

// beta * t + alpha * (a @ b); t broadcasts to the product's shape.
MF_REGISTER_OP(OpDef{
    .name = "addmm",
    .inputs = {"t", "a", "b"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_dtypes("addmm", in[1], in[2]);
      MF_CHECK(in[0].dtype() == in[1].dtype(), TypeError, "addmm: expected t to have dtype ",
               dtype_name(in[1].dtype()), " like a and b, got ", dtype_name(in[0].dtype()));
      Shape shape = batched_shape("addmm", in[1], in[2]);
      MF_CHECK(broadcasts_to(in[0].sizes(), shape), ShapeError, "addmm: t of shape ", shape_str(in[0].sizes()), " cannot be broadcast to the product's shape ",
               shape_str(shape));
      return std::vector<TensorMeta>{{shape, in[1].dtype(), in[1].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      TensorList grads = matmul_grads(ctx, ctx.inputs[1], ctx.inputs[2], 1, 2, ctx.attrs.get_scalar("alpha"));
      const Scalar beta = ctx.attrs.get_scalar("beta");
      if (ctx.needs_input_grad[0])
        grads[0] = beta.to_double() == 0.0
                       ? zeros(ctx.input_metas[0].sizes,
                               {.dtype = ctx.input_metas[0].dtype, .device = ctx.input_metas[0].device})
                       : sum_to(scaled(ctx.grad_outputs[0], beta), ctx.input_metas[0].sizes);
      return grads;
    },
    .save_inputs = 0b110,
    .autocast = AutocastPolicy::LowPrecision,
    .sbp = sbp::matmul(true),
    .flops = [](const TensorList& in, const std::vector<Shape>& out, const Attrs&) {
      return 2.0 * double(shape_numel(out[0])) * double(in[1].size(-1));
    },
});

void check_scalars(const char* op, DType dtype, Scalar beta, Scalar alpha) {
  MF_CHECK(is_floating(dtype) || (!beta.is_floating() && !alpha.is_floating()), TypeError, op,
           ": for integral tensors, beta and alpha must be integers");
}

Tensor addmm_op(const Tensor& t, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  return dispatch::apply_one(op_addmm(), {t, a, b}, {{"beta", beta}, {"alpha", alpha}});
}

// True when dims [0, d-1) of t merge into one row dim without a copy, so
// t (..., n, k) can be viewed as (rows, k).
bool rows_foldable(const Tensor& t) {
  int64_t expected = -1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    const int64_t size = t.sizes()[size_t(d)], stride = t.strides()[size_t(d)];
    if (size == 1) continue;
    if (expected >= 0 && stride != expected) return false;
    expected = stride * size;
  }
  return true;
}

// t (..., n, k) viewed as (rows, k).
Tensor fold_rows(const Tensor& t) {
  return reshape(t, {shape_numel(Shape(t.sizes().begin(), t.sizes().end() - 1)), t.size(-1)});
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  MF_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, ShapeError,
           "matmul: both arguments need to be at least 1-d, but they are ", a_in.dim(), "-d and ", b_in.dim(), "-d");
  const Tensor a = autocast_operand(op_matmul(), a_in), b = autocast_operand(op_matmul(), b_in);
  check_dtypes("matmul", a, b);
  check_inner("matmul", a, b);
  const int64_t da = a.dim(), db = b.dim();
  if (da == 1 && db == 1) return dot(a, b);
  if (da == 2 && db == 1) return mv(a, b);
  if (da == 2 && db == 2) return mm(a, b);
  if (da >= 3 && db <= 2 && rows_foldable(a)) {
    // (..., n, k) @ (k, m): one GEMM over all rows.
    Tensor product = batched_matmul(fold_rows(a), db == 1 ? unsqueeze(b, 1) : b);
    Shape shape(a.sizes().begin(), a.sizes().end() - 1);
    if (db == 2) shape.push_back(b.size(1));
    return view(product, shape);
  }
  Tensor product = batched_matmul(da == 1 ? unsqueeze(a, 0) : a, db == 1 ? unsqueeze(b, 1) : b);
  if (db == 1) product = squeeze(product, -1);
  if (da == 1) product = squeeze(product, -2);
  return product;
}

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  MF_CHECK(a_in.dim() == 2 && b_in.dim() == 2, ShapeError, "mm: expected 2-d matrices, got shapes ",
           shape_str(a_in.sizes()), " and ", shape_str(b_in.sizes()));
  const Tensor a = autocast_operand(op_matmul(), a_in), b = autocast_operand(op_matmul(), b_in);
  check_dtypes("mm", a, b);
  check_inner("mm", a, b);
  return batched_matmul(a, b);
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast_operand(op_matmul(), a_in), b = autocast_operand(op_matmul(), b_in);
  MF_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "bmm: expected 3-d tensors, got shapes ", shape_str(a.sizes()),
           " and ", shape_str(b.sizes()));
  MF_CHECK(a.size(0) == b.size(0), ShapeError, "bmm: a and b must have the same batch size, got ", a.size(0),
           " and ", b.size(0), "; shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  check_dtypes("bmm", a, b);
  check_inner("bmm", a, b);
  return batched_matmul(a, b);
}

Tensor mv(const Tensor& a, const Tensor& v) {
  MF_CHECK(a.dim() == 2 && v.dim() == 1, ShapeError, "mv: expected a matrix and a vector, got shapes ",
           shape_str(a.sizes()), " and ", shape_str(v.sizes()));
  check_dtypes("mv", a, v);
  std::optional<AutocastGuard> follow;
  follow_inputs(follow, a);
  check_inner("mv", a, v);
  return squeeze(batched_matmul(a, unsqueeze(v, 1)), 1);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  MF_CHECK(a.dim() == 1 && b.dim() == 1, ShapeError, "dot: expected 1-d tensors, got shapes ", shape_str(a.sizes()),
           " and ", shape_str(b.sizes()));
  check_dtypes("dot", a, b);
  std::optional<AutocastGuard> follow;
  follow_inputs(follow, a);
  MF_CHECK(a.size(0) == b.size(0), ShapeError, "dot: a and b must have the same number of elements, got ", a.size(0),
           " and ", b.size(0));
  return view(batched_matmul(unsqueeze(a, 0), unsqueeze(b, 1)), {});
}

Tensor outer(const Tensor& a, const Tensor& b) {
  MF_CHECK(a.dim() == 1 && b.dim() == 1, ShapeError, "outer: expected 1-d tensors, got shapes ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  return mul(unsqueeze(a, 1), unsqueeze(b, 0));
}

Tensor addmm(const Tensor& t, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  MF_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "addmm: expected 2-d matrices, got shapes ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  check_scalars("addmm", a.dtype(), beta, alpha);
  return addmm_op(t, a, b, beta, alpha);
}

Tensor baddbmm(const Tensor& t, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  MF_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "baddbmm: expected 3-d tensors, got shapes ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  MF_CHECK(a.size(0) == b.size(0), ShapeError, "baddbmm: a and b must have the same batch size, got ", a.size(0),
           " and ", b.size(0));
  check_scalars("baddbmm", a.dtype(), beta, alpha);
  return addmm_op(t, a, b, beta, alpha);
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const Tensor x = autocast_operand(op_addmm(), x_in), weight = autocast_operand(op_addmm(), weight_in),
               bias = autocast_operand(op_addmm(), bias_in);
  MF_CHECK(x.dim() >= 1, ShapeError, "linear: x must be at least 1-d, got a 0-d tensor");
  MF_CHECK(weight.dim() == 2, ShapeError, "linear: weight must be 2-d (out_features, in_features), got shape ",
           shape_str(weight.sizes()));
  MF_CHECK(x.size(-1) == weight.size(1), ShapeError, "linear: x.shape[-1] (", x.size(-1),
           ") must equal weight.shape[1] (", weight.size(1), "); shapes ", shape_str(x.sizes()), " and ",
           shape_str(weight.sizes()));
  check_dtypes("linear", x, weight);
  const int64_t out_features = weight.size(0);
  if (bias.defined())
    MF_CHECK(bias.dim() <= 1 && (bias.numel() == out_features || bias.numel() == 1), ShapeError,
             "linear: bias must have shape (", out_features, ") to match weight ", shape_str(weight.sizes()),
             ", got ", shape_str(bias.sizes()));
  // (..., in) -> (rows, in) @ (in, out) -> (..., out)
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
  out_shape.push_back(out_features);
  const bool fold = x.dim() != 2 && rows_foldable(x);
  Tensor x2 = x.dim() == 1 ? unsqueeze(x, 0) : fold ? fold_rows(x) : x;
  Tensor w_t = t(weight);
  Tensor y = bias.defined() ? addmm_op(bias, x2, w_t, 1, 1) : batched_matmul(x2, w_t);
  return y.sizes() == out_shape ? y : view(y, out_shape);
}

}  // namespace mf
