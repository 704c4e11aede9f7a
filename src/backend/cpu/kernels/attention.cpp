// The fused attention kernels on the CPU (attention.h).
#include "backend/cpu/kernels/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "meshflow/dtype.h"
#include "meshflow/error.h"
#include "meshflow/generator.h"
#include "meshflow/op_def.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/math.h"
#include "ops/random_common.h"

namespace mf::cpu {

// Note [Fused attention]
// ~~~~~~~~~~~~~~~~~~~~~~
// out = dropout(softmax(q k^T * scale + mask)) v, computed as FlashAttention
// does: the queries in blocks of kQueryBlock rows, each block meeting the
// keys in blocks of kKeyBlock with an online softmax (a running row maximum
// m and sum l rescale the partial output when m grows). Memory is the
// blocks plus out and lse = m + log(l): linear in the sequence, where the
// composed formula keeps (L, S) weights (and, under dropout, their mask).
// Products are float32 (float64 for float64 inputs) GEMM calls on blocks
// (block_gemm: oneDNN's sgemm, OpenBLAS for float64) read in place or
// packed from any strides, scale folded into the query block.
//
// Backward recomputes each block's weights from lse: P = exp(S - lse),
// dV += P^T dO, dP = dO V^T, dS = P * (dP - D) with D = rowsum(dO * out),
// dQ += scale * dS K, dK += dS^T (scale * Q). One task per batch matrix
// walks the key blocks (owning their dK and dV) and, inside, the query
// blocks, adding into a (L, E) dQ of its own: no two tasks write one value.
//
// A key block whose masked scores are all -inf for a query block adds
// nothing and is skipped: under is_causal the blocks above the diagonal are
// never computed, and an additive or boolean mask with whole blocks masked
// (padding, local windows, a causal mask given as a tensor) skips them too.
// A row with every key masked gives NaN, as the composed formula does.
//
// Dropout keeps weight (b, i, j) when word idx % 4 of Philox(seed,
// offset + idx / 4), idx = (b * L + i) * S + j, has its top 24 bits below
// (1 - p) * 2^24: the dropout op's rule over the weights' elements, so
// backward regenerates the mask instead of storing it.

namespace {

// The block products run inside parallel_for tasks, several at once: float
// goes through oneDNN's sgemm, which runs on the calling thread there (the
// pthreads OpenBLAS, called from two OpenMP threads at once, left the
// library's later large GEMMs up to 2x slower), double through OpenBLAS.
template <typename A>
void block_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, A alpha, const A* a, int64_t lda, const A* b,
                int64_t ldb, A beta, A* c, int64_t ldc) {
  if constexpr (std::is_same_v<A, float>) {
    if (m == 0 || n == 0) return;
    if (k == 0) return gemm_rows<A>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);  // C = beta * C
    const dnnl_status_t status =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    MF_CHECK(status == dnnl_success, Error, "scaled_dot_product_attention: internal: oneDNN sgemm failed (status ",
             int(status), ")");
  } else {
    gemm_rows<A>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 128;

// A (batch..., rows, cols) operand read through its strides: element
// (b, r, c) is data[offsets[b] + r * rs + c * cs] (a broadcast dim steps 0).
template <typename T>
struct Strided {
  const T* data;
  Offsets offsets;
  int64_t rs, cs;

  Strided(const Tensor& t, const Shape& batch)
      : data(static_cast<const T*>(t.data_ptr())),
        offsets(batch_offsets(t, batch)),
        rs(t.size(-2) == 1 ? 0 : t.stride(-2)),
        cs(t.size(-1) == 1 ? 0 : t.stride(-1)) {}

  const T* row(int64_t b, int64_t r) const { return data + offsets[size_t(b)] + r * rs; }

  // Rows [r0, r0 + n) of matrix b as a row-major block of A with leading
  // dim *ld: in place when T is A and the rows are unit-strided, else
  // packed into scratch.
  template <typename A>
  const A* block(int64_t b, int64_t r0, int64_t n, int64_t cols, A* scratch, int64_t* ld) const {
    if constexpr (std::is_same_v<T, A>) {
      if ((cs == 1 || cols == 1) && rs >= cols && n > 0) {
        *ld = rs;
        return row(b, r0);
      }
    }
    pack(b, r0, n, cols, A(1), scratch);
    *ld = cols;
    return scratch;
  }

  // Rows [r0, r0 + n) of matrix b, times mul, into dst (n, cols) row-major.
  template <typename A>
  void pack(int64_t b, int64_t r0, int64_t n, int64_t cols, A mul, A* dst) const {
    for (int64_t r = 0; r < n; ++r) {
      const T* src = row(b, r0 + r);
      A* d = dst + r * cols;
      if constexpr (std::is_same_v<T, A>) {
        if (cs == 1 && mul == A(1)) {
          std::memcpy(d, src, size_t(cols) * sizeof(A));
          continue;
        }
      }
      for (int64_t c = 0; c < cols; ++c) d[c] = A(src[c * cs]) * mul;
    }
  }
};

// exp over a row: the vectorising float exp (math.h), std::exp for double.
template <typename A>
[[gnu::always_inline]] inline A exp_of(A x) {
  if constexpr (std::is_same_v<A, float>) return math::exp(x);
  else return std::exp(x);
}

template <typename A>
A row_max(const A* s, int64_t n) {
  A mx = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < n; ++c) mx = s[c] > mx ? s[c] : mx;
  return mx;
}

uint32_t keep_threshold(double p) { return uint32_t(std::ceil(double(float(1.0 - p)) * 16777216.0)); }

// Per-thread scratch of one kernel call.
template <typename A>
struct Blocks {
  std::vector<A> q, k, v, s, p, o, d_o, dk, dv, m, l, keep;
  Blocks(int64_t e, int64_t ev) {
    q.resize(size_t(kQueryBlock * e));
    k.resize(size_t(kKeyBlock * e));
    v.resize(size_t(kKeyBlock * ev));
    s.resize(size_t(kQueryBlock * kKeyBlock));
    p.resize(size_t(kQueryBlock * kKeyBlock));
    keep.resize(size_t(kQueryBlock * kKeyBlock));
    o.resize(size_t(kQueryBlock * ev));
    d_o.resize(size_t(kQueryBlock * ev));
    dk.resize(size_t(kKeyBlock * e));
    dv.resize(size_t(kKeyBlock * ev));
    m.resize(size_t(kQueryBlock));
    l.resize(size_t(kQueryBlock));
  }
};

// The shapes and operands of one call, for element type T and mask type M
// (bool, or T for an additive mask; void: none).
template <typename T, typename M>
struct Problem {
  using A = acc_type<T>;
  int64_t batch, queries, keys, e, ev;
  AttentionArgs args;
  Strided<T> q, k, v;
  using MaskT = std::conditional_t<std::is_void_v<M>, bool, M>;
  std::optional<Strided<MaskT>> mask;

  Problem(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& mt, const AttentionArgs& a,
          const Shape& batch_shape)
      : batch(1), queries(qt.size(-2)), keys(kt.size(-2)), e(qt.size(-1)), ev(vt.size(-1)), args(a),
        q(qt, batch_shape), k(kt, batch_shape), v(vt, batch_shape) {
    for (int64_t s : batch_shape) batch *= s;
    if constexpr (!std::is_void_v<M>) mask.emplace(mt, batch_shape);
  }

  // s (nq, nk) = masked scores of queries [i0, i0 + nq) and keys
  // [j0, j0 + nk) of matrix b from the packed, scaled q and the packed k;
  // false when every one is -inf.
  bool scores(int64_t b, int64_t i0, int64_t nq, int64_t j0, int64_t nk, const A* qs, const A* ks, int64_t ldk,
              A* s) const {
    block_gemm<A>(false, true, nq, nk, e, A(1), qs, e, ks, ldk, A(0), s, nk);
    constexpr A neg_inf = -std::numeric_limits<A>::infinity();
    bool any = false;
    for (int64_t r = 0; r < nq; ++r) {
      A* row = s + r * nk;
      const int64_t i = i0 + r;
      if (args.causal)
        for (int64_t c = std::max<int64_t>(0, i + 1 - j0); c < nk; ++c) row[c] = neg_inf;
      if constexpr (!std::is_void_v<M>) {
        const M* mrow = mask->row(b, i) + j0 * mask->cs;
        const int64_t mcs = mask->cs;
        if constexpr (std::is_same_v<M, bool>) {
          for (int64_t c = 0; c < nk; ++c)
            if (!mrow[c * mcs]) row[c] = neg_inf;
        } else {
          for (int64_t c = 0; c < nk; ++c) row[c] += A(mrow[c * mcs]);
        }
      }
      for (int64_t c = 0; c < nk && !any; ++c) any = row[c] != neg_inf;
    }
    return any;
  }

  // keep (nq, nk): 1 / (1 - p) for the kept weights of the block, 0 for
  // the dropped ones (Note [Fused attention]).
  void dropout_mask(int64_t b, int64_t i0, int64_t nq, int64_t j0, int64_t nk, A* keep) const {
    const uint32_t threshold = keep_threshold(args.dropout_p);
    const A scale = A(1.0 / (1.0 - args.dropout_p));
    for (int64_t r = 0; r < nq; ++r) {
      const uint64_t first = uint64_t(((b * queries) + i0 + r) * keys + j0);
      uint64_t counter = std::numeric_limits<uint64_t>::max();
      std::array<uint32_t, 4> words{};
      for (int64_t c = 0; c < nk; ++c) {
        const uint64_t idx = first + uint64_t(c);
        if (idx / 4 != counter) {
          counter = idx / 4;
          words = philox(args.seed, args.offset + counter);
        }
        keep[r * nk + c] = (words[idx % 4] >> 8) < threshold ? scale : A(0);
      }
    }
  }

  int64_t key_end(int64_t i0, int64_t nq) const { return args.causal ? std::min(keys, i0 + nq) : keys; }
};

template <typename T, typename M>
void forward(const Problem<T, M>& pb, T* out, acc_type<T>* lse_out) {
  using A = acc_type<T>;
  const int64_t blocks_per_matrix = (pb.queries + kQueryBlock - 1) / kQueryBlock;
  const int64_t e = pb.e, ev = pb.ev;
  const bool dropout = pb.args.dropout_p > 0.0;
  parallel_for(0, pb.batch * blocks_per_matrix, 1, [&](int64_t lo, int64_t hi) {
    Blocks<A> w(e, ev);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / blocks_per_matrix, i0 = (task % blocks_per_matrix) * kQueryBlock;
      const int64_t nq = std::min(kQueryBlock, pb.queries - i0);
      pb.q.pack(b, i0, nq, e, A(pb.args.scale), w.q.data());
      std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<A>::infinity());
      std::fill(w.l.begin(), w.l.end(), A(0));
      std::fill(w.o.begin(), w.o.begin() + nq * ev, A(0));
      const int64_t kend = pb.key_end(i0, nq);
      for (int64_t j0 = 0; j0 < kend; j0 += kKeyBlock) {
        const int64_t nk = std::min(kKeyBlock, kend - j0);
        int64_t ldk, ldv;
        const A* kb = pb.k.block(b, j0, nk, e, w.k.data(), &ldk);
        if (!pb.scores(b, i0, nq, j0, nk, w.q.data(), kb, ldk, w.s.data())) continue;
        const A* vb = pb.v.block(b, j0, nk, ev, w.v.data(), &ldv);
        if (dropout) pb.dropout_mask(b, i0, nq, j0, nk, w.keep.data());
        for (int64_t r = 0; r < nq; ++r) {
          A* s = w.s.data() + r * nk;
          const A mx = row_max(s, nk);
          const A m_new = std::max(w.m[size_t(r)], mx);
          // All -inf so far: the row adds nothing yet (exp(-inf - 0) = 0).
          const A ref = std::isinf(m_new) && m_new < 0 ? A(0) : m_new;
          const A alpha = exp_of(w.m[size_t(r)] - ref);
          A sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < nk; ++c) {
            s[c] = exp_of(s[c] - ref);
            sum += s[c];
          }
          if (dropout)
            for (int64_t c = 0; c < nk; ++c) s[c] *= w.keep[size_t(r * nk + c)];
          w.l[size_t(r)] = w.l[size_t(r)] * alpha + sum;
          w.m[size_t(r)] = m_new;
          if (alpha != A(1))
            for (int64_t c = 0; c < ev; ++c) w.o[size_t(r * ev + c)] *= alpha;
        }
        block_gemm<A>(false, false, nq, ev, nk, A(1), w.s.data(), nk, vb, ldv, A(1), w.o.data(), ev);
      }
      for (int64_t r = 0; r < nq; ++r) {
        const int64_t row = b * pb.queries + i0 + r;
        const A l = w.l[size_t(r)];
        for (int64_t c = 0; c < ev; ++c) out[row * ev + c] = T(w.o[size_t(r * ev + c)] / l);
        lse_out[row] = w.m[size_t(r)] + std::log(l);
      }
    }
  });
}

template <typename T, typename M>
void backward(const Problem<T, M>& pb, const Strided<T>& grad_out, const T* out, const acc_type<T>* lse, T* dq_out,
              T* dk_out, T* dv_out) {
  using A = acc_type<T>;
  const int64_t e = pb.e, ev = pb.ev, L = pb.queries, S = pb.keys;
  const bool dropout = pb.args.dropout_p > 0.0;
  const A scale = A(pb.args.scale);
  parallel_for(0, pb.batch, 1, [&](int64_t lo, int64_t hi) {
    Blocks<A> w(e, ev);
    std::vector<A> dq(size_t(L * e));
    std::vector<A> dvec(static_cast<size_t>(L));
    for (int64_t b = lo; b < hi; ++b) {
      // D = rowsum(dO * out)
      for (int64_t i = 0; i < L; ++i) {
        const T* g = grad_out.row(b, i);
        const T* o = out + (b * L + i) * ev;
        A d = 0;
        for (int64_t c = 0; c < ev; ++c) d += A(g[c * grad_out.cs]) * A(o[c]);
        dvec[size_t(i)] = d;
      }
      std::fill(dq.begin(), dq.end(), A(0));
      for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
        const int64_t nk = std::min(kKeyBlock, S - j0);
        int64_t ldk, ldv;
        const A* kb = pb.k.block(b, j0, nk, e, w.k.data(), &ldk);
        const A* vb = pb.v.block(b, j0, nk, ev, w.v.data(), &ldv);
        std::fill(w.dk.begin(), w.dk.begin() + nk * e, A(0));
        std::fill(w.dv.begin(), w.dv.begin() + nk * ev, A(0));
        const int64_t istart = pb.args.causal ? (j0 / kQueryBlock) * kQueryBlock : 0;
        for (int64_t i0 = istart; i0 < L; i0 += kQueryBlock) {
          const int64_t nq = std::min(kQueryBlock, L - i0);
          pb.q.pack(b, i0, nq, e, scale, w.q.data());
          if (!pb.scores(b, i0, nq, j0, nk, w.q.data(), kb, ldk, w.s.data())) continue;
          int64_t ldg;
          const A* gb = grad_out.block(b, i0, nq, ev, w.d_o.data(), &ldg);
          if (dropout) pb.dropout_mask(b, i0, nq, j0, nk, w.keep.data());
          // s <- P; p <- P * keep (the weights that met v)
          for (int64_t r = 0; r < nq; ++r) {
            const A row_lse = lse[b * L + i0 + r];
            A* s = w.s.data() + r * nk;
#pragma omp simd
            for (int64_t c = 0; c < nk; ++c) s[c] = exp_of(s[c] - row_lse);
          }
          const A* pd = w.s.data();
          if (dropout) {
            for (int64_t x = 0; x < nq * nk; ++x) w.p[size_t(x)] = w.s[size_t(x)] * w.keep[size_t(x)];
            pd = w.p.data();
          }
          block_gemm<A>(true, false, nk, ev, nq, A(1), pd, nk, gb, ldg, A(1), w.dv.data(), ev);
          // p <- dP (of the kept weights), then dS = P * (dP * keep - D)
          block_gemm<A>(false, true, nq, nk, ev, A(1), gb, ldg, vb, ldv, A(0), w.p.data(), nk);
          for (int64_t r = 0; r < nq; ++r) {
            const A d = dvec[size_t(i0 + r)];
            A* dp = w.p.data() + r * nk;
            const A* p = w.s.data() + r * nk;
            if (dropout) {
              const A* keep = w.keep.data() + r * nk;
#pragma omp simd
              for (int64_t c = 0; c < nk; ++c) dp[c] = p[c] * (dp[c] * keep[c] - d);
            } else {
#pragma omp simd
              for (int64_t c = 0; c < nk; ++c) dp[c] = p[c] * (dp[c] - d);
            }
          }
          block_gemm<A>(false, false, nq, e, nk, scale, w.p.data(), nk, kb, ldk, A(1), dq.data() + i0 * e, e);
          block_gemm<A>(true, false, nk, e, nq, A(1), w.p.data(), nk, w.q.data(), e, A(1), w.dk.data(), e);
        }
        for (int64_t r = 0; r < nk; ++r) {
          const int64_t row = b * S + j0 + r;
          for (int64_t c = 0; c < e; ++c) dk_out[row * e + c] = T(w.dk[size_t(r * e + c)]);
          for (int64_t c = 0; c < ev; ++c) dv_out[row * ev + c] = T(w.dv[size_t(r * ev + c)]);
        }
      }
      for (int64_t x = 0; x < L * e; ++x) dq_out[b * L * e + x] = T(dq[size_t(x)]);
    }
  });
}

Shape batch_of(const Tensor& q) { return Shape(q.sizes().begin(), q.sizes().end() - 2); }

// fn.template operator()<T, M>() for q's dtype and the mask's kind.
template <typename F>
void dispatch_attention(const Tensor& q, const Tensor& mask, F&& fn) {
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    if (!mask.defined()) fn.template operator()<T, void>();
    else if (mask.dtype() == kBool) fn.template operator()<T, bool>();
    else {
      MF_CHECK(mask.dtype() == q.dtype(), TypeError, "scaled_dot_product_attention: internal: an additive mask of ",
               dtype_name(mask.dtype()), " for ", dtype_name(q.dtype()), " scores");
      fn.template operator()<T, T>();
    }
  });
}

}  // namespace

uint64_t attention_dropout_counters(int64_t batch, int64_t queries, int64_t keys) {
  return (uint64_t(batch) * uint64_t(queries) * uint64_t(keys) + 3) / 4;
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionArgs& args, Tensor& out, Tensor& lse) {
  const Shape batch = batch_of(q);
  dispatch_attention(q, mask, [&]<typename T, typename M>() {
    const Problem<T, M> pb(q, k, v, mask, args, batch);
    forward<T, M>(pb, static_cast<T*>(out.data_ptr()), static_cast<acc_type<T>*>(lse.data_ptr()));
  });
}

void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionArgs& args,
                        Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  const Shape batch = batch_of(q);
  dispatch_attention(q, mask, [&]<typename T, typename M>() {
    const Problem<T, M> pb(q, k, v, mask, args, batch);
    const Strided<T> g(grad_out, batch);
    backward<T, M>(pb, g, static_cast<const T*>(out.data_ptr()), static_cast<const acc_type<T>*>(lse.data_ptr()),
                   static_cast<T*>(grad_q.data_ptr()), static_cast<T*>(grad_k.data_ptr()),
                   static_cast<T*>(grad_v.data_ptr()));
  });
}

namespace {

// The attrs of fused_attention and fused_attention_backward (src/ops/attention.cpp).
AttentionArgs attention_args(const Attrs& attrs) {
  AttentionArgs a;
  a.scale = attrs.get_float("scale");
  a.causal = attrs.get_bool("is_causal");
  a.dropout_p = attrs.get_float("dropout_p");
  if (a.dropout_p > 0.0) {
    const random_detail::Stream stream = random_detail::stream_of(attrs);
    a.seed = stream.seed, a.offset = stream.offset;
  }
  return a;
}

}  // namespace

// inputs (query, key, value, attn_mask); outputs (out, lse).
MF_REGISTER_KERNEL("fused_attention", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  attention_forward(in[0], in[1], in[2], in[3], attention_args(attrs), out[0], out[1]);
});
// inputs (grad_out, query, key, value, attn_mask, out, lse); outputs the
// gradients of query, key and value.
MF_REGISTER_KERNEL("fused_attention_backward", DeviceType::CPU,
                   [](const TensorList& in, TensorList& out, const Attrs& attrs) {
                     attention_backward(in[0], in[1], in[2], in[3], in[4], in[5], in[6], attention_args(attrs),
                                        out[0], out[1], out[2]);
                   });

}  // namespace mf::cpu
