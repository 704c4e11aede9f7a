// Reading and writing the 16-bit floating types as float32 inside
// vectorised loops: the shared conversion helpers of the CPU kernels that
// compute in float32 on bfloat16 data (softmax, layer_norm, AccRun in
// vec_math.h, copy_cast).
//
// Note [Vectorised bfloat16 conversion]
// GCC 12 does not vectorise loops that store the 16-bit struct types
// (BFloat16, Half), with or without `#pragma omp simd`, so a kernel that
// converted a bfloat16 row to float32, computed, and converted back spent
// more time converting than computing: softmax and layer_norm ran slower on
// bfloat16 than on float32. It does vectorise the same arithmetic on the
// raw uint16_t bits: bfloat16 -> float32 is a 16-bit shift, and float32 ->
// bfloat16 rounds to nearest even with integer adds, exactly as
// BFloat16::from_float (NaN stays a quiet NaN, subnormals are kept, unlike
// AVX512-BF16's vcvtneps2bf16, which flushes them). load_acc / store_acc
// give element i of a run in the kernel's accumulation type, so a loop can
// read and write bfloat16 directly with no conversion pass of its own; with
// -march=native that is 16 values per AVX-512 instruction. Half keeps the
// scalar conversion.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "meshflow/dtype.h"
#include "meshflow/half.h"

namespace mf::cpu {

namespace detail {
[[gnu::always_inline]] inline float bfloat16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}
[[gnu::always_inline]] inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}
}  // namespace detail

// p[i] as acc_type<T>.
template <typename T>
[[gnu::always_inline]] inline acc_type<T> load_acc(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, BFloat16>)
    return detail::bfloat16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
  else return acc_type<T>(p[i]);
}

// p[i] = T(v), rounded as T's constructor rounds.
template <typename T>
[[gnu::always_inline]] inline void store_acc(T* p, int64_t i, acc_type<T> v) {
  if constexpr (std::is_same_v<T, BFloat16>) reinterpret_cast<uint16_t*>(p)[i] = detail::float_to_bfloat16_bits(v);
  else p[i] = T(v);
}

// dst[i] = D(src[i]) for i < n, between a floating type and its
// accumulation type.
template <typename D, typename S>
inline void convert_run(const S* src, D* dst, int64_t n) {
  if constexpr (std::is_same_v<D, acc_type<S>>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = load_acc(src, i);
  } else {
    static_assert(std::is_same_v<S, acc_type<D>>, "convert_run: between a type and its accumulation type");
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) store_acc(dst, i, src[i]);
  }
}

}  // namespace mf::cpu
