// Helpers for the hand-written CPU loops of the nn ops, in forms that GCC
// vectorises under `#pragma omp simd` without -ffast-math: exp and log1p in
// a kernel's accumulation type (math.h) and reductions over contiguous runs.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "meshflow/dtype.h"
#include "ops/kernels/cpu/math.h"

namespace mf::cpu {

// exp and log1p (argument >= 0) in the accumulation type of a kernel: the
// vectorisable float versions, libm for double.
template <typename A>
[[gnu::always_inline]] inline A exp_acc(A x) {
  return math::exp(x);
}

template <typename A>
[[gnu::always_inline]] inline A log1p_acc(A z) {
  return math::log1p(z);
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
