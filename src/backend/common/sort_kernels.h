// Note [Device sorting]
// sort and topk over a backend's walks L, one thread per line along the
// sorted dim. The order is src/ops/sort.cpp's: NaN above every number, ties
// broken by position, so it is a strict total order on (value, position)
// and any sorting algorithm gives the CPU's result. Each line heap-sorts
// the positions in place (in the indices output for sort; in a scratch
// line of positions for topk, whose first k are kept, re-sorted by
// position when unsorted results are asked for), then gathers the values.
#pragma once

#include "backend/common/index_kernels.h"
#include "backend/common/scratch.h"

namespace mf::sort_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;

// Positions l before r in the order (descending: largest first).
template <typename M, typename T>
struct Before {
  const T* x;
  int64_t xs;
  bool descending;
  MF_FORCE_INLINE MF_HOST_DEVICE bool operator()(int64_t l, int64_t r) const {
    using A = acc_type<T>;
    const A a = M::template to_acc<A>(x[l * xs]), b = M::template to_acc<A>(x[r * xs]);
    const bool a_nan = a != a, b_nan = b != b;
    if (a_nan || b_nan) {
      if (a_nan != b_nan) return descending ? a_nan : b_nan;
    } else if (a != b) {
      return descending ? a > b : a < b;
    }
    return l < r;
  }
};
struct ByPosition {
  MF_FORCE_INLINE MF_HOST_DEVICE bool operator()(int64_t l, int64_t r) const { return l < r; }
};

// Heap sort of p[0, n) (stride s) by `before`.
template <typename Less>
MF_FORCE_INLINE MF_HOST_DEVICE void heap_sort(int64_t* p, int64_t s, int64_t n, const Less& before) {
  auto sift = [&](int64_t root, int64_t end) {
    while (true) {
      int64_t child = 2 * root + 1;
      if (child >= end) return;
      if (child + 1 < end && before(p[child * s], p[(child + 1) * s])) ++child;
      if (!before(p[root * s], p[child * s])) return;
      const int64_t t = p[root * s];
      p[root * s] = p[child * s];
      p[child * s] = t;
      root = child;
    }
  };
  for (int64_t start = n / 2 - 1; start >= 0; --start) sift(start, n);
  for (int64_t end = n - 1; end > 0; --end) {
    const int64_t t = p[0];
    p[0] = p[end * s];
    p[end * s] = t;
    sift(0, end);
  }
}

// Operands (one line each): 0 the values out, 1 the indices out, 2 the
// input, 3 the positions to sort (the indices out for sort, a scratch line
// for topk).
template <typename M, typename T>
struct SortLine {
  int64_t n, keep, vs, is, xs, ps;
  bool descending, by_position;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    T* values = reinterpret_cast<T*>(data[0] + off[0]);
    int64_t* indices = reinterpret_cast<int64_t*>(data[1] + off[1]);
    const T* x = reinterpret_cast<const T*>(data[2] + off[2]);
    int64_t* p = reinterpret_cast<int64_t*>(data[3] + off[3]);
    for (int64_t j = 0; j < n; ++j) p[j * ps] = j;
    heap_sort(p, ps, n, Before<M, T>{x, xs, descending});
    if (by_position) heap_sort(p, ps, keep, ByPosition{});
    for (int64_t j = 0; j < keep; ++j) {
      const int64_t at = p[j * ps];
      indices[j * is] = at;
      values[j * vs] = x[at * xs];
    }
  }
};

template <typename L>
void sort_lines(const Tensor& x, TensorList& out, int64_t dim, int64_t keep, bool descending, bool by_position,
                bool scratch, const char* op) {
  Tensor &values = out[0], &indices = out[1];
  const int64_t n = x.sizes()[size_t(dim)];
  if (values.numel() == 0 || n == 0) return;
  Tensor positions = indices;
  if (scratch) positions = Scratch(out).take(x.sizes(), DType::Int64);
  Shape lines = x.sizes();
  lines[size_t(dim)] = 1;
  const LoopGeometry<4> g = walk_geometry<4>(
      lines, {operand(values, values.strides()), operand(indices, indices.strides()), operand(x, x.strides()),
              operand(positions, positions.strides())},
      op);
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    using K = kernel_type<T>;
    L::template for_each<4>(x.device(), g, shape_numel(lines),
                            SortLine<typename L::Math, K>{n, keep, values.strides()[size_t(dim)],
                                                          indices.strides()[size_t(dim)], x.strides()[size_t(dim)],
                                                          positions.strides()[size_t(dim)], descending, by_position});
  });
}

template <typename L>
void sort(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "sort");
  sort_lines<L>(in[0], out, dim, in[0].sizes()[size_t(dim)], attrs.get_bool("descending"), false, false, "sort");
}

template <typename L>
void topk(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "topk");
  sort_lines<L>(in[0], out, dim, attrs.get_int("k"), attrs.get_bool("largest"), !attrs.get_bool("sorted"), true,
                "topk");
}

// topk sorts the positions of whole lines in scratch (Note [Kernel
// scratch]): its indices output keeps only k of them.
inline int64_t topk_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  return ScratchLayout("topk").add(in[0].sizes(), DType::Int64).bytes();
}

template <typename L>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("sort", device, sort<L>);
  OpRegistry::instance().set_kernel("topk", device, topk<L>, topk_scratch);
}

}  // namespace mf::sort_kernels
