// torch.linalg's orthogonal decompositions: qr, svd, svdvals, eigh,
// eigvalsh. Kernels: backend/cpu/kernels/lapack.cpp (geqrf/orgqr, gesdd, syevd),
// backend/common/linalg_kernels.h on devices.
// Batch dims split; matrices stay whole. Backward formulas follow PyTorch
// 1.13 (FunctionsManual.cpp) and are written with ops, so they work in
// graphs, for global tensors and twice:
//   qr (m >= n):  M = R gR^T - gQ^T Q, gA = (gQ + Q copyltu(M)) R^-T, with
//                 copyltu(M) = tril(M) + tril(M, -1)^T; for m < n the first
//                 m columns take that formula with gQ + Y gV^T (A = [X | Y],
//                 R = [U | V]) and Y takes Q gV.
//   svd:          PyTorch's svd_backward (gradients of U and Vh that were not
//                 received are left out, so svd(A).S alone differentiates
//                 like svdvals); the decomposition must have distinct
//                 singular values, and full rank when U or Vh is used.
//   eigh:         gA = V (diag(gL) + skew(V^T gV) / E) V^T, E_ij = L_j - L_i
//                 (distinct eigenvalues when V is used).
//   svdvals, eigvalsh: U diag(gS) Vh, V diag(gL) V^T, the factors recomputed
//                 in backward (the forward computes values only).
#include <cctype>

#include "meshflow/ops/functional.h"
#include "meshflow/ops/reduce.h"
#include "ops/linalg_common.h"

namespace mf {
namespace {

using namespace linalg_detail;

void check_general(const char* op, const Tensor& a) {
  check_is_matrix(a, op);
  check_lapack_dtype(a.dtype(), op);
}

TensorMeta meta_of(const Tensor& a, Shape shape) { return TensorMeta{std::move(shape), a.dtype(), a.device()}; }

// --- qr -----------------------------------------------------------------------------------

enum class QrMode { Reduced, Complete, R };

QrMode qr_mode(const std::string& mode) {
  if (mode == "reduced") return QrMode::Reduced;
  if (mode == "complete") return QrMode::Complete;
  if (mode == "r") return QrMode::R;
  throw ValueError(detail::concat("qr received unrecognized mode '", mode,
                                  "' but expected one of 'reduced' (default), 'r', or 'complete'"));
}

// The QR gradient of a square-or-tall factorisation (m >= n).
Tensor qr_backward_tall(const Tensor& grad_q, const Tensor& grad_r, const Tensor& q, const Tensor& r) {
  const Tensor m = sub(matmul(r, mT(grad_r)), matmul(mT(grad_q), q));
  const Tensor copyltu = add(tril(m), mT(tril(m, -1)));
  const Tensor b = add(grad_q, matmul(q, copyltu));
  return mT(linalg::solve(r, mT(b)));  // b R^-T
}

TensorList qr_backward(const BackwardContext& ctx) {
  const QrMode mode = qr_mode(ctx.attrs.get_string("mode"));
  MF_CHECK(mode != QrMode::R, Error,
           "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use "
           "linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.");
  const Tensor &q = ctx.outputs[0], &r = ctx.outputs[1];
  const int64_t m = q.size(-2), n = r.size(-1);
  MF_CHECK(mode == QrMode::Reduced || m <= n, Error,
           "The QR decomposition is not differentiable when mode='complete' and nrows > ncols.");
  const Tensor &grad_q = ctx.grad_outputs[0], &grad_r = ctx.grad_outputs[1];
  if (m >= n) return {qr_backward_tall(grad_q, grad_r, q, r)};
  // A = [X | Y], R = [U | V]: X = Q U is square, Y = Q V.
  const Tensor u = narrow(r, -1, 0, m), v = narrow(r, -1, m, n - m);
  const Tensor grad_u = narrow(grad_r, -1, 0, m), grad_v = narrow(grad_r, -1, m, n - m);
  const Tensor y = matmul(q, v);
  const Tensor grad_x = qr_backward_tall(add(grad_q, matmul(y, mT(grad_v))), grad_u, q, u);
  return {cat({grad_x, matmul(q, grad_v)}, -1)};
}

MF_REGISTER_OP(OpDef{
    .name = "linalg_qr",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& a = in[0];
      check_general("linalg.qr", a);
      const QrMode mode = qr_mode(attrs.get_string("mode"));
      const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
      // mode 'r' keeps an (m, 0) Q so that every output has the batch dims.
      const int64_t q_cols = mode == QrMode::Complete ? m : mode == QrMode::R ? 0 : k;
      const int64_t r_rows = mode == QrMode::Complete ? m : k;
      return std::vector<TensorMeta>{meta_of(a, batch_with(a, {m, q_cols})), meta_of(a, batch_with(a, {r_rows, n}))};
    },
    .backward = qr_backward,
    .save_outputs = 0b11,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2}, {2, 2}),
});

// --- svd ----------------------------------------------------------------------------------

// PyTorch's svd_backward for reduced factors U (m, k), S (k), Vh (k, n).
Tensor svd_backward(const Tensor& grad_u, const Tensor& grad_s, const Tensor& grad_vh, const Tensor& u,
                    const Tensor& s, const Tensor& vh) {
  const int64_t m = u.size(-2), n = vh.size(-1);
  const bool has_u = grad_u.defined(), has_vh = grad_vh.defined();
  if (!has_u && !has_vh) {  // svdvals: U diag(gS) Vh
    return m >= n ? matmul(u, mul(unsqueeze(grad_s, -1), vh)) : matmul(mul(u, unsqueeze(grad_s, -2)), vh);
  }
  auto skew = [](const Tensor& x) { return sub(x, mT(x)); };
  // E_ij = S_j^2 - S_i^2 off the diagonal, 1 on it.
  const Tensor s2 = mul(s, s);
  const Tensor e = add(sub(unsqueeze(s2, -2), unsqueeze(s2, -1)),
                       eye(s.size(-1), std::nullopt, {.dtype = s.dtype(), .device = s.device()}));
  Tensor grad_a;
  if (has_u && has_vh) {
    const Tensor uh_gu = skew(matmul(mT(u), grad_u)), vh_gv = skew(matmul(vh, mT(grad_vh)));
    grad_a = div(add(mul(uh_gu, unsqueeze(s, -2)), mul(unsqueeze(s, -1), vh_gv)), e);
  } else if (has_u) {
    grad_a = mul(div(skew(matmul(mT(u), grad_u)), e), unsqueeze(s, -2));
  } else {
    grad_a = mul(unsqueeze(s, -1), div(skew(matmul(vh, mT(grad_vh))), e));
  }
  if (grad_s.defined()) grad_a = add(grad_a, diag_embed(grad_s));
  if (m > n && has_u) {  // U [gA + (I - U U^T) gU S^-1] Vh
    grad_a = matmul(u, grad_a);
    const Tensor gu_s_inv = div(grad_u, unsqueeze(s, -2));
    grad_a = sub(add(grad_a, gu_s_inv), matmul(u, matmul(mT(u), gu_s_inv)));
    return matmul(grad_a, vh);
  }
  if (m < n && has_vh) {  // U [gA Vh + S^-1 gVh (I - V Vh)]
    grad_a = matmul(grad_a, vh);
    const Tensor s_inv_gvh = div(grad_vh, unsqueeze(s, -1));
    grad_a = sub(add(grad_a, s_inv_gvh), matmul(matmul(s_inv_gvh, mT(vh)), vh));
    return matmul(u, grad_a);
  }
  return m >= n ? matmul(u, matmul(grad_a, vh)) : matmul(matmul(u, grad_a), vh);
}

MF_REGISTER_OP(OpDef{
    .name = "linalg_svd",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& a = in[0];
      check_general("linalg.svd", a);
      const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
      const bool full = attrs.get_bool("full_matrices");
      return std::vector<TensorMeta>{meta_of(a, batch_with(a, {m, full ? m : k})), meta_of(a, batch_with(a, {k})),
                                     meta_of(a, batch_with(a, {full ? n : k, n}))};
    },
    .backward = [](const BackwardContext& ctx) {
      const bool full = ctx.attrs.get_bool("full_matrices");
      const Tensor& s = ctx.outputs[1];
      // Of full factors only the first k columns of U (rows of Vh) enter A.
      auto first_k = [&](const Tensor& t, int64_t dim) { return full ? narrow(t, dim, 0, s.size(-1)) : t; };
      auto grad = [&](size_t i) { return ctx.received_grad[i] ? ctx.grad_outputs[i] : Tensor(); };
      const Tensor grad_u = grad(0), grad_vh = grad(2);
      return TensorList{svd_backward(grad_u.defined() ? first_k(grad_u, -1) : grad_u, grad(1),
                                     grad_vh.defined() ? first_k(grad_vh, -2) : grad_vh, first_k(ctx.outputs[0], -1), s,
                                     first_k(ctx.outputs[2], -2))};
    },
    .save_outputs = 0b111,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2}, {2, 1, 2}),
});

MF_REGISTER_OP(OpDef{
    .name = "linalg_svdvals",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs&) {
      const Tensor& a = in[0];
      check_general("linalg.svdvals", a);
      return std::vector<TensorMeta>{meta_of(a, batch_with(a, {std::min(a.size(-2), a.size(-1))}))};
    },
    .backward = [](const BackwardContext& ctx) {
      const linalg::SVDResult f = linalg::svd(ctx.inputs[0], false);
      return TensorList{svd_backward(Tensor(), ctx.grad_outputs[0], Tensor(), f.U, f.S, f.Vh)};
    },
    .save_inputs = 0b1,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2}, {1}),
});

// --- eigh ---------------------------------------------------------------------------------

bool upper_of(const std::string& uplo) {
  MF_CHECK(uplo.size() == 1 && (std::toupper(uplo[0]) == 'L' || std::toupper(uplo[0]) == 'U'), ValueError,
           "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  return std::toupper(uplo[0]) == 'U';
}

std::vector<TensorMeta> infer_eigh(const char* op, const Tensor& a, bool vectors) {
  check_square(a, op);
  check_lapack_dtype(a.dtype(), op);
  std::vector<TensorMeta> out{meta_of(a, batch_with(a, {a.size(-1)}))};
  if (vectors) out.push_back(meta_of(a, a.sizes()));
  return out;
}

MF_REGISTER_OP(OpDef{
    .name = "linalg_eigh",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_eigh("linalg.eigh", in[0], true); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor &l = ctx.outputs[0], &v = ctx.outputs[1];
      Tensor inner = diag_embed(ctx.grad_outputs[0]);
      if (ctx.received_grad[1]) {
        const Tensor vh_gv = matmul(mT(v), ctx.grad_outputs[1]);
        const Tensor skew = mul(sub(vh_gv, mT(vh_gv)), 0.5);
        const Tensor e = add(sub(unsqueeze(l, -2), unsqueeze(l, -1)),
                             eye(l.size(-1), std::nullopt, {.dtype = l.dtype(), .device = l.device()}));
        inner = add(inner, div(skew, e));
      }
      return TensorList{matmul(v, matmul(inner, mT(v)))};
    },
    .save_outputs = 0b11,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2}, {1, 2}),
});

MF_REGISTER_OP(OpDef{
    .name = "linalg_eigvalsh",
    .inputs = {"A"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_eigh("linalg.eigvalsh", in[0], false); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor v = linalg::eigh(ctx.inputs[0], ctx.attrs.get_bool("upper") ? "U" : "L").eigenvectors;
      return TensorList{matmul(mul(v, unsqueeze(ctx.grad_outputs[0], -2)), mT(v))};
    },
    .save_inputs = 0b1,
    .autocast = AutocastPolicy::Fp32,
    .sbp = sbp::batched({2}, {1}),
});

}  // namespace

namespace linalg {

QRResult qr(const Tensor& A, const std::string& mode) {
  static const OpDef& op = dispatch::op("linalg_qr");
  const QrMode parsed = qr_mode(mode);
  TensorList out = dispatch::apply(op, {A}, {{"mode", mode}});
  // PyTorch's mode 'r' returns an empty Q.
  if (parsed == QrMode::R) out[0] = empty({0}, {.dtype = out[1].dtype(), .device = out[1].device()});
  return {out[0], out[1]};
}

SVDResult svd(const Tensor& A, bool full_matrices) {
  static const OpDef& op = dispatch::op("linalg_svd");
  TensorList out = dispatch::apply(op, {A}, {{"full_matrices", full_matrices}});
  return {out[0], out[1], out[2]};
}

Tensor svdvals(const Tensor& A) { return dispatch::apply_one(dispatch::op("linalg_svdvals"), {A}); }

EighResult eigh(const Tensor& A, const std::string& UPLO) {
  static const OpDef& op = dispatch::op("linalg_eigh");
  TensorList out = dispatch::apply(op, {A}, {{"upper", upper_of(UPLO)}});
  return {out[0], out[1]};
}

Tensor eigvalsh(const Tensor& A, const std::string& UPLO) {
  return dispatch::apply_one(dispatch::op("linalg_eigvalsh"), {A}, {{"upper", upper_of(UPLO)}});
}

}  // namespace linalg
}  // namespace mf
