// Row gather/put loops of the indexing ops (Note [Rows layout]), and the
// indexing ops' CPU kernels.
#include "backend/cpu/kernels/index_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "backend/common/index_kernels.h"
#include "backend/common/index_plan.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "ops/index_common.h"

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

// --- the indexing ops' kernels ------------------------------------------------------------
// index_select, index_add, gather, scatter, scatter_add, scatter_reduce
// (src/ops/index.cpp), index and index_put (src/ops/advanced_index.cpp),
// as_strided_backward (src/ops/strided_view.cpp) and one_hot
// (src/ops/rearrange.cpp).

namespace {

using index_detail::Reduce;
using index_detail::reduce_of;
using Geometry = index_kernels::StorageGeometry;
using index_plan::IndexPlan;
using index_plan::plan_view;
using index_plan::rows_shape_of;

Shape strides_without(const Tensor& t, int64_t dim) { return with_size(t.strides(), dim, 0); }

enum class ScatterMode { Copy, Add, Fill };

// Throws IndexError naming the first index outside [0, size).
void check_indices(const Tensor& index, int64_t dim, int64_t size, const char* name) {
  const int64_t* ip = index.numel() ? index.data<int64_t>() : nullptr;
  StridedWalk<1> all(index.sizes(), {index.strides()});
  parallel_for(0, all.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    all.runs(b, e, {0}, [&](const auto& o, const auto& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = ip[o[0] + i * s[0]];
        if (v < 0 || v >= size) [[unlikely]]
          throw_index_out_of_range(name, v, dim, size);
      }
    });
  });
}

// y = base (zeros when base is null), then y[... index[i] ...] = src[i] (+=
// for Add; fill for Fill). Every index is checked before the first write.
// Lines along dim run on one thread, in order, so repeated indices never
// race and the last write wins.
void scatter_into(Tensor& y, const Tensor* base, const Tensor& full_index, const Tensor* src, int64_t dim,
                  ScatterMode mode, Scalar fill, const char* name) {
  const int64_t size = y.sizes()[size_t(dim)];
  // An index (and src) expanded along dim (stride 0) writes one element
  // `repeats` times: once for a copy or fill, its value times repeats for an
  // add (only for huge repeats, where iterating could never finish; smaller
  // ones add one by one, in PyTorch's order).
  Tensor index = full_index;
  int64_t repeats = 1;
  if (index.dim() > 0 && index.strides()[size_t(dim)] == 0 && index.sizes()[size_t(dim)] > 1 &&
      (!src || src->strides()[size_t(dim)] == 0) &&
      (mode != ScatterMode::Add || index.sizes()[size_t(dim)] > (int64_t(1) << 20))) {
    repeats = index.sizes()[size_t(dim)];
    index = make_view(index, with_size(index.sizes(), dim, 1), index.strides(), index.storage_offset());
  }
  const int64_t* ip = index.numel() ? index.data<int64_t>() : nullptr;
  check_indices(index, dim, size, name);
  if (base) {
    copy_cast(y, *base);
  } else if (y.numel() > 0) {
    char* p = static_cast<char*>(y.data_ptr());  // zero bits are 0 in every dtype
    const int64_t bytes = y.numel() * int64_t(y.element_size());
    parallel_for(0, bytes, 1 << 20, [&](int64_t b, int64_t e) { std::memset(p + b, 0, size_t(e - b)); });
  }
  if (index.numel() == 0) return;
  const int64_t line = index.sizes()[size_t(dim)];
  const int64_t index_step = index.strides()[size_t(dim)], out_step = y.strides()[size_t(dim)];
  const int64_t src_step = src ? src->strides()[size_t(dim)] : 0;
  StridedWalk<3> lines(with_size(index.sizes(), dim, 1),
                       {index.strides(), strides_without(y, dim), src ? src->strides() : Shape(size_t(y.dim()), 0)});
  dispatch_dtype(y.dtype(), [&]<typename T>() {
    T* yp = static_cast<T*>(y.data_ptr());
    const T* sp = src ? static_cast<const T*>(src->data_ptr()) : nullptr;
    const T fill_value = fill.to<T>();
    parallel_for(0, lines.numel(), std::max<int64_t>(1, kGrainSize / line), [&](int64_t b, int64_t e) {
      lines.runs(b, e, {0, 0, 0}, [&](const auto& o, const auto& s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t* il = ip + o[0] + i * s[0];
          T* yl = yp + o[1] + i * s[1];
          for (int64_t k = 0; k < line; ++k) {
            T& dst = yl[il[k * index_step] * out_step];
            if (mode == ScatterMode::Fill) {
              dst = fill_value;
            } else {
              const T v = sp[o[2] + i * s[2] + k * src_step];
              if (mode == ScatterMode::Copy) dst = v;
              else if constexpr (std::is_same_v<T, bool>) dst = dst || v;
              else if constexpr (std::is_integral_v<T>)  // wraps, as repeated adds would
                dst = T(uint64_t(int64_t(dst)) + uint64_t(int64_t(v)) * uint64_t(repeats));
              else dst = T(acc_type<T>(dst) + acc_type<T>(v) * acc_type<T>(repeats));
            }
          }
        }
      });
    });
  });
}

KernelFn scatter_kernel(ScatterMode mode, const char* name) {
  return [mode, name](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const int64_t dim = wrap_dim(attrs.get_int("dim"), out[0].dim(), name);
    const Scalar fill = mode == ScatterMode::Fill ? attrs.get_scalar("value") : Scalar(0);
    scatter_into(out[0], &in[0], in[1], mode == ScatterMode::Fill ? nullptr : &in[2], dim, mode, fill, name);
  };
}

template <typename T>
T combine(Reduce r, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return r == Reduce::Prod || r == Reduce::Amin ? (a && b) : (a || b);
  } else {
    using A = acc_type<T>;
    const A x = A(a), y = A(b);
    switch (r) {
      case Reduce::Prod: return T(x * y);
      case Reduce::Amax: return (y != y || y > x) ? b : a;  // NaN in b wins; NaN in a stays
      case Reduce::Amin: return (y != y || y < x) ? b : a;
      default:
        if constexpr (std::is_integral_v<T>) return T(uint64_t(int64_t(a)) + uint64_t(int64_t(b)));  // wraps
        else return T(x + y);
    }
  }
}

template <typename T>
T identity_of(Reduce r) {
  if (r == Reduce::Prod) return T(1);
  if (r != Reduce::Amax && r != Reduce::Amin) return T(0);
  const bool low = r == Reduce::Amax;
  if constexpr (std::is_integral_v<T>) {
    return low ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  } else {  // float, double, Half, BFloat16
    const double inf = std::numeric_limits<double>::infinity();
    return T(low ? -inf : inf);
  }
}

// Note [scatter_reduce] in src/ops/index.cpp. Lines along dim run on one
// thread, in order, so the result does not depend on the thread count.
void scatter_reduce_into(Tensor& y, const Tensor& self, const Tensor& index, const Tensor& src, int64_t dim,
                         Reduce reduce, bool include_self) {
  check_indices(index, dim, y.sizes()[size_t(dim)], "scatter_reduce");
  copy_cast(y, self);
  if (index.numel() == 0) return;
  const int64_t* ip = index.data<int64_t>();
  const int64_t line = index.sizes()[size_t(dim)];
  const int64_t index_step = index.strides()[size_t(dim)], out_step = y.strides()[size_t(dim)];
  const int64_t src_step = src.strides()[size_t(dim)];
  StridedWalk<3> lines(with_size(index.sizes(), dim, 1), {index.strides(), strides_without(y, dim), src.strides()});
  const int64_t grain = std::max<int64_t>(1, kGrainSize / line);
  // Visits every (output element, src element) pair, line by line.
  auto each = [&](auto&& visit) {
    parallel_for(0, lines.numel(), grain, [&](int64_t b, int64_t e) {
      lines.runs(b, e, {0, 0, 0}, [&](const auto& o, const auto& s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k < line; ++k)
            visit(o[1] + i * s[1] + ip[o[0] + i * s[0] + k * index_step] * out_step, o[2] + i * s[2] + k * src_step);
      });
    });
  };
  // How many src values each output element receives (y is the op's own
  // contiguous output, so its offsets index this vector).
  std::vector<int64_t> counts;
  if (reduce == Reduce::Mean || !include_self) {
    counts.assign(size_t(y.numel()), 0);
    each([&](int64_t at, int64_t) { ++counts[size_t(at)]; });
  }
  dispatch_dtype(y.dtype(), [&]<typename T>() {
    T* yp = static_cast<T*>(y.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    if (!include_self) {
      const T start = identity_of<T>(reduce);
      for (size_t at = 0; at < counts.size(); ++at)
        if (counts[at] > 0) yp[at] = start;
    }
    each([&](int64_t at, int64_t from) { yp[at] = combine(reduce, yp[at], sp[from]); });
    if (reduce != Reduce::Mean) return;
    if constexpr (!std::is_same_v<T, bool>) {
      for (size_t at = 0; at < counts.size(); ++at) {
        const int64_t n = counts[at] + (include_self ? 1 : 0);
        if (counts[at] == 0 || n == 1) continue;
        if constexpr (std::is_integral_v<T>) {
          const int64_t v = int64_t(yp[at]);
          yp[at] = T(v / n - ((v % n != 0) && ((v < 0) != (n < 0)) ? 1 : 0));  // floor division
        } else {
          yp[at] = T(acc_type<T>(yp[at]) / acc_type<T>(n));
        }
      }
    }
  });
}

// Note [Index plan] in src/ops/advanced_index.cpp: the offsets of the rows
// the index tensors pick in the plan's view.
std::vector<int64_t> plan_offsets(const Tensor& view, const IndexPlan& p, const TensorList& idx, const char* op) {
  const size_t k = idx.size(), np = size_t(p.num_pre);
  Shape sizes(k), strides(k), dims(k);
  for (size_t j = 0; j < k; ++j) {
    sizes[j] = view.sizes()[np + j];
    strides[j] = view.strides()[np + j];
    dims[j] = p.src_dims[np + j];
  }
  return row_offsets(idx, sizes, strides, dims, /*wrap=*/true, op);
}

// Calls fn(flat index, storage position) for every element of g (serially).
template <typename F>
void for_each_position(const Geometry& g, const F& fn) {
  StridedWalk<2> walk(g.size, {contiguous_strides(g.size), g.stride});
  walk.runs(0, walk.numel(), {0, g.offset}, [&](const auto& o, const auto& s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) fn(o[0] + i * s[0], o[1] + i * s[1]);
  });
}

}  // namespace

MF_REGISTER_KERNEL("index_select", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), "index_select");
  auto offsets =
      row_offsets({in[1]}, {x.sizes()[size_t(dim)]}, {x.strides()[size_t(dim)]}, {dim}, false, "index_select");
  gather_rows(x, dim, 1, offsets, out[0]);
});
MF_REGISTER_KERNEL("index_add", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  int64_t dim = wrap_dim(attrs.get_int("dim"), y.dim(), "index_add");
  auto offsets = row_offsets({in[1]}, {y.sizes()[size_t(dim)]}, {y.strides()[size_t(dim)]}, {dim}, false, "index_add");
  copy_cast(y, in[0]);
  put_rows(y, dim, 1, offsets, {in[1].numel()}, in[2], true);
});
MF_REGISTER_KERNEL("gather", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &x = in[0], &index = in[1];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), "gather");
  const int64_t size = x.sizes()[size_t(dim)], stride = x.strides()[size_t(dim)];
  StridedWalk<3> walk(index.sizes(), {out[0].strides(), index.strides(), strides_without(x, dim)});
  const int64_t* ip = index.data_ptr() ? index.data<int64_t>() : nullptr;
  dispatch_itemsize(x.element_size(), [&]<typename E>() {
    const E* xp = static_cast<const E*>(x.data_ptr());
    E* op = static_cast<E*>(out[0].data_ptr());
    parallel_for(0, walk.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      walk.runs(b, e, {0, 0, 0}, [&](const auto& o, const auto& s, int64_t n) {
        const int64_t* il = ip + o[1];
        const E* xl = xp + o[2];
        E* ol = op + o[0];
        auto check = [&](int64_t v) {
          if (uint64_t(v) >= uint64_t(size)) [[unlikely]]
            throw_index_out_of_range("gather", v, dim, size);
        };
        if (s[0] == 1 && s[1] == 1) {  // contiguous output and index (cross entropy's case)
          for (int64_t i = 0; i < n; ++i) check(il[i]);
          for (int64_t i = 0; i < n; ++i) ol[i] = xl[i * s[2] + il[i] * stride];
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          const int64_t v = il[i * s[1]];
          check(v);
          ol[i * s[0]] = xl[i * s[2] + v * stride];
        }
      });
    });
  });
});
// zeros of the input's shape, grad added at index (scatter_add into zeros,
// without reading a tensor of zeros).
MF_REGISTER_KERNEL("gather_backward", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.get_int("dim"), out[0].dim(), "gather_backward");
  scatter_into(out[0], nullptr, in[1], &in[0], dim, ScatterMode::Add, Scalar(0), "gather_backward");
});
MF_REGISTER_KERNEL("scatter", DeviceType::CPU, scatter_kernel(ScatterMode::Copy, "scatter"));
MF_REGISTER_KERNEL("scatter_value", DeviceType::CPU, scatter_kernel(ScatterMode::Fill, "scatter"));
MF_REGISTER_KERNEL("scatter_add", DeviceType::CPU, scatter_kernel(ScatterMode::Add, "scatter_add"));
MF_REGISTER_KERNEL("scatter_reduce", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.get_int("dim"), out[0].dim(), "scatter_reduce");
  scatter_reduce_into(out[0], in[0], in[1], in[2], dim, reduce_of(attrs.get_string("reduce")),
                      attrs.get_bool("include_self"));
});
MF_REGISTER_KERNEL("index", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  IndexPlan p = IndexPlan::from(attrs);
  Tensor view = plan_view(in[0], p);
  const TensorList idx(in.begin() + 1, in.end());
  gather_rows(view, p.num_pre, int64_t(idx.size()), plan_offsets(view, p, idx, "index"), out[0]);
});
MF_REGISTER_KERNEL("index_put", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  IndexPlan p = IndexPlan::from(attrs);
  const TensorList idx(in.begin() + 2, in.end());
  if (!out[0].is_same(in[0])) copy_cast(out[0], in[0]);
  Tensor view = plan_view(out[0], p);
  // Every index is checked (plan_offsets throws) before the first write.
  std::vector<int64_t> offsets = plan_offsets(view, p, idx, "index_put_");
  put_rows(view, p.num_pre, int64_t(idx.size()), offsets, rows_shape_of(idx, "index_put_"), in[1],
           attrs.get_bool("accumulate"));
});
// Note [as_strided gradient] in src/ops/strided_view.cpp.
MF_REGISTER_KERNEL("as_strided_backward", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& a) {
  const Geometry src = Geometry::of(a, "src"), dst = Geometry::of(a, "dst");
  Tensor& o = out[0];
  if (o.numel() == 0) return;
  Scratch taken(out);
  const Tensor g = dense(in[0], taken);
  dispatch_floating(o.dtype(), "as_strided_backward", [&]<typename T>() {
    using A = acc_type<T>;
    T* op = static_cast<T*>(o.data_ptr());
    if (g.numel() == 0) {
      std::fill(op, op + o.numel(), T(0));
      return;
    }
    auto [lo, hi] = dst.range();
    auto [src_lo, src_hi] = src.range();
    lo = std::min(lo, src_lo);
    hi = std::max(hi, src_hi);
    std::vector<A> buffer(size_t(hi - lo + 1), A(0));
    std::vector<int32_t> count(buffer.size(), 0);
    const T* gp = static_cast<const T*>(g.data_ptr());
    for_each_position(src, [&](int64_t i, int64_t p) { buffer[size_t(p - lo)] += A(gp[i]); });
    for_each_position(a.get_bool("divide_by_dst") ? dst : src, [&](int64_t, int64_t p) { count[size_t(p - lo)]++; });
    for (size_t p = 0; p < buffer.size(); ++p)
      if (count[p] > 1) buffer[p] /= A(count[p]);
    for_each_position(dst, [&](int64_t i, int64_t p) { op[i] = T(buffer[size_t(p - lo)]); });
  });
}, dense_inputs_scratch("as_strided_backward", {0}));
MF_REGISTER_KERNEL("one_hot", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const int64_t classes = attrs.get_int("num_classes");
  int64_t* y = out[0].numel() ? out[0].data<int64_t>() : nullptr;
  const int64_t* xp = x.numel() ? x.data<int64_t>() : nullptr;
  StridedWalk<1> walk(x.sizes(), {x.strides()});
  // Every class is checked before the first write.
  parallel_for(0, walk.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    walk.runs(b, e, {0}, [&](const auto& o, const auto& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t c = xp[o[0] + i * s[0]];
        MF_CHECK(c >= 0, IndexError, "one_hot: class values must be non-negative, got ", c);
        MF_CHECK(c < classes, IndexError, "one_hot: class value ", c, " must be smaller than num_classes (",
                 classes, ")");
      }
    });
  });
  if (out[0].numel() == 0) return;
  std::memset(y, 0, size_t(out[0].numel()) * sizeof(int64_t));
  parallel_for(0, walk.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    int64_t flat = b;
    walk.runs(b, e, {0}, [&](const auto& o, const auto& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i, ++flat) y[flat * classes + xp[o[0] + i * s[0]]] = 1;
    });
  });
});

}  // namespace mf::cpu
