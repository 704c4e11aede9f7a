// Depthwise convolutions (Note [Depthwise convolution]).
#include <algorithm>
#include <optional>
#include <vector>

#include "meshflow/parallel.h"
#include "backend/cpu/kernels/conv_internal.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "meshflow/checked_size.h"

namespace mf::cpu {

// Note [Depthwise convolution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A 2-d convolution with groups == in_channels == out_channels (one K x K
// filter per channel: MobileNet's and ConvNeXt's 3x3 / 7x7 depthwise
// layers) does K*K multiply-adds per output, too few for a GEMM; oneDNN's
// backward for plain NCHW tensors is slow, and vectorising over a plane's
// columns wastes most lanes on small planes (a 4 x 4 plane with a 7 x 7
// kernel). So the loops here vectorise over channels, as oneDNN's blocked
// layouts do: a task copies a block of CB channels (8 or 16) of an image
// into a zero-padded, channels-innermost buffer X[hp][wp][CB] (acc_type:
// float for float32 and the 16-bit types), and every tap of every output
// is then one CB-wide multiply-add,
//   Y[oy][ox][:] += W[ky][kx][:] * X[oy sh + ky dh][ox sw + kx dw][:],
// with no bounds checks and nothing wasted but the padding channels of the
// last block. Rows of taps that only meet padding are skipped. The input
// gradient scatters the same products into a padded GX, and the weight
// gradient sums GY * X per tap over the block's images in a fixed order,
// so results do not depend on the thread count. Tasks are channel blocks
// (all images in order); CB is 8 when 16-channel blocks would leave a
// thread without two tasks. Any strides, symmetric padding and dilation.
//
// Where it runs (conv_onednn.cpp), from measurements of both on this
// library's CPUs (2 threads, float32):
//   - backward, except for 3x3 kernels on planes at least 3x3: oneDNN's
//     backward is 2-3x faster for those (MobileNet's 56x56 .. 7x7 planes),
//     but falls to a path 10-20x slower than these loops for 4x4, 5x5 and
//     7x7 kernels (ConvNeXt: 14.6 -> 3.2 ms on 16x16 planes; a 28x28 plane
//     with a 5x5 kernel: 109 -> 6.5 ms) and for planes smaller than the
//     kernel (2x2 planes, 3x3 kernel: 3.2 -> 0.5 ms);
//   - forward for float64 (no oneDNN path) and where the padding reaches
//     across the whole input (2x2 planes, 7x7 kernel: 10.6 -> 0.4 ms);
//     oneDNN's jit forward is 2-3x faster than these loops elsewhere,
//     4x4 planes under a 7x7 kernel included.

namespace {

struct Geometry {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t hp, wp;

  Geometry(const Shape& x, const Shape& y, const Tensor& wt, const ConvParams& p)
      : n(x[0]), c(x[1]), h(x[2]), w(x[3]), oh(y[2]), ow(y[3]), kh(wt.size(2)), kw(wt.size(3)), sh(p.stride[1]),
        sw(p.stride[2]), ph(p.padding[1]), pw(p.padding[2]), dh(p.dilation[1]), dw(p.dilation[2]),
        hp(x[2] + 2 * p.padding[1]), wp(x[3] + 2 * p.padding[2]) {}

  // Whether padded input row r holds data (else the tap row adds nothing).
  bool real_row(int64_t r) const { return r >= ph && r < ph + h; }
};

// The (image, channel) planes of an NCHW tensor of any strides.
template <typename T>
struct Planes {
  const T* data;
  int64_t sn, sc, sy, sx;
  explicit Planes(const Tensor& t)
      : data(t.data<T>()), sn(t.stride(0)), sc(t.stride(1)), sy(t.stride(2)), sx(t.stride(3)) {}
  const T* at(int64_t img, int64_t c, int64_t y, int64_t x) const {
    return data + img * sn + c * sc + y * sy + x * sx;
  }
};

template <typename T>
struct OutPlanes {  // contiguous NCHW outputs
  T* data;
  int64_t c, h, w;
  T& at(int64_t img, int64_t ch, int64_t y, int64_t x) const { return data[((img * c + ch) * h + y) * w + x]; }
};

bool applies(const Shape& x, const Tensor& w, const ConvParams& p) {
  return p.spatial == 2 && p.groups > 1 && x.size() == 4 && w.dim() == 4 && x[1] == p.groups &&
         w.size(0) == p.groups && w.size(1) == 1 && is_floating(w.dtype()) &&
         p.padding_end[1] == p.padding[1] && p.padding_end[2] == p.padding[2] && p.padding[1] >= 0 &&
         p.padding[2] >= 0;
}

// The largest channel block, and the elements of a thread's buffers for
// blocks of that size: X, Y (or GY), W and the weight gradient's sums.
constexpr int64_t kMaxBlock = 16;
int64_t slot_elements(const Geometry& g) {
  const auto mul = [](int64_t a, int64_t b) { return checked_mul(a, b, "conv2d", "depthwise buffer"); };
  const int64_t planes = checked_add(mul(g.hp, g.wp), mul(g.oh, g.ow), "conv2d", "depthwise buffer");
  return mul(checked_add(planes, mul(2 * g.kh, g.kw), "conv2d", "depthwise buffer"), kMaxBlock);
}

// Per-thread buffers in the kernel's scratch, in acc_type of dtype: one per
// thread, at most one per channel block of 8.
std::vector<Tensor> block_buffers(const Geometry& g, DType dtype, Workspace& ws) {
  const DType acc = dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  return ws.take_slots(std::min<int64_t>(get_num_threads(), (g.c + 7) / 8), {slot_elements(g)}, acc);
}

// fn(block, buffer) for every channel block, in parallel over the buffers.
template <typename A, typename F>
void for_blocks(int64_t blocks, const std::vector<Tensor>& buffers, const F& fn) {
  for_each_slot(blocks, int64_t(buffers.size()),
                [&](int64_t slot, int64_t block) { fn(block, static_cast<A*>(buffers[size_t(slot)].data_ptr())); });
}

// One channel block's buffers (in a thread's slot) and loops; CB channels
// innermost.
template <int CB, typename T, typename A>
struct Block {
  const Geometry& g;
  int64_t c0, cn;     // first channel, channels in use (<= CB)
  A *x, *y, *wts;     // X[hp][wp][CB], Y or GY [oh][ow][CB], W[kh][kw][CB]
  int64_t nx, ny;     // X's and Y's elements

  Block(const Geometry& geo, int64_t block, const T* wp, A* slot)
      : g(geo), c0(block * CB), cn(std::min<int64_t>(CB, geo.c - block * CB)), x(slot),
        y(slot + geo.hp * geo.wp * CB), wts(y + geo.oh * geo.ow * CB), nx(geo.hp * geo.wp * CB),
        ny(geo.oh * geo.ow * CB) {
    for (int64_t k = 0; k < g.kh * g.kw; ++k)
      for (int64_t cc = 0; cc < CB; ++cc) wts[k * CB + cc] = cc < cn ? A(wp[(c0 + cc) * g.kh * g.kw + k]) : A(0);
  }
  // The weight gradient's sums[kh][kw][CB], after W.
  A* sums() const { return wts + g.kh * g.kw * CB; }

  void load_x(const Planes<T>& src, int64_t img) {
    std::fill(x, x + nx, A(0));
    for (int64_t cc = 0; cc < cn; ++cc)
      for (int64_t iy = 0; iy < g.h; ++iy)
        for (int64_t ix = 0; ix < g.w; ++ix)
          x[((iy + g.ph) * g.wp + ix + g.pw) * CB + cc] = A(*src.at(img, c0 + cc, iy, ix));
  }
  void load_y(const Planes<T>& src, int64_t img) {
    std::fill(y, y + ny, A(0));
    for (int64_t cc = 0; cc < cn; ++cc)
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) y[(oy * g.ow + ox) * CB + cc] = A(*src.at(img, c0 + cc, oy, ox));
  }

  // fn(y, x, w): the CB-channel offsets of an output in Y (or GY), of the
  // input it meets in X through a tap, and of the tap in W, for every
  // output and tap whose input row is not padding.
  template <typename F>
  void each_tap(F&& fn) const {
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t r = oy * g.sh + ky * g.dh;
        if (!g.real_row(r)) continue;
        for (int64_t ox = 0; ox < g.ow; ++ox)
          for (int64_t kx = 0; kx < g.kw; ++kx)
            fn((oy * g.ow + ox) * CB, (r * g.wp + ox * g.sw + kx * g.dw) * CB, (ky * g.kw + kx) * CB);
      }
  }

  // Y += conv(X)
  void forward() {
    A* out = y;
    const A *in = x, *f = wts;
    each_tap([&](int64_t yo, int64_t xo, int64_t wo) {
#pragma omp simd
      for (int cc = 0; cc < CB; ++cc) out[yo + cc] += f[wo + cc] * in[xo + cc];
    });
  }

  // X (as the padded input gradient) += the adjoint of conv applied to Y
  void input_gradient() {
    A* gx = x;
    const A *gy = y, *f = wts;
    each_tap([&](int64_t yo, int64_t xo, int64_t wo) {
#pragma omp simd
      for (int cc = 0; cc < CB; ++cc) gx[xo + cc] += f[wo + cc] * gy[yo + cc];
    });
  }

  // sums[tap][:] += sum over outputs of GY * X
  void weight_gradient(A* sums) const {
    const A *gy = y, *in = x;
    each_tap([&](int64_t yo, int64_t xo, int64_t wo) {
#pragma omp simd
      for (int cc = 0; cc < CB; ++cc) sums[wo + cc] += gy[yo + cc] * in[xo + cc];
    });
  }
};

// fn.template operator()<CB>(blocks): 16-channel blocks, or 8 when 16
// would leave a thread fewer than two tasks.
template <typename F>
void dispatch_block(int64_t channels, F&& fn) {
  if ((channels + 15) / 16 >= 2 * int64_t(get_num_threads())) return fn.template operator()<16>((channels + 15) / 16);
  return fn.template operator()<8>((channels + 7) / 8);
}

}  // namespace

bool depthwise_conv_forward(const Tensor& x, const Tensor& w_in, const Tensor& bias_in, Tensor& y,
                            const ConvParams& p, Workspace& ws) {
  if (!applies(x.sizes(), w_in, p)) return false;
  const Geometry g(x.sizes(), y.sizes(), w_in, p);
  const Tensor w = dense(w_in, ws), bias = dense(bias_in, ws);
  const std::vector<Tensor> buffers = block_buffers(g, x.dtype(), ws);
  if (ws.measuring()) return true;
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() {
    using A = acc_type<T>;
    const Planes<T> xs(x);
    const T* bp = bias.defined() ? bias.data<T>() : nullptr;
    const OutPlanes<T> out{y.data<T>(), g.c, g.oh, g.ow};
    dispatch_block(g.c, [&]<int CB>(int64_t blocks) {
      for_blocks<A>(blocks, buffers, [&](int64_t block, A* slot) {
        Block<CB, T, A> b(g, block, w.data<T>(), slot);
        for (int64_t img = 0; img < g.n; ++img) {
          b.load_x(xs, img);
          for (int64_t i = 0; i < g.oh * g.ow; ++i)
            for (int64_t cc = 0; cc < CB; ++cc) b.y[i * CB + cc] = bp && cc < b.cn ? A(bp[b.c0 + cc]) : A(0);
          b.forward();
          for (int64_t cc = 0; cc < b.cn; ++cc)
            for (int64_t oy = 0; oy < g.oh; ++oy)
              for (int64_t ox = 0; ox < g.ow; ++ox)
                out.at(img, b.c0 + cc, oy, ox) = T(b.y[(oy * g.ow + ox) * CB + cc]);
        }
      });
    });
  });
  return true;
}

bool depthwise_conv_backward(const Tensor& grad_y, const Tensor& x, const Shape& x_shape, const Tensor& w_in,
                             Tensor* grad_x, Tensor* grad_w, const ConvParams& p, Workspace& ws) {
  if (!applies(x_shape, w_in, p)) return false;
  const Geometry g(x_shape, grad_y.sizes(), w_in, p);
  const Tensor w = dense(w_in, ws);
  const std::vector<Tensor> buffers = block_buffers(g, w.dtype(), ws);
  if (ws.measuring()) return true;
  dispatch_floating(w.dtype(), "conv2d", [&]<typename T>() {
    using A = acc_type<T>;
    const Planes<T> gys(grad_y);
    const std::optional<Planes<T>> xs = grad_w ? std::optional<Planes<T>>(Planes<T>(x)) : std::nullopt;
    const std::optional<OutPlanes<T>> gx =
        grad_x ? std::optional<OutPlanes<T>>(OutPlanes<T>{grad_x->data<T>(), g.c, g.h, g.w}) : std::nullopt;
    T* gwp = grad_w ? grad_w->data<T>() : nullptr;
    dispatch_block(g.c, [&]<int CB>(int64_t blocks) {
      for_blocks<A>(blocks, buffers, [&](int64_t block, A* slot) {
        Block<CB, T, A> b(g, block, w.data<T>(), slot);
        A* sums = b.sums();
        std::fill(sums, sums + g.kh * g.kw * CB, A(0));
        for (int64_t img = 0; img < g.n; ++img) {
          b.load_y(gys, img);
          if (gwp) {
            b.load_x(*xs, img);
            b.weight_gradient(sums);
          }
          if (gx) {
            std::fill(b.x, b.x + b.nx, A(0));
            b.input_gradient();
            for (int64_t cc = 0; cc < b.cn; ++cc)
              for (int64_t iy = 0; iy < g.h; ++iy)
                for (int64_t ix = 0; ix < g.w; ++ix)
                  gx->at(img, b.c0 + cc, iy, ix) = T(b.x[((iy + g.ph) * g.wp + ix + g.pw) * CB + cc]);
          }
        }
        if (gwp)
          for (int64_t cc = 0; cc < b.cn; ++cc)
            for (int64_t k = 0; k < g.kh * g.kw; ++k) gwp[(b.c0 + cc) * g.kh * g.kw + k] = T(sums[k * CB + cc]);
      });
    });
  });
  return true;
}

}  // namespace mf::cpu
