// Counter-based random numbers (Philox 4x32-10). Element i of a random
// tensor depends only on (seed, offset, i): never on the thread count, and
// (later) not on how a global tensor is split over ranks.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "meshflow/philox.h"

namespace mf {

// Philox4x32 with 10 rounds (philox4x32 in philox.h): four 32-bit random words per 128-bit counter
// (counter, substream). Ops use substream 0; an op that needs an unbounded
// number of words per element (rejection sampling) gives element i the
// counter it reserved for it and walks the substreams 0, 1, 2, ...
std::array<uint32_t, 4> philox(uint64_t seed, uint64_t counter, uint64_t substream = 0);

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // Reserves `counters` Philox counters for one random op; returns the first.
  uint64_t reserve(uint64_t counters);
  uint64_t offset() const;
  void set_state(uint64_t seed, uint64_t offset);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
// Seeds the default generator (mf::manual_seed(0) as torch.manual_seed(0)).
void manual_seed(uint64_t seed);

}  // namespace mf
