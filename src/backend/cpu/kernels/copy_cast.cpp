#include "backend/cpu/kernels/convert.h"
#include "backend/cpu/kernels/loops.h"

#include <algorithm>

namespace mf::cpu {

namespace {
template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return acc_type<S>(v) != acc_type<S>(0);
  else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(float(acc_type<S>(v)));
  else return D(acc_type<S>(v));
}

// Note [Transposing copies]
// A copy whose source is transposed against its destination (contiguous()
// of a permuted view; the copies around boxing's collectives) moves square
// blocks of the last two dims, one cache line of elements wide: it reads a
// block along the source's fast dim into a buffer on the stack, then writes
// it along the destination's. Each cache line is then touched in one burst
// per block. The tiled loop of loops.h (Note [Tiled transposed operands])
// touches 32 lines of each operand per tile row; for rows a power of two
// apart (4 KiB for 1024 floats) those lines share one cache set, evict one
// another, and a 1024 x 1024 float transpose took 3.3 ms against 0.1 ms for
// a plain copy.
template <typename U>
void transposing_copy(const StridedOperands<2>& ops) {
  constexpr int64_t B = std::max<int64_t>(8, 64 / int64_t(sizeof(U)));
  const int64_t nd = int64_t(ops.sizes.size());
  const int64_t rows = ops.sizes[nd - 2], cols = ops.sizes[nd - 1];
  const int64_t row_blocks = (rows + B - 1) / B, col_blocks = (cols + B - 1) / B;
  int64_t outer = 1;
  for (int64_t d = 0; d < nd - 2; ++d) outer *= ops.sizes[d];
  // Element strides (a tensor's byte strides are multiples of its item size).
  constexpr int64_t E = int64_t(sizeof(U));
  const int64_t dr = ops.strides[0][nd - 2] / E, dc = ops.strides[0][nd - 1] / E;
  const int64_t sr = ops.strides[1][nd - 2] / E, sc = ops.strides[1][nd - 1] / E;
  const bool source_by_rows = std::abs(sr) < std::abs(sc), dest_by_rows = std::abs(dr) < std::abs(dc);
  parallel_for(0, outer * row_blocks * col_blocks, std::max<int64_t>(1, kGrainSize / (B * B)),
               [&](int64_t begin, int64_t end) {
    U buf[B][B];  // [row][col] of the block
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / (row_blocks * col_blocks), rb = t / col_blocks % row_blocks, cb = t % col_blocks;
      U* d = reinterpret_cast<U*>(ops.data[0]);
      const U* s = reinterpret_cast<const U*>(ops.data[1]);
      for (int64_t k = nd - 3, rem = o; k >= 0; --k) {
        d += rem % ops.sizes[k] * (ops.strides[0][k] / E);
        s += rem % ops.sizes[k] * (ops.strides[1][k] / E);
        rem /= ops.sizes[k];
      }
      d += rb * B * dr + cb * B * dc;
      s += rb * B * sr + cb * B * sc;
      const int64_t nr = std::min(B, rows - rb * B), nc = std::min(B, cols - cb * B);
      // Visits the block's (r, c) with r innermost when `by_rows` (the
      // operand's fast dim is the rows), else c innermost.
      auto walk = [nr, nc](bool by_rows, auto&& f) {
        if (by_rows) {
          for (int64_t c = 0; c < nc; ++c)
            for (int64_t r = 0; r < nr; ++r) f(r, c);
        } else {
          for (int64_t r = 0; r < nr; ++r)
            for (int64_t c = 0; c < nc; ++c) f(r, c);
        }
      };
      walk(source_by_rows, [&](int64_t r, int64_t c) { buf[r][c] = s[r * sr + c * sc]; });
      walk(dest_by_rows, [&](int64_t r, int64_t c) { d[r * dr + c * dc] = buf[r][c]; });
    }
  });
}
}  // namespace

void copy_cast(Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes()) {
    const size_t nbytes = size_t(dst.numel()) * dst.element_size();
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    parallel_for(0, int64_t(nbytes), 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
    return;
  }
  if (dst.dtype() == src.dtype()) {
    // A strided copy (contiguous() of a transposed view): the elements' bits
    // as unsigned integers of their size, with no conversion through float.
    // Note [Transposing copies] where the source is transposed against dst.
    auto copy_bits = [&]<typename U>() {
      StridedOperands<2> ops = make_operands<2>(dst, {&src});
      if (has_transposed_operand(ops)) return transposing_copy<U>(ops);
      for_each_run<2>(ops, kGrainSize, [](std::array<char*, 2> p, const std::array<int64_t, 2>& st, int64_t n) {
        detail::run_inner<U, U>(p, st, n, [](U v) { return v; }, std::index_sequence<0>{});
      });
    };
    switch (dst.element_size()) {
      case 1: return copy_bits.template operator()<uint8_t>();
      case 2: return copy_bits.template operator()<uint16_t>();
      case 4: return copy_bits.template operator()<uint32_t>();
      case 8: return copy_bits.template operator()<uint64_t>();
      default: break;
    }
  }
  const bool flat = dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes();
  dispatch_dtype(dst.dtype(), [&]<typename D>() {
    dispatch_dtype(src.dtype(), [&]<typename S>() {
      constexpr bool kBFloat16Float = (std::is_same_v<D, BFloat16> && std::is_same_v<S, float>) ||
                                      (std::is_same_v<D, float> && std::is_same_v<S, BFloat16>);
      if constexpr (kBFloat16Float) {
        if (flat) {  // Note [Vectorised bfloat16 conversion]
          D* d = static_cast<D*>(dst.data_ptr());
          const S* s = static_cast<const S*>(src.data_ptr());
          parallel_for(0, dst.numel(), kGrainSize, [&](int64_t b, int64_t e) { convert_run(s + b, d + b, e - b); });
          return;
        }
      }
      elementwise<D, S>(dst, {&src}, [](S v) { return convert<D, S>(v); });
    });
  });
}

}  // namespace mf::cpu
