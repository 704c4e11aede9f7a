// Math for the hand-written CPU loops of the nn ops, in forms that GCC
// vectorises under `#pragma omp simd` without -ffast-math: an exp for float
// built from arithmetic only, and reductions over contiguous runs.
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
inline float exp_float(float x) {
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

// exp in the accumulation type of a kernel: the vectorisable float version,
// the libm one for double.
template <typename A>
inline A exp_acc(A x) {
  if constexpr (std::is_same_v<A, float>) return exp_float(x);
  else return std::exp(x);
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
