// The CPU kernels of the random ops (src/ops/random.cpp, Note
// [Counter-based random ops]) and of _standard_gamma (src/ops/gamma.cpp,
// Note [Gamma sampling] in backend/common/random_kernels.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <vector>

#include "backend/common/random_kernels.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/loops.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "meshflow/philox.h"
#include "ops/random_common.h"

namespace mf::cpu {
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

// generate_contiguous into out[0] (any strides; element i in row-major
// order): a strided one (an in-place call on a view) is written through a
// dense copy in the scratch (written_scratch).
template <typename T, typename F>
void generate(TensorList& out, int64_t k, Stream s, const F& produce) {
  Tensor& t = out[0];
  if (t.is_contiguous()) {
    generate_contiguous(static_cast<T*>(t.data_ptr()), t.numel(), k, s, produce);
    return;
  }
  Scratch taken(out);
  Tensor dense = taken.take(t.sizes(), t.dtype());
  generate_contiguous(static_cast<T*>(dense.data_ptr()), t.numel(), k, s, produce);
  copy_cast(t, dense);
}

// The scratch of generate: the in-place forms' only input is the tensor
// written; the out-of-place forms write a fresh contiguous output.
int64_t written_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  ScratchLayout layout("random");
  if (!in.empty()) add_dense(layout, in[0]);
  return layout.bytes();
}

// randperm's sort keys: a random 64-bit key and the index it moves.
struct Keyed {
  uint64_t key;
  int64_t index;
  bool operator<(const Keyed& o) const { return key != o.key ? key < o.key : index < o.index; }
};

// multinomial's weights as a contiguous float64 copy unless they are one,
// then the draws' uniforms, then per row its cumulative weights or race
// keys (a double and a category each).
struct MultinomialPieces {
  bool copy_weights;
  int64_t rows, categories, draws;
};

MultinomialPieces multinomial_pieces(const Tensor& w, const Attrs& attrs) {
  const int64_t categories = w.size(-1), rows = categories ? w.numel() / categories : 0;
  const bool replacement = attrs.get_bool("replacement");
  return {!(w.dtype() == DType::Float64 && w.is_contiguous()), rows, categories,
          rows * (replacement ? attrs.get_int("num_samples") : categories)};
}

int64_t multinomial_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const MultinomialPieces p = multinomial_pieces(in[0], attrs);
  ScratchLayout layout("multinomial");
  if (p.copy_weights) layout.add(in[0].sizes(), DType::Float64);
  return layout.add({p.draws}, DType::Float64).add({p.rows, p.categories, 2}, DType::Float64).bytes();
}

template <typename T>
acc_type<T> uniform_at(const std::array<uint32_t, 4>& w, int64_t j) {
  if constexpr (std::is_same_v<T, double>) return uniform_double(w[size_t(2 * j)], w[size_t(2 * j + 1)]);
  else return uniform_float(w[size_t(j)]);
}

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

template <typename T>
T bernoulli_value(bool one) {
  if constexpr (is_floating_type_v<T>) return T(one ? 1.0f : 0.0f);
  else return T(one);
}

// A gamma sample costs about 0.1 microseconds: chunks of this many
// elements are worth a thread.
constexpr int64_t kSampleGrain = 2048;

}  // namespace

MF_REGISTER_KERNEL("uniform", DeviceType::CPU, [](const TensorList&, TensorList& out, const Attrs& attrs) {
  const double from = attrs.get_float("from"), to = attrs.get_float("to");
  dispatch_floating(out[0].dtype(), "uniform_", [&]<typename T>() {
    using A = acc_type<T>;
    const A lo = A(from), width = A(to - from);
    generate<T>(out, uniform_per_counter<T>(), stream_of(attrs),
                [=](const std::array<uint32_t, 4>& w, int64_t j) { return T(lo + width * uniform_at<T>(w, j)); });
  });
}, written_scratch);
MF_REGISTER_KERNEL("normal", DeviceType::CPU, [](const TensorList&, TensorList& out, const Attrs& attrs) {
  const double mean = attrs.get_float("mean"), std = attrs.get_float("std");
  dispatch_floating(out[0].dtype(), "normal_", [&]<typename T>() {
    using A = acc_type<T>;
    const A mu = A(mean), sigma = A(std);
    generate<T>(out, normal_per_counter<T>(), stream_of(attrs),
                [=](const std::array<uint32_t, 4>& w, int64_t j) { return T(mu + sigma * normal_at<T>(w, j)); });
  });
}, written_scratch);
MF_REGISTER_KERNEL("random_int", DeviceType::CPU, [](const TensorList&, TensorList& out, const Attrs& attrs) {
  const int64_t low = attrs.get_int("low");
  const uint64_t range = uint64_t(attrs.get_int("high")) - uint64_t(low);
  const int64_t k = randint_per_counter(range);
  dispatch_dtype(out[0].dtype(), [&]<typename T>() {
    generate<T>(out, k, stream_of(attrs), [=](const std::array<uint32_t, 4>& w, int64_t j) {
      const uint64_t bits = k == 4 ? uint64_t(w[size_t(j)])
                                   : (uint64_t(w[size_t(2 * j)]) << 32) | w[size_t(2 * j + 1)];
      const int64_t v = int64_t(uint64_t(low) + bits % range);
      if constexpr (is_floating_type_v<T>) return T(double(v));
      else return T(v);
    });
  });
}, written_scratch);
MF_REGISTER_KERNEL("bernoulli_scalar", DeviceType::CPU, [](const TensorList&, TensorList& out, const Attrs& attrs) {
  const double p = attrs.get_float("p");
  const bool wide = out[0].dtype() == DType::Float64;
  dispatch_dtype(out[0].dtype(), [&]<typename T>() {
    generate<T>(out, bernoulli_per_counter(out[0].dtype()), stream_of(attrs),
                [=](const std::array<uint32_t, 4>& w, int64_t j) {
                  const bool one = wide ? uniform_at<double>(w, j) < p : double(uniform_at<float>(w, j)) < p;
                  return bernoulli_value<T>(one);
                });
  });
}, written_scratch);
MF_REGISTER_KERNEL("bernoulli", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  Scratch taken(out);
  const Tensor p = dense(in[0], taken);
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
}, dense_inputs_scratch("bernoulli", {0}));
// Sorts 0..n-1 by a random 64-bit key per element (two words, k = 2);
// equal keys fall back to the index, so the result is a permutation.
MF_REGISTER_KERNEL(
    "randperm", DeviceType::CPU,
    [](const TensorList&, TensorList& out, const Attrs& attrs) {
      const int64_t n = attrs.get_int("n");
      Scratch taken(out);
      auto* keyed = static_cast<Keyed*>(taken.take({n, 2}, DType::Int64).data_ptr());
      generate_indexed(keyed, n, 2, stream_of(attrs), [&](const std::array<uint32_t, 4>& w, int64_t j, int64_t i) {
        return Keyed{(uint64_t(w[size_t(2 * j)]) << 32) | w[size_t(2 * j + 1)], i};
      });
      std::sort(keyed, keyed + n);
      int64_t* p = static_cast<int64_t*>(out[0].data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] = keyed[i].index;
    },
    [](const TensorList&, const std::vector<TensorMeta>&, const Attrs& attrs) {
      return ScratchLayout("randperm").add({attrs.get_int("n"), 2}, DType::Int64).bytes();
    });
namespace {

// The draws of multinomial's comment in src/ops/random.cpp: a search of the
// cumulative weights with replacement, exponential races without.
void multinomial_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const int64_t samples = attrs.get_int("num_samples");
  const bool replacement = attrs.get_bool("replacement");
  const MultinomialPieces pieces = multinomial_pieces(in[0], attrs);
  Scratch taken(out);
  Tensor w = in[0];
  if (pieces.copy_weights) {
    w = taken.take(in[0].sizes(), DType::Float64);
    copy_cast(w, in[0]);
  }
  const int64_t categories = pieces.categories, rows = pieces.rows;
  const double* wp = static_cast<const double*>(w.data_ptr());
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
  const int64_t draws = pieces.draws;
  double* u = static_cast<double*>(taken.take({draws}, DType::Float64).data_ptr());
  generate_contiguous(u, draws, 2, stream_of(attrs),
                      [](const std::array<uint32_t, 4>& words, int64_t j) { return uniform_at<double>(words, j); });
  // Per row: its cumulative weights, or its (key, -category) race keys.
  char* per_row = static_cast<char*>(taken.take({rows, categories, 2}, DType::Float64).data_ptr());
  int64_t* o = static_cast<int64_t*>(out[0].data_ptr());
  parallel_for(0, rows, 1, [&](int64_t rb, int64_t re) {
    for (int64_t b = rb; b < re; ++b) {
      double* cdf = reinterpret_cast<double*>(per_row) + b * categories * 2;
      auto* keys = reinterpret_cast<std::pair<double, int64_t>*>(per_row) + b * categories;
      const double* row = wp + b * categories;
      if (replacement) {
        double acc = 0;
        for (int64_t c = 0; c < categories; ++c) cdf[c] = acc += row[c];
        for (int64_t r = 0; r < samples; ++r) {
          const double target = u[b * samples + r] * acc;
          int64_t c = int64_t(std::upper_bound(cdf, cdf + categories, target) - cdf);
          c = std::min(c, categories - 1);
          while (row[c] == 0) --c;  // u * acc rounded onto a flat step: its category has weight > 0
          o[b * samples + r] = c;
        }
        continue;
      }
      for (int64_t c = 0; c < categories; ++c) {
        const double key = row[c] > 0 ? std::log1p(-u[b * categories + c]) / row[c]
                                       : -std::numeric_limits<double>::infinity();
        keys[c] = {key, -c};  // ties: the lower category first
      }
      std::partial_sort(keys, keys + samples, keys + categories, std::greater<>());
      for (int64_t r = 0; r < samples; ++r) o[b * samples + r] = -keys[r].second;
    }
  });
}

}  // namespace

MF_REGISTER_KERNEL("multinomial", DeviceType::CPU, multinomial_kernel, multinomial_scratch);
MF_REGISTER_KERNEL("standard_gamma", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  Scratch taken(out);
  const Tensor a = dense(in[0], taken);
  const Stream s = stream_of(attrs);
  dispatch_floating(a.dtype(), "_standard_gamma", [&]<typename T>() {
    const T* alpha = static_cast<const T*>(a.data_ptr());
    T* o = static_cast<T*>(out[0].data_ptr());
    parallel_for(0, a.numel(), kSampleGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double ai = double(alpha[i]);
        MF_CHECK(!(ai < 0), ValueError, "_standard_gamma: concentration must be >= 0, got ", ai, " at element ",
                 i);
        random_kernels::ElementStream stream(s.seed, s.offset + uint64_t(i));
        const T sample = T(random_kernels::sample_standard_gamma(ai, stream));
        o[i] = std::isnan(sample) ? sample : std::max(sample, std::numeric_limits<T>::min());
      }
    });
  });
}, dense_inputs_scratch("standard_gamma", {0}));

}  // namespace mf::cpu
