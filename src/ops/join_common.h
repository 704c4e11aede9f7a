// Shared pieces of the joining ops (src/ops/join.cpp) and cat's CPU kernel
// (backend/cpu/kernels/cat.cpp).
#pragma once

#include "meshflow/tensor.h"

namespace mf::join_detail {

// PyTorch's legacy rule: 1-d tensors of size 0 are skipped by cat.
inline bool is_skipped(const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; }

// The first tensor cat does not skip (null when it skips all).
inline const Tensor* first_kept(const TensorList& in) {
  for (const auto& t : in)
    if (!is_skipped(t)) return &t;
  return nullptr;
}

}  // namespace mf::join_detail
