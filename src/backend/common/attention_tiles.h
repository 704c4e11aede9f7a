// Note [Tiled attention]
// fused_attention and its backward on a device as block programs (Note
// [Block programs]) that keep tiles of the operands in shared memory, in
// the manner of FlashAttention (Dao et al., https://arxiv.org/abs/2205.14135,
// and FlashAttention-2, https://arxiv.org/abs/2307.08691), for calls whose
// head dims E and Ev are at most kMaxTileHead (a thread holds its rows in
// its State) and whose weights do not fit the batched GEMMs (Note
// [Attention by batched GEMMs]); larger heads keep the row walks (Note
// [Device attention]).
//
//   forward:  a block owns kQueryTile query rows of one batch matrix, a
//             thread per row with q's row, its output row o, m and l in
//             its State. For each tile of Bc keys the threads copy k's and
//             v's rows into shared memory as A (float32; float64 for
//             float64), and after a barrier each thread takes the tile's
//             keys in increasing order with the row walk's update
//             (Scores::score and Scores::keep, the same m, l and
//             correction), so its output and lse equal the row walk's bit
//             for bit where the math library is the same. Under is_causal
//             the key tiles after the block's last query are skipped.
//   backward: D = rowsum(grad_out * out) is one walk over the rows first.
//             A block owns kKeyTile keys of one batch matrix, a thread per
//             key with k's and v's rows and its dk and dv rows in its
//             State. For each tile of Bq queries the threads copy q's and
//             grad_out's rows, lse and D into shared memory; after a
//             barrier each thread takes the tile's queries in increasing
//             order, with BackwardRow's p, dp and ds, adds into its own dk
//             and dv, and into dq atomically (the keys of all blocks share
//             the queries). Under is_causal the query tiles before the
//             block's first key are skipped.
//
// Tile sizes: Bc (forward) and Bq (backward) are the largest powers of two
// up to 64 whose tiles fit kTileSharedBytes (48 KiB, what a CUDA block has
// without asking): Bc (E + Ev) and Bq (E + Ev + 2) elements of A. With
// heads of 128, that is Bc = Bq = 32 for float32 and 16 for float64; heads
// of 64 take 64 for float32.
//
// The accumulators are the kernel's scratch (Note [Kernel scratch]), as the
// row walks': the output's rows forward; dq, dk, dv and D backward, copied
// into the outputs at the end.
#pragma once

#include <algorithm>
#include <limits>

#include "backend/common/attention_kernels.h"
#include "backend/common/block_program.h"
#include "backend/common/elementwise_kernels.h"

namespace mf::attention_tiles {

using attention_kernels::mask_strides_of;
using attention_kernels::Scores;
using attention_kernels::scores_of;
using index_kernels::operand;
using index_kernels::walk_geometry;

inline constexpr int64_t kMaxTileHead = 128;
inline constexpr int kQueryTile = 64;  // forward: query rows (threads) per block
inline constexpr int kKeyTile = 64;    // backward: keys (threads) per block
inline constexpr int64_t kTileSharedBytes = 48 * 1024;

// Whether a call's head dims fit a thread's State.
inline bool use_tiles(const Tensor& q, const Tensor& v) {
  return q.size(-1) <= kMaxTileHead && v.size(-1) <= kMaxTileHead;
}

// Bc, and Bq: tiles of `per_row` elements of `acc_bytes` each in kTileSharedBytes.
inline int64_t tile_rows(int64_t per_row, int64_t acc_bytes) {
  return std::min<int64_t>(64, floor_power_of_two(kTileSharedBytes / (std::max<int64_t>(per_row, 1) * acc_bytes)));
}

// The batch dims (B...) of q, one dim of 1 for a single matrix; the first
// strides of a tensor's (or the mask's) along them.
inline Shape batch_sizes(const Tensor& q) {
  Shape s(q.sizes().begin(), q.sizes().end() - 2);
  if (s.empty()) s.push_back(1);
  return s;
}
inline Shape batch_strides_of(const Shape& strides, size_t batch_dims) {
  Shape s(strides.begin(), strides.begin() + std::ptrdiff_t(batch_dims));
  if (s.empty()) s.push_back(0);
  return s;
}

template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE int64_t min_of(T a, T b) {
  return a < b ? a : b;
}

// The forward. Batch operands (the start of each batch matrix): 0 q, 1 k,
// 2 v, 3 the mask. out (the accumulator, (B..., L, Ev)) and lse ((B...,
// L)) are contiguous.
template <typename M, typename T, typename A, typename Lse>
struct ForwardTiles {
  struct State {
    A q[kMaxTileHead], o[kMaxTileHead];
    A m, l;
  };
  Scores<M, T, A> sc;
  LoopGeometry<4> batches;
  int64_t q_l, mask_l;  // q's element stride along L; the mask's byte stride along L
  int64_t query_blocks;  // blocks per batch matrix
  int64_t key_tile;      // Bc
  A* out;
  Lse* lse;

  // The key tiles block meets: all, or under is_causal those up to its last query.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t key_tiles(int64_t block) const {
    const int64_t all = (sc.S + key_tile - 1) / key_tile;
    if (!sc.causal) return all;
    const int64_t last = min_of<int64_t>((block % query_blocks + 1) * kQueryTile, sc.L) - 1;
    return min_of<int64_t>(all, last / key_tile + 1);
  }
  // Phases 2t and 2t + 1 copy key tile t and take its keys; the last writes the rows.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t phases(int64_t block) const { return 2 * key_tiles(block) + 1; }

  MF_FORCE_INLINE MF_HOST_DEVICE void run(int64_t phase, int64_t block, int thread, State& st, char* shared) const {
    const int64_t batch = block / query_blocks, i = (block % query_blocks) * kQueryTile + thread;
    int64_t off[4];
    batches.offsets(batch, off);
    const bool active = i < sc.L;
    A* ks = reinterpret_cast<A*>(shared);  // (Bc, E)
    A* vs = ks + key_tile * sc.E;          // (Bc, Ev)
    if (phase == 0 && active) {
      const T* q = reinterpret_cast<const T*>(batches.data[0] + off[0]) + i * q_l;
      for (int64_t e = 0; e < sc.E; ++e) st.q[e] = M::template to_acc<A>(q[e * sc.q_e]);
      for (int64_t e = 0; e < sc.Ev; ++e) st.o[e] = A(0);
      st.m = -std::numeric_limits<A>::infinity(), st.l = A(0);
    }
    const int64_t t = phase / 2, r = batch * sc.L + i;
    if (t == key_tiles(block)) {
      if (!active) return;
      A* o = out + r * sc.Ev;
      for (int64_t e = 0; e < sc.Ev; ++e) o[e] = st.o[e] / st.l;  // a fully masked row: 0 / 0
      lse[r] = Lse(st.m + M::log(st.l));
      return;
    }
    const int64_t j0 = t * key_tile, keys = min_of<int64_t>(key_tile, sc.S - j0);
    if (phase % 2 == 0) {
      const T* k = reinterpret_cast<const T*>(batches.data[1] + off[1]) + j0 * sc.k_s;
      const T* v = reinterpret_cast<const T*>(batches.data[2] + off[2]) + j0 * sc.v_s;
      for (int64_t x = thread; x < keys * sc.E; x += kQueryTile)
        ks[x] = M::template to_acc<A>(k[(x / sc.E) * sc.k_s + (x % sc.E) * sc.k_e]);
      for (int64_t x = thread; x < keys * sc.Ev; x += kQueryTile)
        vs[x] = M::template to_acc<A>(v[(x / sc.Ev) * sc.v_s + (x % sc.Ev) * sc.v_e]);
      return;
    }
    if (!active) return;
    const char* mask_row = batches.data[3] + off[3] + i * mask_l;
    for (int64_t jj = 0; jj < keys; ++jj) {
      const int64_t j = j0 + jj;
      const A s = sc.score(st.q, 1, ks + jj * sc.E, 1, mask_row, i, j);
      if (s == -std::numeric_limits<A>::infinity()) continue;
      const A m_new = s > st.m ? s : st.m;
      const A correction = M::exp(st.m - m_new), p = M::exp(s - m_new);
      st.l = st.l * correction + p;
      const A weight = p * sc.keep(r, j);
      for (int64_t e = 0; e < sc.Ev; ++e) st.o[e] = st.o[e] * correction + weight * vs[jj * sc.Ev + e];
      st.m = m_new;
    }
  }
};

// Operands over the rows (B..., L): 0 the row's D (A, contiguous),
// 1 grad_out's and 2 out's row.
template <typename M, typename T, typename A>
struct DeltaRow {
  int64_t Ev, go_e, out_e;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const T* go = reinterpret_cast<const T*>(data[1] + off[1]);
    const T* out = reinterpret_cast<const T*>(data[2] + off[2]);
    A d = A(0);
    for (int64_t e = 0; e < Ev; ++e) d += M::template to_acc<A>(go[e * go_e]) * M::template to_acc<A>(out[e * out_e]);
    *reinterpret_cast<A*>(data[0] + off[0]) = d;
  }
};

// The backward. Batch operands: 0 q, 1 k, 2 v, 3 the mask, 4 grad_out.
// dq ((B..., L, E)), dk ((B..., S, E)), dv ((B..., S, Ev)), lse and D
// ((B..., L)) are contiguous.
template <typename M, typename T, typename A, typename Lse>
struct BackwardTiles {
  struct State {
    A k[kMaxTileHead], v[kMaxTileHead], dk[kMaxTileHead], dv[kMaxTileHead];
  };
  Scores<M, T, A> sc;
  LoopGeometry<5> batches;
  int64_t q_l, go_l, go_e, mask_l;  // element strides along L and E; the mask's byte stride along L
  int64_t key_blocks;               // blocks per batch matrix
  int64_t query_tile;               // Bq
  A *dq, *dk, *dv;
  const A* delta;
  const Lse* lse;

  // The first query tile block meets: 0, or under is_causal the tile of its first key.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t first_tile(int64_t block) const {
    const int64_t all = (sc.L + query_tile - 1) / query_tile;
    return sc.causal ? min_of<int64_t>(all, (block % key_blocks) * kKeyTile / query_tile) : 0;
  }
  // Phases 2t and 2t + 1 copy the block's query tile t and take its
  // queries; the last writes dk's and dv's rows.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t phases(int64_t block) const {
    return 2 * ((sc.L + query_tile - 1) / query_tile - first_tile(block)) + 1;
  }

  MF_FORCE_INLINE MF_HOST_DEVICE void run(int64_t phase, int64_t block, int thread, State& st, char* shared) const {
    const int64_t batch = block / key_blocks, j = (block % key_blocks) * kKeyTile + thread;
    int64_t off[5];
    batches.offsets(batch, off);
    const bool active = j < sc.S;
    A* qs = reinterpret_cast<A*>(shared);  // (Bq, E)
    A* gs = qs + query_tile * sc.E;        // (Bq, Ev)
    A* lses = gs + query_tile * sc.Ev;     // (Bq)
    A* ds = lses + query_tile;             // (Bq): D
    if (phase == 0 && active) {
      const T* k = reinterpret_cast<const T*>(batches.data[1] + off[1]) + j * sc.k_s;
      const T* v = reinterpret_cast<const T*>(batches.data[2] + off[2]) + j * sc.v_s;
      for (int64_t e = 0; e < sc.E; ++e) st.k[e] = M::template to_acc<A>(k[e * sc.k_e]), st.dk[e] = A(0);
      for (int64_t e = 0; e < sc.Ev; ++e) st.v[e] = M::template to_acc<A>(v[e * sc.v_e]), st.dv[e] = A(0);
    }
    const int64_t first = first_tile(block);
    if (phase == phases(block) - 1) {
      if (!active) return;
      const int64_t key = batch * sc.S + j;
      for (int64_t e = 0; e < sc.E; ++e) dk[key * sc.E + e] = st.dk[e];
      for (int64_t e = 0; e < sc.Ev; ++e) dv[key * sc.Ev + e] = st.dv[e];
      return;
    }
    const int64_t i0 = (first + phase / 2) * query_tile, queries = min_of<int64_t>(query_tile, sc.L - i0);
    if (phase % 2 == 0) {
      const T* q = reinterpret_cast<const T*>(batches.data[0] + off[0]) + i0 * q_l;
      const T* go = reinterpret_cast<const T*>(batches.data[4] + off[4]) + i0 * go_l;
      for (int64_t x = thread; x < queries * sc.E; x += kKeyTile)
        qs[x] = M::template to_acc<A>(q[(x / sc.E) * q_l + (x % sc.E) * sc.q_e]);
      for (int64_t x = thread; x < queries * sc.Ev; x += kKeyTile)
        gs[x] = M::template to_acc<A>(go[(x / sc.Ev) * go_l + (x % sc.Ev) * go_e]);
      for (int64_t x = thread; x < queries; x += kKeyTile) {
        lses[x] = A(lse[batch * sc.L + i0 + x]);
        ds[x] = delta[batch * sc.L + i0 + x];
      }
      return;
    }
    if (!active) return;
    for (int64_t ii = 0; ii < queries; ++ii) {
      const int64_t i = i0 + ii, r = batch * sc.L + i;
      const char* mask_row = batches.data[3] + off[3] + i * mask_l;
      const A s = sc.score(qs + ii * sc.E, 1, st.k, 1, mask_row, i, j);
      if (s == -std::numeric_limits<A>::infinity()) continue;
      const A p = M::exp(s - lses[ii]), kept = sc.keep(r, j);
      A dp = A(0);
      for (int64_t e = 0; e < sc.Ev; ++e) {
        const A g = gs[ii * sc.Ev + e];
        st.dv[e] += p * kept * g;
        dp += g * st.v[e];
      }
      const A d_s = p * (dp * kept - ds[ii]) * sc.scale;
      for (int64_t e = 0; e < sc.E; ++e) {
        st.dk[e] += d_s * qs[ii * sc.E + e];
        index_kernels::atomic_add<M>(dq + r * sc.E + e, d_s * st.k[e]);
      }
    }
  }
};

// The scratch (Note [Kernel scratch]): the row walks' where they run;
// else the output's rows forward, and dq, dk, dv and D backward.
inline int64_t forward_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  return attention_kernels::forward_scratch(in, out, attrs);
}
inline int64_t backward_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const Tensor &q = in[1], &v = in[3];
  if (!use_tiles(q, v)) return attention_kernels::backward_scratch(in, out, attrs);
  const DType acc = attention_kernels::accumulator_of(q.dtype());
  return ScratchLayout("scaled_dot_product_attention")
      .add(q.sizes(), acc)
      .add(in[2].sizes(), acc)
      .add(v.sizes(), acc)
      .add(Shape(q.sizes().begin(), q.sizes().end() - 1), acc)
      .bytes();
}

// inputs (q, k, v, mask); outputs out, lse.
template <typename L>
void forward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &q = in[0], &k = in[1], &v = in[2], &mask = in[3];
  if (!use_tiles(q, v)) return attention_kernels::forward<L>(in, out, attrs);
  Tensor &y = out[0], &lse = out[1];
  if (shape_numel(Shape(q.sizes().begin(), q.sizes().end() - 1)) == 0) return;
  MF_CHECK(lse.is_contiguous(), Error, "fused_attention: expected a contiguous logsumexp");
  const Shape ms = mask_strides_of(mask, q, k);
  const Tensor& m = mask.defined() ? mask : q;
  const size_t nb = size_t(q.dim() - 2);
  const Shape batches = batch_sizes(q);
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using M = typename L::Math;
    Tensor acc = Scratch(out).take(y.sizes(), dtype_of<A>());
    dispatch_floating(lse.dtype(), "fused_attention", [&]<typename Lse>() {
      ForwardTiles<M, T, A, Lse> program{};
      program.sc = scores_of<M, T, A>(q, k, v, mask, ms, attrs);
      program.batches = walk_geometry<4>(
          batches, {operand(q, batch_strides_of(q.strides(), nb)), operand(k, batch_strides_of(k.strides(), nb)),
                    operand(v, batch_strides_of(v.strides(), nb)), operand(m, batch_strides_of(ms, nb))},
          "fused_attention");
      program.q_l = q.strides()[nb];
      program.mask_l = ms[nb] * int64_t(m.element_size());
      program.query_blocks = (q.size(-2) + kQueryTile - 1) / kQueryTile;
      program.key_tile = tile_rows(q.size(-1) + v.size(-1), int64_t(sizeof(A)));
      program.out = static_cast<A*>(acc.data_ptr());
      program.lse = static_cast<Lse*>(lse.data_ptr());
      L::run_blocks(y.device(), shape_numel(batches) * program.query_blocks, kQueryTile,
                    program.key_tile * (q.size(-1) + v.size(-1)) * int64_t(sizeof(A)), program);
    });
    elementwise_kernels::copy_cast<L>(y, acc);
  });
}

// inputs (grad_out, q, k, v, mask, out, lse); outputs dq, dk, dv.
template <typename L>
void backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &go = in[0], &q = in[1], &k = in[2], &v = in[3], &mask = in[4], &o = in[5], &lse = in[6];
  if (!use_tiles(q, v)) return attention_kernels::backward<L>(in, out, attrs);
  MF_CHECK(lse.is_contiguous(), Error, "fused_attention_backward: expected a contiguous logsumexp");
  const Shape rows(q.sizes().begin(), q.sizes().end() - 1);
  const Shape ms = mask_strides_of(mask, q, k);
  const Tensor& m = mask.defined() ? mask : q;
  const size_t nb = size_t(q.dim() - 2);
  const Shape batches = batch_sizes(q);
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using M = typename L::Math;
    Scratch taken(out);
    Tensor dq = taken.take(q.sizes(), dtype_of<A>()), dk = taken.take(k.sizes(), dtype_of<A>()),
           dv = taken.take(v.sizes(), dtype_of<A>()), delta = taken.take(rows, dtype_of<A>());
    elementwise_kernels::fill<L>(dq, Scalar(0));
    if (shape_numel(rows) > 0) {
      const LoopGeometry<3> g = walk_geometry<3>(
          rows,
          {operand(delta, contiguous_strides(rows)), operand(go, attention_kernels::row_strides(go)),
           operand(o, attention_kernels::row_strides(o))},
          "fused_attention_backward");
      L::template for_each<3>(q.device(), g, shape_numel(rows),
                              DeltaRow<M, T, A>{v.size(-1), go.strides().back(), o.strides().back()});
    }
    dispatch_floating(lse.dtype(), "fused_attention_backward", [&]<typename Lse>() {
      BackwardTiles<M, T, A, Lse> program{};
      program.sc = scores_of<M, T, A>(q, k, v, mask, ms, attrs);
      program.batches = walk_geometry<5>(
          batches, {operand(q, batch_strides_of(q.strides(), nb)), operand(k, batch_strides_of(k.strides(), nb)),
                    operand(v, batch_strides_of(v.strides(), nb)), operand(m, batch_strides_of(ms, nb)),
                    operand(go, batch_strides_of(go.strides(), nb))},
          "fused_attention_backward");
      program.q_l = q.strides()[nb];
      program.go_l = go.strides()[nb], program.go_e = go.strides().back();
      program.mask_l = ms[nb] * int64_t(m.element_size());
      program.key_blocks = (k.size(-2) + kKeyTile - 1) / kKeyTile;
      program.query_tile = tile_rows(q.size(-1) + v.size(-1) + 2, int64_t(sizeof(A)));
      program.dq = static_cast<A*>(dq.data_ptr());
      program.dk = static_cast<A*>(dk.data_ptr());
      program.dv = static_cast<A*>(dv.data_ptr());
      program.delta = static_cast<const A*>(delta.data_ptr());
      program.lse = static_cast<const Lse*>(lse.data_ptr());
      L::run_blocks(q.device(), shape_numel(batches) * program.key_blocks, kKeyTile,
                    program.query_tile * (q.size(-1) + v.size(-1) + 2) * int64_t(sizeof(A)), program);
    });
    elementwise_kernels::copy_cast<L>(out[0], dq);
    elementwise_kernels::copy_cast<L>(out[1], dk);
    elementwise_kernels::copy_cast<L>(out[2], dv);
  });
}

// Registers fused_attention and its backward on `device`: the tiles where
// the head dims fit, the row walks elsewhere.
template <typename L>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("fused_attention", device, forward<L>, forward_scratch);
  OpRegistry::instance().set_kernel("fused_attention_backward", device, backward<L>, backward_scratch);
}

}  // namespace mf::attention_tiles
