// Shared pieces of the ops whose output size is the number of non-zeros
// (src/ops/mask.cpp) and their CPU kernels (backend/cpu/kernels/mask.cpp):
// Note [Data-dependent shapes] in src/ops/mask.cpp.
#pragma once

#include <vector>

#include "meshflow/tensor.h"

namespace mf::mask_detail {

template <typename T>
bool is_nonzero(T v) {
  if constexpr (std::is_same_v<T, bool>) return v;
  else return acc_type<T>(v) != acc_type<T>(0);
}

struct Chunks {
  int64_t size = 1;             // elements per chunk (the last may be shorter)
  std::vector<int64_t> starts;  // output position of each chunk's first non-zero
  int64_t total = 0;
  int64_t count() const { return int64_t(starts.size()); }
};

// The non-zeros of t: with total_only, only their count (Note [Expanded
// counts] in src/ops/mask.cpp); otherwise also per chunk (t on the CPU).
Chunks count_chunks(const Tensor& t, const char* op, bool total_only = false);

}  // namespace mf::mask_detail
