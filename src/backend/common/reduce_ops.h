// Note [Shared reduction ops]
// The reductions' per-element math, written once for every backend like the
// elementwise functors (Note [Shared elementwise math]): a reduction op is a
// small struct whose members both the host compiler and nvcc compile,
//   using Acc = ...;                        // accumulator type
//   Acc identity() const;                   // value of an empty reduction
//   Acc map(T x, int64_t out) const;        // contribution of one element
//   Acc combine(Acc a, Acc b) const;        // associative and commutative
// `out` is the flat index of the output the element belongs to (var and
// logsumexp subtract a per-output centre; most ops ignore it). An op that
// needs the element's position along the reduced dim (argmax) has
// map(T x, int64_t out, int64_t r) instead; only reductions over one dim use
// it. A store writes each output from its accumulator: store(o, acc).
//
// M is the backend's math (cpu::HostMath, cuda::DeviceMath); M::to_acc<A>(x)
// reads an element of storage type T in the compute type A.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "meshflow/dtype.h"
#include "meshflow/host_device.h"

namespace mf::reduce_ops {

// Integers accumulate in uint64_t: wrap-around is defined and gives the
// two's-complement result of int64 arithmetic.
template <typename T>
using sum_acc_t = std::conditional_t<is_floating_type_v<T>, acc_type<T>, uint64_t>;

// An accumulator as the output type (bool: non-zero; integers from the
// wrapping uint64_t accumulator).
template <typename Out, typename Acc>
MF_FORCE_INLINE MF_HOST_DEVICE Out from_acc(Acc a) {
  if constexpr (std::is_same_v<Out, bool>) return a != Acc(0);
  else if constexpr (std::is_integral_v<Acc> && std::is_signed_v<Out>) return Out(int64_t(a));
  else return Out(a);
}

template <typename M, typename T, typename A>
struct Sum {
  using Acc = A;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return Acc(0); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t) const { return M::template to_acc<Acc>(x); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
};

template <typename M, typename T, typename A>
struct Prod {
  using Acc = A;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return Acc(1); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t) const { return M::template to_acc<Acc>(x); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a * b; }
};

// all (kAll) or any: whether each element is non-zero.
template <typename M, typename T, bool kAll>
struct Logical {
  using Acc = bool;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return kAll; }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t) const {
    return M::template to_acc<acc_type<T>>(x) != acc_type<T>(0);
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return kAll ? (a && b) : (a || b); }
};

// max (kMax) or min with NaN propagation: a NaN wins over any number.
template <typename M, typename T, bool kMax>
struct Extremum {
  using Acc = acc_type<T>;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const {
    if constexpr (std::is_floating_point_v<Acc>)
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t) const { return M::template to_acc<Acc>(x); }
  // One select on the or of two compares: the form GCC vectorises best.
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const {
    const bool keep_a = (kMax ? a > b : a < b) | (a != a);
    return keep_a ? a : b;
  }
};

// The extremum of |x| (the infinity norms).
template <typename M, typename T, bool kMax>
struct AbsExtremum {
  using Acc = acc_type<T>;
  Extremum<M, T, kMax> base;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return base.identity(); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t) const { return M::fabs(M::template to_acc<Acc>(x)); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return base.combine(a, b); }
};

// sum((x - centre[out])^2)
template <typename M, typename T>
struct SquaredDeviation {
  using Acc = acc_type<T>;
  const Acc* centre;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return Acc(0); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t out) const {
    const Acc d = M::template to_acc<Acc>(x) - centre[out];
    return d * d;
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
};

// sum(exp(x - shift[out]))
template <typename M, typename T>
struct SumExp {
  using Acc = acc_type<T>;
  const Acc* shift;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return Acc(0); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t out) const {
    return M::exp(M::template to_acc<Acc>(x) - shift[out]);
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
};

// Norm kinds by p, each a sum (or extremum) of a function of |x|.
enum class NormKind { Zero, One, Two, Inf, NegInf, General };

template <typename M, typename T, NormKind kKind>
struct NormSum {
  using Acc = acc_type<T>;
  Acc p;
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const { return Acc(0); }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t) const {
    const Acc v = M::template to_acc<Acc>(x);
    if constexpr (kKind == NormKind::Zero) return v != Acc(0) ? Acc(1) : Acc(0);
    else if constexpr (kKind == NormKind::One) return M::fabs(v);
    else if constexpr (kKind == NormKind::Two) return v * v;
    else return M::pow(M::fabs(v), p);
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
};

// The first position of the maximum (kMax) or minimum along the reduced
// dim, NaN counting as the extremum (argmax, max over a dim).
template <typename M, typename T, bool kMax>
struct ArgExtremum {
  using A = acc_type<T>;
  struct Acc {
    A value;
    int64_t index;
  };
  MF_FORCE_INLINE MF_HOST_DEVICE static bool beats(A v, A best) {
    return (kMax ? v > best : v < best) | ((v != v) & (best == best));
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc identity() const {
    return {Extremum<M, T, kMax>{}.identity(), std::numeric_limits<int64_t>::max()};
  }
  MF_FORCE_INLINE MF_HOST_DEVICE Acc map(T x, int64_t, int64_t r) const { return {M::template to_acc<A>(x), r}; }
  // Ties (and the identity's value met again) keep the earlier position.
  MF_FORCE_INLINE MF_HOST_DEVICE Acc combine(Acc a, Acc b) const {
    if (beats(b.value, a.value)) return b;
    if (beats(a.value, b.value)) return a;
    return b.index < a.index ? b : a;
  }
};

// --- stores ---------------------------------------------------------------------------

template <typename Out>
struct StoreAs {
  Out* out;
  template <typename Acc>
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, Acc a) const {
    out[i] = from_acc<Out>(a);
  }
};

// a / divisor (mean, var), or its square root (std).
template <typename M, typename Out, bool kSqrt>
struct StoreDivided {
  Out* out;
  acc_type<Out> divisor;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, acc_type<Out> a) const {
    const acc_type<Out> v = a / divisor;
    if constexpr (kSqrt) out[i] = Out(M::sqrt(v));
    else out[i] = Out(v);
  }
};

// a ** inverse (the general p-norm's root).
template <typename M, typename Out>
struct StoreRoot {
  Out* out;
  acc_type<Out> inverse;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, acc_type<Out> a) const { out[i] = Out(M::pow(a, inverse)); }
};

// logsumexp's shift: the maximum, or 0 where it is infinite (all -inf, or a
// +inf present), so exp(x - shift) cannot overflow.
template <typename M, typename A>
struct StoreShift {
  A* shift;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, A m) const { shift[i] = M::isinf(m) ? A(0) : m; }
};
template <typename M, typename Out>
struct StoreLogShifted {
  Out* out;
  const acc_type<Out>* shift;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, acc_type<Out> s) const {
    out[i] = Out(M::log(s) + shift[i]);
  }
};

// argmax's position, and max over a dim's value (values may be null).
template <typename Out>
struct StoreArg {
  Out* values;
  int64_t* indices;
  template <typename Acc>
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, Acc a) const {
    if (values) values[i] = Out(a.value);
    indices[i] = a.index;
  }
};

}  // namespace mf::reduce_ops
