// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3"), for host and device code: four 32-bit random words per 128-bit
// counter (counter, substream) under a 64-bit key. Every random op draws
// from it (Note [Counter-based random ops] in src/ops/random.cpp), so a
// device gives the values the CPU gives for the same seed and offset.
#pragma once

#include <cstdint>

#include "meshflow/host_device.h"

namespace mf {

struct PhiloxWords {
  uint32_t w[4];
};

MF_FORCE_INLINE MF_HOST_DEVICE PhiloxWords philox4x32(uint64_t seed, uint64_t counter, uint64_t substream = 0) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32);
  uint32_t c2 = uint32_t(substream), c3 = uint32_t(substream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c0;
    const uint64_t p1 = uint64_t(kM1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1), c3 = uint32_t(p0), c0 = n0, c2 = n2;
    k0 += kW0, k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) from a 32-bit word (24 random bits).
MF_FORCE_INLINE MF_HOST_DEVICE float uniform_float(uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }
// Uniform double in [0, 1) from two words (53 random bits).
MF_FORCE_INLINE MF_HOST_DEVICE double uniform_double(uint32_t hi, uint32_t lo) {
  const uint64_t v = (uint64_t(hi) << 21) ^ (uint64_t(lo) >> 11);
  return double(v & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace mf
