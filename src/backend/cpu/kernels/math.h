// Float exp, expm1, log, log1p, sqrt, tanh and erf written without branches or calls, so
// that cpu::elementwise loops over float32 / float16 / bfloat16 vectorise
// (the std:: functions are library calls the compiler cannot vectorise).
// double arguments go to the std:: functions.
//
// Accuracy against a float64 reference, for float inputs:
//   exp, log, log1p, tanh   within 3 ulp (Cephes single-precision polynomials)
//   expm1                   within 4 ulp
//   sqrt                    correctly rounded
//   erf                     within 4 ulp below |x| = 0.5 (Taylor series),
//                           within 3.5e-7 absolute above (Abramowitz-Stegun
//                           7.1.26, the form PyTorch's vectorised erf uses)
// NaN, infinities, signed zeros and subnormal results follow IEEE / libm.
//
// The functions are forced inline: a call in the loop body (the compiler's
// inlining budget runs out in files with many kernels) keeps it scalar.
// Comparisons use the quiet forms (std::isless, ==): an ordered < may raise
// an FP exception on NaN, so the compiler will not evaluate it speculatively,
// which turns a select into a branch and the loop back into scalar code.
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/common/index_fault.h"
#include "backend/common/special_math.h"
#include "meshflow/dtype.h"
#include "meshflow/error.h"

namespace mf::cpu::math {

// c ? a : b through bit masks. A plain ?: that overrides a computed value
// lets the compiler sink that computation into a branch, and branches keep
// the loop scalar.
[[gnu::always_inline]] inline float select(bool c, float a, float b) {
  const uint32_t mask = uint32_t(0) - uint32_t(c);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) | (std::bit_cast<uint32_t>(b) & ~mask));
}
[[gnu::always_inline]] inline double select(bool c, double a, double b) { return c ? a : b; }

namespace detail {
// Round to nearest (ties to even) without a library call: adding 1.5 * 2^23
// pushes the fraction bits out. Valid for |x| < 2^22.
[[gnu::always_inline]] inline float round_to_int(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

// 2^n for an integer n in [-126, 127], built from its exponent bits.
[[gnu::always_inline]] inline float pow2(int32_t n) { return std::bit_cast<float>(uint32_t(n + 127) << 23); }
}  // namespace detail

// Cephes expf: exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln 2 / 2.
[[gnu::always_inline]] inline float exp(float x) {
  // Clamp to where the result is 0 or inf anyway; NaN fails both tests and
  // is replaced, then restored at the end.
  float xc = std::isgreater(x, -104.0f) ? x : -104.0f;
  xc = std::isless(xc, 89.0f) ? xc : 89.0f;
  const float n = detail::round_to_int(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  // n is in [-150, 128]: scale in two steps so both factors are normal and
  // the result underflows gradually (one rounding) or overflows to inf.
  const int32_t ni = int32_t(n);
  const int32_t half = ni / 2;
  const float result = y * detail::pow2(half) * detail::pow2(ni - half);
  return select(x == x, result, x);
}

// exp(x) - 1: a Taylor polynomial below |x| = ln(2) / 2 (where the
// subtraction would cancel), exp(x) - 1 above.
[[gnu::always_inline]] inline float expm1(float x) {
  float p = 1.0f / 40320.0f;
  p = p * x + 1.0f / 5040.0f;
  p = p * x + 1.0f / 720.0f;
  p = p * x + 1.0f / 120.0f;
  p = p * x + 1.0f / 24.0f;
  p = p * x + 1.0f / 6.0f;
  p = p * x + 0.5f;
  const float small = select(x == 0.0f, x, p * (x * x) + x);  // keeps -0
  const float large = math::exp(x) - 1.0f;
  return select(std::isless(std::fabs(x), 0.34657359f), small, large);
}

// sqrt without the errno check that keeps std::sqrt scalar (the build does
// not pass -fno-math-errno): an estimate of 1/sqrt(x) from the exponent
// bits, three Newton steps, then one fused correction of s = x / sqrt(x)
// (Markstein), which rounds correctly.
[[gnu::always_inline]] inline float sqrt(float x) {
  // Tiny inputs (subnormal ones, and those whose x / 2 would be) are scaled
  // up by 2^64 and the result down by 2^-32.
  const bool tiny = std::isless(x, 0x1p-100f);
  const float xs = select(tiny, x * 0x1p64f, x);
  float y = std::bit_cast<float>(0x5f375a86u - (std::bit_cast<uint32_t>(xs) >> 1));
  const float half_x = 0.5f * xs;
  y = y * (1.5f - half_x * y * y);
  y = y * (1.5f - half_x * y * y);
  y = y * (1.5f - half_x * y * y);
  float s = xs * y;
  const float r = std::fma(-s, s, xs);
  s = std::fma(r, 0.5f * y, s);
  s = select(tiny, s * 0x1p-32f, s);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  s = select(x == kInf, kInf, s);
  s = select(x == 0.0f, x, s);  // +-0
  return select(std::isgreaterequal(x, 0.0f), s, std::numeric_limits<float>::quiet_NaN());
}

// Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log x = log m + e ln 2.
[[gnu::always_inline]] inline float log(float x) {
  constexpr float kMinNormal = 1.17549435e-38f;
  const bool subnormal = std::isless(x, kMinNormal);
  const float xs = subnormal ? x * 8388608.0f : x;  // * 2^23
  const uint32_t bits = std::bit_cast<uint32_t>(xs);
  int32_t exponent = int32_t((bits >> 23) & 0xffu) - (subnormal ? 126 + 23 : 126);
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool low = std::isless(m, 0.707106781186547524f);
  exponent = low ? exponent - 1 : exponent;
  m = low ? m + m - 1.0f : m - 1.0f;
  // One unconditional int -> float conversion: a conversion (which may raise
  // "inexact") inside a select arm is not speculated either.
  const float e = float(exponent);
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float y = p * m * z;
  y = y + e * -2.12194440e-4f;
  y = y - 0.5f * z;
  float result = m + y + e * 0.693359375f;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  result = select(x == kInf, kInf, result);
  result = select(x == 0.0f, -kInf, result);
  return select(std::isgreaterequal(x, 0.0f), result, std::numeric_limits<float>::quiet_NaN());
}

// log(1 + x) = log(u) * x / (u - 1) with u = 1 + x rounded: the rounding
// error of u cancels (Goldberg's trick).
[[gnu::always_inline]] inline float log1p(float x) {
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  const float result = select(d == 0.0f, x, math::log(u) * (x / d));
  return select(x == std::numeric_limits<float>::infinity(), x, result);
}

// Cephes tanhf: an odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1) above.
[[gnu::always_inline]] inline float tanh(float x) {
  const float ax = std::fabs(x);
  const float e = math::exp(ax + ax);
  const float large = 1.0f - 2.0f / (e + 1.0f);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * ax + ax;
  return std::copysign(select(std::isless(ax, 0.625f), small, large), x);
}

[[gnu::always_inline]] inline float erf(float x) {
  const float ax = std::fabs(x);
  // |x| < 0.5: 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), seven terms.
  const float z = x * x;
  float s = 1.0f / 9360.0f;
  s = s * z - 1.0f / 1320.0f;
  s = s * z + 1.0f / 216.0f;
  s = s * z - 1.0f / 42.0f;
  s = s * z + 1.0f / 10.0f;
  s = s * z - 1.0f / 3.0f;
  s = s * z + 1.0f;
  const float small = 1.12837916709551257f * ax * s;
  // |x| >= 0.5: 1 - t (a1 + t (a2 + ...)) exp(-x^2), t = 1 / (1 + p |x|).
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  const float large = 1.0f - q * t * math::exp(-z);
  return std::copysign(select(std::isless(ax, 0.5f), small, large), x);
}

[[gnu::always_inline]] inline double exp(double x) { return std::exp(x); }
[[gnu::always_inline]] inline double expm1(double x) { return std::expm1(x); }
[[gnu::always_inline]] inline double sqrt(double x) { return std::sqrt(x); }
[[gnu::always_inline]] inline double log(double x) { return std::log(x); }
[[gnu::always_inline]] inline double log1p(double x) { return std::log1p(x); }
[[gnu::always_inline]] inline double tanh(double x) { return std::tanh(x); }
[[gnu::always_inline]] inline double erf(double x) { return std::erf(x); }

}  // namespace mf::cpu::math

namespace mf::cpu {

// x in the accumulator type A. float16 converts with a branch-free form of
// Half::to_float (same results, bit for bit) so that loops over it vectorise.
template <typename A, typename T>
inline A to_acc(T x) {
  if constexpr (std::is_same_v<T, Half>) {
    const uint32_t bits = x.bits, magnitude = bits & 0x7fffu;
    // Exponent and mantissa moved into float position: scaling by 2^112
    // rebiases normal and subnormal values alike; all-ones exponents
    // (inf, NaN) map to float's all-ones exponent instead.
    const float scaled = std::bit_cast<float>(magnitude << 13) * 0x1p112f;
    const float special = std::bit_cast<float>((magnitude << 13) | 0x7f800000u);
    const float unsigned_value = magnitude >= 0x7c00u ? special : scaled;
    return A(std::bit_cast<float>(std::bit_cast<uint32_t>(unsigned_value) | ((bits & 0x8000u) << 16)));
  } else {
    return A(x);
  }
}

// The CPU's math for the shared elementwise functors (Note [Shared
// elementwise math] in backend/common/elementwise_functors.h): the
// vectorisable versions above where there are some, std:: otherwise.
struct HostMath {
#define MF_HOST_MATH(name, impl) \
  template <typename A>          \
  [[gnu::always_inline]] static A name(A x) { return impl(x); }
  MF_HOST_MATH(exp, math::exp)
  MF_HOST_MATH(expm1, math::expm1)
  MF_HOST_MATH(log, math::log)
  MF_HOST_MATH(log1p, math::log1p)
  MF_HOST_MATH(sqrt, math::sqrt)
  MF_HOST_MATH(tanh, math::tanh)
  MF_HOST_MATH(erf, math::erf)
  MF_HOST_MATH(sin, std::sin)
  MF_HOST_MATH(cos, std::cos)
  MF_HOST_MATH(floor, std::floor)
  MF_HOST_MATH(ceil, std::ceil)
  MF_HOST_MATH(nearbyint, std::nearbyint)
  MF_HOST_MATH(trunc, std::trunc)
  MF_HOST_MATH(fabs, std::fabs)
  MF_HOST_MATH(tan, std::tan)
  MF_HOST_MATH(asin, std::asin)
  MF_HOST_MATH(acos, std::acos)
  MF_HOST_MATH(atan, std::atan)
  MF_HOST_MATH(sinh, std::sinh)
  MF_HOST_MATH(cosh, std::cosh)
  MF_HOST_MATH(asinh, std::asinh)
  MF_HOST_MATH(acosh, std::acosh)
  MF_HOST_MATH(atanh, std::atanh)
  MF_HOST_MATH(log2, std::log2)
  MF_HOST_MATH(log10, std::log10)
  MF_HOST_MATH(exp2, std::exp2)
  MF_HOST_MATH(erfc, std::erfc)
#undef MF_HOST_MATH
  template <typename A>
  static A erfinv(A x) { return A(special_math::erfinv(double(x))); }
  template <typename A>
  [[gnu::always_inline]] static A pow(A a, A b) { return std::pow(a, b); }
  template <typename A>
  [[gnu::always_inline]] static A atan2(A a, A b) { return std::atan2(a, b); }
  template <typename A>
  [[gnu::always_inline]] static A fmod(A a, A b) { return std::fmod(a, b); }
  template <typename A>
  [[gnu::always_inline]] static A copysign(A a, A b) { return std::copysign(a, b); }
  template <typename A>
  [[gnu::always_inline]] static bool isnan(A a) { return std::isnan(a); }
  template <typename A>
  [[gnu::always_inline]] static bool isinf(A a) { return std::isinf(a); }
  template <typename A>
  [[gnu::always_inline]] static A select(bool c, A a, A b) { return math::select(c, a, b); }
  template <typename A, typename T>
  [[gnu::always_inline]] static A to_acc(T x) { return cpu::to_acc<A>(x); }
  // Atomics of the index kernels (Note [Device index kernels]).
  template <typename T>
  static void atomic_add(T* p, T v) {
    std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
  }
  // *p = f(*p) by compare-and-swap on the element's bits.
  template <typename T, typename F>
  static void atomic_update(T* p, const F& f) {
    using U = std::conditional_t<sizeof(T) == 1, uint8_t,
                                 std::conditional_t<sizeof(T) == 2, uint16_t,
                                                    std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    static_assert(sizeof(T) == sizeof(U));
    std::atomic_ref<U> bits(*reinterpret_cast<U*>(p));
    U old = bits.load(std::memory_order_relaxed);
    while (!bits.compare_exchange_weak(old, std::bit_cast<U>(f(std::bit_cast<T>(old))), std::memory_order_relaxed)) {
    }
  }
  static void record_fault(IndexFault* fault, int64_t value) {
    int32_t unset = 0;
    if (std::atomic_ref<int32_t>(fault->set).compare_exchange_strong(unset, 1)) fault->value = value;
  }
  // Note [Integer division] in backend/common/elementwise_functors.h.
  template <typename T>
  [[noreturn]] static T zero_divisor(const char* op) {
    throw Error(::mf::detail::concat(op, ": ZeroDivisionError (integer division by zero)"));
  }
};

}  // namespace mf::cpu
