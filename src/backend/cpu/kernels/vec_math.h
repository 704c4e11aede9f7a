// Helpers for the hand-written CPU loops of the nn ops, in forms that GCC
// vectorises under `#pragma omp simd` without -ffast-math: exp and log1p in
// a kernel's accumulation type (math.h) and reductions over contiguous runs.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "meshflow/dtype.h"
#include "backend/cpu/kernels/convert.h"
#include "backend/cpu/kernels/math.h"

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
// double, a converted copy for the 16-bit floats (Note [Vectorised bfloat16
// conversion] in convert.h).
template <typename T>
class AccRun {
 public:
  using A = acc_type<T>;
  static constexpr bool kConverts = !std::is_same_v<T, A>;
  const A* load(const T* src, int64_t n) {
    if constexpr (!kConverts) {
      return src;
    } else {
      A* buf = buffer(n);
      convert_run(src, buf, n);
      return buf;
    }
  }
  // Scratch of n values to compute into before `store`.
  A* scratch(T* dst, int64_t n) {
    if constexpr (!kConverts) {
      return dst;
    } else {
      return buffer(n);
    }
  }
  void store(const A* src, T* dst, int64_t n) {
    if constexpr (kConverts) convert_run(src, dst, n);
  }

 private:
  // Aligned to a cache line: vector loops over a misaligned copy split every
  // load across two lines and ran at about half the speed of float32 data.
  A* buffer(int64_t n) {
    constexpr size_t kLine = 64 / sizeof(A);
    if (buf_.size() < size_t(n) + kLine) buf_.resize(size_t(n) + kLine);
    void* p = buf_.data();
    size_t space = buf_.size() * sizeof(A);
    return static_cast<A*>(std::align(64, size_t(n) * sizeof(A), p, space));
  }
  std::vector<A> buf_;
};

}  // namespace mf::cpu
