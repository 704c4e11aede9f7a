// The Philox stream of a random op (Note [Counter-based random ops] in
// random.cpp): the functional function reserves the counters from a
// generator and records seed and offset as attributes, so a traced graph
// replays them; the kernel reads them back.
#pragma once

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

}  // namespace mf::random_detail
