// The geometry of a reduction, shared by every backend's reduction loops
// (Note [Strided reduction] in backend/cpu/kernels/reduce.h, and Note
// [Device reductions] below for a device's one kernel shape).
#pragma once

#include <cstdint>

#include "backend/common/scratch.h"
#include "meshflow/host_device.h"
#include "meshflow/tensor.h"

namespace mf {

// Most dims a coalesced geometry may keep; deeper layouts are permuted and
// copied first (reduce_geometry does it).
inline constexpr int64_t kMaxReduceDims = 12;

struct ReduceGeometry {
  // Kept dims in output order (outermost first); out_strides index the
  // contiguous output.
  Shape kept_sizes, kept_strides, kept_out_strides;
  // Reduced dims ordered by decreasing stride (the last moves fastest).
  Shape red_sizes, red_strides;
  int64_t num_outputs = 1;
  int64_t num_reduced = 1;
  // Note [Broadcast reduced dims]: reduced dims of stride 0 (an expanded
  // view) are left out of red_sizes: each output is the reduction of the
  // other dims' elements combined with itself `copies` times, by repeated
  // doubling (log2(copies) combines). A sum over an expanded dim of 2^62
  // elements thus takes as long as one over a single element.
  int64_t copies = 1;
};

// op.combine of `copies` copies of a, by doubling; identity for none.
template <typename Op>
MF_HOST_DEVICE typename Op::Acc combine_copies(const Op& op, typename Op::Acc a, int64_t copies) {
  auto result = op.identity();
  while (copies > 0) {
    if (copies & 1) result = op.combine(result, a);
    copies >>= 1;
    if (copies > 0) a = op.combine(a, a);
  }
  return result;
}

// The geometry of reducing x over dims (sorted, wrapped); reduced dims are
// sorted by stride. A layout that needs more than kMaxReduceDims coalesced
// dims (pathological ones only) is first copied, kept dims first, into
// `copy` (taken from `taken`) by the backend's `copy_cast`, and the
// geometry then describes `copy`.
ReduceGeometry reduce_geometry(const Tensor& x, const Shape& dims, Scratch& taken, Tensor& copy,
                               void (*copy_cast)(Tensor& dst, const Tensor& src));

// Note [Reduction scratch]
// A reduction's working memory comes from its kernel's scratch (Note
// [Kernel scratch] in meshflow/op_def.h): the copy reduce_geometry makes of
// a pathological layout and, on a device, the partial results of a
// reduction cut into chunks (Note [Device reductions]), kMaxReduceAccBytes
// per partial whatever the op's accumulator. Every reducer R gives
// R::scratch_bytes(x, dims), the bytes one reduction of x (its layout: no
// data is read) over dims takes, and its reduce and reduce_arg take them
// from the Scratch they are handed and rewind it when they return: a
// kernel's reductions run one after another (on a device, in one stream)
// and reuse the same bytes, so the kernel's ScratchFn asks for its own
// pieces first and then for the largest of its reductions' shares.
inline constexpr int64_t kMaxReduceAccBytes = 16;
// The bytes one reduction of x over dims takes: the copy, and the chunks'
// partials where `partials` (a device's reducers).
int64_t reduce_scratch_bytes(const Tensor& x, const Shape& dims, bool partials);

// The kept dim to vectorise or spread threads along (reduce-over-outer): the one with the
// smallest stride when it is smaller than every reduced stride; -1 when
// the fastest-moving dim is reduced (reduce-over-inner).
int64_t reduce_lane(const ReduceGeometry& g);

// Note [Device reductions]
// A device reduces with one kernel shape, planned from the sizes only (so a
// result never depends on the device it ran on): blocks of
// kReduceBlockThreads threads, `group` threads per output.
//   * group 1 where a kept dim moves fastest (reduce-over-outer): neighbouring
//     threads reduce neighbouring outputs, so their reads coalesce; also where
//     each output reduces fewer than 32 elements;
//   * a warp (32) per output where the reduced dim moves fastest, or the whole
//     block (256) when an output reduces 2048 elements or more.
// Thread `lane` of a group folds elements r0 + lane, r0 + lane + group, ...
// of its output's range [r0, r1); the group's partial results are then
// combined as a tree (lane l takes l + s for s = group/2, ..., 1).
// With too few outputs to fill kReduceTargetBlocks blocks, the reduced range
// is cut into `chunks` of chunk_len elements (at least kReduceMinChunk each),
// each reduced by its own blocks into a buffer of partials, which a second
// pass folds in chunk order for each output.
inline constexpr int kReduceBlockThreads = 256;
inline constexpr int64_t kReduceTargetBlocks = 1024;
inline constexpr int64_t kReduceMinChunk = 8192;

struct ReducePlan {
  int group = 1;
  int64_t blocks = 0;  // along the outputs (a grid-stride loop covers the rest)
  int64_t chunks = 1, chunk_len = 0;
};
ReducePlan plan_reduce(const ReduceGeometry& g);

// A ReduceGeometry in fixed arrays, for a device kernel: the element offset
// of output o's first element, and of the r-th reduced element from it.
struct ReduceIndexer {
  int32_t kept_dims = 0, red_dims = 0;
  int64_t kept_sizes[kMaxReduceDims] = {}, kept_strides[kMaxReduceDims] = {};
  int64_t red_sizes[kMaxReduceDims] = {}, red_strides[kMaxReduceDims] = {};

  explicit ReduceIndexer(const ReduceGeometry& g) {
    kept_dims = int32_t(g.kept_sizes.size());
    red_dims = int32_t(g.red_sizes.size());
    for (int32_t d = 0; d < kept_dims; ++d) kept_sizes[d] = g.kept_sizes[size_t(d)], kept_strides[d] = g.kept_strides[size_t(d)];
    for (int32_t d = 0; d < red_dims; ++d) red_sizes[d] = g.red_sizes[size_t(d)], red_strides[d] = g.red_strides[size_t(d)];
  }
  // Kept dims are in output order and the output is contiguous, so the flat
  // output index walks them row-major.
  MF_HOST_DEVICE int64_t input_base(int64_t o) const {
    int64_t offset = 0;
    for (int32_t d = kept_dims - 1; d >= 0; --d) {
      offset += o % kept_sizes[d] * kept_strides[d];
      o /= kept_sizes[d];
    }
    return offset;
  }
  MF_HOST_DEVICE int64_t reduced_offset(int64_t r) const {
    if (red_dims == 1) return r * red_strides[0];
    int64_t offset = 0;
    for (int32_t d = red_dims - 1; d >= 0; --d) {
      offset += r % red_sizes[d] * red_strides[d];
      r /= red_sizes[d];
    }
    return offset;
  }
};

}  // namespace mf
