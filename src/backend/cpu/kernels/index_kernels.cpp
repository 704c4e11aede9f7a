// Row gather/put loops of the indexing ops; see Note [Rows layout].
#include "backend/cpu/kernels/index_kernels.h"

namespace mf::cpu {
namespace {

Shape sub_shape(const Shape& s, int64_t begin, int64_t end) { return Shape(s.begin() + begin, s.begin() + end); }

Shape concat_shapes(const Shape& a, const Shape& b) {
  Shape out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Element offsets of every position of `sizes` (row-major) under `strides`.
std::vector<int64_t> offsets_of(const Shape& sizes, const Shape& strides) {
  StridedWalk<2> walk(sizes, {contiguous_strides(sizes), strides});
  std::vector<int64_t> out(size_t(walk.numel()));
  parallel_for(0, walk.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    walk.runs(b, e, {0, 0}, [&](const auto& o, const auto& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) out[size_t(o[0] + i * s[0])] = o[1] + i * s[1];
    });
  });
  return out;
}

template <typename T>
struct Assign {
  static void apply(T& x, T v) { x = v; }
};

template <typename T>
struct Accumulate {
  static void apply(T& x, T v) {
    if constexpr (std::is_same_v<T, bool>) x = x || v;
    else x = T(acc_type<T>(x) + acc_type<T>(v));
  }
};

// x[xo + i * sx] op= v[vo + i * sv] for i < n, with the common stride
// patterns written out so they vectorise.
template <typename Op, typename T>
inline void combine_run(T* x, const T* v, int64_t sx, int64_t sv, int64_t n) {
  if (sx == 1 && sv == 1) {
    for (int64_t i = 0; i < n; ++i) Op::apply(x[i], v[i]);
  } else if (sx == 1 && sv == 0) {
    const T value = v[0];
    for (int64_t i = 0; i < n; ++i) Op::apply(x[i], value);
  } else {
    for (int64_t i = 0; i < n; ++i) Op::apply(x[i * sx], v[i * sv]);
  }
}

template <typename Op, typename T>
void put_rows_typed(T* xp, const T* vp, const StridedWalk<2>& cells, const std::vector<int64_t>& offsets,
                    const std::vector<int64_t>& value_offsets) {
  const int64_t rows = int64_t(offsets.size());
  if (cells.numel() == 1) {
    // One element per row: rows may repeat, so they run in order.
    for (int64_t b = 0; b < rows; ++b) Op::apply(xp[offsets[size_t(b)]], vp[value_offsets[size_t(b)]]);
    return;
  }
  // Different cells never share an element of x, so threads split the cells
  // and each walks every row (duplicate rows stay on one thread, in order).
  parallel_for(0, cells.numel(), std::max<int64_t>(1, kGrainSize / rows), [&](int64_t c0, int64_t c1) {
    if (cells.sizes().size() == 1) {  // the common case (e.g. embedding rows): plain pointer steps
      const int64_t sx = cells.strides(0)[0], sv = cells.strides(1)[0];
      for (int64_t b = 0; b < rows; ++b)
        combine_run<Op>(xp + offsets[size_t(b)] + c0 * sx, vp + value_offsets[size_t(b)] + c0 * sv, sx, sv, c1 - c0);
      return;
    }
    for (int64_t b = 0; b < rows; ++b)
      cells.runs(c0, c1, {offsets[size_t(b)], value_offsets[size_t(b)]},
                 [&](const auto& o, const auto& s, int64_t n) { combine_run<Op>(xp + o[0], vp + o[1], s[0], s[1], n); });
  });
}

}  // namespace

void throw_index_out_of_range(const char* op, int64_t index, int64_t dim, int64_t size) {
  throw IndexError(::mf::detail::concat(op, ": index ", index, " is out of bounds for dimension ", dim, " with size ", size));
}

std::vector<int64_t> row_offsets(const TensorList& idx, const Shape& sizes, const Shape& strides, const Shape& dims,
                                 bool wrap, const char* op) {
  const Shape rows_shape = idx.empty() ? Shape{} : idx[0].sizes();
  std::vector<int64_t> offsets(size_t(shape_numel(rows_shape)), 0);
  for (size_t j = 0; j < idx.size(); ++j) {
    const int64_t* ip = idx[j].data<int64_t>();
    StridedWalk<2> walk(rows_shape, {contiguous_strides(rows_shape), idx[j].strides()});
    const int64_t size = sizes[j], stride = strides[j], dim = dims[j];
    parallel_for(0, walk.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      walk.runs(b, e, {0, 0}, [&](const auto& o, const auto& s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t given = ip[o[1] + i * s[1]];
          const int64_t v = (wrap && given < 0) ? given + size : given;
          if (v < 0 || v >= size) [[unlikely]]
            throw_index_out_of_range(op, given, dim, size);
          offsets[size_t(o[0] + i * s[0])] += v * stride;
        }
      });
    });
  }
  return offsets;
}

void gather_rows(const Tensor& x, int64_t num_pre, int64_t num_indexed, const std::vector<int64_t>& offsets,
                 Tensor& out) {
  if (out.numel() == 0) return;
  const int64_t post_start = num_pre + num_indexed;
  const Shape post_sizes = sub_shape(x.sizes(), post_start, x.dim());
  const std::vector<int64_t> pre_offsets =
      offsets_of(sub_shape(x.sizes(), 0, num_pre), sub_shape(x.strides(), 0, num_pre));
  const int64_t rows = int64_t(offsets.size());
  const int64_t total_rows = int64_t(pre_offsets.size()) * rows;
  const int64_t post_n = shape_numel(post_sizes);
  dispatch_itemsize(x.element_size(), [&]<typename E>() {
    const E* src = static_cast<const E*>(x.data_ptr());
    E* dst = static_cast<E*>(out.data_ptr());
    if (post_n == 1) {
      parallel_for(0, total_rows, kGrainSize, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) dst[r] = src[pre_offsets[size_t(r / rows)] + offsets[size_t(r % rows)]];
      });
      return;
    }
    StridedWalk<2> post(post_sizes, {sub_shape(x.strides(), post_start, x.dim()), contiguous_strides(post_sizes)});
    const bool memcpy_rows = post.is_flat_unit(0);
    parallel_for(0, total_rows, std::max<int64_t>(1, kGrainSize / post_n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const E* row = src + pre_offsets[size_t(r / rows)] + offsets[size_t(r % rows)];
        E* d = dst + r * post_n;
        if (memcpy_rows) {
          std::memcpy(d, row, size_t(post_n) * sizeof(E));
          continue;
        }
        post.runs(0, post_n, {0, 0}, [&](const auto& o, const auto& s, int64_t n) {
          for (int64_t i = 0; i < n; ++i) d[o[1] + i * s[1]] = row[o[0] + i * s[0]];
        });
      }
    });
  });
}

void put_rows(Tensor& x, int64_t num_pre, int64_t num_indexed, const std::vector<int64_t>& offsets,
              const Shape& rows_shape, const Tensor& value, bool accumulate) {
  MF_CHECK(value.dtype() == x.dtype(), TypeError, "put_rows: value dtype ", dtype_name(value.dtype()),
           " differs from ", dtype_name(x.dtype()));
  const int64_t post_start = num_pre + num_indexed;
  const Shape pre_sizes = sub_shape(x.sizes(), 0, num_pre);
  const Shape post_sizes = sub_shape(x.sizes(), post_start, x.dim());
  const Shape result_shape = concat_shapes(concat_shapes(pre_sizes, rows_shape), post_sizes);
  const Shape vs = broadcast_strides(value, result_shape);
  const int64_t nb = int64_t(rows_shape.size()), np = num_pre;
  const std::vector<int64_t> value_offsets = offsets_of(rows_shape, sub_shape(vs, np, np + nb));
  StridedWalk<2> cells(concat_shapes(pre_sizes, post_sizes),
                       {concat_shapes(sub_shape(x.strides(), 0, np), sub_shape(x.strides(), post_start, x.dim())),
                        concat_shapes(sub_shape(vs, 0, np), sub_shape(vs, np + nb, int64_t(vs.size())))});
  if (offsets.empty() || cells.numel() == 0) return;
  if (!accumulate) {
    dispatch_itemsize(x.element_size(), [&]<typename E>() {
      put_rows_typed<Assign<E>>(static_cast<E*>(x.data_ptr()), static_cast<const E*>(value.data_ptr()), cells,
                                offsets, value_offsets);
    });
    return;
  }
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    put_rows_typed<Accumulate<T>>(static_cast<T*>(x.data_ptr()), static_cast<const T*>(value.data_ptr()), cells,
                                  offsets, value_offsets);
  });
}

}  // namespace mf::cpu
