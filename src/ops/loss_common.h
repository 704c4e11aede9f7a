// Shared pieces of the loss op files: the reduction argument.
#pragma once

#include <string>

#include "meshflow/error.h"

namespace mf::loss_detail {

enum class Reduction { None, Mean, Sum };

inline Reduction parse_reduction(const char* op, const std::string& reduction) {
  if (reduction == "mean") return Reduction::Mean;
  if (reduction == "sum") return Reduction::Sum;
  MF_CHECK(reduction == "none", ValueError, op, ": reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  return Reduction::None;
}

}  // namespace mf::loss_detail
