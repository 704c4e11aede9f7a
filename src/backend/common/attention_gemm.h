// Note [Attention by batched GEMMs]
// fused_attention and its backward on a device, for calls whose (B..., L,
// S) weights fit kMaxGemmScores elements: the products run as the
// backend's batched GEMM G (cuBLAS on CUDA: tensor cores for float16 and
// bfloat16), the softmax and its gradient as one walk over the rows:
//   forward:  S = q k^T (float32; float64 for float64), then per row the
//             masked, scaled scores, lse = logsumexp, P = exp(s - lse)
//             times the dropout keep factor (in q's dtype), out = P v;
//   backward: S = q k^T and dP = dO v^T again, then per row D = dO . out,
//             p = exp(s - lse), Pk = p * keep and dS = p (dP keep - D) scale
//             (in q's dtype; 0 where masked), then dv = Pk^T dO, dq = dS k,
//             dk = dS^T q.
// The scores, masks, causal rule, dropout keep mask (the CPU's Philox
// positions) and the lse are those of the reference walks, so the two
// paths differ only in rounding (the products' order and, for 16-bit
// dtypes, P and dS rounded to the dtype before their GEMMs, as flash
// attention does). A fully masked row gives NaN outputs and zero
// gradients, as there. The weights and their gradients are the kernel's
// scratch (Note [Kernel scratch]). Longer sequences, whose weights would
// not fit, run the tiles of Note [Tiled attention] where the head dims fit
// them, else the one-thread-per-row walks of Note [Device attention].
//
// G provides, for contiguous 3-d operands,
//   G::bmm(a, ta, b, tb, out, taken)   out (n, M, N) = op(a) @ op(b), op(x) =
//                                      x or its last two dims swapped; out's
//                                      dtype may be wider than a's and b's
//   G::bmm_scratch(a, b, in, out)      the bytes bmm takes from `taken`
#pragma once

#include <algorithm>

#include "backend/common/attention_kernels.h"
#include "backend/common/attention_tiles.h"
#include "backend/common/elementwise_kernels.h"

namespace mf::attention_gemm {

using attention_kernels::mask_strides_of;
using attention_kernels::MaskKind;
using attention_kernels::Scores;
using attention_kernels::scores_of;
using index_kernels::operand;
using index_kernels::walk_geometry;

// The most (B..., L, S) weights the GEMM path keeps (1 GiB of float32).
inline constexpr int64_t kMaxGemmScores = int64_t(1) << 28;

inline DType accumulator_of(DType dtype) { return dtype == DType::Float64 ? DType::Float64 : DType::Float32; }

// The rows (B..., L) of q and the batch count of the products.
inline Shape rows_of(const Tensor& q) { return Shape(q.sizes().begin(), q.sizes().end() - 1); }
inline int64_t batches_of(const Tensor& q) { return shape_numel(rows_of(q)) / std::max<int64_t>(q.size(-2), 1); }

// Whether a call takes this path.
inline bool use_gemm(const Tensor& q, const Tensor& k) {
  const int64_t rows = shape_numel(rows_of(q));
  return rows > 0 && k.size(-2) > 0 && q.size(-1) > 0 && rows <= kMaxGemmScores / k.size(-2);
}

// A contiguous t as (n, rows, cols).
inline Tensor as3(const Tensor& t, int64_t n, int64_t rows, int64_t cols) {
  return Tensor(std::make_shared<TensorImpl>(t.storage(), Shape{n, rows, cols}, contiguous_strides({n, rows, cols}),
                                             t.storage_offset(), t.dtype()));
}

// A row's masked, scaled score: -inf where masked.
template <typename M, typename T, typename A>
MF_FORCE_INLINE MF_HOST_DEVICE A masked_score(const Scores<M, T, A>& sc, A dot, const char* mask_row, int64_t i,
                                              int64_t j) {
  if (sc.causal && j > i) return -std::numeric_limits<A>::infinity();
  if (sc.mask == MaskKind::Bool && !*reinterpret_cast<const bool*>(mask_row + j * sc.mask_s))
    return -std::numeric_limits<A>::infinity();
  A s = dot * sc.scale;
  if (sc.mask == MaskKind::Additive) s += M::template to_acc<A>(reinterpret_cast<const T*>(mask_row)[j * sc.mask_s]);
  return s;
}

// Operands over the rows (B..., L): 0 the row of S (A), 1 the mask's row,
// 2 the row's lse, 3 the row of P (P: q's dtype, or A in S's place).
template <typename M, typename T, typename A, typename P, typename Lse>
struct SoftmaxRow {
  Scores<M, T, A> sc;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t r = off[2] / int64_t(sizeof(Lse)), i = r % sc.L;
    A* s = reinterpret_cast<A*>(data[0] + off[0]);
    const char* mask_row = data[1] + off[1];
    P* p = reinterpret_cast<P*>(data[3] + off[3]);
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t j = 0; j < sc.S; ++j) {
      const A x = masked_score(sc, s[j], mask_row, i, j);
      s[j] = x;
      if (x > m) m = x;
    }
    A l = A(0);
    for (int64_t j = 0; j < sc.S; ++j)
      if (s[j] != -std::numeric_limits<A>::infinity()) l += M::exp(s[j] - m);
    const A lse = m + M::log(l);  // a fully masked row: -inf, and NaN weights below (0 / 0)
    *reinterpret_cast<Lse*>(data[2] + off[2]) = Lse(lse);
    for (int64_t j = 0; j < sc.S; ++j) p[j] = P(M::exp(s[j] - lse) * sc.keep(r, j));
  }
};

// Operands over the rows: 0 the row of S (A), 1 the mask's row, 2 the
// row's lse, 3 the row of dP (A), 4 grad_out's and 5 out's row, 6 the row
// of Pk and 7 of dS (P: q's dtype, or A in S's and dP's places).
template <typename M, typename T, typename A, typename P, typename Lse>
struct GradRow {
  Scores<M, T, A> sc;
  int64_t go_e, out_e;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t r = off[2] / int64_t(sizeof(Lse)), i = r % sc.L;
    const A* s = reinterpret_cast<const A*>(data[0] + off[0]);
    const char* mask_row = data[1] + off[1];
    const A lse = A(*reinterpret_cast<const Lse*>(data[2] + off[2]));
    const A* dp = reinterpret_cast<const A*>(data[3] + off[3]);
    const T* go = reinterpret_cast<const T*>(data[4] + off[4]);
    const T* out = reinterpret_cast<const T*>(data[5] + off[5]);
    P* pk = reinterpret_cast<P*>(data[6] + off[6]);
    P* ds = reinterpret_cast<P*>(data[7] + off[7]);
    A d = A(0);
    for (int64_t e = 0; e < sc.Ev; ++e)
      d += M::template to_acc<A>(go[e * go_e]) * M::template to_acc<A>(out[e * out_e]);
    for (int64_t j = 0; j < sc.S; ++j) {
      const A x = masked_score(sc, s[j], mask_row, i, j);
      const A dpj = dp[j];  // read before ds[j] may overwrite it
      if (x == -std::numeric_limits<A>::infinity()) {
        pk[j] = P(A(0));
        ds[j] = P(A(0));
        continue;
      }
      const A p = M::exp(x - lse), kept = sc.keep(r, j);
      pk[j] = P(p * kept);
      ds[j] = P(p * (dpj * kept - d) * sc.scale);
    }
  }
};

// A buffer (rows..., n): its strides along the rows.
inline Shape buffer_rows(const Shape& rows, int64_t n) { return attention_kernels::buffer_row_strides(rows, n); }

// --- the forward: inputs (q, k, v, mask), outputs (out, lse) ---

template <typename G>
int64_t forward_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  if (!use_gemm(q, k)) return attention_tiles::forward_scratch(in, out, attrs);
  const DType t = q.dtype(), a = accumulator_of(t);
  const int64_t n = batches_of(q), L = q.size(-2), S = k.size(-2);
  ScratchLayout layout("scaled_dot_product_attention");
  add_dense(layout, q);
  add_dense(layout, k);
  add_dense(layout, v);
  layout.add({n, L, S}, a);
  if (t != a) layout.add({n, L, S}, t);
  layout.add_bytes(std::max(G::bmm_scratch({n, L, q.size(-1)}, {n, S, q.size(-1)}, t, a),
                            G::bmm_scratch({n, L, S}, {n, S, v.size(-1)}, t, t)));
  return layout.bytes();
}

template <typename L, typename G>
void forward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &q_in = in[0], &k_in = in[1], &v_in = in[2], &mask = in[3];
  if (!use_gemm(q_in, k_in)) return attention_tiles::forward<L>(in, out, attrs);
  Tensor &y = out[0], &lse = out[1];
  const Shape rows = rows_of(q_in);
  const int64_t n = batches_of(q_in), Lq = q_in.size(-2), S = k_in.size(-2), E = q_in.size(-1),
                Ev = v_in.size(-1);
  const Shape ms = mask_strides_of(mask, q_in, k_in);
  const Tensor& m = mask.defined() ? mask : q_in;
  Scratch taken(out);
  const Tensor q = as3(elementwise_kernels::dense<L>(q_in, taken), n, Lq, E);
  const Tensor k = as3(elementwise_kernels::dense<L>(k_in, taken), n, S, E);
  const Tensor v = as3(elementwise_kernels::dense<L>(v_in, taken), n, S, Ev);
  const DType acc = accumulator_of(q.dtype());
  Tensor s = taken.take({n, Lq, S}, acc);
  Tensor p = q.dtype() == acc ? s : taken.take({n, Lq, S}, q.dtype());
  {
    Scratch::Turn turn(taken);
    G::bmm(q, false, k, true, s, taken);
  }
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using M = typename L::Math;
    const LoopGeometry<4> g = walk_geometry<4>(
        rows, {operand(s, buffer_rows(rows, S)), operand(m, Shape(ms.begin(), ms.end() - 1)),
               operand(lse, contiguous_strides(rows)), operand(p, buffer_rows(rows, S))},
        "fused_attention");
    dispatch_floating(lse.dtype(), "fused_attention", [&]<typename Lse>() {
      L::template for_each<4>(y.device(), g, shape_numel(rows),
                              SoftmaxRow<M, T, A, T, Lse>{scores_of<M, T, A>(q_in, k_in, v_in, mask, ms, attrs)});
    });
  });
  Tensor y3 = as3(y, n, Lq, Ev);
  Scratch::Turn turn(taken);
  G::bmm(p, false, v, false, y3, taken);
}

// --- the backward: inputs (grad_out, q, k, v, mask, out, lse), outputs dq, dk, dv ---

template <typename G>
int64_t backward_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const Tensor &go = in[0], &q = in[1], &k = in[2], &v = in[3];
  if (!use_gemm(q, k)) return attention_tiles::backward_scratch(in, out, attrs);
  const DType t = q.dtype(), a = accumulator_of(t);
  const int64_t n = batches_of(q), L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  ScratchLayout layout("scaled_dot_product_attention");
  for (const Tensor* x : {&go, &q, &k, &v}) add_dense(layout, *x);
  layout.add({n, L, S}, a).add({n, L, S}, a);
  if (t != a) layout.add({n, L, S}, t).add({n, L, S}, t);
  layout.add_bytes(std::max({G::bmm_scratch({n, L, E}, {n, S, E}, t, a), G::bmm_scratch({n, L, Ev}, {n, S, Ev}, t, a),
                             G::bmm_scratch({n, L, S}, {n, L, Ev}, t, t), G::bmm_scratch({n, L, S}, {n, S, E}, t, t),
                             G::bmm_scratch({n, L, S}, {n, L, E}, t, t)}));
  return layout.bytes();
}

template <typename L, typename G>
void backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &go_in = in[0], &q_in = in[1], &k_in = in[2], &v_in = in[3], &mask = in[4], &o = in[5],
               &lse = in[6];
  if (!use_gemm(q_in, k_in)) return attention_tiles::backward<L>(in, out, attrs);
  const Shape rows = rows_of(q_in);
  const int64_t n = batches_of(q_in), Lq = q_in.size(-2), S = k_in.size(-2), E = q_in.size(-1),
                Ev = v_in.size(-1);
  const Shape ms = mask_strides_of(mask, q_in, k_in);
  const Tensor& m = mask.defined() ? mask : q_in;
  MF_CHECK(lse.is_contiguous(), Error, "fused_attention_backward: expected a contiguous logsumexp");
  Scratch taken(out);
  const Tensor go = as3(elementwise_kernels::dense<L>(go_in, taken), n, Lq, Ev);
  const Tensor q = as3(elementwise_kernels::dense<L>(q_in, taken), n, Lq, E);
  const Tensor k = as3(elementwise_kernels::dense<L>(k_in, taken), n, S, E);
  const Tensor v = as3(elementwise_kernels::dense<L>(v_in, taken), n, S, Ev);
  const DType acc = accumulator_of(q.dtype());
  Tensor s = taken.take({n, Lq, S}, acc), dp = taken.take({n, Lq, S}, acc);
  const bool wide = q.dtype() == acc;
  Tensor pk = wide ? s : taken.take({n, Lq, S}, q.dtype());
  Tensor ds = wide ? dp : taken.take({n, Lq, S}, q.dtype());
  {
    Scratch::Turn turn(taken);
    G::bmm(q, false, k, true, s, taken);
  }
  {
    Scratch::Turn turn(taken);
    G::bmm(go, false, v, true, dp, taken);
  }
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using M = typename L::Math;
    const LoopGeometry<8> g = walk_geometry<8>(
        rows, {operand(s, buffer_rows(rows, S)), operand(m, Shape(ms.begin(), ms.end() - 1)),
               operand(lse, contiguous_strides(rows)), operand(dp, buffer_rows(rows, S)),
               operand(go_in, attention_kernels::row_strides(go_in)), operand(o, attention_kernels::row_strides(o)),
               operand(pk, buffer_rows(rows, S)), operand(ds, buffer_rows(rows, S))},
        "fused_attention_backward");
    dispatch_floating(lse.dtype(), "fused_attention_backward", [&]<typename Lse>() {
      L::template for_each<8>(q.device(), g, shape_numel(rows),
                              GradRow<M, T, A, T, Lse>{scores_of<M, T, A>(q_in, k_in, v_in, mask, ms, attrs),
                                                       go_in.strides().back(), o.strides().back()});
    });
  });
  Tensor dq = as3(out[0], n, Lq, E), dk = as3(out[1], n, S, E), dv = as3(out[2], n, S, Ev);
  {
    Scratch::Turn turn(taken);
    G::bmm(pk, true, go, false, dv, taken);
  }
  {
    Scratch::Turn turn(taken);
    G::bmm(ds, false, k, false, dq, taken);
  }
  Scratch::Turn turn(taken);
  G::bmm(ds, true, q, false, dk, taken);
}

// Registers fused_attention and its backward on `device`: this path where
// the weights fit, else the tiles where the head dims fit them, else the
// reference walks. (attention_tiles::register_all and
// attention_kernels::register_all register the latter two alone, for tests.)
template <typename L, typename G>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("fused_attention", device, forward<L, G>, forward_scratch<G>);
  OpRegistry::instance().set_kernel("fused_attention_backward", device, backward<L, G>, backward_scratch<G>);
}

}  // namespace mf::attention_gemm
