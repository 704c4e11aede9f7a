// Shared pieces of the reduction ops: dim normalisation, output shapes and
// the CPU loop that reduces contiguous runs.
#pragma once

#include "meshflow/dispatch.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"

namespace mf::reduce_detail {

// Sorted, wrapped, de-duplicated dims; empty means all dims.
inline Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    MF_CHECK(std::find(out.begin(), out.end(), w) == out.end(), ValueError, op, ": dim ", w,
             " appears multiple times in the list of dims");
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  if (ndim == 0) out.clear();
  return out;
}

inline Shape reduced_shape(const Shape& sizes, const Shape& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < int64_t(sizes.size()); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// x with the reduced dims moved last and made contiguous, viewed as
// (outer, inner) where inner is the number of reduced elements per output.
inline Tensor as_outer_inner(const Tensor& x, const Shape& dims, int64_t& outer, int64_t& inner) {
  Shape perm, kept;
  inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  for (int64_t d : dims) {
    perm.push_back(d);
    inner *= x.sizes()[d];
  }
  outer = inner == 0 ? shape_numel(reduced_shape(x.sizes(), dims, false)) : x.numel() / inner;
  Tensor p = x.dim() == 0 ? x : contiguous(permute(x.detach(), perm));
  return p;
}

// Grad of a reduction broadcast back to the input shape.
inline Tensor expand_reduced_grad(const Tensor& grad, const Shape& input_sizes, const Shape& dims, bool keepdim) {
  Tensor g = grad;
  if (!keepdim)
    for (int64_t d : dims) g = unsqueeze(g, d);
  return expand(g, input_sizes);
}

}  // namespace mf::reduce_detail
