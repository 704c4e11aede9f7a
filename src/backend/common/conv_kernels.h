// Note [Device convolutions]
// The convolution ops (conv2d/3d, their backward op, conv_transpose2d/3d)
// over a backend's walks L as direct convolutions, one thread per element
// written: a forward output sums its window over the group's input
// channels; an input gradient (and a transposed convolution's output, the
// same adjoint) sums the outputs and kernel taps that read it (the taps
// whose position lines up with the stride); a weight gradient sums over the
// batch and the output positions; a bias gradient over the batch and the
// spatial positions. Sums are in acc_type<T>, in a fixed order, so no
// atomics are needed and results do not depend on the device. The window
// rules and the transposed convolution's adjoint are src/ops/conv.cpp's
// and conv_transpose.cpp's (Note [Transposed convolution]). This is the
// reference device path: no tiling, no tensor cores, no cuDNN.
#pragma once

#include "backend/common/index_kernels.h"
#include "ops/conv_common.h"

namespace mf::conv_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;

// One operand's element strides as (N, C, D, H, W) (a 2-d tensor's depth
// stride 0).
struct Strides5 {
  int64_t s[5] = {0, 0, 0, 0, 0};
};
inline Strides5 strides5(const Tensor& t) {
  Strides5 r;
  const int64_t spatial = t.dim() - 2;
  r.s[0] = t.strides()[0];
  r.s[1] = t.strides()[1];
  for (int64_t k = 0; k < spatial; ++k) r.s[2 + 3 - spatial + k] = t.strides()[size_t(2 + k)];
  return r;
}
inline void sizes3(const Tensor& t, int64_t (&out)[3]) {
  const int64_t spatial = t.dim() - 2;
  out[0] = out[1] = out[2] = 1;
  for (int64_t k = 0; k < spatial; ++k) out[3 - spatial + k] = t.sizes()[size_t(2 + k)];
}

struct ConvGeometry {
  int64_t in[3], out[3], kernel[3];
  int64_t stride[3], padding[3], dilation[3];
  int64_t channels, out_channels, groups;  // the convolution's C and O
  Strides5 x, w, y;                        // x: (N, C, ...), w: (O, C / groups, ...), y: (N, O, ...)

  // The input position along dim d of output position o and tap k.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t input_at(int d, int64_t o, int64_t k) const {
    return o * stride[d] - padding[d] + k * dilation[d];
  }
  // The output position along dim d that tap k reads input position i from, or -1.
  MF_FORCE_INLINE MF_HOST_DEVICE int64_t output_at(int d, int64_t i, int64_t k) const {
    const int64_t t = i + padding[d] - k * dilation[d];
    if (t < 0 || t % stride[d] != 0) return -1;
    const int64_t o = t / stride[d];
    return o < out[d] ? o : -1;
  }
};

inline ConvGeometry geometry(const Tensor& x, const Tensor& w, const Tensor& y, const cpu::ConvParams& p) {
  ConvGeometry g{};
  sizes3(x, g.in);
  sizes3(y, g.out);
  sizes3(w, g.kernel);
  for (int d = 0; d < 3; ++d) {
    g.stride[d] = p.stride[d];
    g.padding[d] = p.padding[d];
    g.dilation[d] = p.dilation[d];
  }
  g.channels = x.sizes()[1];
  g.out_channels = w.sizes()[0];
  g.groups = p.groups;
  g.x = strides5(x);
  g.w = strides5(w);
  g.y = strides5(y);
  return g;
}

// Splits a contiguous (N, Ch, D, H, W) index into its coordinates.
MF_FORCE_INLINE MF_HOST_DEVICE void coordinates(int64_t i, int64_t ch, const int64_t* size, int64_t* c) {
  c[4] = i % size[2];
  i /= size[2];
  c[3] = i % size[1];
  i /= size[1];
  c[2] = i % size[0];
  i /= size[0];
  c[1] = i % ch;
  c[0] = i / ch;
}

// Forward: operand 0 the output y (contiguous). Fields: x, w, bias.
template <typename M, typename T>
struct Forward {
  ConvGeometry g;
  const T *x, *w, *bias;
  int64_t bias_stride;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    int64_t c[5];
    coordinates(off[0] / int64_t(sizeof(T)), g.out_channels, g.out, c);
    const int64_t o = c[1], per_group = g.channels / g.groups, first = o / (g.out_channels / g.groups) * per_group;
    A sum = bias ? M::template to_acc<A>(bias[o * bias_stride]) : A(0);
    for (int64_t ci = 0; ci < per_group; ++ci)
      for (int64_t a = 0; a < g.kernel[0]; ++a) {
        const int64_t z = g.input_at(0, c[2], a);
        if (z < 0 || z >= g.in[0]) continue;
        for (int64_t b = 0; b < g.kernel[1]; ++b) {
          const int64_t yy = g.input_at(1, c[3], b);
          if (yy < 0 || yy >= g.in[1]) continue;
          for (int64_t k = 0; k < g.kernel[2]; ++k) {
            const int64_t xx = g.input_at(2, c[4], k);
            if (xx < 0 || xx >= g.in[2]) continue;
            const A xv = M::template to_acc<A>(x[c[0] * g.x.s[0] + (first + ci) * g.x.s[1] + z * g.x.s[2] +
                                                 yy * g.x.s[3] + xx * g.x.s[4]]);
            const A wv = M::template to_acc<A>(w[o * g.w.s[0] + ci * g.w.s[1] + a * g.w.s[2] + b * g.w.s[3] +
                                                 k * g.w.s[4]]);
            sum += xv * wv;
          }
        }
      }
    *reinterpret_cast<T*>(data[0] + off[0]) = T(sum);
  }
};

// The adjoint (input gradient, transposed convolution): operand 0 the
// input-shaped output (contiguous). Fields: gy (y-shaped), w, bias.
template <typename M, typename T>
struct Adjoint {
  ConvGeometry g;
  const T *gy, *w, *bias;
  int64_t bias_stride;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    int64_t c[5];
    coordinates(off[0] / int64_t(sizeof(T)), g.channels, g.in, c);
    const int64_t ch = c[1], per_group = g.channels / g.groups, outs = g.out_channels / g.groups;
    const int64_t group = ch / per_group, ci = ch % per_group;
    A sum = bias ? M::template to_acc<A>(bias[ch * bias_stride]) : A(0);
    for (int64_t oi = 0; oi < outs; ++oi) {
      const int64_t o = group * outs + oi;
      for (int64_t a = 0; a < g.kernel[0]; ++a) {
        const int64_t z = g.output_at(0, c[2], a);
        if (z < 0) continue;
        for (int64_t b = 0; b < g.kernel[1]; ++b) {
          const int64_t yy = g.output_at(1, c[3], b);
          if (yy < 0) continue;
          for (int64_t k = 0; k < g.kernel[2]; ++k) {
            const int64_t xx = g.output_at(2, c[4], k);
            if (xx < 0) continue;
            sum += M::template to_acc<A>(gy[c[0] * g.y.s[0] + o * g.y.s[1] + z * g.y.s[2] + yy * g.y.s[3] +
                                            xx * g.y.s[4]]) *
                   M::template to_acc<A>(w[o * g.w.s[0] + ci * g.w.s[1] + a * g.w.s[2] + b * g.w.s[3] +
                                           k * g.w.s[4]]);
          }
        }
      }
    }
    *reinterpret_cast<T*>(data[0] + off[0]) = T(sum);
  }
};

// The weight gradient: operand 0 gw (contiguous, w's shape). Fields: gy, x, batch.
template <typename M, typename T>
struct WeightGrad {
  ConvGeometry g;
  const T *gy, *x;
  int64_t batch;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    const int64_t per_group = g.channels / g.groups;
    int64_t c[5];
    coordinates(off[0] / int64_t(sizeof(T)), per_group, g.kernel, c);
    const int64_t o = c[0], ci = c[1], ch = o / (g.out_channels / g.groups) * per_group + ci;
    A sum = A(0);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t z = 0; z < g.out[0]; ++z) {
        const int64_t iz = g.input_at(0, z, c[2]);
        if (iz < 0 || iz >= g.in[0]) continue;
        for (int64_t yy = 0; yy < g.out[1]; ++yy) {
          const int64_t iy = g.input_at(1, yy, c[3]);
          if (iy < 0 || iy >= g.in[1]) continue;
          for (int64_t xx = 0; xx < g.out[2]; ++xx) {
            const int64_t ix = g.input_at(2, xx, c[4]);
            if (ix < 0 || ix >= g.in[2]) continue;
            sum += M::template to_acc<A>(gy[n * g.y.s[0] + o * g.y.s[1] + z * g.y.s[2] + yy * g.y.s[3] +
                                            xx * g.y.s[4]]) *
                   M::template to_acc<A>(x[n * g.x.s[0] + ch * g.x.s[1] + iz * g.x.s[2] + iy * g.x.s[3] +
                                           ix * g.x.s[4]]);
          }
        }
      }
    *reinterpret_cast<T*>(data[0] + off[0]) = T(sum);
  }
};

// The bias gradient: operand 0 gb (contiguous (O)). Fields: gy, batch.
template <typename M, typename T>
struct BiasGrad {
  ConvGeometry g;
  const T* gy;
  int64_t batch;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    const int64_t o = off[0] / int64_t(sizeof(T));
    A sum = A(0);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t z = 0; z < g.out[0]; ++z)
        for (int64_t yy = 0; yy < g.out[1]; ++yy)
          for (int64_t xx = 0; xx < g.out[2]; ++xx)
            sum += M::template to_acc<A>(gy[n * g.y.s[0] + o * g.y.s[1] + z * g.y.s[2] + yy * g.y.s[3] + xx * g.y.s[4]]);
    *reinterpret_cast<T*>(data[0] + off[0]) = T(sum);
  }
};

// Runs f over every element of the contiguous out.
template <typename L, typename F>
void over(Tensor& out, const F& f, const char* op) {
  if (out.numel() == 0) return;
  MF_CHECK(out.is_contiguous(), Error, op, ": expected a contiguous output");
  L::template for_each<1>(out.device(), walk_geometry<1>({out.numel()}, {operand(out, {1})}, op), out.numel(), f);
}

template <typename T>
const T* data_of(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

// inputs (x, w, bias)
template <typename L>
void forward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1], &bias = in[2];
  Tensor& y = out[0];
  const ConvGeometry g = geometry(x, w, y, conv_detail::params_of(attrs));
  dispatch_floating(x.dtype(), "conv", [&]<typename T>() {
    over<L>(y, Forward<typename L::Math, T>{g, data_of<T>(x), data_of<T>(w), data_of<T>(bias),
                                            bias.defined() ? bias.strides()[0] : 0},
            "conv");
  });
}

// inputs (grad_y, x, w); outputs (gx, gw, gb) as "output_mask" asks.
template <typename L>
void backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &gy = in[0], &x = in[1], &w = in[2];
  const Shape& mask = attrs.get_shape("output_mask");
  const ConvGeometry g = geometry(x, w, gy, conv_detail::params_of(attrs));
  dispatch_floating(gy.dtype(), "conv_backward", [&]<typename T>() {
    using M = typename L::Math;
    if (mask[0]) over<L>(out[0], Adjoint<M, T>{g, data_of<T>(gy), data_of<T>(w), nullptr, 0}, "conv_backward");
    if (mask[1]) over<L>(out[1], WeightGrad<M, T>{g, data_of<T>(gy), data_of<T>(x), x.sizes()[0]}, "conv_backward");
    if (mask[2]) over<L>(out[2], BiasGrad<M, T>{g, data_of<T>(gy), gy.sizes()[0]}, "conv_backward");
  });
}

// inputs (x, w, bias): the adjoint of the convolution whose output x is.
template <typename L>
void transpose_forward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1], &bias = in[2];
  Tensor& y = out[0];
  const ConvGeometry g = geometry(y, w, x, conv_detail::params_of(conv_detail::adjoint_conv_attrs(attrs, "")));
  dispatch_floating(x.dtype(), "conv_transpose", [&]<typename T>() {
    over<L>(y, Adjoint<typename L::Math, T>{g, data_of<T>(x), data_of<T>(w), data_of<T>(bias),
                                            bias.defined() ? bias.strides()[0] : 0},
            "conv_transpose");
  });
}

template <typename L>
void register_all(DeviceType device) {
  auto set = [device](const char* op, KernelFn kernel) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel));
  };
  set("conv2d", forward<L>);
  set("conv3d", forward<L>);
  set("conv2d_backward", backward<L>);
  set("conv3d_backward", backward<L>);
  set("conv_transpose2d", transpose_forward<L>);
  set("conv_transpose3d", transpose_forward<L>);
}

}  // namespace mf::conv_kernels
