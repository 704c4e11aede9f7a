// Note [Device random ops]
// The random ops (uniform_, normal_, random_ ints, bernoulli, dropout,
// randperm, multinomial, _standard_gamma)
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
// counters side by side (backend/cpu/kernels/random.cpp, dropout.cpp).
#pragma once

#include <cmath>
#include <limits>

#include "backend/common/index_kernels.h"
#include "backend/common/scratch.h"
#include "backend/common/sort_kernels.h"
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

// out[i] = f(i) in row-major order, through a dense buffer in scratch when
// out is strided (generate_scratch).
template <typename L, typename K, typename F>
void generate(TensorList& outs, const F& f) {
  Tensor& out = outs[0];
  if (out.is_contiguous()) {
    L::template run_indexed<K>(out, f);
    return;
  }
  Tensor dense = Scratch(outs).take(out.sizes(), out.dtype());
  L::template run_indexed<K>(dense, f);
  copy_cast<L>(out, dense);
}

template <typename L>
void uniform(const TensorList&, TensorList& out, const Attrs& attrs) {
  dispatch_floating(out[0].dtype(), "uniform_", [&]<typename T>() {
    using A = acc_type<T>;
    const double from = attrs.get_float("from"), to = attrs.get_float("to");
    generate<L, T>(out, Uniform<T>{counter_of(attrs, uniform_per_counter<T>()), A(from), A(to - from)});
  });
}

template <typename L>
void normal(const TensorList&, TensorList& out, const Attrs& attrs) {
  dispatch_floating(out[0].dtype(), "normal_", [&]<typename T>() {
    using A = acc_type<T>;
    generate<L, T>(out, Normal<typename L::Math, T>{counter_of(attrs, normal_per_counter<T>()),
                                                       A(attrs.get_float("mean")), A(attrs.get_float("std"))});
  });
}

template <typename L>
void random_int(const TensorList&, TensorList& out, const Attrs& attrs) {
  const int64_t low = attrs.get_int("low");
  const uint64_t range = uint64_t(attrs.get_int("high")) - uint64_t(low);
  const int64_t k = range <= (uint64_t(1) << 32) ? 4 : 2;
  dispatch_dtype(out[0].dtype(), [&]<typename T>() {
    generate<L, kernel_type<T>>(out, RandomInt<kernel_type<T>>{counter_of(attrs, k), low, range});
  });
}

template <typename L>
void bernoulli_scalar(const TensorList&, TensorList& out, const Attrs& attrs) {
  const int64_t k = out[0].dtype() == DType::Float64 ? 2 : 4;
  dispatch_dtype(out[0].dtype(), [&]<typename T>() {
    generate<L, kernel_type<T>>(out, BernoulliScalar<kernel_type<T>>{counter_of(attrs, k), attrs.get_float("p")});
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

// --- randperm ------------------------------------------------------------------------
// 0..n-1 sorted by a random 64-bit key per element (two words, k = 2),
// equal keys by position: the keys in a buffer, then one thread heap-sorts
// the positions (a single line).

struct KeyOf {  // element i's key, as uint64 bits in int64 storage
  Counter c;
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t operator()(int64_t i) const {
    const PhiloxWords w = c.words(i);
    const int64_t j = i % 2;
    return int64_t((uint64_t(w.w[2 * j]) << 32) | w.w[2 * j + 1]);
  }
};
struct ByKey {
  const int64_t* keys;
  MF_FORCE_INLINE MF_HOST_DEVICE bool operator()(int64_t l, int64_t r) const {
    const uint64_t a = uint64_t(keys[l]), b = uint64_t(keys[r]);
    return a != b ? a < b : l < r;
  }
};
struct PermuteLine {  // operand 0: the output
  const int64_t* keys;
  int64_t n;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t* p = reinterpret_cast<int64_t*>(data[0] + off[0]);
    for (int64_t i = 0; i < n; ++i) p[i] = i;
    sort_kernels::heap_sort(p, 1, n, ByKey{keys});
  }
};

template <typename L>
void randperm(const TensorList&, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const int64_t n = attrs.get_int("n");
  if (n == 0) return;
  Tensor keys = Scratch(out).take({n}, DType::Int64);
  L::template run_indexed<int64_t>(keys, KeyOf{counter_of(attrs, 2)});
  L::template for_each<1>(y.device(), walk_geometry<1>({1}, {operand(y, {0})}, "randperm"), 1,
                          PermuteLine{static_cast<const int64_t*>(keys.data_ptr()), n});
}

// --- multinomial ---------------------------------------------------------------------
// src/ops/random.cpp's draws (one double uniform per draw, k = 2), one
// thread per row. With replacement, draw r of row b is the first category
// whose running sum exceeds u * total (u of element b * samples + r).
// Without, the samples largest keys log1p(-u) / w_c (u of element
// b * categories + c; ties: the lower category), in order. A row that is
// not a distribution (a negative or non-finite weight, a zero total, too
// few positive weights to draw without replacement) is recorded and
// raised as a ValueError.

template <typename M, typename T>
struct MultinomialRow {  // operands: 0 the row's samples (contiguous), 1 the row's weights
  Counter c;
  int64_t categories, samples, ws;
  bool replacement;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE double weight(const T* row, int64_t k) const {
    return double(M::template to_acc<acc_type<T>>(row[k * ws]));
  }
  MF_FORCE_INLINE MF_HOST_DEVICE double uniform(int64_t i) const {
    const PhiloxWords w = c.words(i);
    const int64_t j = i % 2;
    return uniform_double(w.w[2 * j], w.w[2 * j + 1]);
  }
  MF_FORCE_INLINE MF_HOST_DEVICE double key(const T* row, int64_t b, int64_t k) const {
    const double v = weight(row, k);
    return v > 0 ? M::log1p(-uniform(b * categories + k)) / v : -INFINITY;
  }
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t* o = reinterpret_cast<int64_t*>(data[0] + off[0]);
    const T* row = reinterpret_cast<const T*>(data[1] + off[1]);
    const int64_t b = off[0] / int64_t(sizeof(int64_t)) / samples;
    double total = 0;
    int64_t positive = 0;
    for (int64_t k = 0; k < categories; ++k) {
      const double v = weight(row, k);
      if (!(v >= 0) || M::isinf(v)) {
        M::record_fault(fault, b);
        return;
      }
      total += v;
      positive += v > 0;
    }
    if (!(total > 0) || (!replacement && positive < samples)) {
      M::record_fault(fault, b);
      return;
    }
    if (replacement) {
      for (int64_t r = 0; r < samples; ++r) {
        const double target = uniform(b * samples + r) * total;
        double acc = 0;
        int64_t k = 0;
        for (; k < categories; ++k) {
          acc += weight(row, k);
          if (acc > target) break;
        }
        if (k == categories) k = categories - 1;
        while (weight(row, k) == 0) --k;
        o[r] = k;
      }
      return;
    }
    // The r-th largest (key, -category) below the previous one.
    double last_key = INFINITY;
    int64_t last = -1;
    for (int64_t r = 0; r < samples; ++r) {
      double best_key = -INFINITY;
      int64_t best = -1;
      for (int64_t k = 0; k < categories; ++k) {
        const double v = key(row, b, k);
        const bool below_last = last < 0 || v < last_key || (v == last_key && k > last);
        const bool above_best = best < 0 || v > best_key || (v == best_key && k < best);
        if (below_last && above_best) best_key = v, best = k;
      }
      o[r] = best;
      last_key = best_key, last = best;
    }
  }
};

template <typename L>
void multinomial(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& w = in[0];
  Tensor& y = out[0];
  const int64_t samples = attrs.get_int("num_samples"), categories = w.size(-1);
  if (y.numel() == 0 || categories == 0) return;
  MF_CHECK(y.is_contiguous(), Error, "multinomial: expected a contiguous output");
  const Shape rows(w.sizes().begin(), w.sizes().end() - 1);
  Shape out_rows = contiguous_strides(rows);
  for (auto& v : out_rows) v *= samples;
  const LoopGeometry<2> g = walk_geometry<2>(
      rows, {operand(y, out_rows), operand(w, Shape(w.strides().begin(), w.strides().end() - 1))}, "multinomial");
  dispatch_floating(w.dtype(), "multinomial", [&]<typename T>() {
    index_kernels::with_fault_check<L>(
        y.device(),
        [&](IndexFault* fault) {
          L::template for_each<2>(y.device(), g, shape_numel(rows),
                                  MultinomialRow<typename L::Math, T>{counter_of(attrs, 2), categories, samples,
                                                                      w.strides().back(),
                                                                      attrs.get_bool("replacement"), fault});
        },
        [samples](int64_t row) {
          throw ValueError(::mf::detail::concat(
              "multinomial: row ", row, " is not a distribution to draw ", samples,
              " samples from (probabilities must be finite and >= 0, sum to more than 0, and without replacement "
              "have at least num_samples of them > 0)"));
        });
  });
}

// --- _standard_gamma (Note [Gamma sampling]) ---------------------------------------------------

// Note [Gamma sampling]: Marsaglia and Tsang, "A simple method for
// generating gamma variables" (ACM TOMS 26(3), 2000), the method torch
// uses. For a >= 1 let d = a - 1/3 and c = 1 / sqrt(9 d); draw a standard
// normal z until v = (1 + c z)^3 > 0, and a uniform u in (0, 1]; accept d v
// when u < 1 - 0.0331 z^4 (the squeeze) or log u < z^2 / 2 + d (1 - v + log v),
// else draw again. For a < 1 the sample is one of shape a + 1 times
// u^(1 / a) for another uniform u (the boost).
//
// Rejection needs an unbounded number of draws per element, so element i
// owns one Philox counter, offset + i (the op reserves one counter per
// element), and reads the words of philox(seed, offset + i, k) for the
// substreams k = 0, 1, 2, ... in turn: each counter gives two double
// uniforms (two words each), and two uniforms give two normals by
// Box-Muller (the sine half is kept for the element's next normal). No
// other op uses a substream other than 0, so the streams never overlap
// another op's counters, and element i depends only on (seed, offset, i)
// and its own shape: never on the thread count, the device or the other
// elements.
//
// Every dtype computes in double; the sample is rounded to the dtype and
// raised to its smallest normal number, as torch does, so that log of a
// sample stays finite for tiny shapes (where u^(1 / a) underflows).
// a = 0 gives that smallest number too, a = inf gives inf, NaN gives NaN
// (torch gives the smallest number), and a < 0 is an error (torch returns
// the smallest number).

// The random numbers of one element: the words of its counter's
// substreams, in order.
class ElementStream {
 public:
  MF_HOST_DEVICE ElementStream(uint64_t seed, uint64_t counter) : seed_(seed), counter_(counter) {}

  // Uniform in [0, 1) with 53 random bits.
  MF_HOST_DEVICE double uniform() {
    if (next_word_ == 4) {
      words_ = philox4x32(seed_, counter_, substream_++);
      next_word_ = 0;
    }
    const double u = uniform_double(words_.w[next_word_], words_.w[next_word_ + 1]);
    next_word_ += 2;
    return u;
  }

  MF_HOST_DEVICE double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double radius = std::sqrt(-2 * std::log(1 - uniform()));  // 1 - u in (0, 1]
    const double angle = kTwoPi * uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  uint64_t seed_, counter_, substream_ = 0;
  PhiloxWords words_{};
  int next_word_ = 4;
  double spare_ = 0;
  bool has_spare_ = false;
};

// A Gamma(a, 1) sample for a >= 0.
MF_HOST_DEVICE inline double sample_standard_gamma(double a, ElementStream& stream) {
  if (!(a > 0) || std::isinf(a)) return a;  // 0, inf and NaN
  double scale = 1;
  if (a < 1) {
    scale = std::pow(1 - stream.uniform(), 1 / a);
    a += 1;
  }
  const double d = a - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    double z, v;
    do {
      z = stream.normal();
      v = 1 + c * z;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1 - stream.uniform();
    const double zz = z * z;
    if (u < 1 - 0.0331 * zz * zz || std::log(u) < 0.5 * zz + d * (1 - v + std::log(v))) return scale * d * v;
  }
}

// Operands: 0 the output (contiguous: its offset gives i), 1 the concentration.
template <typename M, typename T>
struct StandardGamma {
  uint64_t seed, offset;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t i = off[0] / int64_t(sizeof(T));
    const double a = double(*reinterpret_cast<const T*>(data[1] + off[1]));
    if (a < 0) {
      M::record_fault(fault, i);
      return;
    }
    ElementStream stream(seed, offset + uint64_t(i));
    const T sample = T(sample_standard_gamma(a, stream));
    constexpr T kTiny = std::numeric_limits<T>::min();
    *reinterpret_cast<T*>(data[0] + off[0]) = sample != sample || sample >= kTiny ? sample : kTiny;
  }
};

template <typename L>
void standard_gamma(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& a = in[0];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  MF_CHECK(y.is_contiguous(), Error, "_standard_gamma: expected a contiguous output");
  const LoopGeometry<2> g =
      walk_geometry<2>(a.sizes(), {operand(y, y.strides()), operand(a, a.strides())}, "_standard_gamma");
  MF_CHECK(a.dtype() == DType::Float32 || a.dtype() == DType::Float64, TypeError,
           "_standard_gamma: expected a float32 or float64 tensor, got ", dtype_name(a.dtype()));
  const Counter c = counter_of(attrs, 1);
  auto run = [&]<typename T>() {
    index_kernels::with_fault_check<L>(
        y.device(),
        [&](IndexFault* fault) {
          L::template for_each<2>(y.device(), g, y.numel(),
                                  StandardGamma<typename L::Math, T>{c.seed, c.offset, fault});
        },
        [](int64_t i) {
          throw ValueError(::mf::detail::concat("_standard_gamma: concentration must be >= 0, got a negative value "
                                                "at element ", i));
        });
  };
  if (a.dtype() == DType::Float64) run.template operator()<double>();
  else run.template operator()<float>();
}

// The in-place fills' scratch (Note [Kernel scratch]): a dense buffer when
// self (input 0, the output) is strided.
inline int64_t generate_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  const Tensor& self = in[0];
  return self.is_contiguous() ? 0 : ScratchLayout("random fill").add(self.sizes(), self.dtype()).bytes();
}
// randperm's sort keys.
inline int64_t randperm_scratch(const TensorList&, const std::vector<TensorMeta>&, const Attrs& attrs) {
  return ScratchLayout("randperm").add({attrs.get_int("n")}, DType::Int64).bytes();
}

template <typename L>
void register_all(DeviceType device) {
  auto set = [device](const char* op, KernelFn kernel, ScratchFn scratch = {}) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel), std::move(scratch));
  };
  set("uniform", uniform<L>, generate_scratch);
  set("normal", normal<L>, generate_scratch);
  set("random_int", random_int<L>, generate_scratch);
  set("bernoulli_scalar", bernoulli_scalar<L>, generate_scratch);
  set("bernoulli", bernoulli<L>);
  set("dropout", dropout<L>);
  set("dropout_backward", dropout_backward<L>);
  set("randperm", randperm<L>, randperm_scratch);
  set("multinomial", multinomial<L>);
  set("standard_gamma", standard_gamma<L>);
}

}  // namespace mf::random_kernels
