// nonzero, masked_select and masked_select_backward over a backend's walks
// L (Note [Device index kernels] in index_kernels.h). The CPU keeps its own
// kernels (backend/cpu/kernels/mask.cpp; src/ops/mask.cpp has the schemas,
// the backward and the counting that sizes the output).
//
// Note [Device mask kernels]: shape inference has counted the true
// (non-zero) elements already (on a device with a reduction, Note
// [Data-dependent shapes] in mask.cpp). The kernel cuts the flat, row-major
// element range into chunks and runs three walks:
//   1. one thread per chunk counts its true elements;
//   2. one thread turns the counts into each chunk's first output position
//      (an exclusive scan, in place);
//   3. one thread per chunk writes its elements' results from there.
// So the output keeps row-major order without any thread waiting for
// another. Every write is checked against the output's size, so an input
// that changed after inference cannot make a kernel write out of bounds.
#pragma once

#include <algorithm>

#include "backend/common/index_kernels.h"
#include "backend/common/scratch.h"

namespace mf::mask_kernels {

using index_kernels::Operand;
using index_kernels::operand;
using index_kernels::walk_geometry;

// Elements per chunk: enough to amortise a thread, few enough chunks for
// the one-thread scan.
constexpr int64_t kMinChunk = 256;
constexpr int64_t kMaxChunks = 1 << 16;

struct ChunkPlan {
  int64_t n = 0, size = 1, count = 0;
  // The element range of the chunk whose walk offset (into the int64
  // counts or starts) is `off`.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t chunk(int64_t off) const { return off / int64_t(sizeof(int64_t)); }
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t begin(int64_t k) const { return k * size; }
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t end(int64_t k) const { return k * size + size < n ? k * size + size : n; }
};

inline ChunkPlan chunk_plan(int64_t n) {
  ChunkPlan p;
  p.n = n;
  p.count = std::clamp<int64_t>(n / kMinChunk, 1, kMaxChunks);
  p.size = (n + p.count - 1) / p.count;
  p.count = (n + p.size - 1) / p.size;
  return p;
}

template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE bool is_true(const char* p) {
  const T v = *reinterpret_cast<const T*>(p);
  if constexpr (std::is_same_v<T, bool>) return v;
  else return M::template to_acc<acc_type<T>>(v) != acc_type<T>(0);
}

// Walk 1. Operand 0: the chunk's count (int64); xs: the tested tensor.
template <typename M, typename T>
struct CountChunk {
  LoopGeometry<1> xs;
  ChunkPlan plan;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t k = plan.chunk(off[0]), end = plan.end(k);
    int64_t count = 0, o[1];
    for (int64_t i = plan.begin(k); i < end; ++i) {
      xs.offsets(i, o);
      count += is_true<M, T>(xs.data[0] + o[0]);
    }
    *reinterpret_cast<int64_t*>(data[0] + off[0]) = count;
  }
};

// Walk 2, one thread. Operand 0: the counts, which become the starts.
struct ExclusiveScan {
  int64_t count;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    int64_t* p = reinterpret_cast<int64_t*>(data[0] + off[0]);
    int64_t total = 0;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t c = p[k];
      p[k] = total;
      total += c;
    }
  }
};

// Walk 3 of nonzero. Operand 0: the chunk's start. Row r of out (rows x nd,
// int64) gets the coordinates of the r-th non-zero.
template <typename M, typename T>
struct NonzeroChunk {
  LoopGeometry<1> xs;
  ChunkPlan plan;
  int64_t* out;
  int64_t rows, nd;
  int64_t sizes[kMaxLoopDims];
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t k = plan.chunk(off[0]), end = plan.end(k);
    int64_t row = *reinterpret_cast<const int64_t*>(data[0] + off[0]), o[1];
    for (int64_t i = plan.begin(k); i < end && row < rows; ++i) {
      xs.offsets(i, o);
      if (!is_true<M, T>(xs.data[0] + o[0])) continue;
      int64_t rem = i;
      for (int64_t d = nd - 1; d >= 0; --d) {
        out[row * nd + d] = rem % sizes[d];
        rem /= sizes[d];
      }
      ++row;
    }
  }
};

// Walk 3 of masked_select: the chunk's selected elements of x (operand 0 of
// xm) into out, in order. xm: 0 x, 1 the mask.
template <typename E>
struct SelectChunk {
  LoopGeometry<2> xm;
  ChunkPlan plan;
  E* out;
  int64_t limit;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t k = plan.chunk(off[0]), end = plan.end(k);
    int64_t pos = *reinterpret_cast<const int64_t*>(data[0] + off[0]), o[2];
    for (int64_t i = plan.begin(k); i < end && pos < limit; ++i) {
      xm.offsets(i, o);
      if (*reinterpret_cast<const bool*>(xm.data[1] + o[1])) out[pos++] = *reinterpret_cast<const E*>(xm.data[0] + o[0]);
    }
  }
};

// Walk 3 of masked_select_backward: every element of y (operand 0 of ym),
// the next gradient value where the mask (operand 1) is true, else zero.
template <typename E>
struct UnselectChunk {
  LoopGeometry<2> ym;
  ChunkPlan plan;
  const E* grad;
  int64_t grad_stride, limit;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t k = plan.chunk(off[0]), end = plan.end(k);
    int64_t pos = *reinterpret_cast<const int64_t*>(data[0] + off[0]), o[2];
    for (int64_t i = plan.begin(k); i < end; ++i) {
      ym.offsets(i, o);
      E* y = reinterpret_cast<E*>(ym.data[0] + o[0]);
      if (*reinterpret_cast<const bool*>(ym.data[1] + o[1]) && pos < limit) *y = grad[grad_stride * pos++];
      else *y = E{};  // zero bits are 0 in every dtype
    }
  }
};

// Walks 1 and 2: the first output position of each chunk of t's elements
// (a device tensor of plan.count int64), and the walk over the chunks.
template <typename L>
Tensor chunk_starts(const Tensor& t, const ChunkPlan& plan, Scratch& taken, const char* op) {
  Tensor starts = taken.take({plan.count}, DType::Int64);
  const LoopGeometry<1> chunks = walk_geometry<1>({plan.count}, {operand(starts, {1})}, op);
  const LoopGeometry<1> xs = walk_geometry<1>(t.sizes(), {operand(t, t.strides())}, op);
  dispatch_dtype(t.dtype(), [&]<typename T>() {
    L::template for_each<1>(t.device(), chunks, plan.count, CountChunk<typename L::Math, T>{xs, plan});
  });
  const LoopGeometry<1> one = walk_geometry<1>({1}, {operand(starts, {1})}, op);
  L::template for_each<1>(t.device(), one, 1, ExclusiveScan{plan.count});
  return starts;
}

template <typename L>
void nonzero(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor& t = in[0];
  const int64_t rows = out[0].sizes()[0];
  if (t.numel() == 0 || rows == 0) return;
  MF_CHECK(t.dim() <= kMaxLoopDims, ValueError, "nonzero: at most ", kMaxLoopDims, " dims on ",
           device_type_name(t.device().type()), ", got ", t.dim());
  const ChunkPlan plan = chunk_plan(t.numel());
  Scratch taken(out);
  Tensor starts = chunk_starts<L>(t, plan, taken, "nonzero");
  const LoopGeometry<1> chunks = walk_geometry<1>({plan.count}, {operand(starts, {1})}, "nonzero");
  const LoopGeometry<1> xs = walk_geometry<1>(t.sizes(), {operand(t, t.strides())}, "nonzero");
  dispatch_dtype(t.dtype(), [&]<typename T>() {
    NonzeroChunk<typename L::Math, T> f{xs, plan, out[0].data<int64_t>(), rows, t.dim(), {}};
    for (int64_t d = 0; d < t.dim(); ++d) f.sizes[d] = t.sizes()[size_t(d)];
    L::template for_each<1>(t.device(), chunks, plan.count, f);
  });
}

template <typename L>
void masked_select(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &x = in[0], &mask = in[1];
  const int64_t limit = out[0].numel();
  if (x.numel() == 0 || limit == 0) return;
  const ChunkPlan plan = chunk_plan(x.numel());
  Scratch taken(out);
  Tensor starts = chunk_starts<L>(mask, plan, taken, "masked_select");
  const LoopGeometry<1> chunks = walk_geometry<1>({plan.count}, {operand(starts, {1})}, "masked_select");
  const LoopGeometry<2> xm =
      walk_geometry<2>(x.sizes(), {operand(x, x.strides()), operand(mask, mask.strides())}, "masked_select");
  index_kernels::by_itemsize(x.element_size(), [&]<typename E>() {
    L::template for_each<1>(x.device(), chunks, plan.count,
                            SelectChunk<E>{xm, plan, static_cast<E*>(out[0].data_ptr()), limit});
  });
}

template <typename L>
void masked_select_backward(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &grad = in[0], &mask = in[1];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  const ChunkPlan plan = chunk_plan(y.numel());
  Scratch taken(out);
  Tensor starts = chunk_starts<L>(mask, plan, taken, "masked_select_backward");
  const LoopGeometry<1> chunks = walk_geometry<1>({plan.count}, {operand(starts, {1})}, "masked_select_backward");
  const LoopGeometry<2> ym =
      walk_geometry<2>(y.sizes(), {operand(y, y.strides()), operand(mask, mask.strides())}, "masked_select_backward");
  const int64_t grad_stride = grad.dim() ? grad.strides()[0] : 1;
  index_kernels::by_itemsize(y.element_size(), [&]<typename E>() {
    L::template for_each<1>(y.device(), chunks, plan.count,
                            UnselectChunk<E>{ym, plan, static_cast<const E*>(grad.data_ptr()), grad_stride,
                                             grad.numel()});
  });
}

// The chunk starts' scratch for a walk over n elements (Note [Kernel
// scratch]); input 0 (nonzero, masked_select) or output 0
// (masked_select_backward) gives n.
template <bool kOfOutput>
int64_t chunk_starts_bytes(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs&) {
  const int64_t n = kOfOutput ? shape_numel(out[0].sizes) : in[0].numel();
  return ScratchLayout("chunk starts").add({n ? chunk_plan(n).count : 0}, DType::Int64).bytes();
}

template <typename L>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("nonzero", device, nonzero<L>, chunk_starts_bytes<false>);
  OpRegistry::instance().set_kernel("masked_select", device, masked_select<L>, chunk_starts_bytes<false>);
  OpRegistry::instance().set_kernel("masked_select_backward", device, masked_select_backward<L>,
                                    chunk_starts_bytes<true>);
}

}  // namespace mf::mask_kernels
