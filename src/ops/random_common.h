// The Philox stream of a random op (Note [Counter-based random ops] in
// random.cpp): the functional function reserves the counters from a
// generator and records seed and offset as attributes, so a traced graph
// replays them; the kernel reads them back. How many elements share a
// counter is the op's contract, which the functions and the CPU kernels
// (backend/cpu/kernels/random.cpp, dropout.cpp) share.
#pragma once

#include <type_traits>

#include "meshflow/dtype.h"
#include "meshflow/generator.h"
#include "meshflow/op_def.h"

namespace mf::random_detail {

struct Stream {
  uint64_t seed;
  uint64_t offset;
};

inline Stream stream_of(const Attrs& attrs) {
  return {uint64_t(attrs.get_int("seed")), uint64_t(attrs.get_int("offset"))};
}

inline Generator& gen(Generator* generator) { return generator ? *generator : default_generator(); }

// Reserves the counters of n elements, k per counter, from gen and adds them
// to attrs.
inline Attrs& with_stream(Attrs& attrs, int64_t n, int64_t k, Generator& gen = default_generator()) {
  const uint64_t offset = gen.reserve(uint64_t((n + k - 1) / k));
  return attrs.set("seed", int64_t(gen.seed())).set("offset", int64_t(offset));
}

// Elements per counter of a uniform draw for T (Note [Counter-based random ops]).
template <typename T>
constexpr int64_t uniform_per_counter() { return std::is_same_v<T, double> ? 2 : 4; }

// Elements per counter of a normal draw for T.
template <typename T>
constexpr int64_t normal_per_counter() { return std::is_same_v<T, double> ? 1 : 2; }

// Elements per counter of uniform_ (normal false) or normal_ into dtype.
inline int64_t per_counter(DType dtype, bool normal) {
  return dispatch_floating(dtype, normal ? "normal_" : "uniform_", [&]<typename T>() {
    return normal ? normal_per_counter<T>() : uniform_per_counter<T>();
  });
}

// Integers in [low, high): one word per element when the range fits in 32
// bits, else two (k = 4 or 2).
inline int64_t randint_per_counter(uint64_t range) { return range <= (uint64_t(1) << 32) ? 4 : 2; }

// Elements per counter of a bernoulli draw into dtype: a double uniform for
// float64 probabilities, a float one otherwise.
inline int64_t bernoulli_per_counter(DType p_dtype) { return p_dtype == DType::Float64 ? 2 : 4; }

// dropout's counters for numel elements: element i uses word i % 4 of
// counter offset + i / 4 (src/ops/dropout.cpp).
inline int64_t dropout_counters(int64_t numel) { return (numel + 3) / 4; }

}  // namespace mf::random_detail
