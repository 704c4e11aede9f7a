// CPU elementwise loops over broadcast, strided operands.
//
// elementwise<Out, In...>(out, {&a, &b}, f) writes out[i] = f(a[i], b[i])
// for every index i of out's shape; inputs broadcast to that shape (their
// sizes must already broadcast: infer checked that). Contiguous operands run
// a flat loop the compiler vectorises; a broadcast scalar operand is hoisted;
// anything else runs an N-d strided loop. Work is split over the intra-op
// pool (parallel.h).
#pragma once

#include <cstdlib>

#include <array>
#include <tuple>
#include <cstring>
#include <utility>

#include "meshflow/parallel.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

// Byte strides of t broadcast to `shape` (0 where t is broadcast).
inline Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  const int64_t nd = int64_t(shape.size()), td = t.dim();
  Shape out(nd, 0);
  const int64_t item = int64_t(t.element_size());
  for (int64_t i = 0; i < td; ++i) {
    int64_t od = nd - td + i;
    if (t.sizes()[i] != 1) out[od] = t.strides()[i] * item;
  }
  return out;
}

// N operands sharing one iteration shape, with dims merged where all
// operands are contiguous across them.
template <size_t N>
struct StridedOperands {
  Shape sizes;                         // after coalescing, at least 1 dim
  std::array<Shape, N> strides;        // byte strides per operand
  std::array<char*, N> data;

  void coalesce() {
    if (sizes.empty()) {
      sizes.push_back(1);
      for (auto& s : strides) s.push_back(0);
      return;
    }
    Shape new_sizes{sizes[0]};
    std::array<Shape, N> new_strides;
    for (size_t k = 0; k < N; ++k) new_strides[k] = {strides[k][0]};
    for (size_t d = 1; d < sizes.size(); ++d) {
      if (sizes[d] == 1) continue;  // contributes nothing to any address
      if (new_sizes.back() == 1) {
        new_sizes.back() = sizes[d];
        for (size_t k = 0; k < N; ++k) new_strides[k].back() = strides[k][d];
        continue;
      }
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        mergeable = mergeable && new_strides[k].back() == strides[k][d] * sizes[d];
      if (mergeable) {
        new_sizes.back() *= sizes[d];
        for (size_t k = 0; k < N; ++k) new_strides[k].back() = strides[k][d];
      } else {
        new_sizes.push_back(sizes[d]);
        for (size_t k = 0; k < N; ++k) new_strides[k].push_back(strides[k][d]);
      }
    }
    sizes = std::move(new_sizes);
    strides = std::move(new_strides);
  }
};

// Note [Tiled transposed operands]
// An operand whose innermost dim is not its fastest in memory (a transposed
// view: the gradient of a weight used as W^T, a .t() added to a contiguous
// tensor) would make every element of a row run touch another cache line.
// When some operand has a smaller stride along the second-innermost dim
// than along the innermost, the loop walks the last two dims in square
// tiles instead, so each cache line a tile touches is reused across the
// tile's rows. Elementwise results do not depend on the order.
constexpr int64_t kTransposeTile = 32;

template <size_t N>
bool has_transposed_operand(const StridedOperands<N>& ops) {
  const size_t nd = ops.sizes.size();
  if (nd < 2 || ops.sizes[nd - 1] < kTransposeTile / 2 || ops.sizes[nd - 2] < kTransposeTile / 2) return false;
  for (size_t k = 0; k < N; ++k) {
    const int64_t inner = std::abs(ops.strides[k][nd - 1]), outer = std::abs(ops.strides[k][nd - 2]);
    if (inner != 0 && outer != 0 && outer < inner) return true;
  }
  return false;
}

// for_each_run over square tiles of the last two dims (runs of at most a
// tile's width).
template <size_t N, typename Inner>
void for_each_tile_run(const StridedOperands<N>& ops, int64_t grain, const Inner& inner) {
  const int64_t nd = int64_t(ops.sizes.size());
  const int64_t rows = ops.sizes[nd - 2], cols = ops.sizes[nd - 1], T = kTransposeTile;
  const int64_t row_tiles = (rows + T - 1) / T, col_tiles = (cols + T - 1) / T;
  int64_t outer = 1;
  for (int64_t d = 0; d < nd - 2; ++d) outer *= ops.sizes[d];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = ops.strides[k][nd - 1];
  parallel_for(0, outer * row_tiles * col_tiles, std::max<int64_t>(1, grain / (T * T)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / (row_tiles * col_tiles), rt = t / col_tiles % row_tiles, ct = t % col_tiles;
      std::array<char*, N> base;
      for (size_t k = 0; k < N; ++k) {
        char* p = ops.data[k];
        for (int64_t d = nd - 3, rem = o; d >= 0; --d) {
          p += rem % ops.sizes[d] * ops.strides[k][d];
          rem /= ops.sizes[d];
        }
        base[k] = p + ct * T * ops.strides[k][nd - 1];
      }
      const int64_t n = std::min(T, cols - ct * T);
      for (int64_t r = rt * T; r < std::min(rows, rt * T + T); ++r) {
        std::array<char*, N> ptrs;
        for (size_t k = 0; k < N; ++k) ptrs[k] = base[k] + r * ops.strides[k][nd - 2];
        inner(ptrs, inner_strides, n);
      }
    }
  });
}

// Calls inner(ptrs, byte_strides, n) for runs along the innermost dim
// covering all elements, in parallel chunks.
template <size_t N, typename Inner>
void for_each_run(const StridedOperands<N>& ops, int64_t grain, const Inner& inner) {
  const int64_t nd = int64_t(ops.sizes.size());
  const int64_t inner_size = ops.sizes[nd - 1];
  int64_t numel = 1;
  for (int64_t s : ops.sizes) numel *= s;
  if (numel == 0) return;
  if (has_transposed_operand(ops)) return for_each_tile_run(ops, grain, inner);
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = ops.strides[k][nd - 1];

  parallel_for(0, numel, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`.
    Shape idx(nd, 0);
    int64_t rem = begin;
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = rem % ops.sizes[d];
      rem /= ops.sizes[d];
    }
    std::array<char*, N> ptrs;
    for (size_t k = 0; k < N; ++k) {
      char* p = ops.data[k];
      for (int64_t d = 0; d < nd; ++d) p += idx[d] * ops.strides[k][d];
      ptrs[k] = p;
    }
    int64_t i = begin;
    while (i < end) {
      int64_t n = std::min(inner_size - idx[nd - 1], end - i);
      inner(ptrs, inner_strides, n);
      i += n;
      // Advance the multi-index past the run and recompute pointers.
      idx[nd - 1] += n;
      for (int64_t d = nd - 1; d > 0 && idx[d] == ops.sizes[d]; --d) {
        idx[d] = 0;
        idx[d - 1]++;
      }
      if (i < end) {
        for (size_t k = 0; k < N; ++k) {
          char* p = ops.data[k];
          for (int64_t d = 0; d < nd; ++d) p += idx[d] * ops.strides[k][d];
          ptrs[k] = p;
        }
      }
    }
  });
}

template <size_t N>
StridedOperands<N> make_operands(Tensor& out, const std::array<const Tensor*, N - 1>& ins) {
  StridedOperands<N> ops;
  // Operands that are all contiguous and of out's shape are one flat run:
  // the common case needs neither per-dim strides nor coalescing.
  bool flat = out.is_contiguous() && out.numel() > 0;
  for (size_t k = 1; flat && k < N; ++k) flat = ins[k - 1]->is_contiguous() && ins[k - 1]->sizes() == out.sizes();
  if (flat) {
    ops.sizes.assign(1, out.numel());
    ops.strides[0].assign(1, int64_t(itemsize(out.dtype())));
    ops.data[0] = static_cast<char*>(out.data_ptr());
    for (size_t k = 1; k < N; ++k) {
      ops.strides[k].assign(1, int64_t(itemsize(ins[k - 1]->dtype())));
      ops.data[k] = static_cast<char*>(ins[k - 1]->data_ptr());
    }
    return ops;
  }
  ops.sizes = out.sizes();
  ops.strides[0] = broadcast_byte_strides(out, ops.sizes);
  ops.data[0] = static_cast<char*>(out.data_ptr());
  for (size_t k = 1; k < N; ++k) {
    ops.strides[k] = broadcast_byte_strides(*ins[k - 1], ops.sizes);
    ops.data[k] = static_cast<char*>(ins[k - 1]->data_ptr());
  }
  ops.coalesce();
  return ops;
}

namespace detail {
template <typename Out, typename... In, typename F, size_t... I>
inline void run_inner(std::array<char*, sizeof...(In) + 1>& p, const std::array<int64_t, sizeof...(In) + 1>& s,
                      int64_t n, const F& f, std::index_sequence<I...>) {
  Out* out = reinterpret_cast<Out*>(p[0]);
  const bool contiguous = s[0] == int64_t(sizeof(Out)) && ((s[I + 1] == int64_t(sizeof(In))) && ...);
  if (contiguous) {
    std::tuple<const In*...> in{reinterpret_cast<const In*>(p[I + 1])...};
    for (int64_t i = 0; i < n; ++i) out[i] = Out(f(std::get<I>(in)[i]...));
    return;
  }
  const bool out_contig = s[0] == int64_t(sizeof(Out));
  const bool scalar_inputs_or_contig =
      out_contig && (((s[I + 1] == 0) || (s[I + 1] == int64_t(sizeof(In)))) && ...);
  if (scalar_inputs_or_contig) {
    // Broadcast operands have stride 0: index them with i * 0 so the loop
    // stays simple enough to vectorise.
    std::tuple<const In*...> in{reinterpret_cast<const In*>(p[I + 1])...};
    [[maybe_unused]] std::array<int64_t, sizeof...(In)> step{(s[I + 1] == 0 ? 0 : 1)...};
    for (int64_t i = 0; i < n; ++i) out[i] = Out(f(std::get<I>(in)[i * step[I]]...));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<Out*>(p[0] + i * s[0]) = Out(f(*reinterpret_cast<const In*>(p[I + 1] + i * s[I + 1])...));
}
}  // namespace detail

// out[i] = f(in[0][i], in[1][i], ...); see the file comment.
template <typename Out, typename... In, typename F>
void elementwise(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f,
                 int64_t grain = kGrainSize) {
  constexpr size_t N = sizeof...(In) + 1;
  StridedOperands<N> ops = make_operands<N>(out, ins);
  for_each_run<N>(ops, grain, [&](std::array<char*, N> p, const std::array<int64_t, N>& s, int64_t n) {
    detail::run_inner<Out, In...>(p, s, n, f, std::index_sequence_for<In...>{});
  });
}

// Copies src (any strides, broadcast to dst's shape, any dtype) into dst.
void copy_cast(Tensor& dst, const Tensor& src);

}  // namespace mf::cpu
