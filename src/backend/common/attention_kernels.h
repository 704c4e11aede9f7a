// Note [Device attention]
// fused_attention and its backward (Note [Fused attention] in
// backend/cpu/kernels/attention.cpp) over a backend's walks L, one query
// row per element of the walk: the row meets the keys in order with an
// online softmax (a running maximum m and sum l rescale the partial output
// when m grows), so no (L, S) weights are kept, and writes its output and
// lse = m + log(l). Dropout regenerates the CPU's keep mask from Philox
// (weight (b, i, j) of flat index idx = (b L + i) S + j is kept when word
// idx % 4 of counter offset + idx / 4 has its top 24 bits below the
// threshold). The backward recomputes each weight p = exp(s - lse): a row
// adds into its own dq, and into dk and dv atomically (rows share keys).
// Partial results are float32 (float64 for float64 inputs) buffers, copied
// into the outputs at the end. This is the reference device path, with no
// tiling into shared memory or tensor-core products; it runs where neither
// the batched GEMMs (Note [Attention by batched GEMMs]) nor the tiles (Note
// [Tiled attention]) take a call.
#pragma once

#include <cmath>
#include <limits>

#include "backend/common/index_kernels.h"
#include "backend/common/scratch.h"
#include "meshflow/philox.h"

namespace mf::attention_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;

enum class MaskKind { None, Bool, Additive };

// The scores of one query row: s_j = scale q . k_j (+ mask_j), or -inf
// where masked (bool mask false, or a key after the query under is_causal).
template <typename M, typename T, typename A>
struct Scores {
  int64_t L, S, E, Ev;
  int64_t q_e, k_s, k_e, v_s, v_e, mask_s;
  MaskKind mask;
  bool causal;
  A scale;
  // dropout: 0 without; else the keep threshold and the kept weights' scale
  uint32_t threshold;
  A keep_scale;
  uint64_t seed, offset;

  MF_FORCE_INLINE MF_HOST_DEVICE A at(const T* q, const T* k, const char* mask_row, int64_t i, int64_t j) const {
    return score(q, q_e, k + j * k_s, k_e, mask_row, i, j);
  }
  // The score of query i (its row q, elements step q_step apart) and key j
  // (its row k): the row walks read both rows in memory, the tiles
  // (Note [Tiled attention]) read them as A from registers and shared
  // memory, in the same order, so the two agree bit for bit.
  template <typename Q, typename K>
  MF_FORCE_INLINE MF_HOST_DEVICE A score(const Q* q, int64_t q_step, const K* k, int64_t k_step,
                                         const char* mask_row, int64_t i, int64_t j) const {
    if (causal && j > i) return -std::numeric_limits<A>::infinity();
    if (mask == MaskKind::Bool && !*reinterpret_cast<const bool*>(mask_row + j * mask_s))
      return -std::numeric_limits<A>::infinity();
    A dot = A(0);
    for (int64_t e = 0; e < E; ++e)
      dot += M::template to_acc<A>(q[e * q_step]) * M::template to_acc<A>(k[e * k_step]);
    A s = dot * scale;
    if (mask == MaskKind::Additive) s += M::template to_acc<A>(reinterpret_cast<const T*>(mask_row)[j * mask_s]);
    return s;
  }
  // The factor of weight (r, j) after dropout: 0 or 1 / (1 - p).
  MF_FORCE_INLINE MF_HOST_DEVICE A keep(int64_t r, int64_t j) const {
    if (threshold == 0) return A(1);
    const uint64_t idx = uint64_t(r) * uint64_t(S) + uint64_t(j);
    const PhiloxWords w = philox4x32(seed, offset + idx / 4);
    return (w.w[idx % 4] >> 8) < threshold ? keep_scale : A(0);
  }
};

// Operands over the rows (B..., L): 0 the row's output (A, contiguous
// (rows, Ev)), 1 q's row, 2 k's and 3 v's batch matrix, 4 the mask's row,
// 5 the row's lse (contiguous).
template <typename M, typename T, typename A, typename Lse>
struct ForwardRow {
  Scores<M, T, A> sc;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t r = off[5] / int64_t(sizeof(Lse)), i = r % sc.L;
    A* o = reinterpret_cast<A*>(data[0] + off[0]);
    const T* q = reinterpret_cast<const T*>(data[1] + off[1]);
    const T* k = reinterpret_cast<const T*>(data[2] + off[2]);
    const T* v = reinterpret_cast<const T*>(data[3] + off[3]);
    const char* mask_row = data[4] + off[4];
    for (int64_t e = 0; e < sc.Ev; ++e) o[e] = A(0);
    A m = -std::numeric_limits<A>::infinity(), l = A(0);
    for (int64_t j = 0; j < sc.S; ++j) {
      const A s = sc.at(q, k, mask_row, i, j);
      if (s == -std::numeric_limits<A>::infinity()) continue;
      const A m_new = s > m ? s : m;
      const A correction = M::exp(m - m_new), p = M::exp(s - m_new);
      l = l * correction + p;
      const A weight = p * sc.keep(r, j);
      for (int64_t e = 0; e < sc.Ev; ++e)
        o[e] = o[e] * correction + weight * M::template to_acc<A>(v[j * sc.v_s + e * sc.v_e]);
      m = m_new;
    }
    for (int64_t e = 0; e < sc.Ev; ++e) o[e] = o[e] / l;  // a fully masked row: 0 / 0
    *reinterpret_cast<Lse*>(data[5] + off[5]) = Lse(m + M::log(l));
  }
};

// Operands over the rows: 0 the row's dq (A, contiguous (rows, E)), 1 q's
// row, 2 k's and 3 v's batch matrix, 4 the mask's row, 5 the row's lse,
// 6 grad_out's and 7 out's row, 8 dk's and 9 dv's batch matrix (A,
// contiguous).
template <typename M, typename T, typename A, typename Lse>
struct BackwardRow {
  Scores<M, T, A> sc;
  int64_t go_e, out_e;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t r = off[5] / int64_t(sizeof(Lse)), i = r % sc.L;
    A* dq = reinterpret_cast<A*>(data[0] + off[0]);
    const T* q = reinterpret_cast<const T*>(data[1] + off[1]);
    const T* k = reinterpret_cast<const T*>(data[2] + off[2]);
    const T* v = reinterpret_cast<const T*>(data[3] + off[3]);
    const char* mask_row = data[4] + off[4];
    const A lse = A(*reinterpret_cast<const Lse*>(data[5] + off[5]));
    const T* go = reinterpret_cast<const T*>(data[6] + off[6]);
    const T* out = reinterpret_cast<const T*>(data[7] + off[7]);
    A* dk = reinterpret_cast<A*>(data[8] + off[8]);
    A* dv = reinterpret_cast<A*>(data[9] + off[9]);
    A d = A(0);
    for (int64_t e = 0; e < sc.Ev; ++e)
      d += M::template to_acc<A>(go[e * go_e]) * M::template to_acc<A>(out[e * out_e]);
    for (int64_t e = 0; e < sc.E; ++e) dq[e] = A(0);
    for (int64_t j = 0; j < sc.S; ++j) {
      const A s = sc.at(q, k, mask_row, i, j);
      if (s == -std::numeric_limits<A>::infinity()) continue;
      const A p = M::exp(s - lse), kept = sc.keep(r, j);
      A dp = A(0);
      for (int64_t e = 0; e < sc.Ev; ++e) {
        const A g = M::template to_acc<A>(go[e * go_e]);
        index_kernels::atomic_add<M>(dv + j * sc.Ev + e, p * kept * g);
        dp += g * M::template to_acc<A>(v[j * sc.v_s + e * sc.v_e]);
      }
      const A ds = p * (dp * kept - d) * sc.scale;
      for (int64_t e = 0; e < sc.E; ++e) {
        dq[e] += ds * M::template to_acc<A>(k[j * sc.k_s + e * sc.k_e]);
        index_kernels::atomic_add<M>(dk + j * sc.E + e, ds * M::template to_acc<A>(q[e * sc.q_e]));
      }
    }
  }
};

// The walk over the rows (B..., L): a tensor's strides along them, and
// along the batch dims only (0 along L) for the batch matrices.
inline Shape row_strides(const Tensor& t) { return Shape(t.strides().begin(), t.strides().end() - 1); }
inline Shape batch_strides(const Tensor& t) {
  Shape s = row_strides(t);
  s.back() = 0;
  return s;
}
// A contiguous (rows..., n) buffer's strides along the rows, per row and per batch.
inline Shape buffer_row_strides(const Shape& rows, int64_t n) {
  Shape s = contiguous_strides(rows);
  for (auto& v : s) v *= n;
  return s;
}

template <typename M, typename T, typename A>
Scores<M, T, A> scores_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const Shape& mask_strides, const Attrs& attrs) {
  Scores<M, T, A> sc{};
  sc.L = q.size(-2), sc.S = k.size(-2), sc.E = q.size(-1), sc.Ev = v.size(-1);
  sc.q_e = q.strides().back();
  sc.k_s = k.strides()[size_t(k.dim() - 2)], sc.k_e = k.strides().back();
  sc.v_s = v.strides()[size_t(v.dim() - 2)], sc.v_e = v.strides().back();
  sc.mask = !mask.defined() ? MaskKind::None : mask.dtype() == DType::Bool ? MaskKind::Bool : MaskKind::Additive;
  sc.mask_s = mask.defined() ? mask_strides.back() : 0;
  sc.causal = attrs.get_bool("is_causal");
  sc.scale = A(attrs.get_float("scale"));
  const double p = attrs.get_float("dropout_p");
  if (p > 0.0) {
    sc.threshold = uint32_t(std::ceil(double(float(1.0 - p)) * 16777216.0));
    sc.keep_scale = A(1.0 / (1.0 - p));
    sc.seed = uint64_t(attrs.get_int("seed"));
    sc.offset = uint64_t(attrs.get_int("offset"));
  }
  return sc;
}

// The mask's element strides broadcast to (B..., L, S); a dummy (q with
// zero strides) without a mask.
inline Shape mask_strides_of(const Tensor& mask, const Tensor& q, const Tensor& k) {
  Shape full(q.sizes().begin(), q.sizes().end() - 1);
  full.push_back(k.size(-2));
  if (!mask.defined()) return Shape(full.size(), 0);
  MF_CHECK(mask.dtype() == DType::Bool || mask.dtype() == q.dtype(), TypeError,
           "scaled_dot_product_attention: an additive mask of ", dtype_name(mask.dtype()), " for ",
           dtype_name(q.dtype()), " scores");
  Shape s = broadcast_byte_strides(mask, full);
  for (auto& v : s) v /= int64_t(mask.element_size());
  return s;
}

template <typename L>
void forward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &q = in[0], &k = in[1], &v = in[2], &mask = in[3];
  Tensor &y = out[0], &lse = out[1];
  const Shape rows(q.sizes().begin(), q.sizes().end() - 1);
  if (shape_numel(rows) == 0) return;
  const Shape ms = mask_strides_of(mask, q, k);
  const Tensor& m = mask.defined() ? mask : q;
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using M = typename L::Math;
    const int64_t ev = v.size(-1);
    Tensor acc = Scratch(out).take(y.sizes(), dtype_of<A>());
    const LoopGeometry<6> g = walk_geometry<6>(
        rows, {operand(acc, buffer_row_strides(rows, ev)), operand(q, row_strides(q)), operand(k, batch_strides(k)),
               operand(v, batch_strides(v)), operand(m, Shape(ms.begin(), ms.end() - 1)),
               operand(lse, contiguous_strides(rows))},
        "fused_attention");
    dispatch_floating(lse.dtype(), "fused_attention", [&]<typename Lse>() {
      L::template for_each<6>(y.device(), g, shape_numel(rows),
                              ForwardRow<M, T, A, Lse>{scores_of<M, T, A>(q, k, v, mask, ms, attrs)});
    });
    elementwise_kernels::copy_cast<L>(y, acc);
  });
}

// inputs (grad_out, q, k, v, mask, out, lse); outputs dq, dk, dv.
template <typename L>
void backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &go = in[0], &q = in[1], &k = in[2], &v = in[3], &mask = in[4], &o = in[5], &lse = in[6];
  const Shape rows(q.sizes().begin(), q.sizes().end() - 1);
  const Shape ms = mask_strides_of(mask, q, k);
  const Tensor& m = mask.defined() ? mask : q;
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using M = typename L::Math;
    Scratch taken(out);
    Tensor dq = taken.take(q.sizes(), dtype_of<A>()), dk = taken.take(k.sizes(), dtype_of<A>()),
           dv = taken.take(v.sizes(), dtype_of<A>());
    elementwise_kernels::fill<L>(dk, Scalar(0));
    elementwise_kernels::fill<L>(dv, Scalar(0));
    if (shape_numel(rows) > 0) {
      // dk and dv as batch matrices along the rows: their batch strides, 0 along L.
      Shape dk_rows = buffer_row_strides(Shape(k.sizes().begin(), k.sizes().end() - 1), k.size(-1));
      Shape dv_rows = buffer_row_strides(Shape(v.sizes().begin(), v.sizes().end() - 1), v.size(-1));
      dk_rows.back() = 0, dv_rows.back() = 0;
      const LoopGeometry<10> g = walk_geometry<10>(
          rows, {operand(dq, buffer_row_strides(rows, q.size(-1))), operand(q, row_strides(q)),
                 operand(k, batch_strides(k)), operand(v, batch_strides(v)), operand(m, Shape(ms.begin(), ms.end() - 1)),
                 operand(lse, contiguous_strides(rows)), operand(go, row_strides(go)), operand(o, row_strides(o)),
                 operand(dk, dk_rows), operand(dv, dv_rows)},
          "fused_attention_backward");
      dispatch_floating(lse.dtype(), "fused_attention_backward", [&]<typename Lse>() {
        MF_CHECK(lse.is_contiguous(), Error, "fused_attention_backward: expected a contiguous logsumexp");
        L::template for_each<10>(q.device(), g, shape_numel(rows),
                                 BackwardRow<M, T, A, Lse>{scores_of<M, T, A>(q, k, v, mask, ms, attrs),
                                                           go.strides().back(), o.strides().back()});
      });
    } else {
      elementwise_kernels::fill<L>(dq, Scalar(0));
    }
    elementwise_kernels::copy_cast<L>(out[0], dq);
    elementwise_kernels::copy_cast<L>(out[1], dk);
    elementwise_kernels::copy_cast<L>(out[2], dv);
  });
}

// The scratch (Note [Kernel scratch]): accumulators in float32 (float64
// for float64), the output's rows forward, the three gradients backward.
inline DType accumulator_of(DType dtype) { return dtype == DType::Float64 ? DType::Float64 : DType::Float32; }
inline int64_t forward_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs&) {
  return ScratchLayout("scaled_dot_product_attention").add(out[0].sizes, accumulator_of(in[0].dtype())).bytes();
}
inline int64_t backward_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  const DType acc = accumulator_of(in[1].dtype());
  return ScratchLayout("scaled_dot_product_attention")
      .add(in[1].sizes(), acc)
      .add(in[2].sizes(), acc)
      .add(in[3].sizes(), acc)
      .bytes();
}

template <typename L>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("fused_attention", device, forward<L>, forward_scratch);
  OpRegistry::instance().set_kernel("fused_attention_backward", device, backward<L>, backward_scratch);
}

}  // namespace mf::attention_kernels
