// The two loops of Note [Separable resampling] (the maps are
// backend/common/resample_plan.cpp's).
#include "backend/cpu/kernels/resample.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <utility>

#include "backend/cpu/kernels/dense_scratch.h"
#include "meshflow/op_def.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

// --- loops --------------------------------------------------------------------------------

// A pass's tensor as (outer, size, inner) around its resampled dim.
struct Span {
  int64_t outer = 1, inner = 1;
};

Span span_of(const Shape& sizes, size_t d) {
  Span s;
  for (size_t i = 0; i < d; ++i) s.outer *= sizes[i];
  for (size_t i = d + 1; i < sizes.size(); ++i) s.inner *= sizes[i];
  return s;
}

// What one pass computes: each output row of the resampled dim is the sum
// over its (source row, weight) pairs, rows [offsets[j], offsets[j + 1])
// of `rows` and `weights`.
template <typename A>
struct RowSums {
  std::vector<int64_t> offsets, rows;
  std::vector<A> weights;
};

// The axis' weights in A (ones for an unweighted axis).
template <typename A>
std::vector<A> weights_of(const ResampleAxis& axis) {
  if (axis.weight.empty()) return std::vector<A>(size_t(axis.out_size * axis.taps), A(1));
  return std::vector<A>(axis.weight.begin(), axis.weight.end());
}

// The forward of one axis: output j sums its taps.
template <typename A>
RowSums<A> forward_sums(const ResampleAxis& axis) {
  RowSums<A> s{.offsets = {}, .rows = axis.index, .weights = weights_of<A>(axis)};
  for (int64_t j = 0; j <= axis.out_size; ++j) s.offsets.push_back(j * axis.taps);
  return s;
}

// The adjoint of one axis as a gather: input position i sums every
// (output, weight) whose tap reads i, in output order.
template <typename A>
RowSums<A> adjoint_sums(const ResampleAxis& axis) {
  const std::vector<A> w = weights_of<A>(axis);
  RowSums<A> s;
  s.offsets.assign(size_t(axis.in_size + 1), 0);
  for (int64_t i : axis.index) ++s.offsets[size_t(i + 1)];
  for (size_t i = 0; i < size_t(axis.in_size); ++i) s.offsets[i + 1] += s.offsets[i];
  s.rows.resize(axis.index.size());
  s.weights.resize(axis.index.size());
  std::vector<int64_t> fill(s.offsets.begin(), s.offsets.end() - 1);
  for (int64_t j = 0; j < axis.out_size; ++j)
    for (int64_t k = 0; k < axis.taps; ++k) {
      const size_t tap = size_t(j * axis.taps + k), at = size_t(fill[size_t(axis.index[tap])]++);
      s.rows[at] = j;
      s.weights[at] = w[tap];
    }
  return s;
}

// One pass: dst (outer, n, inner) from src (outer, m, inner), row j of the
// resampled dim the sum of `sums`' pairs for j. Sums start from the first
// product (not from 0), so a single tap of weight 1 gives its input
// exactly (-0.0 included); a row without pairs is 0. Rows run in parallel;
// the inner dim is the vectorised loop.
template <typename A, typename S, typename D>
void weighted_rows(const S* src, D* dst, Span span, int64_t m, const RowSums<A>& sums) {
  const int64_t n = int64_t(sums.offsets.size()) - 1, inner = span.inner;
  if (inner == 1) {  // the last dim: a gather within each row
    const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1));
    parallel_for(0, span.outer, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const S* s = src + o * m;
        D* d = dst + o * n;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t first = sums.offsets[size_t(j)], last = sums.offsets[size_t(j + 1)];
          A sum = first < last ? sums.weights[size_t(first)] * A(s[sums.rows[size_t(first)]]) : A(0);
          for (int64_t t = first + 1; t < last; ++t) sum += sums.weights[size_t(t)] * A(s[sums.rows[size_t(t)]]);
          d[j] = D(sum);
        }
      }
    });
    return;
  }
  parallel_for(0, span.outer * n, std::max<int64_t>(1, kGrainSize / inner), [&](int64_t lo, int64_t hi) {
    std::vector<A> row(std::is_same_v<D, A> ? 0 : static_cast<size_t>(inner));  // D's own row when it is A
    for (int64_t r = lo; r < hi; ++r) {
      const S* s = src + (r / n) * m * inner;
      const int64_t j = r % n, first = sums.offsets[size_t(j)], last = sums.offsets[size_t(j + 1)];
      D* d = dst + r * inner;
      A* acc;
      if constexpr (std::is_same_v<D, A>) acc = d;
      else acc = row.data();
      if (first == last) std::fill(acc, acc + inner, A(0));
      for (int64_t t = first; t < last; ++t) {
        const S* __restrict line = s + sums.rows[size_t(t)] * inner;
        const A w = sums.weights[size_t(t)];
        if (t == first) {
          for (int64_t i = 0; i < inner; ++i) acc[i] = w * A(line[i]);
        } else {
          for (int64_t i = 0; i < inner; ++i) acc[i] += w * A(line[i]);
        }
      }
      if constexpr (!std::is_same_v<D, A>)
        for (int64_t i = 0; i < inner; ++i) d[i] = D(acc[i]);
    }
  });
}

template <typename T>
void gather(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes) {
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  const size_t lead = size_t(x.dim()) - axes.size();
  int64_t planes = 1, in_plane = 1;
  for (size_t d = 0; d < lead; ++d) planes *= x.size(int64_t(d));
  std::vector<int64_t> in_stride(axes.size());
  for (size_t a = axes.size(); a-- > 0;) {
    in_stride[a] = in_plane;
    in_plane *= axes[a].in_size;
  }
  const int64_t width = axes.back().out_size, rows = y.numel() / planes / width;
  const int64_t* index = axes.back().index.data();
  parallel_for(0, planes * rows, std::max<int64_t>(1, kGrainSize / width), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      // The input offset of output row r % rows through the dims but the last.
      int64_t offset = (r / rows) * in_plane, row = r % rows;
      for (size_t a = axes.size() - 1; a-- > 0;) {
        offset += axes[a].index[size_t(row % axes[a].out_size)] * in_stride[a];
        row /= axes[a].out_size;
      }
      const T* src = xp + offset;
      T* dst = yp + r * width;
      for (int64_t j = 0; j < width; ++j) dst[j] = src[index[j]];
    }
  });
}

// The elements of the two buffers resample_passes ping-pongs between: pass
// s writes buffer s % 2 but for the last pass when it writes y directly
// (last_into_y). x: the passes' input shape.
std::array<int64_t, 2> pass_buffers(const std::vector<ResampleAxis>& axes, Shape sizes, bool adjoint,
                                    bool last_into_y) {
  std::array<int64_t, 2> n{0, 0};
  const size_t lead = sizes.size() - axes.size();
  for (size_t step = 0; step < axes.size(); ++step) {
    const ResampleAxis& axis = axes[adjoint ? step : axes.size() - 1 - step];
    const size_t d = lead + size_t(&axis - axes.data());
    sizes[d] = adjoint ? axis.in_size : axis.out_size;
    if (step + 1 == axes.size() && last_into_y) continue;
    n[step % 2] = std::max(n[step % 2], shape_numel(sizes));
  }
  return n;
}

// The weighted forward (adjoint false) or the backward (adjoint true),
// one pass per resampled dim, ping-ponging between two A buffers (pieces of
// the kernel's scratch); the last pass writes y (through a final conversion
// unless T is A). The forward takes the last dim first, as PyTorch nests
// its sums (y = sum_d w_d sum_h w_h sum_w w_w x, so each output gets
// PyTorch's operations in its order); the adjoint takes each dim's
// transpose in the other order. x: contiguous.
template <typename T>
void resample_passes(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes, bool adjoint,
                     Scratch& taken) {
  using A = acc_type<T>;
  constexpr DType kAcc = std::is_same_v<A, double> ? DType::Float64 : DType::Float32;
  const size_t lead = size_t(x.dim()) - axes.size();
  Shape sizes = x.sizes();
  const std::array<int64_t, 2> buffer_sizes = pass_buffers(axes, sizes, adjoint, std::is_same_v<T, A>);
  // Uninitialised: every pass writes its whole output.
  const Tensor buffers[2] = {taken.take({buffer_sizes[0]}, kAcc), taken.take({buffer_sizes[1]}, kAcc)};
  const A* current = nullptr;
  for (size_t step = 0; step < axes.size(); ++step) {
    const ResampleAxis& axis = axes[adjoint ? step : axes.size() - 1 - step];
    const size_t d = lead + size_t(&axis - axes.data());
    const RowSums<A> sums = adjoint ? adjoint_sums<A>(axis) : forward_sums<A>(axis);
    const Span span = span_of(sizes, d);
    const int64_t m = sizes[d];
    sizes[d] = adjoint ? axis.in_size : axis.out_size;
    A* dst = nullptr;
    if constexpr (std::is_same_v<T, A>) {
      if (step + 1 == axes.size()) dst = y.data<T>();
    }
    if (dst == nullptr) dst = static_cast<A*>(buffers[step % 2].data_ptr());
    if (step == 0) weighted_rows<A>(x.data<T>(), dst, span, m, sums);
    else weighted_rows<A>(current, dst, span, m, sums);
    current = dst;
  }
  if constexpr (!std::is_same_v<T, A>) {
    T* yp = y.data<T>();
    parallel_for(0, y.numel(), kGrainSize, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) yp[i] = T(current[i]);
    });
  }
}

}  // namespace

bool is_weighted(const std::vector<ResampleAxis>& axes) {
  return std::any_of(axes.begin(), axes.end(), [](const auto& a) { return !a.weight.empty(); });
}

void resample_forward(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes, Scratch& taken) {
  if (y.numel() == 0) return;
  if (!is_weighted(axes)) {
    dispatch_dtype(y.dtype(), [&]<typename T>() { gather<T>(x, y, axes); });
    return;
  }
  dispatch_floating(y.dtype(), "interpolate", [&]<typename T>() { resample_passes<T>(x, y, axes, false, taken); });
}

void resample_backward(const Tensor& grad_y, Tensor& grad_x, const std::vector<ResampleAxis>& axes,
                       Scratch& taken) {
  if (grad_x.numel() == 0) return;
  dispatch_floating(grad_x.dtype(), "resample backward",
                    [&]<typename T>() { resample_passes<T>(grad_y, grad_x, axes, true, taken); });
}

int64_t resample_scratch(const std::vector<ResampleAxis>& axes, const Tensor& x, DType dtype, bool adjoint) {
  ScratchLayout layout("resample");
  add_dense(layout, x);
  if (adjoint || is_weighted(axes)) {
    const DType acc = dtype == DType::Float64 ? DType::Float64 : DType::Float32;
    const bool last_into_y = dtype == DType::Float64 || dtype == DType::Float32;
    for (int64_t n : pass_buffers(axes, x.sizes(), adjoint, last_into_y)) layout.add({n}, acc);
  }
  return layout.bytes();
}

namespace {

// The kernels of resampling op `op` (upsample_*, *_pad) and of its
// _backward, with the maps of their attrs (resample_plan::op_axes, defined
// with the ops in src/ops/resample.cpp).
// Their scratch (Note [Kernel scratch]): a copy of a non-contiguous input,
// then the passes' two buffers.
KernelFn forward_kernel(const std::string& op) {
  return [op](const TensorList& in, TensorList& out, const Attrs& a) {
    if (out[0].numel() == 0) return;  // an empty batch: no maps (their sizes may be huge)
    Scratch taken(out);
    const Tensor x = dense(in[0], taken);
    resample_forward(x, out[0], resample_plan::op_axes(op, in, out, a), taken);
  };
}

KernelFn backward_kernel(const std::string& op) {
  return [op](const TensorList& in, TensorList& out, const Attrs& a) {
    if (out[0].numel() == 0) return;
    Scratch taken(out);
    const Tensor grad_y = dense(in[0], taken);
    resample_backward(grad_y, out[0], resample_plan::op_axes(op, in, out, a), taken);
  };
}

ScratchFn scratch_of(const std::string& op, bool adjoint) {
  return [op, adjoint](const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& a) -> int64_t {
    if (shape_numel(out[0].sizes) == 0) return 0;
    const TensorList outputs{make_meta(out[0].sizes, out[0].dtype, out[0].device)};
    return resample_scratch(resample_plan::op_axes(op, in, outputs, a), in[0], out[0].dtype, adjoint);
  };
}

[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string op : {"upsample_nearest", "upsample_nearest_exact", "upsample_linear", "upsample_bicubic2d",
                               "reflection_pad", "replication_pad", "circular_pad"}) {
    OpRegistry::instance().set_kernel(op, DeviceType::CPU, forward_kernel(op), scratch_of(op, false));
    OpRegistry::instance().set_kernel(op + "_backward", DeviceType::CPU, backward_kernel(op + "_backward"),
                                      scratch_of(op + "_backward", true));
  }
  return true;
}();

}  // namespace
}  // namespace mf::cpu
