// Note [Device resampling]
// The resampling ops (interpolate's upsample_* and F.pad's reflect,
// replicate and circular modes, forward and backward) over a backend's
// walks L, from the maps of resample_plan.h. Each resampled dim is one pass,
// as in Note [Separable resampling]: output position j of the pass's dim is
//   sum over k in [start[j], start[j + 1]) of weight[k] * in[index[k]],
// a pull that reads the previous pass (the input for the first) and writes
// the next (the output for the last). Forward passes run the last dim
// first with the maps as they are (taps entries per position); backward
// passes run the first dim first with each map transposed on the host
// (input position i collects the outputs that read it), so a backward is a
// pull too: no atomics, and sums in a fixed order. Passes between the first
// and the last keep float values in acc_type<T>. Maps without weights
// (nearest modes, pads) copy elements in the forward direction, for every
// dtype. The tables go to the device through the backend's copy.
#pragma once

#include <numeric>

#include "backend/common/index_kernels.h"
#include "backend/common/resample_plan.h"
#include "backend/common/scratch.h"
#include "meshflow/backend.h"

namespace mf::resample_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;
using resample_plan::ResampleAxis;

// A pass's map in rows: position j reads entries [start[j], start[j + 1]).
struct RowMap {
  std::vector<int64_t> start, index;
  std::vector<double> weight;  // empty: every weight 1
};

inline RowMap forward_map(const ResampleAxis& a) {
  RowMap m;
  m.start.resize(size_t(a.out_size) + 1);
  for (int64_t j = 0; j <= a.out_size; ++j) m.start[size_t(j)] = j * a.taps;
  m.index = a.index;
  m.weight = a.weight;
  return m;
}

// The transpose: input position i reads the outputs j that read it, in
// increasing j.
inline RowMap adjoint_map(const ResampleAxis& a) {
  RowMap m;
  m.start.assign(size_t(a.in_size) + 1, 0);
  for (int64_t i : a.index) ++m.start[size_t(i) + 1];
  std::partial_sum(m.start.begin(), m.start.end(), m.start.begin());
  std::vector<int64_t> next(m.start.begin(), m.start.end() - 1);
  m.index.resize(a.index.size());
  m.weight.resize(a.index.size());
  for (int64_t j = 0; j < a.out_size; ++j)
    for (int64_t t = 0; t < a.taps; ++t) {
      const size_t k = size_t(j * a.taps + t), slot = size_t(next[size_t(a.index[k])]++);
      m.index[slot] = j;
      m.weight[slot] = a.weight.empty() ? 1.0 : a.weight[k];
    }
  return m;
}

// A host vector copied into a piece of the kernel's scratch on `device`.
template <typename V>
Tensor upload(const std::vector<V>& v, DType dtype, const Device& device, Scratch& taken) {
  Tensor t = taken.take({int64_t(v.size())}, dtype);
  if (!v.empty())
    get_backend(device.type()).copy(t.data_ptr(), device, v.data(), Device(), v.size() * sizeof(V), false);
  return t;
}

struct DeviceMap {
  Tensor start, index, weight;  // weight undefined: all 1
};
inline DeviceMap upload(const RowMap& m, const Device& device, Scratch& taken) {
  DeviceMap d{upload(m.start, DType::Int64, device, taken), upload(m.index, DType::Int64, device, taken), Tensor()};
  if (!m.weight.empty()) d.weight = upload(m.weight, DType::Float64, device, taken);
  return d;
}

// Operands: 0 the pass's output (contiguous: its offset gives j), 1 its
// input at position 0 of the pass's dim.
template <typename M, typename S, typename D, typename A>
struct WeightedRows {
  const int64_t *start, *index;
  const double* weight;
  int64_t inner, size, stride_bytes;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t j = off[0] / int64_t(sizeof(D)) / inner % size;
    A sum = A(0);
    for (int64_t k = start[j]; k < start[j + 1]; ++k) {
      const A v = M::template to_acc<A>(*reinterpret_cast<const S*>(data[1] + off[1] + index[k] * stride_bytes));
      sum += weight ? A(weight[k]) * v : v;
    }
    *reinterpret_cast<D*>(data[0] + off[0]) = D(sum);
  }
};

template <typename E>
struct CopyRows {  // one unweighted entry per position
  const int64_t* index;
  int64_t inner, size, stride_bytes;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t j = off[0] / int64_t(sizeof(E)) / inner % size;
    *reinterpret_cast<E*>(data[0] + off[0]) = *reinterpret_cast<const E*>(data[1] + off[1] + index[j] * stride_bytes);
  }
};

// dst (contiguous) from src along dim d through the map.
template <typename L, typename Make>
void pass(Tensor& dst, const Tensor& src, int64_t d, const Make& make) {
  if (dst.numel() == 0) return;
  Shape src_strides = src.strides();
  src_strides[size_t(d)] = 0;
  const LoopGeometry<2> g =
      walk_geometry<2>(dst.sizes(), {operand(dst, dst.strides()), operand(src, src_strides)}, "resample");
  int64_t inner = 1;
  for (int64_t k = d + 1; k < dst.dim(); ++k) inner *= dst.sizes()[size_t(k)];
  L::template for_each<2>(dst.device(), g, dst.numel(), make(inner, dst.sizes()[size_t(d)], src.strides()[size_t(d)]));
}

// Runs the passes over dims `order` (resampled dims, as indices into
// axes), each reading the previous result; intermediate results in Mid.
template <typename L, typename T>
void weighted_passes(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes, bool adjoint, Scratch& taken) {
  using A = acc_type<T>;
  using M = typename L::Math;
  const int64_t n = int64_t(axes.size()), first = y.dim() - n;
  Tensor cur = x;
  for (int64_t step = 0; step < n; ++step) {
    const int64_t i = adjoint ? step : n - 1 - step, d = first + i;
    const bool last = step == n - 1, from_input = step == 0;
    const RowMap map = adjoint ? adjoint_map(axes[size_t(i)]) : forward_map(axes[size_t(i)]);
    const DeviceMap dm = upload(map, y.device(), taken);
    Shape sizes = cur.sizes();
    sizes[size_t(d)] = adjoint ? axes[size_t(i)].in_size : axes[size_t(i)].out_size;
    Tensor next = last ? y : taken.take(sizes, dtype_of<A>());
    const int64_t* start = static_cast<const int64_t*>(dm.start.data_ptr());
    const int64_t* index = static_cast<const int64_t*>(dm.index.data_ptr());
    const double* weight = dm.weight.defined() ? static_cast<const double*>(dm.weight.data_ptr()) : nullptr;
    auto run = [&]<typename S, typename D>() {
      pass<L>(next, cur, d, [&](int64_t inner, int64_t size, int64_t stride) {
        return WeightedRows<M, S, D, A>{start, index, weight, inner, size, stride * int64_t(sizeof(S))};
      });
    };
    if (from_input && last) run.template operator()<T, T>();
    else if (from_input) run.template operator()<T, A>();
    else if (last) run.template operator()<A, T>();
    else run.template operator()<A, A>();
    cur = next;
  }
}

// Unweighted forward maps: element copies, last dim first, in any dtype.
template <typename L>
void copy_passes(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes, Scratch& taken) {
  const int64_t n = int64_t(axes.size()), first = y.dim() - n;
  Tensor cur = x;
  for (int64_t step = 0; step < n; ++step) {
    const int64_t i = n - 1 - step, d = first + i;
    const Tensor index = upload(axes[size_t(i)].index, DType::Int64, y.device(), taken);
    Shape sizes = cur.sizes();
    sizes[size_t(d)] = axes[size_t(i)].out_size;
    Tensor next = step == n - 1 ? y : taken.take(sizes, y.dtype());
    index_kernels::by_itemsize(y.element_size(), [&]<typename E>() {
      pass<L>(next, cur, d, [&](int64_t inner, int64_t size, int64_t stride) {
        return CopyRows<E>{static_cast<const int64_t*>(index.data_ptr()), inner, size, stride * int64_t(sizeof(E))};
      });
    });
    cur = next;
  }
}

inline bool is_weighted(const std::vector<ResampleAxis>& axes) {
  return std::any_of(axes.begin(), axes.end(), [](const ResampleAxis& a) { return !a.weight.empty(); });
}

template <typename L>
void forward(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes, Scratch& taken) {
  if (y.numel() == 0) return;
  if (!is_weighted(axes)) {
    copy_passes<L>(x, y, axes, taken);
    return;
  }
  dispatch_floating(y.dtype(), "interpolate", [&]<typename T>() { weighted_passes<L, T>(x, y, axes, false, taken); });
}

template <typename L>
void backward(const Tensor& grad_y, Tensor& grad_x, const std::vector<ResampleAxis>& axes, Scratch& taken) {
  if (grad_x.numel() == 0) return;
  dispatch_floating(grad_x.dtype(), "resample backward",
                    [&]<typename T>() { weighted_passes<L, T>(grad_y, grad_x, axes, true, taken); });
}

// The passes' scratch (Note [Kernel scratch]), in the order they take it:
// each pass's map on the device and, but for the last pass, its result
// (in the accumulator dtype when weighted). x: the passes' input.
inline int64_t passes_scratch(const std::vector<ResampleAxis>& axes, const Shape& x_sizes, DType dtype,
                              bool adjoint) {
  const bool weighted = adjoint || is_weighted(axes);
  const DType mid = !weighted ? dtype : dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  const int64_t n = int64_t(axes.size()), first = int64_t(x_sizes.size()) - n;
  ScratchLayout layout("resample");
  Shape sizes = x_sizes;
  for (int64_t step = 0; step < n; ++step) {
    const int64_t i = adjoint ? step : n - 1 - step;
    const ResampleAxis& a = axes[size_t(i)];
    const int64_t entries = int64_t(a.index.size());
    if (weighted) {
      layout.add({(adjoint ? a.in_size : a.out_size) + 1}, DType::Int64).add({entries}, DType::Int64);
      if (adjoint || !a.weight.empty()) layout.add({entries}, DType::Float64);
    } else {
      layout.add({entries}, DType::Int64);
    }
    sizes[size_t(first + i)] = adjoint ? a.in_size : a.out_size;
    if (step < n - 1) layout.add(sizes, mid);
  }
  return layout.bytes();
}

template <bool kAdjoint>
int64_t op_scratch(const std::string& name, const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& a) {
  if (shape_numel(out[0].sizes) == 0) return 0;
  const TensorList outputs{make_meta(out[0].sizes, out[0].dtype, out[0].device)};
  return passes_scratch(resample_plan::op_axes(name, in, outputs, a), in[0].sizes(), in[0].dtype(), kAdjoint);
}

template <typename L>
void register_all(DeviceType device) {
  for (const char* base : {"upsample_nearest", "upsample_nearest_exact", "upsample_linear", "upsample_bicubic2d",
                           "reflection_pad", "replication_pad", "circular_pad"}) {
    const std::string name = base, backward_name = name + "_backward";
    OpRegistry::instance().set_kernel(
        name, device,
        [name](const TensorList& in, TensorList& out, const Attrs& a) {
          if (out[0].numel() == 0) return;  // an empty batch: no maps (their sizes may be huge)
          Scratch taken(out);
          forward<L>(in[0], out[0], resample_plan::op_axes(name, in, out, a), taken);
        },
        [name](const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& a) {
          return op_scratch<false>(name, in, out, a);
        });
    OpRegistry::instance().set_kernel(
        backward_name, device,
        [backward_name](const TensorList& in, TensorList& out, const Attrs& a) {
          if (out[0].numel() == 0) return;
          Scratch taken(out);
          backward<L>(in[0], out[0], resample_plan::op_axes(backward_name, in, out, a), taken);
        },
        [backward_name](const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& a) {
          return op_scratch<true>(backward_name, in, out, a);
        });
  }
}

}  // namespace mf::resample_kernels
