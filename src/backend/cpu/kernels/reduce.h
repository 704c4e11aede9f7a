// CPU reduction loops over strided inputs, without copying the input.
//
// Note [Strided reduction]: reducing x over a set of dims is described by a
// ReduceGeometry: the kept dims (one output element per kept index) and the
// reduced dims, each with element strides, size-1 dims dropped and adjacent
// dims merged. Two loop shapes cover every layout:
//   * reduce-over-inner: the reduced dim with the smallest stride is the
//     fastest-moving one, so each output reduces contiguous (or strided)
//     runs with several independent accumulators (vectorises, keeps ILP),
//     reading a few lines at once so that several memory streams are in
//     flight (reduce_lines);
//   * reduce-over-outer: a kept dim moves fastest (e.g. summing an (N, C)
//     tensor over N), so a block of W neighbouring outputs is accumulated row
//     by row, vectorised along the kept dim; when C is small, several
//     back-to-back rows fill one vector and are folded at the end.
// Accuracy: the reduced range is summed pairwise (split in halves down to a
// leaf block, inside which each accumulator takes a strided share of at most
// about a thousand elements), so float32 sums of millions of elements stay
// within ~1e-7 relative of the exact result. Work is split over outputs when
// there are enough of them, otherwise the reduced range is cut into fixed
// chunks whose partial results are combined pairwise. Every choice depends on sizes only, never on
// the thread count, so results are reproducible on any number of threads.
//
// The reduction ops are the shared ones of backend/common/reduce_ops.h
// (Note [Shared reduction ops]).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <limits>
#include <memory>
#include <vector>

#include "backend/common/reduce_geometry.h"
#include "backend/common/reduce_ops.h"
#include "backend/cpu/kernels/loops.h"
#include "meshflow/parallel.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

// Walks a linear index over (sizes, strides), outermost first, keeping the
// element offset current without a division per step.
struct IndexWalker {
  int64_t nd = 0;
  std::array<int64_t, kMaxReduceDims> sizes{}, strides{}, index{};
  int64_t offset = 0;

  IndexWalker() = default;
  IndexWalker(const Shape& sz, const Shape& st) : nd(int64_t(sz.size())) {
    for (int64_t d = 0; d < nd; ++d) sizes[size_t(d)] = sz[size_t(d)], strides[size_t(d)] = st[size_t(d)];
  }
  void seek(int64_t linear) {
    offset = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      index[size_t(d)] = linear % sizes[size_t(d)];
      linear /= sizes[size_t(d)];
      offset += index[size_t(d)] * strides[size_t(d)];
    }
  }
  void next() {
    for (int64_t d = nd - 1; d >= 0; --d) {
      offset += strides[size_t(d)];
      if (++index[size_t(d)] < sizes[size_t(d)]) return;
      offset -= sizes[size_t(d)] * strides[size_t(d)];
      index[size_t(d)] = 0;
    }
  }
};

// A walker over the kept dims other than `lane`, in input (or output) strides.
IndexWalker kept_walker_without(const ReduceGeometry& g, int64_t lane, bool output_strides);

namespace reduce_impl {
// Pairwise leaves: up to kLeafElems elements of contiguous runs (each of the
// 64 float accumulators of reduce_line's streams takes a strided share), at most
// kLeafRuns short runs, or rows of kRowLeafElems elements in
// reduce-over-outer (64 rows per lane).
inline constexpr int64_t kLeafElems = 1 << 16;
inline constexpr int64_t kLeafRuns = 64;
inline constexpr int64_t kRowLeafElems = 1 << 13;
inline constexpr int64_t kSplitChunkElems = 1 << 16;  // least work per chunk of a split range
inline constexpr int64_t kMaxChunks = 64;
inline constexpr int64_t kMinUnits = 16;  // fewer work units than this: split the reduced range

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace reduce_impl

// Accumulators per line: a 64-byte vector of them.
template <typename Acc>
inline constexpr int64_t kLineLanes = 64 / sizeof(Acc) > 8 ? 64 / sizeof(Acc) : 8;
// Lines reduce_lines walks in lock-step.
inline constexpr int64_t kStreams = 4;

// Reduces kStreams lines of n >= kLineLanes<Acc> elements each (line j:
// lines[j][0], lines[j][s], ...) in lock-step: several sequential streams
// keep more cache misses in flight than one (measured 1.6x the bandwidth of
// a single stream on a 64 MB sum), and each line's adds are independent.
// result[j] = reduction of line j, out[j] its output index.
template <typename T, typename Op>
void reduce_lines(const T* const* lines, int64_t n, int64_t s, const Op& op, const int64_t* out,
                  typename Op::Acc* result) {
  using Acc = typename Op::Acc;
  constexpr int64_t L = kLineLanes<Acc>;
  Acc a[kStreams][L];
  for (auto& lanes : a)
    for (int64_t k = 0; k < L; ++k) lanes[k] = op.identity();
  // `omp simd` keeps GCC from unrolling the lane loops into scalars before
  // vectorising them (selects, as in max, otherwise stay scalar).
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    for (int64_t j = 0; j < kStreams; ++j) {
      const T* q = lines[j] + i * s;
      if (s == 1) {
#pragma omp simd
        for (int64_t k = 0; k < L; ++k) a[j][k] = op.combine(a[j][k], op.map(q[k], out[j]));
      } else {
#pragma omp simd
        for (int64_t k = 0; k < L; ++k) a[j][k] = op.combine(a[j][k], op.map(q[k * s], out[j]));
      }
    }
  }
  for (int64_t j = 0; j < kStreams; ++j) {
    for (int64_t r = i; r < n; ++r) a[j][0] = op.combine(a[j][0], op.map(lines[j][r * s], out[j]));
    for (int64_t width = L / 2; width > 0; width /= 2)
      for (int64_t k = 0; k < width; ++k) a[j][k] = op.combine(a[j][k], a[j][k + width]);
    result[j] = a[j][0];
  }
}

// Reduction of the n elements p[0], p[s], ..., p[(n-1)s] with independent
// accumulators; a long line is read as kStreams sub-lines (reduce_lines).
// Short lines use one vector of accumulators, or none.
template <typename T, typename Op>
typename Op::Acc reduce_line(const T* p, int64_t n, int64_t s, const Op& op, int64_t out) {
  using Acc = typename Op::Acc;
  constexpr int64_t L = kLineLanes<Acc>;
  if (n >= kStreams * 4096) {
    const int64_t len = n / kStreams;
    const T* lines[kStreams];
    int64_t outs[kStreams];
    Acc parts[kStreams];
    for (int64_t j = 0; j < kStreams; ++j) lines[j] = p + j * len * s, outs[j] = out;
    reduce_lines(lines, len, s, op, outs, parts);
    Acc acc = op.combine(op.combine(parts[0], parts[1]), op.combine(parts[2], parts[3]));
    for (int64_t i = kStreams * len; i < n; ++i) acc = op.combine(acc, op.map(p[i * s], out));
    return acc;
  }
  Acc acc = op.identity();
  int64_t i = 0;
  if (n >= L) {
    Acc a[L];
    for (int64_t k = 0; k < L; ++k) a[k] = op.identity();
    for (; i + L <= n; i += L) {
#pragma omp simd
      for (int64_t k = 0; k < L; ++k) a[k] = op.combine(a[k], op.map(p[(i + k) * s], out));
    }
    for (int64_t width = L / 2; width > 0; width /= 2)
      for (int64_t k = 0; k < width; ++k) a[k] = op.combine(a[k], a[k + width]);
    acc = a[0];
  }
  for (; i < n; ++i) acc = op.combine(acc, op.map(p[i * s], out));
  return acc;
}

template <typename T, typename Op>
class StridedReducer {
 public:
  using Acc = typename Op::Acc;
  // Widest block of lanes reduce-over-outer accumulates at once: whole rows
  // up to 16 KiB, so rows are read sequentially (narrow column blocks would
  // touch a new page on every row).
  static constexpr int64_t kMaxBlock = std::max<int64_t>(16, int64_t(16384 / sizeof(Acc)));
  // Lanes of one vector step when folding short rows (see fold_rows).
  static constexpr int64_t kFoldLanes = std::max<int64_t>(16, int64_t(512 / sizeof(Acc)));

  StridedReducer(const ReduceGeometry& g, const T* x, const Op& op) : g_(g), x_(x), op_(op) {
    const int64_t lane = reduce_lane(g);
    outer_mode_ = lane >= 0;
    if (outer_mode_) {
      lane_size_ = g.kept_sizes[size_t(lane)];
      lane_stride_ = g.kept_strides[size_t(lane)];
      lane_out_stride_ = g.kept_out_strides[size_t(lane)];
      other_in_ = kept_walker_without(g, lane, false);
      other_out_ = kept_walker_without(g, lane, true);
      block_ = std::clamp<int64_t>(lane_size_, 1, kMaxBlock);
      blocks_per_row_ = reduce_impl::ceil_div(lane_size_, block_);
      num_units_ = (lane_size_ == 0 ? 0 : g.num_outputs / lane_size_) * blocks_per_row_;
      rows_ = IndexWalker(g.red_sizes, g.red_strides);
      row_leaf_ = std::max<int64_t>(64, reduce_impl::kRowLeafElems / block_);
      // A few contiguous lanes in back-to-back rows (an (N, C) tensor with
      // small C summed over N): fold several rows into one vector of lanes.
      if (lane_stride_ == 1 && 2 * lane_size_ <= kFoldLanes && rows_.nd == 1 && rows_.strides[0] == lane_size_) {
        rows_per_fold_ = kFoldLanes / lane_size_;
        row_leaf_ = std::max<int64_t>(rows_per_fold_, reduce_impl::kRowLeafElems / lane_size_);
        for (int64_t k = 0; k < kFoldLanes; ++k) lane_of_[size_t(k)] = (k % lane_size_) * lane_out_stride_;
      }
    } else {
      kept_ = IndexWalker(g.kept_sizes, g.kept_strides);
      num_units_ = g.num_outputs;
      if (g.red_sizes.empty()) {
        run_size_ = 1, run_stride_ = 1;
      } else {
        run_size_ = g.red_sizes.back();
        run_stride_ = g.red_strides.back();
        Shape sz(g.red_sizes.begin(), g.red_sizes.end() - 1), st(g.red_strides.begin(), g.red_strides.end() - 1);
        runs_ = IndexWalker(sz, st);
      }
      leaf_ = runs_.nd == 0 ? reduce_impl::kLeafElems
                            : std::clamp(run_size_ * reduce_impl::kLeafRuns, int64_t(1), reduce_impl::kLeafElems);
    }
  }

  // Calls store(o, acc) once for every output o.
  template <typename Store>
  void run(const Store& store) const {
    using namespace reduce_impl;
    const int64_t R = g_.num_reduced;
    if (g_.num_outputs == 0) return;
    if (num_units_ < kMinUnits && g_.num_outputs * R >= 2 * kSplitChunkElems) {
      int64_t rows_per_chunk = std::max(ceil_div(kSplitChunkElems, g_.num_outputs), ceil_div(R, kMaxChunks));
      rows_per_chunk = ceil_div(rows_per_chunk, leaf_rows()) * leaf_rows();
      const int64_t chunks = ceil_div(R, rows_per_chunk);
      if (chunks >= 2) {
        run_split(store, rows_per_chunk, chunks);
        return;
      }
    }
    const int64_t unit_elems = std::max<int64_t>(1, R * (outer_mode_ ? block_ : 1));
    const int64_t grain = std::max<int64_t>(1, kGrainSize / unit_elems);
    parallel_for(0, num_units_, grain, [&](int64_t b, int64_t e) { reduce_units(b, e, 0, R, store); });
  }

 private:
  int64_t leaf_rows() const { return outer_mode_ ? row_leaf_ : leaf_; }

  // Reduces work units [b, e) over reduced indices [r0, r1).
  template <typename Store>
  void reduce_units(int64_t b, int64_t e, int64_t r0, int64_t r1, const Store& store) const {
    if (!outer_mode_) {
      IndexWalker kept = kept_;
      kept.seek(b);
      if (runs_.nd == 0 && r1 - r0 <= leaf_) {
        // One short run per output: no pairwise split needed; runs of
        // kStreams outputs at a time are read together (reduce_lines).
        const T* first = x_ + r0 * run_stride_;
        const int64_t n = r1 - r0;
        int64_t o = b;
        if (n >= kLineLanes<Acc>) {
          const T* lines[kStreams];
          int64_t outs[kStreams];
          Acc results[kStreams];
          for (; o + kStreams <= e; o += kStreams) {
            for (int64_t j = 0; j < kStreams; ++j, kept.next()) lines[j] = first + kept.offset, outs[j] = o + j;
            reduce_lines(lines, n, run_stride_, op_, outs, results);
            for (int64_t j = 0; j < kStreams; ++j) store(o + j, results[j]);
          }
        }
        for (; o < e; ++o, kept.next()) store(o, reduce_line(first + kept.offset, n, run_stride_, op_, o));
        return;
      }
      for (int64_t o = b; o < e; ++o, kept.next()) store(o, reduce_range(x_ + kept.offset, r0, r1, o));
      return;
    }
    IndexWalker in = other_in_, out = other_out_;
    int64_t k = b / blocks_per_row_;
    in.seek(k);
    out.seek(k);
    // acc, then one buffer per level of reduce_rows' pairwise split.
    int64_t levels = 1;
    for (int64_t rows = r1 - r0; rows > row_leaf_; rows = reduce_impl::ceil_div(rows, 2)) ++levels;
    std::unique_ptr<Acc[]> scratch(new Acc[size_t(block_ * (levels + 1))]);
    Acc* acc = scratch.get();
    for (int64_t u = b; u < e; ++u) {
      if (u / blocks_per_row_ != k) {
        k = u / blocks_per_row_;
        in.next();
        out.next();
      }
      const int64_t first = (u % blocks_per_row_) * block_;
      const int64_t w = std::min(block_, lane_size_ - first);
      const int64_t obase = out.offset + first * lane_out_stride_;
      reduce_rows(x_ + in.offset + first * lane_stride_, obase, w, r0, r1, acc, acc + block_);
      for (int64_t j = 0; j < w; ++j) store(obase + j * lane_out_stride_, acc[j]);
    }
  }

  // Few outputs, long reduction: fixed chunks of the reduced range in
  // parallel, partials combined pairwise.
  template <typename Store>
  void run_split(const Store& store, int64_t rows_per_chunk, int64_t chunks) const {
    const int64_t n_out = g_.num_outputs;
    // (not std::vector: Acc may be bool)
    std::unique_ptr<Acc[]> partial(new Acc[size_t(chunks * n_out)]);
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const int64_t r0 = c * rows_per_chunk, r1 = std::min(g_.num_reduced, r0 + rows_per_chunk);
        Acc* slot = partial.get() + c * n_out;
        reduce_units(0, num_units_, r0, r1, [&](int64_t o, Acc a) { slot[o] = a; });
      }
    });
    for (int64_t o = 0; o < n_out; ++o) store(o, combine_chunks(partial.get(), n_out, o, 0, chunks));
  }

  Acc combine_chunks(const Acc* partial, int64_t n_out, int64_t o, int64_t c0, int64_t c1) const {
    if (c1 - c0 == 1) return partial[c0 * n_out + o];
    const int64_t mid = c0 + (c1 - c0) / 2;
    return op_.combine(combine_chunks(partial, n_out, o, c0, mid), combine_chunks(partial, n_out, o, mid, c1));
  }

  // --- reduce-over-inner -----------------------------------------------------
  Acc reduce_range(const T* base, int64_t r0, int64_t r1, int64_t o) const {
    if (r1 - r0 <= leaf_) return reduce_leaf(base, r0, r1, o);
    const int64_t mid = r0 + (reduce_impl::ceil_div(r1 - r0, leaf_) / 2) * leaf_;
    return op_.combine(reduce_range(base, r0, mid, o), reduce_range(base, mid, r1, o));
  }

  Acc reduce_leaf(const T* base, int64_t r0, int64_t r1, int64_t o) const {
    if (r0 >= r1) return op_.identity();
    if (runs_.nd == 0) return reduce_run(base + r0 * run_stride_, r1 - r0, o);
    IndexWalker runs = runs_;
    runs.seek(r0 / run_size_);
    int64_t j = r0 % run_size_;
    Acc acc = op_.identity();
    for (int64_t r = r0; r < r1;) {
      const int64_t len = std::min(run_size_ - j, r1 - r);
      acc = op_.combine(acc, reduce_run(base + runs.offset + j * run_stride_, len, o));
      r += len;
      j = 0;
      runs.next();
    }
    return acc;
  }

  Acc reduce_run(const T* p, int64_t n, int64_t o) const { return reduce_line(p, n, run_stride_, op_, o); }

  // --- reduce-over-outer -----------------------------------------------------
  // acc[j] = reduction of rows [r0, r1) at lane j < w; `scratch` holds a
  // block of lanes per remaining level of the pairwise split.
  void reduce_rows(const T* base, int64_t obase, int64_t w, int64_t r0, int64_t r1, Acc* acc, Acc* scratch) const {
    if (r1 - r0 > row_leaf_) {
      const int64_t mid = r0 + (reduce_impl::ceil_div(r1 - r0, row_leaf_) / 2) * row_leaf_;
      reduce_rows(base, obase, w, r0, mid, acc, scratch);
      Acc* right = scratch;
      reduce_rows(base, obase, w, mid, r1, right, scratch + block_);
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) acc[j] = op_.combine(acc[j], right[j]);
      return;
    }
    for (int64_t j = 0; j < w; ++j) acc[j] = op_.identity();
    if (r0 >= r1) return;
    if (rows_per_fold_ > 0) {
      fold_rows(base + r0 * lane_size_, obase, r1 - r0, acc);
      return;
    }
    IndexWalker rows = rows_;
    rows.seek(r0);
    const int64_t ls = lane_stride_, los = lane_out_stride_;
    for (int64_t r = r0; r < r1; ++r, rows.next()) {
      const T* p = base + rows.offset;
      if (ls == 1) {
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) acc[j] = op_.combine(acc[j], op_.map(p[j], obase + j * los));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) acc[j] = op_.combine(acc[j], op_.map(p[j * ls], obase + j * los));
      }
    }
  }

  // reduce_rows for rows_per_fold_ > 0: `rows` back-to-back rows of
  // lane_size_ lanes at p, rows_per_fold_ rows per vector step.
  void fold_rows(const T* p, int64_t obase, int64_t rows, Acc* acc) const {
    const int64_t w = lane_size_, width = rows_per_fold_ * w;
    std::array<Acc, size_t(kFoldLanes)> wide;
    for (int64_t k = 0; k < width; ++k) wide[size_t(k)] = op_.identity();
    int64_t r = 0;
    for (; r + rows_per_fold_ <= rows; r += rows_per_fold_, p += width) {
#pragma omp simd
      for (int64_t k = 0; k < width; ++k)
        wide[size_t(k)] = op_.combine(wide[size_t(k)], op_.map(p[k], obase + lane_of_[size_t(k)]));
    }
    for (int64_t j = 0; j < w; ++j) {
      acc[j] = wide[size_t(j)];
      for (int64_t m = 1; m < rows_per_fold_; ++m) acc[j] = op_.combine(acc[j], wide[size_t(m * w + j)]);
    }
    for (; r < rows; ++r, p += w)
      for (int64_t j = 0; j < w; ++j) acc[j] = op_.combine(acc[j], op_.map(p[j], obase + lane_of_[size_t(j)]));
  }

  const ReduceGeometry& g_;
  const T* x_;
  const Op& op_;
  bool outer_mode_ = false;
  int64_t num_units_ = 0;
  // reduce-over-inner
  IndexWalker kept_, runs_;
  int64_t run_size_ = 1, run_stride_ = 1, leaf_ = 1;
  // reduce-over-outer
  IndexWalker other_in_, other_out_, rows_;
  int64_t lane_size_ = 0, lane_stride_ = 0, lane_out_stride_ = 0, block_ = 1, blocks_per_row_ = 1, row_leaf_ = 1;
  int64_t rows_per_fold_ = 0;                          // 0: no folding
  std::array<int64_t, size_t(kFoldLanes)> lane_of_{};  // output offset of folded lane k
};

// Reduces x (dtype T) over dims (sorted, wrapped) with op, calling
// store(o, acc) for each flat index o of the contiguous reduced output.
template <typename T, typename Op, typename Store>
void reduce(const Tensor& x, const Shape& dims, const Op& op, const Store& store, Scratch& taken) {
  const Scratch::Turn turn(taken);
  Tensor copy;
  ReduceGeometry g = reduce_geometry(x, dims, taken, copy, copy_cast);
  const T* data = static_cast<const T*>((copy.defined() ? copy : x).data_ptr());
  if (g.copies == 1) {
    StridedReducer<T, Op>(g, data, op).run(store);
    return;
  }
  using Acc = typename Op::Acc;
  StridedReducer<T, Op>(g, data, op).run([&](int64_t o, Acc a) { store(o, combine_copies(op, a, g.copies)); });
}

// Index-tracking reduction over one dim (max/min with dim, argmax, argmin):
// for each output, the first position along dim of the maximum (kMax) or
// minimum, NaN counting as the extremum, and, when `values` is given, that
// element. The dim must not be empty. Lines along the dim are scanned twice,
// both passes vectorised: the extremum, then its first position.
template <typename T, bool kMax>
void reduce_arg(const Tensor& x, int64_t dim, T* values, int64_t* indices, Scratch& taken) {
  using namespace reduce_impl;
  using A = acc_type<T>;
  const Scratch::Turn turn(taken);
  Tensor copy;
  const ReduceGeometry g = reduce_geometry(x, {dim}, taken, copy, copy_cast);
  const T* data = static_cast<const T*>((copy.defined() ? copy : x).data_ptr());
  const int64_t n = g.num_reduced, s = g.red_strides.empty() ? 0 : g.red_strides[0];
  if (g.num_outputs == 0) return;
  const reduce_ops::Extremum<HostMath, T, kMax> op;
  // v beats best strictly (ties keep the earlier element).
  auto beats = [](A v, A best) { return (kMax ? v > best : v < best) | ((v != v) & (best == best)); };
  auto same = [](A v, A best) { return (v == best) | ((v != v) & (best != best)); };
  auto put = [&](int64_t o, A v, int64_t i) {
    if (values) values[o] = T(v);
    indices[o] = i;
  };
  // The extremum of positions [i0, i1) of the line at p and its first position.
  auto scan = [&](const T* p, int64_t i0, int64_t i1, A& best, int64_t& best_i) {
    best = reduce_line(p + i0 * s, i1 - i0, s, op, 0);
    constexpr int64_t kBlock = 32;
    int64_t i = i0;
    for (; i + kBlock <= i1; i += kBlock) {
      bool found = false;
#pragma omp simd reduction(| : found)
      for (int64_t k = 0; k < kBlock; ++k) found |= same(to_acc<A>(p[(i + k) * s]), best);
      if (found) break;
    }
    while (!same(to_acc<A>(p[i * s]), best)) ++i;
    best_i = i;
  };

  const int64_t lane = reduce_lane(g);
  if (lane < 0) {
    IndexWalker kept(g.kept_sizes, g.kept_strides);
    if (g.num_outputs < kMinUnits && n >= 2 * kSplitChunkElems) {
      // Few long lines: fixed chunks of each line in parallel, then the
      // chunk winners in order.
      const int64_t chunk = std::max(kSplitChunkElems, ceil_div(n, kMaxChunks));
      const int64_t chunks = ceil_div(n, chunk);
      std::unique_ptr<A[]> best(new A[size_t(g.num_outputs * chunks)]);  // A may be bool
      std::vector<int64_t> best_i(size_t(g.num_outputs * chunks));
      std::vector<int64_t> base(size_t(g.num_outputs));
      kept.seek(0);
      for (int64_t o = 0; o < g.num_outputs; ++o, kept.next()) base[size_t(o)] = kept.offset;
      parallel_for(0, g.num_outputs * chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t u = b; u < e; ++u) {
          const int64_t o = u / chunks, c = u % chunks;
          scan(data + base[size_t(o)], c * chunk, std::min(n, (c + 1) * chunk), best[size_t(u)], best_i[size_t(u)]);
        }
      });
      for (int64_t o = 0; o < g.num_outputs; ++o) {
        int64_t w = o * chunks;
        for (int64_t u = w + 1; u < (o + 1) * chunks; ++u)
          if (beats(best[size_t(u)], best[size_t(w)])) w = u;
        put(o, best[size_t(w)], best_i[size_t(w)]);
      }
      return;
    }
    parallel_for(0, g.num_outputs, std::max<int64_t>(1, kGrainSize / n), [&](int64_t b, int64_t e) {
      IndexWalker k = kept;
      k.seek(b);
      for (int64_t o = b; o < e; ++o, k.next()) {
        A best;
        int64_t best_i;
        scan(data + k.offset, 0, n, best, best_i);
        put(o, best, best_i);
      }
    });
    return;
  }

  // Vectorise along the kept dim `lane`: a block of 64 lanes walks the dim
  // together, its best values and indices held in registers.
  const int64_t lane_size = g.kept_sizes[size_t(lane)], ls = g.kept_strides[size_t(lane)];
  const int64_t los = g.kept_out_strides[size_t(lane)];
  constexpr int64_t kArgLanes = 64;
  const int64_t W = std::min<int64_t>(lane_size, kArgLanes);
  const int64_t blocks = ceil_div(lane_size, W);
  const IndexWalker other_in = kept_walker_without(g, lane, false), other_out = kept_walker_without(g, lane, true);
  const int64_t units = g.num_outputs / lane_size * blocks;
  parallel_for(0, units, std::max<int64_t>(1, kGrainSize / (n * W)), [&](int64_t b, int64_t e) {
    IndexWalker in = other_in, out = other_out;
    in.seek(b / blocks);
    out.seek(b / blocks);
    std::array<A, kArgLanes> best;
    std::array<int64_t, kArgLanes> best_i;
    for (int64_t u = b; u < e; ++u) {
      if (u != b && u % blocks == 0) in.next(), out.next();
      const int64_t first = (u % blocks) * W, w = std::min(W, lane_size - first);
      const T* p = data + in.offset + first * ls;
      for (int64_t j = 0; j < w; ++j) best[size_t(j)] = to_acc<A>(p[j * ls]), best_i[size_t(j)] = 0;
      auto update = [&](int64_t j, int64_t i, A v) {
        const bool take = beats(v, best[size_t(j)]);
        best[size_t(j)] = take ? v : best[size_t(j)];
        best_i[size_t(j)] = take ? i : best_i[size_t(j)];
      };
      for (int64_t i = 1; i < n; ++i) {
        const T* row = p + i * s;
        if (ls == 1) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) update(j, i, to_acc<A>(row[j]));
        } else {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) update(j, i, to_acc<A>(row[j * ls]));
        }
      }
      const int64_t obase = out.offset + first * los;
      for (int64_t j = 0; j < w; ++j) put(obase + j * los, best[size_t(j)], best_i[size_t(j)]);
    }
  });
}

// The CPU's reduction loops for the shared reduction kernel table
// (backend/common/reduce_kernels.h).
struct Reducer {
  using Math = HostMath;
  static int64_t scratch_bytes(const Tensor& x, const Shape& dims) { return reduce_scratch_bytes(x, dims, false); }
  template <typename T, typename Op, typename Store>
  static void reduce(const Tensor& x, const Shape& dims, const Op& op, const Store& store, Scratch& taken) {
    cpu::reduce<T>(x, dims, op, store, taken);
  }
  template <typename T, bool kMax>
  static void reduce_arg(const Tensor& x, int64_t dim, T* values, int64_t* indices, Scratch& taken) {
    cpu::reduce_arg<T, kMax>(x, dim, values, indices, taken);
  }
  static void copy_cast(Tensor& dst, const Tensor& src) { cpu::copy_cast(dst, src); }
};

}  // namespace mf::cpu
