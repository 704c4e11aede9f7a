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

#include "backend/common/strided_operands.h"
#include "backend/cpu/kernels/math.h"
#include "meshflow/parallel.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

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

// Note [Vectorised loops]: cpu::elementwise runs a flat loop the compiler
// vectorises when every operand is contiguous and the loop body is inlined
// into it. Loops::run marks its per-element call __attribute__((flatten)) so
// an op's function (exp, gelu, ...) is inlined whole even where the
// inliner's budget has run out. A broadcast one-element operand (a Scalar
// argument, a 0-d tensor) would send it down the strided path instead, so
// binary_loop reads such an operand once and runs a unary loop. Kernels read
// bool tensors as uint8_t (kernel_type).
template <typename Out, typename A, typename B, typename F>
void binary_loop(Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  if (b.numel() == 1 && a.sizes() == out.sizes()) {
    const B bv = *static_cast<const B*>(b.data_ptr());
    elementwise<Out, A>(out, {&a}, [&f, bv](A x) { return f(x, bv); });
  } else if (a.numel() == 1 && b.sizes() == out.sizes()) {
    const A av = *static_cast<const A*>(a.data_ptr());
    elementwise<Out, B>(out, {&b}, [&f, av](B y) { return f(av, y); });
  } else {
    elementwise<Out, A, B>(out, {&a, &b}, f);
  }
}

// Copies src (any strides, broadcast to dst's shape, any dtype) into dst.
void copy_cast(Tensor& dst, const Tensor& src);

// The CPU's loops for the shared elementwise kernel table
// (backend/common/elementwise_kernels.h). Of three operands, a one-element
// second or third one (where(c, x, 0.0), masked_fill's value) is read once,
// as binary_loop does for two (Note [Vectorised loops]).
struct Loops {
  using Math = HostMath;
  template <typename Out, typename... In, typename F>
  static void run(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f) {
    const auto g = [&f](In... x) __attribute__((always_inline, flatten)) { return f(x...); };
    if constexpr (sizeof...(In) == 2) {
      binary_loop<Out, In...>(out, *ins[0], *ins[1], g);
    } else if constexpr (sizeof...(In) == 3) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      using B = std::tuple_element_t<1, std::tuple<In...>>;
      using C = std::tuple_element_t<2, std::tuple<In...>>;
      if (ins[2]->numel() == 1) {
        const C cv = *static_cast<const C*>(ins[2]->data_ptr());
        binary_loop<Out, A, B>(out, *ins[0], *ins[1], [&g, cv](A a, B b) { return g(a, b, cv); });
      } else if (ins[1]->numel() == 1) {
        const B bv = *static_cast<const B*>(ins[1]->data_ptr());
        binary_loop<Out, A, C>(out, *ins[0], *ins[2], [&g, bv](A a, C c) { return g(a, bv, c); });
      } else {
        elementwise<Out, In...>(out, ins, g);
      }
    } else {
      elementwise<Out, In...>(out, ins, g);
    }
  }
  template <typename Out, typename F>
  static void run_indexed(Tensor& out, const F& f) {
    Out* p = static_cast<Out*>(out.data_ptr());
    parallel_for(0, out.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = Out(f(i));
    });
  }
  static void copy_cast(Tensor& dst, const Tensor& src) { cpu::copy_cast(dst, src); }
};

}  // namespace mf::cpu
