// Note [Device random ops]
// The random ops (uniform_, normal_, random_ ints, bernoulli, dropout)
// written once over a backend's loops L, from the Philox words of
// meshflow/philox.h by the rule of Note [Counter-based random ops]
// (src/ops/random.cpp): element i of the output (in row-major order) uses
// word i % k of counter offset + i / k. A device therefore draws the values
// the CPU draws for the same seed and offset: bit for bit for integers,
// uniforms in [0, 1), bernoulli draws and dropout masks, and up to the
// last bit for values that pass through more arithmetic (a uniform scaled
// to [from, to) may be a fused multiply-add on one side; normals use the
// device's log, cos and sqrt). Each element computes its counter's words
// itself.
// The CPU keeps its own kernels, which compute the words of a batch of
// counters side by side (src/ops/random.cpp, dropout.cpp).
#pragma once

#include <cmath>

#include "backend/common/index_kernels.h"
#include "meshflow/philox.h"

namespace mf::random_kernels {

using elementwise_kernels::copy_cast;
using index_kernels::operand;
using index_kernels::walk_geometry;

// k: elements per counter (Note [Counter-based random ops]).
template <typename T>
constexpr int64_t uniform_per_counter() { return std::is_same_v<T, double> ? 2 : 4; }
template <typename T>
constexpr int64_t normal_per_counter() { return std::is_same_v<T, double> ? 1 : 2; }

struct Counter {
  uint64_t seed, offset;
  int64_t k;
  MF_FORCE_INLINE MF_HOST_DEVICE PhiloxWords words(int64_t i) const { return philox4x32(seed, offset + uint64_t(i / k)); }
};

template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE acc_type<T> uniform_at(const PhiloxWords& w, int64_t j) {
  if constexpr (std::is_same_v<T, double>) return uniform_double(w.w[2 * j], w.w[2 * j + 1]);
  else return uniform_float(w.w[j]);
}

template <typename T>
struct Uniform {
  Counter c;
  acc_type<T> lo, width;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const {
    return T(lo + width * uniform_at<T>(c.words(i), i % c.k));
  }
};

// Box-Muller: a standard normal from two uniforms (1 - u1 is in (0, 1]).
template <typename M, typename T>
struct Normal {
  Counter c;
  acc_type<T> mean, std;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const {
    using A = acc_type<T>;
    const PhiloxWords w = c.words(i);
    const int64_t j = i % c.k;
    A u1, u2;
    if constexpr (std::is_same_v<T, double>) {
      u1 = uniform_double(w.w[0], w.w[1]);
      u2 = uniform_double(w.w[2], w.w[3]);
    } else {
      u1 = uniform_float(w.w[2 * j]);
      u2 = uniform_float(w.w[2 * j + 1]);
    }
    constexpr A kTwoPi = A(6.283185307179586476925286766559);
    return T(mean + std * (M::sqrt(A(-2) * M::log(A(1) - u1)) * M::cos(kTwoPi * u2)));
  }
};

// Integers in [low, low + range): one word (k = 4) or two (k = 2).
template <typename T>
struct RandomInt {
  Counter c;
  int64_t low;
  uint64_t range;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const {
    const PhiloxWords w = c.words(i);
    const int64_t j = i % c.k;
    const uint64_t bits = c.k == 4 ? uint64_t(w.w[j]) : (uint64_t(w.w[2 * j]) << 32) | w.w[2 * j + 1];
    const int64_t v = int64_t(uint64_t(low) + bits % range);
    if constexpr (is_floating_type_v<T>) return T(double(v));
    else return T(v);
  }
};

template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T zero_or_one(bool one) {
  if constexpr (is_floating_type_v<T>) return T(one ? 1.0f : 0.0f);
  else return T(one);
}

// 1 with probability p, from a float64 uniform for float64 outputs (k = 2),
// else a float one (k = 4).
template <typename T>
struct BernoulliScalar {
  Counter c;
  double p;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const {
    const PhiloxWords w = c.words(i);
    const int64_t j = i % c.k;
    const bool one = c.k == 2 ? uniform_double(w.w[2 * j], w.w[2 * j + 1]) < p : double(uniform_float(w.w[j])) < p;
    return zero_or_one<T>(one);
  }
};

inline Counter counter_of(const Attrs& attrs, int64_t k) {
  return {uint64_t(attrs.get_int("seed")), uint64_t(attrs.get_int("offset")), k};
}

// out[i] = f(i) in row-major order, through a dense buffer when out is strided.
template <typename L, typename K, typename F>
void generate(Tensor& out, const F& f) {
  if (out.is_contiguous()) {
    L::template run_indexed<K>(out, f);
    return;
  }
  Tensor dense = make_empty(out.sizes(), out.dtype(), out.device());
  L::template run_indexed<K>(dense, f);
  copy_cast<L>(out, dense);
}

template <typename L>
void uniform(const TensorList&, TensorList& out, const Attrs& attrs) {
  dispatch_floating(out[0].dtype(), "uniform_", [&]<typename T>() {
    using A = acc_type<T>;
    const double from = attrs.get_float("from"), to = attrs.get_float("to");
    generate<L, T>(out[0], Uniform<T>{counter_of(attrs, uniform_per_counter<T>()), A(from), A(to - from)});
  });
}

template <typename L>
void normal(const TensorList&, TensorList& out, const Attrs& attrs) {
  dispatch_floating(out[0].dtype(), "normal_", [&]<typename T>() {
    using A = acc_type<T>;
    generate<L, T>(out[0], Normal<typename L::Math, T>{counter_of(attrs, normal_per_counter<T>()),
                                                       A(attrs.get_float("mean")), A(attrs.get_float("std"))});
  });
}

template <typename L>
void random_int(const TensorList&, TensorList& out, const Attrs& attrs) {
  const int64_t low = attrs.get_int("low");
  const uint64_t range = uint64_t(attrs.get_int("high")) - uint64_t(low);
  const int64_t k = range <= (uint64_t(1) << 32) ? 4 : 2;
  dispatch_dtype(out[0].dtype(), [&]<typename T>() {
    generate<L, kernel_type<T>>(out[0], RandomInt<kernel_type<T>>{counter_of(attrs, k), low, range});
  });
}

template <typename L>
void bernoulli_scalar(const TensorList&, TensorList& out, const Attrs& attrs) {
  const int64_t k = out[0].dtype() == DType::Float64 ? 2 : 4;
  dispatch_dtype(out[0].dtype(), [&]<typename T>() {
    generate<L, kernel_type<T>>(out[0], BernoulliScalar<kernel_type<T>>{counter_of(attrs, k), attrs.get_float("p")});
  });
}

// Operands: 0 the output (contiguous: its offset gives i), 1 the probability.
template <typename M, typename T>
struct Bernoulli {
  Counter c;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    const int64_t i = off[0] / int64_t(sizeof(T));
    const A p = M::template to_acc<A>(*reinterpret_cast<const T*>(data[1] + off[1]));
    if (!(p >= A(0) && p <= A(1))) M::record_fault(fault, i);
    *reinterpret_cast<T*>(data[0] + off[0]) = T(uniform_at<T>(c.words(i), i % c.k) < p ? A(1) : A(0));
  }
};

template <typename L>
void bernoulli(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& p = in[0];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  MF_CHECK(y.is_contiguous(), Error, "bernoulli: expected a contiguous output");
  const LoopGeometry<2> g = walk_geometry<2>(p.sizes(), {operand(y, y.strides()), operand(p, p.strides())}, "bernoulli");
  dispatch_floating(p.dtype(), "bernoulli", [&]<typename T>() {
    index_kernels::with_fault_check<L>(
        y.device(),
        [&](IndexFault* fault) {
          L::template for_each<2>(y.device(), g, y.numel(),
                                  Bernoulli<typename L::Math, T>{counter_of(attrs, uniform_per_counter<T>()), fault});
        },
        [](int64_t i) {
          throw Error(::mf::detail::concat("bernoulli: expected every probability in [0, 1], got one outside it at "
                                           "element ", i));
        });
  });
}

// dropout (src/ops/dropout.cpp): element i is kept when the top 24 bits of
// word i % 4 of counter offset + i / 4 are below the threshold.
// Operands: 0 the output, 1 the mask (both contiguous: the output's offset
// gives i), 2 the input.
template <typename M, typename T>
struct Dropout {
  Counter c;
  uint32_t threshold;
  acc_type<T> scale;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    const int64_t i = off[0] / int64_t(sizeof(T));
    const bool keep = (c.words(i).w[i % 4] >> 8) < threshold;
    *reinterpret_cast<bool*>(data[1] + off[1]) = keep;
    // Multiplying by 0 keeps NaN inputs NaN, as in PyTorch.
    *reinterpret_cast<T*>(data[0] + off[0]) =
        T(M::template to_acc<A>(*reinterpret_cast<const T*>(data[2] + off[2])) * (keep ? scale : A(0)));
  }
};

template <typename L>
void dropout(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor &y = out[0], &mask = out[1];
  if (y.numel() == 0) return;
  MF_CHECK(y.is_contiguous() && mask.is_contiguous(), Error, "dropout: expected contiguous outputs");
  const double p = attrs.get_float("p");
  const uint32_t threshold = uint32_t(std::ceil(double(float(1.0 - p)) * 16777216.0));
  const LoopGeometry<3> g = walk_geometry<3>(
      x.sizes(), {operand(y, y.strides()), operand(mask, mask.strides()), operand(x, x.strides())}, "dropout");
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    using A = acc_type<T>;
    L::template for_each<3>(y.device(), g, y.numel(),
                            Dropout<typename L::Math, T>{counter_of(attrs, 4), threshold, A(1.0 / (1.0 - p))});
  });
}

template <typename T>
struct MaskedScale {
  acc_type<T> scale;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T g, uint8_t keep) const {
    return T(acc_type<T>(g) * (keep != 0 ? scale : acc_type<T>(0)));
  }
};

// grad * (mask ? scale : 0).
template <typename L>
void dropout_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  dispatch_floating(in[0].dtype(), "dropout_backward", [&]<typename T>() {
    L::template run<T, T, uint8_t>(out[0], {&in[0], &in[1]}, MaskedScale<T>{acc_type<T>(attrs.get_float("scale"))});
  });
}

template <typename L>
void register_all(DeviceType device) {
  auto set = [device](const char* op, KernelFn kernel) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel));
  };
  set("uniform", uniform<L>);
  set("normal", normal<L>);
  set("random_int", random_int<L>);
  set("bernoulli_scalar", bernoulli_scalar<L>);
  set("bernoulli", bernoulli<L>);
  set("dropout", dropout<L>);
  set("dropout_backward", dropout_backward<L>);
}

}  // namespace mf::random_kernels
