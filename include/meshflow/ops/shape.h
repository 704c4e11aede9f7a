// Views (sharing storage) and shape and indexing ops.
#pragma once

#include <optional>
#include <variant>

#include "meshflow/ops/reduce.h"
#include "meshflow/tensor.h"

namespace mf {

// --- views: outputs share storage with the input -----------------------------
// view requires compatible strides; reshape copies when it must. One size may be -1.
Tensor view(const Tensor& t, const Shape& size);
Tensor reshape(const Tensor& t, const Shape& size);
Tensor permute(const Tensor& t, const Shape& dims);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor t(const Tensor& t);  // 2-d transpose (0-d and 1-d unchanged)
// Elements start, start+step, ... < end along dim (end clamped, negatives wrap).
Tensor slice(const Tensor& t, int64_t dim, std::optional<int64_t> start = {},
             std::optional<int64_t> end = {}, int64_t step = 1);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor expand(const Tensor& t, const Shape& size);  // -1 keeps a size
Tensor expand_as(const Tensor& t, const Tensor& other);
Tensor broadcast_to(const Tensor& t, const Shape& size);
Tensor squeeze(const Tensor& t, std::optional<int64_t> dim = {});
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes);
Tensor as_strided(const Tensor& t, const Shape& size, const Shape& stride,
                  std::optional<int64_t> storage_offset = {});
Tensor diagonal(const Tensor& t, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
// A contiguous tensor with the same values (t itself when already contiguous).
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);

// --- joining and splitting ------------------------------------------------------
Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
TensorList split(const Tensor& t, int64_t split_size, int64_t dim = 0);
TensorList split(const Tensor& t, const Shape& split_sizes, int64_t dim = 0);
TensorList chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
TensorList unbind(const Tensor& t, int64_t dim = 0);

// --- indexing --------------------------------------------------------------------
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, Scalar value);
Tensor scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src);
// src combined into t at index with reduce ("sum", "prod", "mean", "amax",
// "amin"); without include_self the elements written start from the
// reduction's identity (Note [scatter_reduce] in src/ops/index.cpp).
Tensor scatter_reduce(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self = true);
Tensor index_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, Scalar alpha = 1);
// Rows where mask is true, flattened (1-d result).
Tensor masked_select(const Tensor& t, const Tensor& mask);
// Indices of non-zero elements, shape (n, ndim).
Tensor nonzero(const Tensor& t);

// One entry of an advanced index: an integer, a slice, None (new axis),
// Ellipsis, or a tensor (integer indices or a bool mask).
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
};
struct NewAxis {};
struct Ellipsis {};
using TensorIndex = std::variant<int64_t, Slice, NewAxis, Ellipsis, Tensor>;
// t[indices] with NumPy/PyTorch semantics (basic indexing gives a view).
Tensor index(const Tensor& t, const std::vector<TensorIndex>& indices);
// t[indices] = value (in place; differentiable w.r.t. value and t's history).
Tensor& index_put_(Tensor& t, const std::vector<TensorIndex>& indices, const Tensor& value,
                   bool accumulate = false);
Tensor& index_put_(Tensor& t, const std::vector<TensorIndex>& indices, Scalar value);

Tensor tril(const Tensor& t, int64_t diagonal = 0);
Tensor triu(const Tensor& t, int64_t diagonal = 0);
Tensor repeat(const Tensor& t, const Shape& repeats);
Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim = {});
Tensor flip(const Tensor& t, const Shape& dims);
Tensor roll(const Tensor& t, const Shape& shifts, const Shape& dims);
// pad = (last_lo, last_hi, second_last_lo, ...), as F.pad; negative crops.
Tensor pad(const Tensor& t, const Shape& pad, double value = 0.0);
Tensor one_hot(const Tensor& t, int64_t num_classes = -1);
// k largest (or smallest) along dim, sorted.
ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// Stable sort along dim.
ValuesIndices sort(const Tensor& t, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& t, int64_t dim = -1, bool descending = false);

}  // namespace mf
