// Note [Device pooling]
// The pooling ops over a backend's walks L (max and average pools,
// adaptive ones, and the max pool's gradient scatter and gather), with the
// window rules of backend/cpu/kernels/pool.cpp (PyTorch's): a forward walks
// the output, each element reducing its window in row-major order (the max
// keeps the first maximum, NaN wins, and an all-padding window gives -inf at
// PyTorch's index); a backward walks the output gradient and adds each
// share to the input positions atomically. Spatial dims are (depth, height,
// width); a 2-d pool has a neutral depth. Inputs may be strided; gradients
// are read dense (copied when they are not).
#pragma once

#include <limits>

#include "backend/common/index_kernels.h"
#include "backend/common/scratch.h"

namespace mf::pool_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;

struct PoolGeometry {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, padding[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};
  int64_t in_stride[3] = {0, 0, 0};  // the input's element strides along the spatial dims
  bool adaptive = false, count_include_pad = true;

  MF_FORCE_INLINE MF_HOST_DEVICE int64_t in_size() const { return in[0] * in[1] * in[2]; }
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t out_size() const { return out[0] * out[1] * out[2]; }

  // Output i of a plane: its window's first position per dim (negative in
  // the padding) and the kernel offsets [lo, hi) inside the input.
  MF_FORCE_INLINE MF_HOST_DEVICE void window(int64_t i, int64_t* start, int64_t* lo, int64_t* hi) const {
    int64_t o[3];
    o[2] = i % out[2];
    o[1] = i / out[2] % out[1];
    o[0] = i / (out[1] * out[2]);
    for (int d = 0; d < 3; ++d) {
      if (adaptive) {
        start[d] = o[d] * in[d] / out[d];
        lo[d] = 0;
        hi[d] = ((o[d] + 1) * in[d] + out[d] - 1) / out[d] - start[d];
        continue;
      }
      start[d] = o[d] * stride[d] - padding[d];
      const int64_t dil = dilation[d];
      lo[d] = start[d] >= 0 ? 0 : (-start[d] + dil - 1) / dil;
      const int64_t h = in[d] - start[d] <= 0 ? 0 : (in[d] - start[d] + dil - 1) / dil;
      hi[d] = h < kernel[d] ? h : kernel[d];
      if (hi[d] < lo[d]) hi[d] = lo[d];
    }
  }
  // The window of the output element at byte offset `offset` of a contiguous
  // tensor whose elements are `item` bytes.
  MF_FORCE_INLINE MF_HOST_DEVICE void window_at(int64_t offset, int64_t item, int64_t* start, int64_t* lo,
                                                int64_t* hi) const {
    window(offset / item % out_size(), start, lo, hi);
  }
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t step(int d) const { return adaptive ? 1 : dilation[d]; }
  // PyTorch's average divisor: the window clipped to the padded input (or
  // to the input without count_include_pad); adaptive: the window's size.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t divisor(const int64_t* start, const int64_t* lo, const int64_t* hi) const {
    int64_t n = 1;
    for (int d = 0; d < 3; ++d) {
      if (adaptive) {
        n *= hi[d] - lo[d];
        continue;
      }
      int64_t a = start[d], b = start[d] + kernel[d] < in[d] + padding[d] ? start[d] + kernel[d] : in[d] + padding[d];
      if (!count_include_pad) {
        a = a > 0 ? a : 0;
        b = b < in[d] ? b : in[d];
      }
      n *= b - a;
    }
    return n;
  }
};

inline PoolGeometry geometry(const Tensor& x, const Tensor& y, const Attrs* attrs) {
  PoolGeometry g;
  const int64_t spatial = x.dim() - 2, first = 3 - spatial;
  for (int64_t k = 0; k < spatial; ++k) {
    g.in[first + k] = x.sizes()[size_t(2 + k)];
    g.out[first + k] = y.sizes()[size_t(2 + k)];
    g.in_stride[first + k] = x.strides()[size_t(2 + k)];
  }
  if (!attrs) {
    g.adaptive = true;
    return g;
  }
  auto set = [&](int64_t(&dst)[3], const char* name) {
    const Shape& v = attrs->get_shape(name);
    for (size_t k = 0; k < v.size(); ++k) dst[3 - v.size() + k] = v[k];
  };
  set(g.kernel, "kernel_size");
  set(g.stride, "stride");
  set(g.padding, "padding");
  set(g.dilation, "dilation");
  g.count_include_pad = attrs->get_bool("count_include_pad");
  return g;
}

// The walk over an output's shape with a tensor's planes: strides along
// (N, C), 0 along the spatial dims.
inline Shape plane_strides(const Tensor& t, int64_t dims) {
  Shape s(size_t(dims), 0);
  s[0] = t.strides()[0];
  s[1] = t.strides()[1];
  return s;
}

// Operands: 0 the output, 1 the indices (max only; the output again for
// average), 2 the input's plane. Output element i of a plane from its
// contiguous offset.
template <typename M, typename T, bool kMax>
struct PoolForward {
  PoolGeometry g;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    int64_t start[3], lo[3], hi[3];
    g.window_at(off[0], int64_t(sizeof(T)), start, lo, hi);
    const char* x = data[2] + off[2];
    auto at = [&](int64_t a, int64_t b, int64_t c) {
      return M::template to_acc<A>(*reinterpret_cast<const T*>(
          x + ((start[0] + a * g.step(0)) * g.in_stride[0] + (start[1] + b * g.step(1)) * g.in_stride[1] +
               (start[2] + c * g.step(2)) * g.in_stride[2]) *
                  int64_t(sizeof(T))));
    };
    auto position = [&](int64_t a, int64_t b, int64_t c) {
      return ((start[0] + a * g.step(0)) * g.in[1] + start[1] + b * g.step(1)) * g.in[2] + start[2] + c * g.step(2);
    };
    T* y = reinterpret_cast<T*>(data[0] + off[0]);
    const bool empty = lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2];
    if constexpr (kMax) {
      int64_t* where = reinterpret_cast<int64_t*>(data[1] + off[1]);
      *where = position(lo[0], lo[1], lo[2]);
      if (empty) {
        *y = T(-std::numeric_limits<A>::infinity());
        return;
      }
      A best = at(lo[0], lo[1], lo[2]);
      for (int64_t a = lo[0]; a < hi[0]; ++a)
        for (int64_t b = lo[1]; b < hi[1]; ++b)
          for (int64_t c = lo[2]; c < hi[2]; ++c) {
            const A v = at(a, b, c);
            if (v > best || v != v) best = v, *where = position(a, b, c);
          }
      *y = T(best);
    } else {
      A sum = A(0);
      for (int64_t a = lo[0]; a < hi[0]; ++a)
        for (int64_t b = lo[1]; b < hi[1]; ++b)
          for (int64_t c = lo[2]; c < hi[2]; ++c) sum += at(a, b, c);
      *y = T(sum / A(g.divisor(start, lo, hi)));
    }
  }
};

template <typename L, bool kMax>
void forward(const Tensor& x, TensorList& out, const Attrs* attrs, const char* name) {
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  const PoolGeometry g = geometry(x, y, attrs);
  const Tensor& indices = kMax ? out[1] : y;
  const LoopGeometry<3> walk = walk_geometry<3>(
      y.sizes(), {operand(y, y.strides()), operand(indices, indices.strides()), operand(x, plane_strides(x, y.dim()))},
      name);
  dispatch_floating(x.dtype(), name, [&]<typename T>() {
    L::template for_each<3>(y.device(), walk, y.numel(), PoolForward<typename L::Math, T, kMax>{g});
  });
}

using elementwise_kernels::dense;

// Operands: 0 the output gradient (dense), 1 the input gradient's plane
// (zeroed). Each window position += grad / divisor.
template <typename M, typename T>
struct AvgBackward {
  PoolGeometry g;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    int64_t start[3], lo[3], hi[3];
    g.window_at(off[0], int64_t(sizeof(T)), start, lo, hi);
    const A share = M::template to_acc<A>(*reinterpret_cast<const T*>(data[0] + off[0])) / A(g.divisor(start, lo, hi));
    T* gx = reinterpret_cast<T*>(data[1] + off[1]);
    for (int64_t a = lo[0]; a < hi[0]; ++a)
      for (int64_t b = lo[1]; b < hi[1]; ++b)
        for (int64_t c = lo[2]; c < hi[2]; ++c)
          index_kernels::atomic_add<M>(
              gx + ((start[0] + a * g.step(0)) * g.in[1] + start[1] + b * g.step(1)) * g.in[2] + start[2] + c * g.step(2),
              T(share));
  }
};

template <typename L>
void avg_backward(const Tensor& grad_y, TensorList& out, const Attrs* attrs, const char* name) {
  Tensor& grad_x = out[0];
  elementwise_kernels::fill<L>(grad_x, Scalar(0));
  if (grad_y.numel() == 0) return;
  Scratch taken(out);
  const Tensor gy = dense<L>(grad_y, taken);
  const PoolGeometry g = geometry(grad_x, gy, attrs);
  const LoopGeometry<2> walk =
      walk_geometry<2>(gy.sizes(), {operand(gy, gy.strides()), operand(grad_x, plane_strides(grad_x, gy.dim()))}, name);
  dispatch_floating(gy.dtype(), name, [&]<typename T>() {
    L::template for_each<2>(gy.device(), walk, gy.numel(), AvgBackward<typename L::Math, T>{g});
  });
}

// Operands: 0 the output gradient or gathered values (dense), 1 the
// indices, 2 the input-sized tensor's plane. Positions outside the plane
// (an all-padding window's) have no element.
template <typename M, typename T, bool kScatter>
struct MaxMove {
  int64_t plane;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t pos = *reinterpret_cast<const int64_t*>(data[1] + off[1]);
    T* small = reinterpret_cast<T*>(data[0] + off[0]);
    T* big = reinterpret_cast<T*>(data[2] + off[2]);
    const bool inside = pos >= 0 && pos < plane;
    if constexpr (kScatter) {
      if (inside) index_kernels::atomic_add<M>(big + pos, *small);
    } else {
      *small = inside ? big[pos] : T(0.0f);
    }
  }
};

// scatter: grad_x (input-sized, zeroed) += grad at the indices; gather:
// out = t at the indices.
template <typename L, bool kScatter>
void max_move(const Tensor& values_in, const Tensor& indices_in, Tensor& big_in, Tensor* small_out, Scratch taken) {
  const Tensor indices = dense<L>(indices_in, taken);
  Tensor small = kScatter ? dense<L>(values_in, taken) : *small_out;
  Tensor big = kScatter ? big_in : dense<L>(values_in, taken);
  if (kScatter) elementwise_kernels::fill<L>(big, Scalar(0));
  if (small.numel() == 0) return;
  int64_t plane = 1;
  for (int64_t d = 2; d < big.dim(); ++d) plane *= big.sizes()[size_t(d)];
  const LoopGeometry<3> walk = walk_geometry<3>(
      small.sizes(),
      {operand(small, small.strides()), operand(indices, indices.strides()), operand(big, plane_strides(big, small.dim()))},
      "max_pool");
  dispatch_floating(small.dtype(), "max_pool", [&]<typename T>() {
    L::template for_each<3>(small.device(), walk, small.numel(), MaxMove<typename L::Math, T, kScatter>{plane});
  });
}

// The dense copies of inputs kInputs (in the order the kernel makes them)
// that are strided (Note [Kernel scratch]).
template <size_t... kInputs>
int64_t dense_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
  ScratchLayout layout("pool");
  for (const size_t i : {kInputs...}) add_dense(layout, in[i]);
  return layout.bytes();
}

template <typename L>
void register_all(DeviceType device) {
  auto set = [device](const std::string& op, KernelFn kernel, ScratchFn scratch = {}) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel), std::move(scratch));
  };
  for (const std::string spatial : {"2d", "3d"}) {
    set("max_pool" + spatial, [](const TensorList& in, TensorList& out, const Attrs& a) {
      forward<L, true>(in[0], out, &a, "max_pool");
    });
    set("avg_pool" + spatial, [](const TensorList& in, TensorList& out, const Attrs& a) {
      forward<L, false>(in[0], out, &a, "avg_pool");
    });
    set("avg_pool" + spatial + "_backward", [](const TensorList& in, TensorList& out, const Attrs& a) {
      avg_backward<L>(in[0], out, &a, "avg_pool_backward");
    }, dense_scratch<0>);
    set("adaptive_avg_pool" + spatial, [](const TensorList& in, TensorList& out, const Attrs&) {
      forward<L, false>(in[0], out, nullptr, "adaptive_avg_pool");
    });
    set("adaptive_avg_pool" + spatial + "_backward", [](const TensorList& in, TensorList& out, const Attrs&) {
      avg_backward<L>(in[0], out, nullptr, "adaptive_avg_pool_backward");
    }, dense_scratch<0>);
  }
  set("adaptive_max_pool2d", [](const TensorList& in, TensorList& out, const Attrs&) {
    forward<L, true>(in[0], out, nullptr, "adaptive_max_pool2d");
  });
  set("max_pool2d_scatter", [](const TensorList& in, TensorList& out, const Attrs&) {
    max_move<L, true>(in[0], in[1], out[0], nullptr, Scratch(out));
  }, dense_scratch<1, 0>);
  set("max_pool2d_gather", [](const TensorList& in, TensorList& out, const Attrs&) {
    Tensor unused;
    max_move<L, false>(in[0], in[1], unused, &out[0], Scratch(out));
  }, dense_scratch<1, 0>);
}

}  // namespace mf::pool_kernels
