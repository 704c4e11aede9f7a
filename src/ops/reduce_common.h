// Shared pieces of the reduction ops: dim normalisation, output shapes,
// inference and the gradient broadcast back over reduced dims. The kernels
// are backend/common/reduce_kernels.h's.
#pragma once

#include <algorithm>

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

// Number of elements each output of the reduction combines.
inline int64_t reduced_count(const Shape& sizes, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[size_t(d)];
  return n;
}

// Inference of a reduction over attrs "dims"/"keepdim" with the given
// output dtype.
inline std::vector<TensorMeta> infer_reduction(const char* op, const Tensor& x, const Attrs& attrs, DType dtype) {
  Shape dims = normalize_dims(attrs.get_shape("dims"), x.dim(), op);
  return {{reduced_shape(x.sizes(), dims, attrs.get_bool("keepdim")), dtype, x.device()}};
}

// Reductions without an identity (max, min, argmax, ...) reject reducing an
// empty dim, like PyTorch: with no dim given, "Expected reduction dim to be
// specified for input.numel() == 0"; with dims, naming the empty one.
inline void check_reduction_has_identity(const char* op, const Shape& sizes, const Shape& dims, bool dims_given) {
  if (!dims_given) {
    MF_CHECK(shape_numel(sizes) != 0, Error, op,
             "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim ",
             "with the 'dim' argument.");
    return;
  }
  for (int64_t d : dims)
    MF_CHECK(sizes[size_t(d)] != 0, IndexError, op, "(): Expected reduction dim ", d, " to have non-zero size.");
}

// A reduced result (value or gradient) reshaped to broadcast against the input.
inline Tensor unsqueeze_reduced(const Tensor& t, const Shape& dims, bool keepdim) {
  Tensor r = t;
  if (!keepdim)
    for (int64_t d : dims) r = unsqueeze(r, d);
  return r;
}

// Grad of a reduction broadcast back to the input shape.
inline Tensor expand_reduced_grad(const Tensor& grad, const Shape& input_sizes, const Shape& dims, bool keepdim) {
  return expand(unsqueeze_reduced(grad, dims, keepdim), input_sizes);
}

}  // namespace mf::reduce_detail
