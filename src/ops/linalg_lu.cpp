// torch.linalg on the LU and Cholesky factorisations: det, slogdet, inv,
// solve, cholesky (and torch.logdet). Kernels: backend/cpu/kernels/lapack.cpp.
// Every op works on batches of matrices, so its SBP signatures split batch
// dims only. Under autocast inv, solve and cholesky run in float32 and det
// and slogdet follow their input (refusing 16-bit ones), as in PyTorch. Backward formulas are PyTorch's, written with these ops so
// that double backward and global tensors work:
//   det:      gA = g det(A) A^-T          (needs A invertible)
//   slogdet:  gA = g_logabsdet A^-T
//   inv:      gA = -X^T g X^T              (X = A^-1)
//   solve:    gB = A^-T g, gA = -gB X^T    (X = A^-1 B)
//   cholesky: gA = sym(L^-T Phi(L^T gL) L^-1), Phi: the lower triangle with
//             its diagonal halved, sym(M) = (M + M^T) / 2
#include <limits>

#include "meshflow/ops/functional.h"
#include "meshflow/ops/reduce.h"
#include "ops/linalg_common.h"

namespace mf {
namespace {

using namespace linalg_detail;

// g (...) broadcast over the matrices (..., 1, 1).
Tensor per_matrix(const Tensor& g) { return unsqueeze(unsqueeze(g, -1), -1); }

// Outputs of A's shape (matrix_outputs) or of its batch shape, for square A.
std::vector<TensorMeta> infer_square(const char* op, const Tensor& a, bool matrix_outputs, size_t outputs = 1) {
  check_square(a, op);
  check_lapack_dtype(a.dtype(), op);
  const Shape shape = matrix_outputs ? a.sizes() : batch_with(a, {});
  return std::vector<TensorMeta>(outputs, TensorMeta{shape, a.dtype(), a.device()});
}

MF_REGISTER_OP(OpDef{
    .name = "linalg_det",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_square("linalg.det", in[0], false); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor scale = per_matrix(mul(ctx.grad_outputs[0], ctx.outputs[0]));
      return TensorList{mul(scale, mT(linalg::inv(ctx.inputs[0])))};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::batched({2}, {0}),
});

// Outputs sign, logabsdet; the sign is piecewise constant (no gradient).
MF_REGISTER_OP(OpDef{
    .name = "linalg_slogdet",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_square("linalg.slogdet", in[0], false, 2); },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{mul(per_matrix(ctx.grad_outputs[1]), mT(linalg::inv(ctx.inputs[0])))};
    },
    .save_inputs = 0b1,
    .sbp = sbp::batched({2}, {0, 0}),
});

MF_REGISTER_OP(OpDef{
    .name = "linalg_inv",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs&) {
      return infer_square("linalg.inv", in[0], true);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor x_t = mT(ctx.outputs[0]);
      return TensorList{neg(matmul(matmul(x_t, ctx.grad_outputs[0]), x_t))};
    },
    .save_outputs = 0b1,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2}, {2}),
});

// A (..., n, n) X = B (..., n, k), batch dims broadcast; the vector and
// left=False forms are views around it (linalg::solve).
MF_REGISTER_OP(OpDef{
    .name = "linalg_solve",
    .inputs = {"A", "B"},
    .infer = [](const TensorList& in, const Attrs&) {
      const char* op = "linalg.solve";
      const Tensor &a = in[0], &b = in[1];
      check_square(a, op);
      check_is_matrix(b, op, "B");
      check_lapack_dtype(a.dtype(), op);
      MF_CHECK(a.dtype() == b.dtype(), TypeError, op, ": Expected A and B to have the same dtype, but found A of type ",
               dtype_name(a.dtype()), " and B of type ", dtype_name(b.dtype()), " instead");
      MF_CHECK(b.size(-2) == a.size(-1), ShapeError, op, ": Incompatible shapes of A and B for the equation AX = B (",
               a.size(-2), "x", a.size(-1), " and ", b.size(-2), "x", b.size(-1), ")");
      Shape shape = broadcast_shapes(Shape(a.sizes().begin(), a.sizes().end() - 2),
                                     Shape(b.sizes().begin(), b.sizes().end() - 2), op);
      shape.push_back(b.size(-2));
      shape.push_back(b.size(-1));
      return std::vector<TensorMeta>{{shape, a.dtype(), a.device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& a = ctx.inputs[0];
      const Tensor grad_b = linalg::solve(mT(a), ctx.grad_outputs[0]);
      TensorList grads(2);
      if (ctx.needs_input_grad[0])
        grads[0] = sum_to(neg(matmul(grad_b, mT(ctx.outputs[0]))), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(grad_b, ctx.input_metas[1].sizes);
      return grads;
    },
    .save_inputs = 0b01,
    .save_outputs = 0b1,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2, 2}, {2}),
});

MF_REGISTER_OP(OpDef{
    .name = "linalg_cholesky",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs&) {
      return infer_square("linalg.cholesky", in[0], true);
    },
    .backward = [](const BackwardContext& ctx) {
      const bool upper = ctx.attrs.get_bool("upper");
      const Tensor l = upper ? mT(ctx.outputs[0]) : ctx.outputs[0];
      const Tensor grad_l = upper ? mT(ctx.grad_outputs[0]) : ctx.grad_outputs[0];
      const Tensor l_inv = linalg::inv(l);
      Tensor phi = matmul(mT(l), grad_l);
      phi = sub(tril(phi), mul(diag_embed(matrix_diagonal(phi)), 0.5));
      const Tensor grad_a = matmul(matmul(mT(l_inv), phi), l_inv);
      return TensorList{mul(add(grad_a, mT(grad_a)), 0.5)};
    },
    .save_outputs = 0b1,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2}, {2}),
});

Tensor apply_linalg(const char* name, const TensorList& inputs, const Attrs& attrs = {}) {
  return dispatch::apply_one(dispatch::op(name), inputs, attrs);
}

}  // namespace

Tensor logdet(const Tensor& A) {
  auto [sign, logabsdet] = linalg::slogdet(A);
  return where(eq(sign, -1), std::numeric_limits<double>::quiet_NaN(), logabsdet);
}

namespace linalg {

Tensor det(const Tensor& A) { return apply_linalg("linalg_det", {A}); }

SlogdetResult slogdet(const Tensor& A) {
  static const OpDef& op = dispatch::op("linalg_slogdet");
  TensorList out = dispatch::apply(op, {A});
  return {out[0], out[1]};
}

Tensor inv(const Tensor& A) { return apply_linalg("linalg_inv", {A}); }

Tensor solve(const Tensor& A, const Tensor& B, bool left) {
  const char* op = "linalg.solve";
  check_square(A, op);
  // B is a vector (or a batch of them) when it is 1-d or has A's shape
  // without its last dim, as in PyTorch: a column, for left=True only.
  const bool vector =
      B.dim() == 1 || (B.dim() == A.dim() - 1 && Shape(B.sizes()) == Shape(A.sizes().begin(), A.sizes().end() - 1));
  if (!vector) check_is_matrix(B, op, "B");
  const Tensor b = vector ? unsqueeze(B, -1) : B;
  if (!left)
    MF_CHECK(b.size(-1) == A.size(-1), ShapeError, op, ": Incompatible shapes of A and B for the equation XA = B (",
             A.size(-2), "x", A.size(-1), " and ", b.size(-2), "x", b.size(-1), ")");
  MF_CHECK(left || !vector, ValueError, op, ": Vector broadcasting of the left hand side is not supported for "
           "left=False. In this case linalg.solve is equivalent to B / A.squeeze(-1)");
  const Tensor x = left ? apply_linalg("linalg_solve", {A, b}) : mT(apply_linalg("linalg_solve", {mT(A), mT(b)}));
  return vector ? squeeze(x, -1) : x;
}

Tensor cholesky(const Tensor& A, bool upper) { return apply_linalg("linalg_cholesky", {A}, {{"upper", upper}}); }

}  // namespace linalg
}  // namespace mf
