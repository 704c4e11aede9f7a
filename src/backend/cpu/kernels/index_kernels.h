// CPU loops shared by the indexing ops. Note [Rows layout]: index,
// index_put_, index_select and index_add all see the indexed tensor x as
// (pre..., k indexed dims..., post...). Integer index tensors of one shape B
// pick, for every position b of B, one "row" of x at element offset
// offsets[b] within the indexed dims; the result has shape pre + B + post.
// Data movement is dispatched on the element size, not the dtype.
#pragma once

#include <cstring>
#include <vector>

#include "meshflow/tensor.h"
#include "backend/cpu/kernels/loops.h"

namespace mf::cpu {

// Calls fn.template operator()<E>() with E an unsigned type of `bytes` bytes.
template <typename F>
decltype(auto) dispatch_itemsize(size_t bytes, F&& fn) {
  switch (bytes) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    case 8: return fn.template operator()<uint64_t>();
    default: break;
  }
  throw Error(::mf::detail::concat("dispatch_itemsize: unsupported element size ", bytes));
}

// An iteration space shared by N operands, in element strides, with dims
// merged where every operand allows it (StridedOperands::coalesce).
template <size_t N>
class StridedWalk {
 public:
  StridedWalk(const Shape& sizes, const std::array<Shape, N>& strides) {
    ops_.sizes = sizes;
    ops_.strides = strides;
    numel_ = shape_numel(sizes);
    ops_.coalesce();
  }
  int64_t numel() const { return numel_; }
  const Shape& sizes() const { return ops_.sizes; }
  const Shape& strides(size_t k) const { return ops_.strides[k]; }
  // One dim whose operand k has stride 1 (a memcpy-able run).
  bool is_flat_unit(size_t k) const { return ops_.sizes.size() == 1 && ops_.strides[k][0] == 1; }

  // Calls fn(offsets, inner_strides, n) for the runs along the innermost dim
  // that cover the flat positions [begin, end); offsets start at base.
  template <typename F>
  void runs(int64_t begin, int64_t end, const std::array<int64_t, N>& base, const F& fn) const {
    if (begin >= end || numel_ == 0) return;
    const Shape& sz = ops_.sizes;
    const int64_t nd = int64_t(sz.size());
    int64_t stack_idx[16];
    std::vector<int64_t> heap_idx;
    int64_t* idx = stack_idx;
    if (nd > 16) {
      heap_idx.resize(size_t(nd));
      idx = heap_idx.data();
    }
    std::array<int64_t, N> off = base;
    int64_t rem = begin;
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = rem % sz[d];
      rem /= sz[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * ops_.strides[k][d];
    }
    std::array<int64_t, N> inner;
    for (size_t k = 0; k < N; ++k) inner[k] = ops_.strides[k][nd - 1];
    int64_t i = begin;
    while (true) {
      const int64_t n = std::min(sz[nd - 1] - idx[nd - 1], end - i);
      fn(off, inner, n);
      i += n;
      if (i >= end) return;
      idx[nd - 1] += n;
      for (size_t k = 0; k < N; ++k) off[k] += n * inner[k];
      for (int64_t d = nd - 1; d > 0 && idx[d] == sz[d]; --d) {
        idx[d] = 0;
        idx[d - 1]++;
        for (size_t k = 0; k < N; ++k) off[k] += ops_.strides[k][d - 1] - sz[d] * ops_.strides[k][d];
      }
    }
  }

 private:
  StridedOperands<N> ops_;
  int64_t numel_ = 0;
};

// Element strides of t broadcast to `shape` (0 where t is broadcast).
inline Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape s = broadcast_byte_strides(t, shape);
  for (auto& v : s) v /= int64_t(t.element_size());
  return s;
}

// s with entry dim set to size.
inline Shape with_size(Shape s, int64_t dim, int64_t size) {
  s[size_t(dim)] = size;
  return s;
}

[[noreturn]] void throw_index_out_of_range(const char* op, int64_t index, int64_t dim, int64_t size);

// Element offsets of the rows picked by int64 index tensors of one shape:
// offsets[b] = sum_j idx[j][b] * strides[j]. Every index is checked against
// sizes[j] first (negatives wrap when `wrap`); out of range throws IndexError
// naming op and dims[j].
std::vector<int64_t> row_offsets(const TensorList& idx, const Shape& sizes, const Shape& strides, const Shape& dims,
                                 bool wrap, const char* op);

// out (contiguous, shape pre + B + post) = the rows of x (layout of Note
// [Rows layout], num_pre leading dims, num_indexed indexed dims) at offsets.
void gather_rows(const Tensor& x, int64_t num_pre, int64_t num_indexed, const std::vector<int64_t>& offsets,
                 Tensor& out);

// The rows of x at offsets are set to (or, when accumulate, incremented by)
// value broadcast to pre + rows_shape + post. Duplicate offsets accumulate;
// without accumulate the last one along B wins. value has x's dtype.
void put_rows(Tensor& x, int64_t num_pre, int64_t num_indexed, const std::vector<int64_t>& offsets,
              const Shape& rows_shape, const Tensor& value, bool accumulate);

}  // namespace mf::cpu
