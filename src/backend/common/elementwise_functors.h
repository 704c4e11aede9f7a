// Note [Shared elementwise math]
// The per-element math of the elementwise ops, written once for every
// backend: plain structs whose operator() both the host compiler and nvcc
// compile (MF_HOST_DEVICE). Each backend's loops (cpu::elementwise, the CUDA
// launcher) instantiate them through the kernel table of
// elementwise_kernels.h, so an op computes the same function on every
// device.
//
// A functor computes in the compute type A that its kernel passes it:
// acc_type<T>, float for float16 and bfloat16. Transcendental functions go
// through the backend's math M (a struct of static functions over float and
// double): on the CPU the branch-free versions of cpu/kernels/math.h that
// vectorise, on CUDA the device library. M provides exp expm1 log log1p
// sqrt tanh erf sin cos tan asin acos atan sinh cosh asinh acosh atanh log2
// log10 exp2 erfc erfinv floor ceil nearbyint trunc fabs fmod copysign pow
// atan2 isnan isinf and select(c, a, b) (c ? a : b without a branch).
//
// Functors that need attributes (a slope, bounds) hold them as fields in A.
#pragma once

#include <cstdint>
#include <type_traits>

#include "meshflow/dtype.h"
#include "backend/common/special_math.h"
#include "meshflow/host_device.h"

namespace mf::functors {

// f applied to its arguments converted to A: the bridge from a loop's
// storage types (Half, int8_t, ...) to a functor's compute type.
template <typename A, typename F>
struct InAcc {
  F f;
  template <typename... T>
  MF_FORCE_INLINE MF_HOST_DEVICE auto operator()(T... x) const {
    return f(A(x)...);
  }
};

// --- unary floating math --------------------------------------------------------------

#define MF_UNARY_FUNCTOR(Name, ...)                                   \
  template <typename M>                                               \
  struct Name {                                                       \
    template <typename A>                                             \
    MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a) const {          \
      return __VA_ARGS__;                                             \
    }                                                                 \
  };

MF_UNARY_FUNCTOR(Exp, M::exp(a))
MF_UNARY_FUNCTOR(Log, M::log(a))
MF_UNARY_FUNCTOR(Log1p, M::log1p(a))
MF_UNARY_FUNCTOR(Expm1, M::expm1(a))
MF_UNARY_FUNCTOR(Sqrt, M::sqrt(a))
MF_UNARY_FUNCTOR(Rsqrt, A(1) / M::sqrt(a))
MF_UNARY_FUNCTOR(Reciprocal, A(1) / a)
MF_UNARY_FUNCTOR(Sin, M::sin(a))
MF_UNARY_FUNCTOR(Cos, M::cos(a))
MF_UNARY_FUNCTOR(Tanh, M::tanh(a))
MF_UNARY_FUNCTOR(Sigmoid, A(1) / (A(1) + M::exp(-a)))
MF_UNARY_FUNCTOR(Erf, M::erf(a))
MF_UNARY_FUNCTOR(Floor, M::floor(a))
MF_UNARY_FUNCTOR(Ceil, M::ceil(a))
// Half to even, like PyTorch (nearbyint under the default rounding mode).
MF_UNARY_FUNCTOR(Round, M::nearbyint(a))
MF_UNARY_FUNCTOR(Trunc, M::trunc(a))
MF_UNARY_FUNCTOR(Silu, a / (A(1) + M::exp(-a)))

// gelu(x) = x Phi(x), Phi the standard normal CDF; the tanh form
// approximates Phi by (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2.
inline constexpr double kSqrtHalf = 0.70710678118654752440;     // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kGeluTanhCoeff = 0.044715;

MF_UNARY_FUNCTOR(GeluErf, A(0.5) * a * (A(1) + M::erf(a * A(kSqrtHalf))))
MF_UNARY_FUNCTOR(GeluTanh, A(0.5) * a * (A(1) + M::tanh(A(kSqrt2OverPi) * (a + A(kGeluTanhCoeff) * a * a * a))))

// unary_math.cpp
inline constexpr double kPi = 3.14159265358979323846;
MF_UNARY_FUNCTOR(Tan, M::tan(a))
MF_UNARY_FUNCTOR(Asin, M::asin(a))
MF_UNARY_FUNCTOR(Acos, M::acos(a))
MF_UNARY_FUNCTOR(Atan, M::atan(a))
MF_UNARY_FUNCTOR(Sinh, M::sinh(a))
MF_UNARY_FUNCTOR(Cosh, M::cosh(a))
MF_UNARY_FUNCTOR(Asinh, M::asinh(a))
MF_UNARY_FUNCTOR(Acosh, M::acosh(a))
MF_UNARY_FUNCTOR(Atanh, M::atanh(a))
MF_UNARY_FUNCTOR(Log2, M::log2(a))
MF_UNARY_FUNCTOR(Log10, M::log10(a))
MF_UNARY_FUNCTOR(Exp2, M::exp2(a))
MF_UNARY_FUNCTOR(Erfc, M::erfc(a))
MF_UNARY_FUNCTOR(Erfinv, M::erfinv(a))
// The gamma family, evaluated in double (special_math.h) on every device.
MF_UNARY_FUNCTOR(Lgamma, A(special_math::lgamma(double(a))))
MF_UNARY_FUNCTOR(Digamma, A(special_math::digamma(double(a))))
template <typename M, typename A>
struct Polygamma {
  int64_t n;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a) const { return A(special_math::polygamma(n, double(a))); }
};
// sin(pi x) / (pi x), 1 at 0.
MF_UNARY_FUNCTOR(Sinc, a == A(0) ? A(1) : M::sin(A(kPi) * a) / (A(kPi) * a))
MF_UNARY_FUNCTOR(Frac, a - M::trunc(a))
MF_UNARY_FUNCTOR(Deg2rad, a * A(kPi / 180))
MF_UNARY_FUNCTOR(Rad2deg, a * A(180 / kPi))

// pow_scalar's common exponents in cheaper forms (as PyTorch does).
MF_UNARY_FUNCTOR(Square, a * a)
MF_UNARY_FUNCTOR(Cube, a * a * a)
MF_UNARY_FUNCTOR(InverseSquare, A(1) / (a * a))

#undef MF_UNARY_FUNCTOR

template <typename M, typename A>
struct PowBy {
  A exponent;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a) const { return M::pow(a, exponent); }
};

// Integer power by squaring, wrapping on overflow like PyTorch's powi.
// Negative exponents: 1 ** -n = 1, (-1) ** -n = +-1, anything else 0.
template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T int_pow(T base, int64_t exponent) {
  if (exponent < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return exponent % 2 == 0 ? T(1) : T(-1);
    return T(0);
  }
  uint64_t result = 1, b = uint64_t(int64_t(base));
  for (uint64_t e = uint64_t(exponent); e != 0; e >>= 1) {
    if (e & 1u) result *= b;
    b *= b;
  }
  return T(result);
}
template <typename T>
struct IntPowBy {
  int64_t exponent;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a) const { return int_pow(a, exponent); }
};

// grad * gelu'(x):
//   erf form:  Phi(x) + x phi(x)
//   tanh form: (1 + t) / 2 + x (1 - t^2) du / 2,  t = tanh(u),
//              u = c (x + k x^3), du = c (1 + 3 k x^2)
template <typename M>
struct GeluBackwardErf {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A g, A x) const {
    const A cdf = A(0.5) * (A(1) + M::erf(x * A(kSqrtHalf)));
    const A pdf = M::exp(A(-0.5) * x * x) * A(kInvSqrt2Pi);
    return g * (cdf + x * pdf);
  }
};
template <typename M>
struct GeluBackwardTanh {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A g, A x) const {
    const A x2 = x * x;
    const A th = M::tanh(A(kSqrt2OverPi) * (x + A(kGeluTanhCoeff) * x2 * x));
    const A du = A(kSqrt2OverPi) * (A(1) + A(3 * kGeluTanhCoeff) * x2);
    return g * (A(0.5) * (A(1) + th) + A(0.5) * x * (A(1) - th * th) * du);
  }
};

template <typename M, typename A>
struct LeakyRelu {
  A slope;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x) const { return M::select(x > A(0), x, x * slope); }
};
template <typename M, typename A>
struct Elu {
  A alpha;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x) const { return M::select(x > A(0), x, alpha * M::expm1(x)); }
};
// log(1 + exp(beta x)) / beta, and x where beta x > threshold.
template <typename M, typename A>
struct Softplus {
  A beta, threshold;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x) const {
    return M::select(x * beta > threshold, x, M::log1p(M::exp(x * beta)) / beta);
  }
};

// --- unary, every numeric dtype ---------------------------------------------------------

// |a|: fabs for floats (clears the sign of -0 and NaN, as PyTorch's abs).
template <typename M>
struct Abs {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a) const {
    if constexpr (std::is_floating_point_v<A>) return M::fabs(a);
    else if constexpr (std::is_unsigned_v<A>) return a;
    else return a < A(0) ? A(-a) : a;
  }
};
// NaN and -0 give 0, like PyTorch's vectorised kernel.
struct Sign {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a) const {
    if constexpr (std::is_unsigned_v<A>) return A(a != A(0));  // bool and unsigned
    else return A((A(0) < a) - (a < A(0)));
  }
};
struct Neg {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a) const { return A(-a); }
};
// a < 0 ? 0 : a keeps NaN (PyTorch's relu propagates it).
struct Relu {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a) const {
    if constexpr (std::is_unsigned_v<A>) return a;
    else return a < A(0) ? A(0) : a;
  }
};
// clamp with scalar bounds: NaN kept.
template <typename A>
struct ClampBoth {
  A lo, hi;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x) const {
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
  }
};
template <typename A>
struct ClampLow {
  A lo;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x) const { return x < lo ? lo : x; }
};
template <typename A>
struct ClampHigh {
  A hi;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A x) const { return x > hi ? hi : x; }
};

// --- binary arithmetic -----------------------------------------------------------------

#define MF_BINARY_FUNCTOR(Name, ...)                                  \
  struct Name {                                                       \
    template <typename A>                                             \
    MF_FORCE_INLINE MF_HOST_DEVICE auto operator()(A a, A b) const {  \
      return __VA_ARGS__;                                             \
    }                                                                 \
  };

MF_BINARY_FUNCTOR(Add, A(a + b))
MF_BINARY_FUNCTOR(Sub, A(a - b))
MF_BINARY_FUNCTOR(Mul, A(a * b))
MF_BINARY_FUNCTOR(Div, A(a / b))
// add and mul of bool tensors (read as uint8_t): or, and.
MF_BINARY_FUNCTOR(BitOr, A(a | b))
MF_BINARY_FUNCTOR(BitAnd, A(a & b))
MF_BINARY_FUNCTOR(BitXor, A(a ^ b))
// clamp with one tensor bound (clamp_min_tensor, clamp_max_tensor).
MF_BINARY_FUNCTOR(ClampLowBy, a < b ? b : a)
MF_BINARY_FUNCTOR(ClampHighBy, a > b ? b : a)

// Comparisons and logical ops: bool results.
MF_BINARY_FUNCTOR(Eq, bool(a == b))
MF_BINARY_FUNCTOR(Ne, bool(a != b))
MF_BINARY_FUNCTOR(Lt, bool(a < b))
MF_BINARY_FUNCTOR(Le, bool(a <= b))
MF_BINARY_FUNCTOR(Gt, bool(a > b))
MF_BINARY_FUNCTOR(Ge, bool(a >= b))
MF_BINARY_FUNCTOR(LogicalAnd, bool((a != A(0)) && (b != A(0))))
MF_BINARY_FUNCTOR(LogicalOr, bool((a != A(0)) || (b != A(0))))
MF_BINARY_FUNCTOR(LogicalXor, bool((a != A(0)) != (b != A(0))))

// maximum and minimum: NaN wins, like PyTorch (bool: or, and).
MF_BINARY_FUNCTOR(Max, a != a ? a : (b != b ? b : (a > b ? a : b)))
MF_BINARY_FUNCTOR(Min, a != a ? a : (b != b ? b : (a < b ? a : b)))
// Integer powers (pow of two integer tensors).
MF_BINARY_FUNCTOR(IntPow, int_pow(a, int64_t(b)))

#undef MF_BINARY_FUNCTOR

// lerp(a, b, w): the two forms keep it exact at both ends (PyTorch's lerp).
template <typename A>
struct LerpFromStart {  // |w| < 0.5
  A w;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const { return a + w * (b - a); }
};
template <typename A>
struct LerpFromEnd {
  A w;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const { return b - (b - a) * (A(1) - w); }
};
// input + value * t1 * t2, input + value * (t1 / t2).
template <typename A>
struct AddcMul {
  A value;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A t, A a, A b) const { return t + value * a * b; }
};
template <typename A>
struct AddcDiv {
  A value;
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A t, A a, A b) const { return t + value * (a / b); }
};

template <typename M>
struct Pow {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const { return M::pow(a, b); }
};
template <typename M>
struct Atan2 {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const { return M::atan2(a, b); }
};
// d sample / d concentration of a gamma sample (Note [Gamma sample
// gradient] in special_math.h), evaluated in double on every device.
struct StandardGammaGrad {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A x) const {
    return A(special_math::standard_gamma_grad(double(a), double(x)));
  }
};

// Note [Integer division]: integer division by zero is an error (PyTorch
// raises ZeroDivisionError on the CPU); M::zero_divisor(op) throws on the
// host. A device kernel cannot throw: the CUDA backend's zero_divisor gives
// -1, the value of the hardware's unsigned division by zero (PyTorch's CUDA
// kernels do not check either). x / -1 is computed as a wrapping negation
// because the hardware traps on INT_MIN / -1.
template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T negate_wrapping(T a) {
  return T(uint64_t(0) - uint64_t(int64_t(a)));
}

template <typename M>
struct DivTruncInt {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a, T b) const {
    if (b == T(0)) return M::template zero_divisor<T>("div");
    if constexpr (std::is_signed_v<T>)
      if (b == T(-1)) return negate_wrapping(a);
    return T(a / b);
  }
};
template <typename M>
struct DivFloorInt {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a, T b) const {
    if (b == T(0)) return M::template zero_divisor<T>("div");
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return negate_wrapping(a);
      T q = T(a / b);
      if (a % b != 0 && ((a < 0) != (b < 0))) --q;
      return q;
    }
    return T(a / b);
  }
};
// Python's %: the result has the divisor's sign.
template <typename M>
struct RemainderInt {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a, T b) const {
    if (b == T(0)) return M::template zero_divisor<T>("remainder");
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return T(0);
      T r = T(a % b);
      if (r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
      return r;
    }
    return T(a % b);
  }
};

template <typename M>
struct DivTruncFloat {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const { return M::trunc(a / b); }
};
// PyTorch's div_floor_floating: exact for large quotients, signed zeros kept.
template <typename M>
struct DivFloorFloat {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const {
    if (b == A(0)) return a / b;
    const A mod = M::fmod(a, b);
    A quotient = (a - mod) / b;
    if (mod != A(0) && ((b < A(0)) != (mod < A(0)))) quotient -= A(1);
    if (quotient == A(0)) return M::copysign(A(0), a / b);
    A floored = M::floor(quotient);
    if (quotient - floored > A(0.5)) floored += A(1);
    return floored;
  }
};
template <typename M>
struct RemainderFloat {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, A b) const {
    A mod = M::fmod(a, b);
    if (mod != A(0) && ((b < A(0)) != (mod < A(0)))) mod += b;
    return mod;
  }
};

// --- predicates and bitwise ops ---------------------------------------------------------

struct LogicalNot {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE bool operator()(A a) const { return a == A(0); }
};
template <typename M>
struct IsNan {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE bool operator()(A a) const {
    if constexpr (std::is_floating_point_v<A>) return M::isnan(a);
    else return false;
  }
};
template <typename M>
struct IsInf {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE bool operator()(A a) const {
    if constexpr (std::is_floating_point_v<A>) return M::isinf(a);
    else return false;
  }
};
template <typename M>
struct IsFinite {
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE bool operator()(A a) const {
    if constexpr (std::is_floating_point_v<A>) return !M::isnan(a) && !M::isinf(a);
    else return true;
  }
};

// Shifts as PyTorch defines them for every amount (C++ leaves amounts that
// are negative or not below the bit width undefined): such a left shift
// gives 0, such a right shift fills with the sign bit.
struct LeftShift {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a, T b) const {
    constexpr auto bits = int64_t(sizeof(T) * 8);
    if (std::make_signed_t<T>(b) < 0 || int64_t(b) >= bits) return T(0);
    return T(std::make_unsigned_t<T>(a) << b);
  }
};
struct RightShift {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a, T b) const {
    constexpr auto max_shift = int64_t(sizeof(T) * 8) - int64_t(std::is_signed_v<T>);
    if (std::make_signed_t<T>(b) < 0 || int64_t(b) >= max_shift) return T(a >> max_shift);
    return T(a >> b);
  }
};
// ~a for integers; bool (read as uint8_t) flips its one bit.
template <bool kBool>
struct BitwiseNot {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a) const {
    if constexpr (kBool) return T(a ^ 1u);
    else return T(~a);
  }
};

// --- selection (where, masked_fill) ----------------------------------------------------

// m ? x : y with both values read first, so the compiler if-converts the
// choice into a vector blend (a conditionally read value keeps a loop scalar).
struct Select {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(uint8_t m, T x, T y) const {
    T r = y;
    r = m ? x : r;
    return r;
  }
};
// masked_fill(input, mask, value): the value where the mask is set.
struct MaskedFill {
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a, uint8_t m, T v) const {
    return Select{}(m, v, a);
  }
};

// --- copies, fills and ranges ---------------------------------------------------------

// One element of dtype S as dtype D (cast, copy_ between dtypes): through
// acc_type<S>; to bool, whether it is non-zero. S is the loop's storage type
// (bool read as uint8_t), D the destination's dtype (bool, not its storage).
template <typename D, typename S>
struct Convert {
  MF_FORCE_INLINE MF_HOST_DEVICE D operator()(S v) const {
    using A = acc_type<S>;
    if constexpr (std::is_same_v<D, bool>) return A(v) != A(0);
    else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(float(A(v)));
    else return D(A(v));
  }
};
// The bits of one element, unchanged (a copy within one dtype).
struct Identity {
  template <typename U>
  MF_FORCE_INLINE MF_HOST_DEVICE U operator()(U v) const {
    return v;
  }
};
template <typename T>
struct Constant {
  T value;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()() const { return value; }
};

// Index-valued fills: element i of a contiguous output.
// arange: start + i * step, in int64 for integral dtypes (start and step
// truncated, as in PyTorch), in double otherwise.
template <typename T>
struct Arange {
  std::conditional_t<is_floating_type_v<T>, double, int64_t> start, step;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const {
    if constexpr (is_floating_type_v<T>) return T(start + double(i) * step);
    else return T(start + i * step);
  }
};
// linspace, symmetric like PyTorch's: the first half counts up from start,
// the second half down from end, so both ends are exact.
template <typename T>
struct Linspace {
  double start, end, step;
  int64_t steps;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const {
    const double v = steps == 1 || i < steps / 2 ? start + step * double(i) : end - step * double(steps - 1 - i);
    if constexpr (is_floating_type_v<T>) return T(v);
    else return T(int64_t(v));
  }
};
// eye: ones on the diagonal of an (n, m) matrix.
template <typename T>
struct Eye {
  int64_t m;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const { return T(i / m == i % m ? 1 : 0); }
};

}  // namespace mf::functors
