// Random factories and in-place fills: rand, randn, randint, the *_like
// forms, randperm, bernoulli, uniform_, normal_.
//
// Note [Counter-based random ops]: an op reserves Philox counters from the
// default generator when it is called (the functional function does it, so
// a traced graph records seed and offset as attributes) and element i of the
// output uses only the words of counter offset + i / k, where k elements
// share one counter's four 32-bit words:
//   float uniform: one word per element (k = 4)
//   double uniform, float normal (a Box-Muller pair): two words (k = 2)
//   double normal: four words (k = 1)
//   randint: one word (ranges up to 2^32, k = 4) or two (k = 2)
//   randperm: two words, a 64-bit sort key (k = 2)
//   bernoulli: a uniform of the probability's dtype (float64: k = 2, else 4)
//   _standard_gamma: one counter per element and all its substreams (k = 1,
//     Note [Gamma sampling] in gamma.cpp)
// Values therefore never depend on the thread count, and any slice of the
// output can be produced on its own.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/generator.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "backend/cpu/kernels/loops.h"
#include "ops/random_common.h"

namespace mf {
namespace {

using namespace random_detail;

// Philox4x32-10 of kPhiloxBatch consecutive counters: the same function as
// mf::philox (generator.cpp), laid out so that the rounds vectorise across
// counters. words[w][j] is word w of counter first + j.
constexpr int64_t kPhiloxBatch = 16;
using PhiloxBatch = std::array<std::array<uint32_t, kPhiloxBatch>, 4>;

void philox_batch(uint64_t seed, uint64_t first, PhiloxBatch& words) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  auto& [c0, c1, c2, c3] = words;
  for (int64_t j = 0; j < kPhiloxBatch; ++j) {
    c0[size_t(j)] = uint32_t(first + uint64_t(j));
    c1[size_t(j)] = uint32_t((first + uint64_t(j)) >> 32);
    c2[size_t(j)] = 0;
    c3[size_t(j)] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int64_t j = 0; j < kPhiloxBatch; ++j) {
      const uint64_t p0 = uint64_t(kM0) * c0[size_t(j)];
      const uint64_t p1 = uint64_t(kM1) * c2[size_t(j)];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[size_t(j)] ^ k0;
      const uint32_t n2 = uint32_t(p0 >> 32) ^ c3[size_t(j)] ^ k1;
      c0[size_t(j)] = n0;
      c1[size_t(j)] = uint32_t(p1);
      c2[size_t(j)] = n2;
      c3[size_t(j)] = uint32_t(p0);
    }
    k0 += kW0, k1 += kW1;
  }
}

// Writes produce(words, j, i) to element i = c * k + j of the contiguous
// p[0, n) for every counter c, in parallel.
template <typename T, typename F>
void generate_indexed(T* p, int64_t n, int64_t k, Stream s, const F& produce) {
  const int64_t batches = (n + k * kPhiloxBatch - 1) / (k * kPhiloxBatch);
  parallel_for(0, batches, std::max<int64_t>(1, kGrainSize / (4 * k * kPhiloxBatch)), [&](int64_t b, int64_t e) {
    PhiloxBatch words;
    for (int64_t batch = b; batch < e; ++batch) {
      const int64_t first_counter = batch * kPhiloxBatch;
      philox_batch(s.seed, s.offset + uint64_t(first_counter), words);
      for (int64_t j = 0; j < kPhiloxBatch; ++j) {
        const std::array<uint32_t, 4> w{words[0][size_t(j)], words[1][size_t(j)], words[2][size_t(j)],
                                        words[3][size_t(j)]};
        const int64_t first = (first_counter + j) * k, last = std::min(n, first + k);
        for (int64_t i = first; i < last; ++i) p[i] = produce(w, i - first, i);
      }
    }
  });
}

// generate_indexed for values that depend on the words only.
template <typename T, typename F>
void generate_contiguous(T* p, int64_t n, int64_t k, Stream s, const F& produce) {
  generate_indexed(p, n, k, s, [&](const std::array<uint32_t, 4>& w, int64_t j, int64_t) { return produce(w, j); });
}

// generate_contiguous into t (any strides; element i in row-major order).
template <typename T, typename F>
void generate(Tensor& t, int64_t k, Stream s, const F& produce) {
  if (t.is_contiguous()) {
    generate_contiguous(static_cast<T*>(t.data_ptr()), t.numel(), k, s, produce);
    return;
  }
  Tensor dense = make_empty(t.sizes(), t.dtype(), t.device());
  generate_contiguous(static_cast<T*>(dense.data_ptr()), t.numel(), k, s, produce);
  cpu::copy_cast(t, dense);
}

// Elements per counter of a uniform draw for T (Note [Counter-based random ops]).
template <typename T>
constexpr int64_t uniform_per_counter() { return std::is_same_v<T, double> ? 2 : 4; }

template <typename T>
acc_type<T> uniform_at(const std::array<uint32_t, 4>& w, int64_t j) {
  if constexpr (std::is_same_v<T, double>) return uniform_double(w[size_t(2 * j)], w[size_t(2 * j + 1)]);
  else return uniform_float(w[size_t(j)]);
}

template <typename T>
constexpr int64_t normal_per_counter() { return std::is_same_v<T, double> ? 1 : 2; }

// Box-Muller: a standard normal from two uniforms (1 - u1 is in (0, 1]).
template <typename T>
acc_type<T> normal_at(const std::array<uint32_t, 4>& w, int64_t j) {
  using A = acc_type<T>;
  A u1, u2;
  if constexpr (std::is_same_v<T, double>) {
    u1 = uniform_double(w[0], w[1]);
    u2 = uniform_double(w[2], w[3]);
  } else {
    u1 = uniform_float(w[size_t(2 * j)]);
    u2 = uniform_float(w[size_t(2 * j + 1)]);
  }
  return std::sqrt(A(-2) * std::log(A(1) - u1)) * std::cos(A(2) * std::numbers::pi_v<A> * u2);
}

int64_t per_counter(DType dtype, bool normal) {
  return dispatch_floating(dtype, normal ? "normal_" : "uniform_", [&]<typename T>() {
    return normal ? normal_per_counter<T>() : uniform_per_counter<T>();
  });
}

std::vector<TensorMeta> same_as_self(const TensorList& in) { return {{in[0].sizes(), in[0].dtype(), in[0].device()}}; }

// In-place fills overwrite self: no gradient reaches its old value.
TensorList no_gradient(const BackwardContext&) { return TensorList(1); }

MF_REGISTER_OP(OpDef{
    .name = "uniform",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .cpu_kernel = [](const TensorList&, TensorList& out, const Attrs& attrs) {
      const double from = attrs.get_float("from"), to = attrs.get_float("to");
      dispatch_floating(out[0].dtype(), "uniform_", [&]<typename T>() {
        using A = acc_type<T>;
        const A lo = A(from), width = A(to - from);
        generate<T>(out[0], uniform_per_counter<T>(), stream_of(attrs),
                    [=](const std::array<uint32_t, 4>& w, int64_t j) { return T(lo + width * uniform_at<T>(w, j)); });
      });
    },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "normal",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .cpu_kernel = [](const TensorList&, TensorList& out, const Attrs& attrs) {
      const double mean = attrs.get_float("mean"), std = attrs.get_float("std");
      dispatch_floating(out[0].dtype(), "normal_", [&]<typename T>() {
        using A = acc_type<T>;
        const A mu = A(mean), sigma = A(std);
        generate<T>(out[0], normal_per_counter<T>(), stream_of(attrs),
                    [=](const std::array<uint32_t, 4>& w, int64_t j) { return T(mu + sigma * normal_at<T>(w, j)); });
      });
    },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

// Integers in [low, high): one word per element when the range fits in 32
// bits, else two (k = 4 or 2).
int64_t randint_per_counter(uint64_t range) { return range <= (uint64_t(1) << 32) ? 4 : 2; }

MF_REGISTER_OP(OpDef{
    .name = "random_int",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .cpu_kernel = [](const TensorList&, TensorList& out, const Attrs& attrs) {
      const int64_t low = attrs.get_int("low");
      const uint64_t range = uint64_t(attrs.get_int("high")) - uint64_t(low);
      const int64_t k = randint_per_counter(range);
      dispatch_dtype(out[0].dtype(), [&]<typename T>() {
        generate<T>(out[0], k, stream_of(attrs), [=](const std::array<uint32_t, 4>& w, int64_t j) {
          const uint64_t bits = k == 4 ? uint64_t(w[size_t(j)])
                                       : (uint64_t(w[size_t(2 * j)]) << 32) | w[size_t(2 * j + 1)];
          const int64_t v = int64_t(uint64_t(low) + bits % range);
          if constexpr (is_floating_type_v<T>) return T(double(v));
          else return T(v);
        });
      });
    },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

// Elements per counter of a bernoulli draw into dtype: a double uniform for
// float64 probabilities, a float one otherwise.
int64_t bernoulli_per_counter(DType p_dtype) { return p_dtype == DType::Float64 ? 2 : 4; }

template <typename T>
T bernoulli_value(bool one) {
  if constexpr (is_floating_type_v<T>) return T(one ? 1.0f : 0.0f);
  else return T(one);
}

MF_REGISTER_OP(OpDef{
    .name = "bernoulli_scalar",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .cpu_kernel = [](const TensorList&, TensorList& out, const Attrs& attrs) {
      const double p = attrs.get_float("p");
      const bool wide = out[0].dtype() == DType::Float64;
      dispatch_dtype(out[0].dtype(), [&]<typename T>() {
        generate<T>(out[0], bernoulli_per_counter(out[0].dtype()), stream_of(attrs),
                    [=](const std::array<uint32_t, 4>& w, int64_t j) {
                      const bool one = wide ? uniform_at<double>(w, j) < p : double(uniform_at<float>(w, j)) < p;
                      return bernoulli_value<T>(one);
                    });
      });
    },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "bernoulli",
    .inputs = {"p"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(is_floating(in[0].dtype()), TypeError, "bernoulli: expected a floating-point tensor of ",
               "probabilities, got ", dtype_name(in[0].dtype()));
      return same_as_self(in);
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      Tensor p = in[0];
      if (!p.is_contiguous()) {
        p = make_empty(in[0].sizes(), in[0].dtype(), in[0].device());
        cpu::copy_cast(p, in[0]);
      }
      dispatch_floating(p.dtype(), "bernoulli", [&]<typename T>() {
        using A = acc_type<T>;
        const T* prob = static_cast<const T*>(p.data_ptr());
        const int64_t k = uniform_per_counter<T>();
        T* o = static_cast<T*>(out[0].data_ptr());
        generate_indexed(o, p.numel(), k, stream_of(attrs), [&](const std::array<uint32_t, 4>& w, int64_t j, int64_t i) {
          const A pi = A(prob[i]);
          MF_CHECK(pi >= A(0) && pi <= A(1), Error, "bernoulli: expected every probability in [0, 1], got ",
                   double(pi), " at element ", i);
          return T(uniform_at<T>(w, j) < pi ? A(1) : A(0));
        });
      });
    },
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "randperm",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      return std::vector<TensorMeta>{{{attrs.get_int("n")}, DType::Int64, attrs.get_device("device")}};
    },
    // Sorts 0..n-1 by a random 64-bit key per element (two words, k = 2);
    // equal keys fall back to the index, so the result is a permutation.
    .cpu_kernel = [](const TensorList&, TensorList& out, const Attrs& attrs) {
      const int64_t n = attrs.get_int("n");
      std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(n));
      generate_contiguous(keyed.data(), n, 2, stream_of(attrs), [&](const std::array<uint32_t, 4>& w, int64_t j) {
        return std::pair<uint64_t, int64_t>((uint64_t(w[size_t(2 * j)]) << 32) | w[size_t(2 * j + 1)], 0);
      });
      for (int64_t i = 0; i < n; ++i) keyed[size_t(i)].second = i;
      std::sort(keyed.begin(), keyed.end());
      int64_t* p = static_cast<int64_t*>(out[0].data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] = keyed[size_t(i)].second;
    },
    .differentiable = false,
});

// multinomial: one double uniform (two words, k = 2) per draw. With
// replacement, draw r of row b is the first category whose cumulative
// weight exceeds u * total (u of counter element b * num_samples + r).
// Without replacement, each category c of row b gets the key
// log(u) / w_c (u of element b * categories + c): the num_samples largest
// keys are a weighted sample without replacement (exponential races), in
// the order drawn.
MF_REGISTER_OP(OpDef{
    .name = "multinomial",
    .inputs = {"probs"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      Shape out = in[0].sizes();
      out.back() = attrs.get_int("num_samples");
      return std::vector<TensorMeta>{{out, DType::Int64, in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const int64_t samples = attrs.get_int("num_samples");
      const bool replacement = attrs.get_bool("replacement");
      const Tensor w = contiguous(to(in[0].detach(), DType::Float64));
      const int64_t categories = w.size(-1), rows = categories ? w.numel() / categories : 0;
      const double* wp = w.data<double>();
      for (int64_t b = 0; b < rows; ++b) {
        double total = 0;
        int64_t positive = 0;
        for (int64_t c = 0; c < categories; ++c) {
          const double v = wp[b * categories + c];
          MF_CHECK(std::isfinite(v) && v >= 0, ValueError,
                   "multinomial: probabilities must be finite and >= 0, got ", v, " in row ", b);
          total += v;
          positive += v > 0;
        }
        MF_CHECK(total > 0, ValueError, "multinomial: the probabilities of row ", b, " sum to 0");
        MF_CHECK(replacement || positive >= samples, ValueError, "multinomial: cannot draw ", samples,
                 " samples without replacement from row ", b, ", which has ", positive, " categories of weight > 0");
      }
      const int64_t draws = rows * (replacement ? samples : categories);
      std::vector<double> u(static_cast<size_t>(std::max<int64_t>(draws, 0)));
      generate_contiguous(u.data(), draws, 2, stream_of(attrs),
                          [](const std::array<uint32_t, 4>& words, int64_t j) { return uniform_at<double>(words, j); });
      int64_t* o = static_cast<int64_t*>(out[0].data_ptr());
      parallel_for(0, rows, 1, [&](int64_t rb, int64_t re) {
        std::vector<double> cdf(static_cast<size_t>(categories));
        std::vector<std::pair<double, int64_t>> keys(static_cast<size_t>(categories));
        for (int64_t b = rb; b < re; ++b) {
          const double* row = wp + b * categories;
          if (replacement) {
            double acc = 0;
            for (int64_t c = 0; c < categories; ++c) cdf[size_t(c)] = acc += row[c];
            for (int64_t r = 0; r < samples; ++r) {
              const double target = u[size_t(b * samples + r)] * acc;
              int64_t c = int64_t(std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin());
              c = std::min(c, categories - 1);
              while (row[c] == 0) --c;  // u * acc rounded onto a flat step: its category has weight > 0
              o[b * samples + r] = c;
            }
            continue;
          }
          for (int64_t c = 0; c < categories; ++c) {
            const double key = row[c] > 0 ? std::log1p(-u[size_t(b * categories + c)]) / row[c]
                                           : -std::numeric_limits<double>::infinity();
            keys[size_t(c)] = {key, -c};  // ties: the lower category first
          }
          std::partial_sort(keys.begin(), keys.begin() + samples, keys.end(), std::greater<>());
          for (int64_t r = 0; r < samples; ++r) o[b * samples + r] = -keys[size_t(r)].second;
        }
      });
    },
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
});

void check_floating_dtype(const char* op, DType dtype) {
  MF_CHECK(is_floating(dtype), TypeError, op, ": expected a floating-point dtype, got ", dtype_name(dtype));
}

Tensor with_grad(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, Generator* generator) {
  static const OpDef& op = dispatch::op("uniform");
  check_floating_dtype("uniform_", t.dtype());
  MF_CHECK(std::isfinite(from) && std::isfinite(to), Error, "uniform_: expects from and to to be finite, got from=",
           from, ", to=", to);
  MF_CHECK(from <= to, Error, "uniform_: expects to return a [from, to) range, but found from=", from, " > to=", to);
  Attrs attrs{{"from", from}, {"to", to}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), per_counter(t.dtype(), false), gen(generator)));
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* generator) {
  static const OpDef& op = dispatch::op("normal");
  check_floating_dtype("normal_", t.dtype());
  MF_CHECK(std >= 0, Error, "normal_: expects std >= 0.0, but found std ", std);
  Attrs attrs{{"mean", mean}, {"std", std}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), per_counter(t.dtype(), true), gen(generator)));
  return t;
}

Tensor rand(const Shape& size, const TensorOptions& options, Generator* generator) {
  check_floating_dtype("rand", options.dtype);
  Tensor t = empty(size, {.dtype = options.dtype, .device = options.device});
  uniform_(t, 0.0, 1.0, generator);
  return with_grad(t, options.requires_grad);
}

Tensor randn(const Shape& size, const TensorOptions& options, Generator* generator) {
  check_floating_dtype("randn", options.dtype);
  Tensor t = empty(size, {.dtype = options.dtype, .device = options.device});
  normal_(t, 0.0, 1.0, generator);
  return with_grad(t, options.requires_grad);
}

Tensor rand_like(const Tensor& t) { return rand(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor randn_like(const Tensor& t) { return randn(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }

Tensor randint(int64_t low, int64_t high, const Shape& size, const TensorOptions& options, Generator* generator) {
  static const OpDef& op = dispatch::op("random_int");
  MF_CHECK(low < high, Error, "randint: expects 'low' to be less than 'high', but got low=", low, " >= high=", high);
  if (is_integral(options.dtype, true)) {
    const auto [min, max] = dispatch_dtype(options.dtype, []<typename T>() {
      return std::pair<int64_t, int64_t>(int64_t(std::numeric_limits<T>::lowest()),
                                         int64_t(std::min<uint64_t>(uint64_t(std::numeric_limits<T>::max()),
                                                                    uint64_t(std::numeric_limits<int64_t>::max()))));
    });
    MF_CHECK(low >= min && high - 1 <= max, Error, "randint: the range [", low, ", ", high,
             ") is out of bounds for ", dtype_name(options.dtype));
  }
  Tensor t = empty(size, {.dtype = options.dtype, .device = options.device});
  Attrs attrs{{"low", low}, {"high", high}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), randint_per_counter(uint64_t(high) - uint64_t(low)),
                                               gen(generator)));
  return with_grad(t, options.requires_grad);
}

Tensor randperm(int64_t n, Device device, Generator* generator) {
  static const OpDef& op = dispatch::op("randperm");
  MF_CHECK(n >= 0, Error, "randperm: n must be non-negative, got ", n);
  Attrs attrs{{"n", n}, {"device", device}};
  return dispatch::apply_one(op, {}, with_stream(attrs, n, 2, gen(generator)));
}

Tensor bernoulli(const Tensor& p, Generator* generator) {
  static const OpDef& op = dispatch::op("bernoulli");
  Attrs attrs;
  return dispatch::apply_one(op, {p}, with_stream(attrs, p.numel(), bernoulli_per_counter(p.dtype()), gen(generator)));
}

Tensor bernoulli(const Tensor& like, double p, Generator* generator) {
  static const OpDef& op = dispatch::op("bernoulli_scalar");
  MF_CHECK(p >= 0 && p <= 1, Error, "bernoulli: expects p to be in [0, 1], but got p=", p);
  Tensor t = empty(like.sizes(), {.dtype = like.dtype(), .device = like.device()});
  Attrs attrs{{"p", p}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), bernoulli_per_counter(t.dtype()), gen(generator)));
  return t;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* generator) {
  static const OpDef& op = dispatch::op("multinomial");
  MF_CHECK(probs.defined() && (probs.dim() == 1 || probs.dim() == 2), ShapeError,
           "multinomial: probs must be 1-d or 2-d, got ", probs.defined() ? probs.dim() : 0, " dims");
  MF_CHECK(is_floating(probs.dtype()), TypeError, "multinomial: probs must be a floating-point tensor, got ",
           dtype_name(probs.dtype()));
  MF_CHECK(num_samples > 0, ValueError, "multinomial: num_samples must be positive, got ", num_samples);
  const int64_t categories = probs.size(-1);
  MF_CHECK(categories > 0, ValueError, "multinomial: probs has no categories");
  MF_CHECK(replacement || num_samples <= categories, ValueError, "multinomial: cannot draw ", num_samples,
           " samples without replacement from ", categories, " categories");
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const int64_t draws = checked_mul(rows, replacement ? num_samples : categories, "multinomial", "draws");
  Attrs attrs{{"num_samples", num_samples}, {"replacement", replacement}};
  return dispatch::apply_one(op, {probs}, with_stream(attrs, draws, 2, gen(generator)));
}

}  // namespace mf
