// Shared pieces of the indexing ops (src/ops/index.cpp) and their CPU
// kernels (backend/cpu/kernels/index_kernels.cpp): scatter_reduce's reduce
// argument.
#pragma once

#include <string>

#include "meshflow/error.h"

namespace mf::index_detail {

enum class Reduce { Sum, Prod, Mean, Amax, Amin };

inline Reduce reduce_of(const std::string& r) {
  if (r == "sum") return Reduce::Sum;
  if (r == "prod") return Reduce::Prod;
  if (r == "mean") return Reduce::Mean;
  if (r == "amax") return Reduce::Amax;
  if (r == "amin") return Reduce::Amin;
  MF_CHECK(false, ValueError, "scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got ",
           r);
  return Reduce::Sum;
}

}  // namespace mf::index_detail
