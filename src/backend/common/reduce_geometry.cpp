#include "backend/common/reduce_geometry.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

namespace mf {

namespace {

struct Dim {
  int64_t size, stride, out_stride;
};

// Merges neighbours whose strides make them one dim (outer first).
std::vector<Dim> merge_dims(const std::vector<Dim>& dims) {
  std::vector<Dim> out;
  for (const Dim& d : dims) {
    if (!out.empty() && out.back().stride == d.stride * d.size && out.back().out_stride == d.out_stride * d.size) {
      out.back() = Dim{out.back().size * d.size, d.stride, d.out_stride};
      continue;
    }
    out.push_back(d);
  }
  return out;
}

ReduceGeometry geometry_of(const Shape& sizes, const Shape& strides, const Shape& dims) {
  const int64_t nd = int64_t(sizes.size());
  std::vector<bool> reduced(size_t(nd), false);
  for (int64_t d : dims) reduced[size_t(d)] = true;
  Shape out_strides(size_t(nd), 0);
  ReduceGeometry g;
  for (int64_t d = nd - 1, os = 1; d >= 0; --d) {
    if (reduced[size_t(d)]) {
      // Note [Broadcast reduced dims]: a reduced dim of stride 0 holds copies.
      if (strides[size_t(d)] == 0 && sizes[size_t(d)] > 1) g.copies *= sizes[size_t(d)];
      else g.num_reduced *= sizes[size_t(d)];
      continue;
    }
    out_strides[size_t(d)] = os;
    os *= sizes[size_t(d)];
    g.num_outputs *= sizes[size_t(d)];
  }
  std::vector<Dim> kept, red;
  for (int64_t d = 0; d < nd; ++d) {
    if (sizes[size_t(d)] == 1) continue;
    Dim dim{sizes[size_t(d)], strides[size_t(d)], out_strides[size_t(d)]};
    if (reduced[size_t(d)] && dim.stride == 0) continue;  // counted in g.copies
    (reduced[size_t(d)] ? red : kept).push_back(dim);
  }
  // Any order of the reduced dims reduces the same elements; ordering by
  // stride lets neighbours merge and puts the fastest-moving dim last.
  std::stable_sort(red.begin(), red.end(),
                   [](const Dim& a, const Dim& b) { return std::abs(a.stride) > std::abs(b.stride); });
  for (const Dim& d : merge_dims(kept)) {
    g.kept_sizes.push_back(d.size);
    g.kept_strides.push_back(d.stride);
    g.kept_out_strides.push_back(d.out_stride);
  }
  for (const Dim& d : merge_dims(red)) {
    g.red_sizes.push_back(d.size);
    g.red_strides.push_back(d.stride);
  }
  return g;
}

}  // namespace

namespace {

// A layout whose coalesced dims exceed kMaxReduceDims is reduced from a
// copy: its sizes (kept dims first, then the reduced ones), x viewed in that
// order, and the reduced dims' positions in it.
struct PermutedCopy {
  Shape sizes, strides, dims;
};

std::optional<PermutedCopy> permuted_copy(const Tensor& x, const Shape& dims, const ReduceGeometry& g) {
  if (x.numel() == 0 ||
      (int64_t(g.kept_sizes.size()) <= kMaxReduceDims && int64_t(g.red_sizes.size()) <= kMaxReduceDims))
    return std::nullopt;
  PermutedCopy c;
  Shape perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  for (int64_t d : dims) {
    c.dims.push_back(int64_t(perm.size()));
    perm.push_back(d);
  }
  for (int64_t d : perm) {
    c.sizes.push_back(x.sizes()[size_t(d)]);
    c.strides.push_back(x.strides()[size_t(d)]);
  }
  return c;
}

// The geometry of x over dims when x has elements (no copy made).
ReduceGeometry direct_geometry(const Tensor& x, const Shape& dims) {
  if (x.numel() > 0) return geometry_of(x.sizes(), x.strides(), dims);
  // No element to read, however many dims (size-0 dims do not merge, so
  // they could exceed kMaxReduceDims): one kept dim of the outputs, which
  // each reduce an empty range (or nothing is written at all).
  ReduceGeometry g;
  for (int64_t d = 0; d < x.dim(); ++d)
    (std::find(dims.begin(), dims.end(), d) != dims.end() ? g.num_reduced : g.num_outputs) *= x.size(d);
  if (g.num_outputs > 1) g.kept_sizes = {g.num_outputs}, g.kept_strides = {0}, g.kept_out_strides = {1};
  if (g.num_reduced != 1) g.red_sizes = {g.num_reduced}, g.red_strides = {1};
  return g;
}

}  // namespace

ReduceGeometry reduce_geometry(const Tensor& x, const Shape& dims, Scratch& taken, Tensor& copy,
                               void (*copy_cast)(Tensor& dst, const Tensor& src)) {
  const ReduceGeometry g = direct_geometry(x, dims);
  const std::optional<PermutedCopy> c = permuted_copy(x, dims, g);
  if (!c) return g;
  copy = taken.take(c->sizes, x.dtype());
  copy_cast(copy, make_view(x, c->sizes, c->strides, x.storage_offset()));
  return geometry_of(copy.sizes(), copy.strides(), c->dims);
}

int64_t reduce_scratch_bytes(const Tensor& x, const Shape& dims, bool partials) {
  if (!partials && x.dim() <= kMaxReduceDims) return 0;  // no copy: at most that many dims coalesce
  ScratchLayout layout("reduction");
  ReduceGeometry g = direct_geometry(x, dims);
  if (const std::optional<PermutedCopy> c = permuted_copy(x, dims, g)) {
    layout.add(c->sizes, x.dtype());
    g = geometry_of(c->sizes, contiguous_strides(c->sizes), c->dims);
  }
  if (partials && g.num_outputs > 0) {
    const ReducePlan plan = plan_reduce(g);
    if (plan.chunks > 1)
      layout.add({checked_mul(checked_mul(plan.chunks, g.num_outputs, "reduction", "partials"), kMaxReduceAccBytes,
                              "reduction", "partial bytes")},
                 DType::UInt8);
  }
  return layout.bytes();
}

int64_t reduce_lane(const ReduceGeometry& g) {
  const int64_t red_min =
      g.red_strides.empty() ? std::numeric_limits<int64_t>::max() : std::abs(g.red_strides.back());
  int64_t lane = -1;
  for (int64_t d = 0; d < int64_t(g.kept_sizes.size()); ++d) {
    const int64_t s = std::abs(g.kept_strides[size_t(d)]);
    if (s < red_min && (lane < 0 || s < std::abs(g.kept_strides[size_t(lane)]))) lane = d;
  }
  return lane;
}

ReducePlan plan_reduce(const ReduceGeometry& g) {
  constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // the rest by the grid-stride loop
  constexpr int64_t kMaxChunks = 1024;
  const int64_t n = g.num_reduced;
  ReducePlan plan;
  plan.group = reduce_lane(g) >= 0 || n < 32 ? 1 : n >= 2048 ? kReduceBlockThreads : 32;
  const int64_t groups = kReduceBlockThreads / plan.group;
  plan.blocks = std::min((g.num_outputs + groups - 1) / groups, kMaxBlocks);
  plan.chunk_len = n;
  if (plan.blocks > 0 && plan.blocks < kReduceTargetBlocks && n >= 2 * kReduceMinChunk) {
    const int64_t want = std::min({n / kReduceMinChunk, (kReduceTargetBlocks + plan.blocks - 1) / plan.blocks, kMaxChunks});
    plan.chunk_len = (n + want - 1) / want;
    plan.chunks = (n + plan.chunk_len - 1) / plan.chunk_len;
  }
  return plan;
}

}  // namespace mf
