// Note [Device index kernels]
// The indexing ops (gather, index_select, embedding, the scatters, index_add
// and the gradients that are scatters, one_hot, advanced index and
// index_put, scatter_reduce, as_strided's gradient), written once over a
// backend's loops L. Each is a walk over an
// iteration space whose operands are views with chosen strides; at every
// element a functor reads an index and moves or combines one value:
//
//   L::for_each<N>(device, g, n, f)   f(data, offsets) for i in [0, n), where
//                                     offsets are operand k's byte offsets
//                                     of element i of g (LoopGeometry<N>)
//   L::clear_fault(device)            an IndexFault record in the device's
//                                     memory, cleared, for the next walk
//   L::read_fault(device, record)     the record after the walk (waits for it)
//   L::Math::atomic_add(p, v)         *p += v, atomic among the walk's threads
//   L::Math::record_fault(record, v)  keeps the first bad index it is given
//
// Pulls (gather, index_select, embedding, one_hot) walk the output; pushes
// (scatter, index_add, the backward ops) walk the source and write through
// the index, adding atomically, so a push's sums do not depend on a
// thread order but their rounding may (as PyTorch's CUDA scatter_add), and
// where a scatter copies two values to one place either may land.
//
// A kernel cannot throw from a device thread: an index out of range is
// recorded and its access skipped, and after the walk the host reads the
// record back and throws IndexError naming the op, the dim, the size and
// the first bad index recorded. That read waits for the walk, so an
// indexing op on a device synchronises its stream once.
//
// The scans (cumsum, cumprod) are walks too, in scan_kernels.h. The CPU
// keeps its own kernels for these ops (backend/cpu/kernels/index_kernels.cpp,
// embedding.cpp, scan.cpp); src/ops/ (index.cpp, embedding.cpp,
// rearrange.cpp, advanced_index.cpp, strided_view.cpp, cumsum.cpp) holds
// their schemas, inference and backward.
#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <optional>
#include <type_traits>

#include "backend/common/elementwise_kernels.h"
#include "backend/common/index_fault.h"
#include "backend/common/index_plan.h"
#include "backend/common/reduce_ops.h"
#include "backend/common/scratch.h"
#include "meshflow/checked_size.h"
#include "ops/index_common.h"

namespace mf {

namespace index_kernels {

// One operand of a walk: its data and its strides (in elements) over the
// walk's shape.
struct Operand {
  const void* data;
  Shape strides;
  int64_t itemsize;
};

inline Operand operand(const Tensor& t, Shape strides) {
  return {t.data_ptr(), std::move(strides), int64_t(t.element_size())};
}

// t's strides with dim d set to `stride`.
inline Shape strides_with(const Tensor& t, int64_t d, int64_t stride) {
  Shape s = t.strides();
  s[size_t(d)] = stride;
  return s;
}

template <size_t N>
LoopGeometry<N> walk_geometry(const Shape& sizes, const std::array<Operand, N>& ops, const char* op) {
  StridedOperands<N> s;
  s.sizes = sizes;
  for (size_t k = 0; k < N; ++k) {
    MF_CHECK(ops[k].strides.size() == sizes.size(), Error, op, ": operand ", k, " has ", ops[k].strides.size(),
             " strides for a walk of ", sizes.size(), " dims");
    s.strides[k] = ops[k].strides;
    for (auto& v : s.strides[k]) v *= ops[k].itemsize;
    s.data[k] = static_cast<char*>(const_cast<void*>(ops[k].data));
  }
  s.coalesce();
  return loop_geometry<N>(s, op);
}

// Runs body(fault) on device, then on_fault(value) if it recorded a value.
template <typename L, typename Body, typename OnFault>
void with_fault_check(const Device& device, const Body& body, const OnFault& on_fault) {
  IndexFault* fault = L::clear_fault(device);
  body(fault);
  if (const std::optional<int64_t> bad = L::read_fault(device, fault)) on_fault(*bad);
}

// Runs body(fault) on device, then throws IndexError if it recorded a bad
// index.
template <typename L, typename Body>
void with_index_check(const Device& device, const char* op, int64_t dim, int64_t size, const Body& body) {
  with_fault_check<L>(device, body, [&](int64_t bad) {
    throw IndexError(::mf::detail::concat(op, ": index ", bad, " is out of bounds for dimension ", dim,
                                          " with size ", size));
  });
}

// Calls fn.template operator()<E>() with E an unsigned type of `bytes` bytes:
// moving elements needs only their size.
template <typename F>
decltype(auto) by_itemsize(size_t bytes, F&& fn) {
  switch (bytes) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    default: return fn.template operator()<uint64_t>();
  }
}

// Reads an index of type I at p into v; records it and returns false when
// it is outside [0, size).
template <typename M, typename I>
MF_FORCE_INLINE MF_HOST_DEVICE bool read_index(const char* p, int64_t size, IndexFault* fault, int64_t& v) {
  v = int64_t(*reinterpret_cast<const I*>(p));
  if (v >= 0 && v < size) return true;
  M::record_fault(fault, v);
  return false;
}

// Operands: 0 the output, 1 the index, 2 the source at index 0 along the
// indexed dim. out = source[index * stride].
template <typename M, typename E, typename I>
struct Pick {
  int64_t size, stride_bytes;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t v;
    if (!read_index<M, I>(data[1] + off[1], size, fault, v)) return;
    *reinterpret_cast<E*>(data[0] + off[0]) = *reinterpret_cast<const E*>(data[2] + off[2] + v * stride_bytes);
  }
};

// out (sizes `sizes`, contiguous) = x[..., index[...], ...] along dim: the
// walk's operands are the output, the index and x with dim's stride 0.
template <typename L>
void pick(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index, const Shape& index_strides,
          const Shape& x_strides, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t size = x.sizes()[size_t(dim)];
  const LoopGeometry<3> g = walk_geometry<3>(
      out.sizes(), {operand(out, out.strides()), operand(index, index_strides), operand(x, x_strides)}, op);
  with_index_check<L>(out.device(), op, dim, size, [&](IndexFault* fault) {
    by_itemsize(x.element_size(), [&]<typename E>() {
      const int64_t stride_bytes = x.strides()[size_t(dim)] * int64_t(sizeof(E));
      if (index.dtype() == DType::Int32)
        L::template for_each<3>(out.device(), g, n, Pick<typename L::Math, E, int32_t>{size, stride_bytes, fault});
      else
        L::template for_each<3>(out.device(), g, n, Pick<typename L::Math, E, int64_t>{size, stride_bytes, fault});
    });
  });
}

template <typename L>
void gather(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &x = in[0], &index = in[1];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), "gather");
  if (x.dim() == 0) {
    pick<L>(out[0], make_view(x, {1}, {1}, x.storage_offset()), 0, index, Shape(), Shape(), "gather");
    return;
  }
  pick<L>(out[0], x, dim, index, index.strides(), strides_with(x, dim, 0), "gather");
}

template <typename L>
void index_select(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &x = in[0], &index = in[1];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), "index_select");
  Shape index_strides(size_t(x.dim()), 0);
  index_strides[size_t(dim)] = index.strides()[0];
  pick<L>(out[0], x, dim, index, index_strides, strides_with(x, dim, 0), "index_select");
}

// (indices..., D) = weight[indices[...], :].
template <typename L>
void embedding(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &weight = in[0], &indices = in[1];
  Shape index_strides = indices.strides(), weight_strides(size_t(indices.dim()), 0);
  index_strides.push_back(0);
  weight_strides.push_back(weight.strides()[1]);
  // Over the output's shape, the weight moves along D only; rows come
  // through the index.
  pick<L>(out[0], weight, 0, indices, index_strides, weight_strides, "embedding");
}

// class c of out[..., c] is 1 where x[...] == c.
template <typename M>
struct OneHot {
  int64_t classes, stride;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t c;
    if (!read_index<M, int64_t>(data[1] + off[1], classes, fault, c)) return;
    reinterpret_cast<int64_t*>(data[0] + off[0])[c * stride] = 1;
  }
};

template <typename L>
void one_hot(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const int64_t classes = attrs.get_int("num_classes");
  elementwise_kernels::fill<L>(y, Scalar(0));
  if (x.numel() == 0) return;
  // The output at class 0 of every position, walked with x.
  Shape out_strides = y.strides();
  out_strides.pop_back();
  const LoopGeometry<2> g = walk_geometry<2>(x.sizes(), {operand(y, out_strides), operand(x, x.strides())}, "one_hot");
  with_index_check<L>(y.device(), "one_hot", x.dim(), classes, [&](IndexFault* fault) {
    L::template for_each<2>(y.device(), g, x.numel(), OneHot<typename L::Math>{classes, y.strides().back(), fault});
  });
}

// --- pushes --------------------------------------------------------------------------

enum class PutMode { Copy, Fill, Add };

// a + b with wrapping integers and bool as or: the sum of a scatter_add.
template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T add_values(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a || b;
  else if constexpr (std::is_integral_v<T>) return T(uint64_t(int64_t(a)) + uint64_t(int64_t(b)));
  else return T(M::template to_acc<acc_type<T>>(a) + M::template to_acc<acc_type<T>>(b));
}

// v added `times` times (integers wrap, as repeated adds would).
template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T times_value(T v, int64_t times) {
  if (times == 1) return v;
  if constexpr (std::is_same_v<T, bool>) return v;
  else if constexpr (std::is_integral_v<T>) return T(uint64_t(int64_t(v)) * uint64_t(times));
  else return T(M::template to_acc<acc_type<T>>(v) * acc_type<T>(times));
}

// *p += v among concurrent threads: the math's own atomic add where it has
// one for T, else its compare-and-swap loop.
template <typename M, typename T>
struct AddTo {
  T v;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T old) const { return add_values<M, T>(old, v); }
};

template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                std::is_same_v<T, int64_t>)
    M::atomic_add(p, v);
  else
    M::atomic_update(p, AddTo<M, T>{v});
}

// Operands: 0 the destination at index 0 along the indexed dim, 1 the index,
// 2 the source (unused for Fill). dst[index * stride] = / += source;
// an index equal to `skip` (embedding's padding row) writes nothing.
template <typename M, typename T, typename I, PutMode kMode>
struct Put {
  int64_t size, stride_bytes, skip, repeats;
  T value;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t v;
    if (!read_index<M, I>(data[1] + off[1], size, fault, v) || v == skip) return;
    T* dst = reinterpret_cast<T*>(data[0] + off[0] + v * stride_bytes);
    if constexpr (kMode == PutMode::Fill) {
      *dst = value;
    } else {
      const T src = *reinterpret_cast<const T*>(data[2] + off[2]);
      if constexpr (kMode == PutMode::Copy) *dst = src;
      else atomic_add<M>(dst, times_value<M, T>(src, repeats));
    }
  }
};

// The walk of a push over `sizes` (the index's or source's shape): the
// destination's strides along it (0 along the indexed dim), the index's and
// the source's; `size` and `stride` are the destination's along the indexed
// dim `dim`.
struct PushWalk {
  Shape sizes, y_strides, index_strides, src_strides;
  int64_t dim, size, stride;
};

template <typename L, PutMode kMode>
void push(Tensor& y, const Tensor& index, const Tensor* src, PushWalk w, Scalar fill, int64_t skip, const char* op) {
  // Walk dims along which nothing moves (an expanded index and source)
  // write one place `repeats` times: once, with the value times repeats for
  // an add, so a huge expanded index costs one element.
  int64_t repeats = 1;
  for (size_t d = 0; d < w.sizes.size(); ++d) {
    if (w.sizes[d] > 1 && w.y_strides[d] == 0 && w.index_strides[d] == 0 && (!src || w.src_strides[d] == 0)) {
      repeats *= w.sizes[d];  // at most the walk's numel
      w.sizes[d] = 1;
    }
  }
  const int64_t n = shape_numel(w.sizes);
  if (n == 0) return;
  const Tensor& s = src ? *src : index;
  const LoopGeometry<3> g =
      walk_geometry<3>(w.sizes,
                       {operand(y, w.y_strides), operand(index, w.index_strides),
                        operand(s, src ? w.src_strides : w.index_strides)},
                       op);
  with_index_check<L>(y.device(), op, w.dim, w.size, [&](IndexFault* fault) {
    dispatch_dtype(y.dtype(), [&]<typename T>() {
      const int64_t stride_bytes = w.stride * int64_t(sizeof(T));
      const T value = fill.to<T>();
      auto run = [&]<typename I>() {
        L::template for_each<3>(y.device(), g, n,
                                Put<typename L::Math, T, I, kMode>{w.size, stride_bytes, skip, repeats, value, fault});
      };
      if (index.dtype() == DType::Int32) run.template operator()<int32_t>();
      else run.template operator()<int64_t>();
    });
  });
}

// A push along dim of y, walking the index's shape.
inline PushWalk along(const Tensor& y, int64_t dim, const Tensor& index, const Tensor* src) {
  if (y.dim() == 0) return {Shape(), Shape(), Shape(), Shape(), 0, 1, 0};
  return {index.sizes(), strides_with(y, dim, 0), index.strides(), src ? src->strides() : index.strides(), dim,
          y.sizes()[size_t(dim)], y.strides()[size_t(dim)]};
}

// scatter / scatter_value / scatter_add: y = self, then y[.. index ..] = src
// (or the value, or += src).
template <typename L, PutMode kMode>
void scatter(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const Tensor& index = in[1];
  const char* op = kMode == PutMode::Add ? "scatter_add" : "scatter";
  const int64_t dim = y.dim() == 0 ? 0 : wrap_dim(attrs.get_int("dim"), y.dim(), op);
  elementwise_kernels::copy_cast<L>(y, in[0]);
  const Tensor* src = kMode == PutMode::Fill ? nullptr : &in[2];
  push<L, kMode>(y, index, src, along(y, dim, index, src),
                 kMode == PutMode::Fill ? attrs.get_scalar("value") : Scalar(0), -1, op);
}

// gather's gradient: zeros of the input's shape, grad added at index.
template <typename L>
void gather_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const int64_t dim = y.dim() == 0 ? 0 : wrap_dim(attrs.get_int("dim"), y.dim(), "gather_backward");
  elementwise_kernels::fill<L>(y, Scalar(0));
  push<L, PutMode::Add>(y, in[1], &in[0], along(y, dim, in[1], &in[0]), Scalar(0), -1, "gather_backward");
}

// y = self, then y's rows index[i] along dim += source's row i.
template <typename L>
void index_add(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const Tensor &index = in[1], &src = in[2];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), y.dim(), "index_add");
  elementwise_kernels::copy_cast<L>(y, in[0]);
  Shape index_strides(size_t(src.dim()), 0);
  index_strides[size_t(dim)] = index.strides()[0];
  push<L, PutMode::Add>(y, index, &src,
                        {src.sizes(), strides_with(y, dim, 0), index_strides, src.strides(), dim,
                         y.sizes()[size_t(dim)], y.strides()[size_t(dim)]},
                        Scalar(0), -1, "index_add");
}

// The weight's gradient: zeros, then grad row i added to row indices[i],
// except the padding row.
template <typename L>
void embedding_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const Tensor &grad = in[0], &indices = in[1];
  elementwise_kernels::fill<L>(y, Scalar(0));
  Shape index_strides = indices.strides(), y_strides(size_t(indices.dim()), 0);
  index_strides.push_back(0);
  y_strides.push_back(y.strides()[1]);
  push<L, PutMode::Add>(y, indices, &grad,
                        {grad.sizes(), y_strides, index_strides, grad.strides(), 0, y.sizes()[0], y.strides()[0]},
                        Scalar(0), attrs.get_int("padding_idx"), "embedding_backward");
}

// --- scatter_reduce -------------------------------------------------------------------
// y = self; with include_self false, the places some source reaches start
// from the reduction's identity; then every source value is combined into
// its place atomically (compare-and-swap), and "mean" divides by the count
// (self counting once when included; integers floor). NaN wins amax and
// amin. Sums and products may round differently from run to run, as
// PyTorch's CUDA scatter_reduce.

// The reduce argument, as the op checked it (ops/index_common.h).
using index_detail::Reduce;
using index_detail::reduce_of;

template <typename M, typename T>
struct CombineWith {
  T b;
  Reduce r;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(T a) const {
    if constexpr (std::is_same_v<T, bool>) {
      return r == Reduce::Prod || r == Reduce::Amin ? (a && b) : (a || b);
    } else {
      using A = acc_type<T>;
      const A x = M::template to_acc<A>(a), y = M::template to_acc<A>(b);
      switch (r) {
        case Reduce::Prod: return T(x * y);
        case Reduce::Amax: return (y != y || y > x) ? b : a;
        case Reduce::Amin: return (y != y || y < x) ? b : a;
        default: return add_values<M, T>(a, b);
      }
    }
  }
};

template <typename T>
T identity_of(Reduce r) {
  if (r == Reduce::Prod) return T(1);
  if (r != Reduce::Amax && r != Reduce::Amin) return T(0);
  const bool low = r == Reduce::Amax;
  if constexpr (std::is_same_v<T, bool>) return !low;
  else if constexpr (std::is_integral_v<T>) return low ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  else return T(low ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity());
}

// Checks the index (operand 1) only.
template <typename M>
struct IndexOnly {
  int64_t size;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t v;
    read_index<M, int64_t>(data[1] + off[1], size, fault, v);
  }
};

// Operands: 0 y's place at index 0 along dim, 1 the index, 2 the source.
template <typename M, typename T>
struct ReduceInto {
  int64_t stride_bytes;
  Reduce r;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t v = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    T* dst = reinterpret_cast<T*>(data[0] + off[0] + v * stride_bytes);
    M::atomic_update(dst, CombineWith<M, T>{*reinterpret_cast<const T*>(data[2] + off[2]), r});
  }
};

// Operands over y: 0 y, 1 the counts. Places some source reached start from
// `start` (include_self false), or are divided by their count ("mean").
template <typename M, typename T>
struct FinishPlace {
  T start;
  bool restart, mean, include_self;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    T& y = *reinterpret_cast<T*>(data[0] + off[0]);
    const int64_t count = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    if (count == 0) return;
    if (restart) {
      y = start;
      return;
    }
    if constexpr (!std::is_same_v<T, bool>) {
      const int64_t n = count + (include_self ? 1 : 0);
      if (!mean || n == 1) return;
      if constexpr (std::is_integral_v<T>) {
        const int64_t v = int64_t(y);
        y = T(v / n - ((v % n != 0) && ((v < 0) != (n < 0)) ? 1 : 0));  // floor division
      } else {
        using A = acc_type<T>;
        y = T(M::template to_acc<A>(y) / A(n));
      }
    }
  }
};

template <typename L>
void scatter_reduce(const TensorList& in, TensorList& out, const Attrs& attrs) {
  using M = typename L::Math;
  Tensor& y = out[0];
  const Tensor &index = in[1], &src = in[2];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), y.dim(), "scatter_reduce");
  const Reduce r = reduce_of(attrs.get_string("reduce"));
  const bool include_self = attrs.get_bool("include_self");
  elementwise_kernels::copy_cast<L>(y, in[0]);
  if (index.numel() == 0) return;
  const Device device = y.device();
  const int64_t size = y.sizes()[size_t(dim)];
  const LoopGeometry<3> g = walk_geometry<3>(
      index.sizes(), {operand(y, strides_with(y, dim, 0)), operand(index, index.strides()), operand(src, src.strides())},
      "scatter_reduce");
  // Counts of the sources each place receives (checks every index first).
  Tensor counts;
  const bool counted = r == Reduce::Mean || !include_self;
  if (counted) {
    Scratch taken(out);
    counts = taken.take(y.sizes(), DType::Int64);
    elementwise_kernels::fill<L>(counts, Scalar(0));
    Tensor ones = taken.take({}, DType::Int64);
    elementwise_kernels::fill<L>(ones, Scalar(1));
    push<L, PutMode::Add>(counts, index, &ones,
                          {index.sizes(), strides_with(counts, dim, 0), index.strides(), Shape(size_t(index.dim()), 0),
                           dim, size, counts.strides()[size_t(dim)]},
                          Scalar(0), -1, "scatter_reduce");
  } else {
    with_index_check<L>(device, "scatter_reduce", dim, size, [&](IndexFault* fault) {
      L::template for_each<3>(device, g, index.numel(), IndexOnly<M>{size, fault});
    });
  }
  dispatch_dtype(y.dtype(), [&]<typename T>() {
    const LoopGeometry<2> places =
        walk_geometry<2>(y.sizes(), {operand(y, y.strides()), operand(counted ? counts : y, counted ? counts.strides() : y.strides())},
                         "scatter_reduce");
    if (!include_self)
      L::template for_each<2>(device, places, y.numel(), FinishPlace<M, T>{identity_of<T>(r), true, false, false});
    L::template for_each<3>(device, g, index.numel(),
                            ReduceInto<M, T>{y.strides()[size_t(dim)] * int64_t(sizeof(T)), r});
    if (r == Reduce::Mean)
      L::template for_each<2>(device, places, y.numel(), FinishPlace<M, T>{T(0), false, true, include_self});
  });
}

// --- as_strided's gradient --------------------------------------------------------------
// Note [as_strided gradient] (src/ops/strided_view.cpp): the gradient is
// summed (atomically) into a buffer over the storage positions it covers,
// each position divided by how many elements of the divisor geometry read
// it, and the result read back through the destination geometry.

template <typename M, typename A, typename T>
struct AddToPosition {  // operands: 0 the buffer at the element's position, 1 the gradient
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    atomic_add<M>(reinterpret_cast<A*>(data[0] + off[0]), A(M::template to_acc<A>(*reinterpret_cast<const T*>(data[1] + off[1]))));
  }
};
template <typename M>
struct CountPosition {  // operand 0: the count at the element's position
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    atomic_add<M>(reinterpret_cast<int64_t*>(data[0] + off[0]), int64_t(1));
  }
};
template <typename A>
struct DivideByCount {
  MF_FORCE_INLINE MF_HOST_DEVICE A operator()(A a, int64_t count) const { return count > 1 ? a / A(count) : a; }
};

// A view's geometry over its storage (shared with src/ops/strided_view.cpp).
struct StorageGeometry {
  Shape size, stride;
  int64_t offset;
  // Smallest and largest storage position (numel > 0).
  std::pair<int64_t, int64_t> range() const {
    int64_t lo = offset, hi = offset;
    for (size_t d = 0; d < size.size(); ++d) {
      const int64_t span = (size[d] - 1) * stride[d];
      (span < 0 ? lo : hi) += span;
    }
    return {lo, hi};
  }
  static StorageGeometry of(const Attrs& a, const std::string& prefix) {
    return {a.get_shape(prefix + "_size"), a.get_shape(prefix + "_stride"), a.get_int(prefix + "_offset")};
  }
};

template <typename L>
void as_strided_backward(const TensorList& in, TensorList& out, const Attrs& a) {
  using M = typename L::Math;
  const StorageGeometry src = StorageGeometry::of(a, "src"), dst = StorageGeometry::of(a, "dst");
  Tensor& o = out[0];
  if (o.numel() == 0) return;
  const Tensor& g = in[0];
  if (g.numel() == 0) {
    elementwise_kernels::fill<L>(o, Scalar(0));
    return;
  }
  auto [lo, hi] = dst.range();
  const auto [src_lo, src_hi] = src.range();
  lo = std::min(lo, src_lo);
  hi = std::max(hi, src_hi);
  const Device device = o.device();
  dispatch_floating(o.dtype(), "as_strided_backward", [&]<typename T>() {
    using A = acc_type<T>;
    Scratch taken(out);
    Tensor buffer = taken.take({hi - lo + 1}, dtype_of<A>()), count = taken.take({hi - lo + 1}, DType::Int64);
    elementwise_kernels::fill<L>(buffer, Scalar(0));
    elementwise_kernels::fill<L>(count, Scalar(0));
    const Tensor at_src = make_view(buffer, src.size, src.stride, src.offset - lo);
    L::template for_each<2>(device,
                            walk_geometry<2>(src.size, {operand(at_src, src.stride), operand(g, g.strides())},
                                             "as_strided_backward"),
                            g.numel(), AddToPosition<M, A, T>{});
    const StorageGeometry& divisor = a.get_bool("divide_by_dst") ? dst : src;
    const Tensor at_divisor = make_view(count, divisor.size, divisor.stride, divisor.offset - lo);
    L::template for_each<1>(device,
                            walk_geometry<1>(divisor.size, {operand(at_divisor, divisor.stride)}, "as_strided_backward"),
                            shape_numel(divisor.size), CountPosition<M>{});
    L::template run<A, A, int64_t>(buffer, {&buffer, &count}, DivideByCount<A>{});
    elementwise_kernels::copy_cast<L>(o, make_view(buffer, dst.size, dst.stride, dst.offset - lo));
  });
}

// --- advanced indexing -------------------------------------------------------------
// Note [Rows layout] (cpu/kernels/index_kernels.h): the k index tensors of
// shape B pick rows of the plan's view (pre..., k indexed dims, post...).
// A first walk per index tensor adds its element offsets into an int64
// buffer of shape B (negatives wrap; one out of range is an IndexError),
// then the result (pre + B + post) is walked with the buffer read along B.

// Operands: 0 the row offsets (int64), 1 index tensor j.
template <typename M>
struct AddRowOffset {
  int64_t size, stride;
  bool first;
  IndexFault* fault;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t& o = *reinterpret_cast<int64_t*>(data[0] + off[0]);
    const int64_t given = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    const int64_t v = given < 0 ? given + size : given;
    if (first) o = 0;
    if (v < 0 || v >= size) {
      M::record_fault(fault, given);
      return;
    }
    o += v * stride;
  }
};

// The element offsets (within the view) of the rows the index tensors pick.
template <typename L>
Tensor row_offsets(const Tensor& view, const index_plan::IndexPlan& p, const TensorList& idx, Scratch taken,
                   const char* op) {
  const Shape rows = index_plan::rows_shape_of(idx, op);
  Tensor offsets = taken.take(rows, DType::Int64);
  const int64_t n = offsets.numel();
  if (idx.empty()) elementwise_kernels::fill<L>(offsets, Scalar(0));  // one row, at the view's start
  for (size_t j = 0; j < idx.size(); ++j) {
    const size_t d = size_t(p.num_pre) + j;
    const int64_t size = view.sizes()[d];
    const LoopGeometry<2> g =
        walk_geometry<2>(rows, {operand(offsets, offsets.strides()), operand(idx[j], idx[j].strides())}, op);
    with_index_check<L>(view.device(), op, p.src_dims[d], size, [&](IndexFault* fault) {
      L::template for_each<2>(view.device(), g, n,
                              AddRowOffset<typename L::Math>{size, view.strides()[d], j == 0, fault});
    });
  }
  return offsets;
}

// The walk over the result (pre + B + post): strides of the view with B's
// dims 0, and of the offsets along B only.
struct RowsWalk {
  Shape sizes, view_strides, offset_strides;
};
inline RowsWalk rows_walk(const Tensor& view, const index_plan::IndexPlan& p, size_t k, const Tensor& offsets) {
  const size_t np = size_t(p.num_pre), nb = size_t(offsets.dim());
  RowsWalk w;
  for (size_t d = 0; d < np; ++d) {
    w.sizes.push_back(view.sizes()[d]);
    w.view_strides.push_back(view.strides()[d]);
    w.offset_strides.push_back(0);
  }
  for (size_t d = 0; d < nb; ++d) {
    w.sizes.push_back(offsets.sizes()[d]);
    w.view_strides.push_back(0);
    w.offset_strides.push_back(offsets.strides()[d]);
  }
  for (size_t d = np + k; d < size_t(view.dim()); ++d) {
    w.sizes.push_back(view.sizes()[d]);
    w.view_strides.push_back(view.strides()[d]);
    w.offset_strides.push_back(0);
  }
  return w;
}

// Operands: 0 the result, 1 the row offset, 2 the view at the row's start.
template <typename E>
struct PickRow {
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t row = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    *reinterpret_cast<E*>(data[0] + off[0]) = reinterpret_cast<const E*>(data[2] + off[2])[row];
  }
};

// Operands: 0 the view at the row's start, 1 the row offset, 2 the value.
template <typename M, typename T, bool kAdd>
struct PutRow {
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t row = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    T* dst = reinterpret_cast<T*>(data[0] + off[0]) + row;
    const T v = *reinterpret_cast<const T*>(data[2] + off[2]);
    if constexpr (kAdd) atomic_add<M>(dst, v);
    else *dst = v;
  }
};

// inputs (x, indices...)
template <typename L>
void index(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const index_plan::IndexPlan p = index_plan::IndexPlan::from(attrs);
  const Tensor view = index_plan::plan_view(in[0], p);
  const TensorList idx(in.begin() + 1, in.end());
  Tensor& y = out[0];
  const Tensor offsets = row_offsets<L>(view, p, idx, Scratch(out), "index");
  if (y.numel() == 0) return;
  const RowsWalk w = rows_walk(view, p, idx.size(), offsets);
  const LoopGeometry<3> g = walk_geometry<3>(
      w.sizes, {operand(y, y.strides()), operand(offsets, w.offset_strides), operand(view, w.view_strides)}, "index");
  by_itemsize(view.element_size(), [&]<typename E>() { L::template for_each<3>(y.device(), g, y.numel(), PickRow<E>{}); });
}

// inputs (self, value, indices...): out = self with the rows set to (or
// incremented by) value broadcast to the result's shape.
template <typename L>
void index_put(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const index_plan::IndexPlan p = index_plan::IndexPlan::from(attrs);
  Tensor& y = out[0];
  if (!y.is_same(in[0])) elementwise_kernels::copy_cast<L>(y, in[0]);
  const Tensor view = index_plan::plan_view(y, p);
  const TensorList idx(in.begin() + 2, in.end());
  const Tensor offsets = row_offsets<L>(view, p, idx, Scratch(out), "index_put_");
  const RowsWalk w = rows_walk(view, p, idx.size(), offsets);
  const int64_t n = shape_numel(w.sizes);
  if (n == 0) return;
  const Tensor& value = in[1];
  Shape value_strides = broadcast_byte_strides(value, w.sizes);
  for (auto& v : value_strides) v /= int64_t(value.element_size());
  const LoopGeometry<3> g = walk_geometry<3>(
      w.sizes, {operand(view, w.view_strides), operand(offsets, w.offset_strides), operand(value, value_strides)},
      "index_put_");
  dispatch_dtype(y.dtype(), [&]<typename T>() {
    if (attrs.get_bool("accumulate")) L::template for_each<3>(y.device(), g, n, PutRow<typename L::Math, T, true>{});
    else L::template for_each<3>(y.device(), g, n, PutRow<typename L::Math, T, false>{});
  });
}

// The kernels' scratch (Note [Kernel scratch]).
// index, index_put: the row offsets, over the index tensors from input k.
template <size_t kFirstIndex>
int64_t row_offsets_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  const TensorList idx(in.begin() + kFirstIndex, in.end());
  return ScratchLayout("index").add(index_plan::rows_shape_of(idx, "index"), DType::Int64).bytes();
}
// scatter_reduce: the counts of the sources each place receives, and a one.
inline int64_t scatter_reduce_scratch(const TensorList&, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  if (reduce_of(attrs.get_string("reduce")) != Reduce::Mean && attrs.get_bool("include_self")) return 0;
  return ScratchLayout("scatter_reduce").add(out[0].sizes, DType::Int64).add({}, DType::Int64).bytes();
}
// as_strided_backward: sums and counts over the storage span both
// geometries cover.
inline int64_t as_strided_backward_scratch(const TensorList& in, const std::vector<TensorMeta>& out,
                                           const Attrs& a) {
  if (shape_numel(out[0].sizes) == 0 || in[0].numel() == 0) return 0;
  const StorageGeometry src = StorageGeometry::of(a, "src"), dst = StorageGeometry::of(a, "dst");
  const auto [dst_lo, dst_hi] = dst.range();
  const auto [src_lo, src_hi] = src.range();
  const int64_t span = std::max(dst_hi, src_hi) - std::min(dst_lo, src_lo) + 1;
  const DType acc = out[0].dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  return ScratchLayout("as_strided_backward").add({span}, acc).add({span}, DType::Int64).bytes();
}

template <typename L>
void register_all(DeviceType device) {
  auto set = [device](const char* op, KernelFn kernel, ScratchFn scratch = {}) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel), std::move(scratch));
  };
  set("gather", gather<L>);
  set("index", index<L>, row_offsets_scratch<1>);
  set("index_put", index_put<L>, row_offsets_scratch<2>);
  set("index_select", index_select<L>);
  set("embedding", embedding<L>);
  set("one_hot", one_hot<L>);
  set("scatter", scatter<L, PutMode::Copy>);
  set("scatter_value", scatter<L, PutMode::Fill>);
  set("scatter_add", scatter<L, PutMode::Add>);
  set("gather_backward", gather_backward<L>);
  set("index_add", index_add<L>);
  set("embedding_backward", embedding_backward<L>);
  set("scatter_reduce", scatter_reduce<L>, scatter_reduce_scratch);
  set("as_strided_backward", as_strided_backward<L>, as_strided_backward_scratch);
}

}  // namespace index_kernels
}  // namespace mf
