// 16-bit floating-point storage types. Arithmetic converts to float: kernels
// accumulate in float32 and round once when they store.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "meshflow/host_device.h"

namespace mf {

namespace detail {
MF_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
MF_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

// bfloat16: the upper half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  MF_HOST_DEVICE BFloat16(float f) { bits = from_float(f); }  // NOLINT: implicit like float
  MF_HOST_DEVICE operator float() const { return detail::bits_float(uint32_t(bits) << 16); }
  MF_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
  MF_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  MF_HOST_DEVICE Half(float f) { bits = from_float(f); }  // NOLINT
  MF_HOST_DEVICE operator float() const { return to_float(bits); }
  MF_HOST_DEVICE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  MF_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t x = detail::float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow to inf
    if (abs < 0x38800000u) {  // subnormal or zero: round abs * 2^24 to even
      float scaled = detail::bits_float(abs) * 16777216.0f;
      return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
    return uint16_t(sign | (abs >> 13));
  }
  MF_HOST_DEVICE static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
      float v = float(mant) * 5.9604644775390625e-08f;  // 2^-24
      return detail::bits_float(detail::float_bits(v) | sign);
    }
    if (exp == 31) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
    return detail::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

}  // namespace mf
