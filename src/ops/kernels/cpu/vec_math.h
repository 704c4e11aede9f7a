// Math for the hand-written CPU loops of the nn ops, in forms that GCC
// vectorises under `#pragma omp simd` without -ffast-math: exp and log1p for
// float built from arithmetic only, and reductions over contiguous runs.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "meshflow/dtype.h"

namespace mf::cpu {

// exp(x) for float: Cephes expf (x = n ln2 + r, |r| <= ln2/2, degree-6
// polynomial; about 1 ulp). 2^n is applied as two halves so that every n
// in range stays a normal float; results underflow gradually to 0 below
// -87.3, overflow to inf above 88.72, and NaN stays NaN.
[[gnu::always_inline]] inline float exp_float(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLo = -104.0f, kHi = 88.7228394f;
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t half = ni >> 1;
  const float s1 = std::bit_cast<float>((half + 127) << 23);
  const float s2 = std::bit_cast<float>((ni - half + 127) << 23);
  const float y = p * s1 * s2;
  return x > kHi ? std::numeric_limits<float>::infinity() : y;
}

// log(x) for float x >= 1: Cephes logf (x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// degree-8 polynomial in m - 1; about 1 ulp). inf stays inf, NaN stays NaN.
[[gnu::always_inline]] inline float log_float_from_one(float x) {
  constexpr float kSqrtHalf = 0.707106781186547524f;
  const int32_t bits = std::bit_cast<int32_t>(x);
  float e = float(((bits >> 23) & 0xff) - 126);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  const bool small = m < kSqrtHalf;
  e = small ? e - 1.0f : e;
  m = small ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  const float r = m + y + 0.693359375f * e;
  return x == std::numeric_limits<float>::infinity() || x != x ? x : r;
}

// log1p(z) for float z >= 0, accurate for tiny z too: with u = 1 + z,
// log1p(z) = log(u) * z / (u - 1) (exact when u == 1: z).
[[gnu::always_inline]] inline float log1p_float(float z) {
  const float u = 1.0f + z;
  const float d = u - 1.0f;
  const float r = log_float_from_one(u) * (z / (d == 0.0f ? 1.0f : d));
  return d == 0.0f ? z : (z == std::numeric_limits<float>::infinity() ? z : r);
}

// exp and log1p (argument >= 0) in the accumulation type of a kernel: the
// vectorisable float versions, libm for double.
template <typename A>
[[gnu::always_inline]] inline A exp_acc(A x) {
  if constexpr (std::is_same_v<A, float>) return exp_float(x);
  else return std::exp(x);
}

template <typename A>
[[gnu::always_inline]] inline A log1p_acc(A z) {
  if constexpr (std::is_same_v<A, float>) return log1p_float(z);
  else return std::log1p(z);
}

template <typename A>
inline A max_run(const A* x, int64_t n) {
  A m = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

template <typename A>
inline A sum_run(const A* x, int64_t n) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

template <typename A>
inline A dot_run(const A* x, const A* y, int64_t n) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

// A run of T values seen as acc_type<T>: the data itself for float and
// double, a converted copy for the 16-bit floats.
template <typename T>
class AccRun {
 public:
  using A = acc_type<T>;
  static constexpr bool kConverts = !std::is_same_v<T, A>;
  const A* load(const T* src, int64_t n) {
    if constexpr (!kConverts) {
      return src;
    } else {
      if (int64_t(buf_.size()) < n) buf_.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) buf_[size_t(i)] = A(src[i]);
      return buf_.data();
    }
  }
  // Scratch of n values to compute into before `store`.
  A* scratch(T* dst, int64_t n) {
    if constexpr (!kConverts) {
      return dst;
    } else {
      if (int64_t(buf_.size()) < n) buf_.resize(size_t(n));
      return buf_.data();
    }
  }
  void store(const A* src, T* dst, int64_t n) {
    if constexpr (kConverts)
      for (int64_t i = 0; i < n; ++i) dst[i] = T(src[i]);
  }

 private:
  std::vector<A> buf_;
};

}  // namespace mf::cpu
