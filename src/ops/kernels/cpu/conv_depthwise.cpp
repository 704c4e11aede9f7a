// Depthwise convolutions (Note [Depthwise convolution]).
#include <algorithm>
#include <optional>
#include <vector>

#include "meshflow/parallel.h"
#include "ops/kernels/cpu/conv_internal.h"

namespace mf::cpu {

// Note [Depthwise convolution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A 2-d convolution with groups == in_channels == out_channels (one K x K
// filter per channel: MobileNet's and ConvNeXt's 3x3 / 7x7 depthwise
// layers) does K*K multiply-adds per output, too few for a GEMM, and
// oneDNN's path for plain NCHW tensors reorders to blocked layouts and back
// around each call. Here each (image, channel) plane is one task. The
// plane is copied once into a zero-padded buffer of pitch Wp = W + 2 pw
// (in acc_type: float for float32 and the 16-bit types), so no tap needs a
// bounds check. With stride 1 the output is computed at pitch Wp too: a tap
// (ky, kx) is then one loop over the whole plane,
//   out[i] += f * in[i + ky dh Wp + kx dw],
// long enough to vectorise even for 4 x 4 planes (the columns past OW are
// computed and dropped). The input gradient is the same loop scattering
// into a padded plane, and the weight gradient one dot product per tap
// (grad_y laid out at pitch Wp, zeros past OW), summed over images in a
// task per channel. Other strides walk the output rows. Taken for
// floating tensors of any memory strides (the planes are copied in anyway;
// grad_y often arrives permuted from a channels-last block), any symmetric
// padding and any dilation.
//
// Where it runs (conv_onednn.cpp): every depthwise backward (3x faster
// than oneDNN's plain-layout backward on ConvNeXt's 7x7 layers, 1.6-5x on
// 8x8 to 2x2 planes); the forward only for float64 and where the padding
// reaches across the whole input (oneDNN's jit forward is 2-3x faster than
// these loops otherwise, but 7-10x slower there).

namespace {

struct Geometry {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t hp, wp, padded;  // padded rows, pitch, buffer length (with a tail for the last taps)

  Geometry(const Shape& x, const Shape& y, const Tensor& wt, const ConvParams& p)
      : n(x[0]), c(x[1]), h(x[2]), w(x[3]), oh(y[2]), ow(y[3]), kh(wt.size(2)), kw(wt.size(3)), sh(p.stride[1]),
        sw(p.stride[2]), ph(p.padding[1]), pw(p.padding[2]), dh(p.dilation[1]), dw(p.dilation[2]) {
    hp = h + 2 * ph;
    wp = w + 2 * pw;
    padded = (hp + 1) * wp + (kw - 1) * dw + 1;
  }

  // The plane at src (h, w; row and column strides sy, sx) into dst
  // (zeroed, pitch wp), converted to A.
  template <typename T, typename A>
  void pad(const T* src, int64_t sy, int64_t sx, A* dst) const {
    std::fill(dst, dst + padded, A(0));
    for (int64_t y = 0; y < h; ++y) {
      A* row = dst + (y + ph) * wp + pw;
      const T* s = src + y * sy;
      for (int64_t x = 0; x < w; ++x) row[x] = A(s[x * sx]);
    }
  }
  int64_t tap_offset(int64_t ky, int64_t kx) const { return ky * dh * wp + kx * dw; }

  // Whether kernel row ky (column kx) meets an input row (column) for some
  // output: taps that only ever read padding are skipped.
  static bool meets(int64_t k, int64_t d, int64_t stride, int64_t pad, int64_t outs, int64_t size) {
    // input index = o * stride - pad + k * d for o in [0, outs)
    const int64_t first = k * d - pad, last = (outs - 1) * stride + first;
    if (last < 0 || first >= size) return false;
    if (first >= 0 || stride == 1) return true;
    const int64_t o = (-first + stride - 1) / stride;  // the first output past the padding
    return o < outs && o * stride + first < size;
  }
  bool row_meets(int64_t ky) const { return meets(ky, dh, sh, ph, oh, h); }
  bool col_meets(int64_t kx) const { return meets(kx, dw, sw, pw, ow, w); }
  // The taps that meet the input (their weight gradient is zero otherwise).
  std::vector<bool> taps() const {
    std::vector<bool> t(static_cast<size_t>(kh * kw));
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t kx = 0; kx < kw; ++kx) t[size_t(ky * kw + kx)] = row_meets(ky) && col_meets(kx);
    return t;
  }
};

// The (image, channel) planes of an NCHW tensor of any strides.
template <typename T>
struct Planes {
  const T* data;
  int64_t sn, sc, sy, sx;
  explicit Planes(const Tensor& t)
      : data(t.data<T>()), sn(t.stride(0)), sc(t.stride(1)), sy(t.stride(2)), sx(t.stride(3)) {}
  const T* plane(int64_t img, int64_t c) const { return data + img * sn + c * sc; }
};

bool applies(const Shape& x, const Tensor& w, const ConvParams& p) {
  return p.spatial == 2 && p.groups > 1 && x.size() == 4 && w.dim() == 4 && x[1] == p.groups &&
         w.size(0) == p.groups && w.size(1) == 1 && is_floating(w.dtype()) && w.is_contiguous() &&
         p.padding_end[1] == p.padding[1] && p.padding_end[2] == p.padding[2] && p.padding[1] >= 0 &&
         p.padding[2] >= 0;
}

}  // namespace

namespace {

// Stride 1: one task per channel walks its images in stacks of planes laid
// out at plane stride g.padded (the padded input, grad_y at pitch wp with
// zeros past ow and past oh rows), so that a tap is one loop over a whole
// stack: out[i] += f * x[i + offset]. Index i in a plane's margin (columns
// past ow, rows past oh) reads into the next plane; grad_y is zero there,
// so the gradients get nothing from it, and the forward drops those
// outputs.
constexpr int64_t kStackElements = int64_t(1) << 12;  // per buffer: 16 KiB of float, in L1 with the others

template <typename T, typename A>
struct Stacks {
  const Geometry& g;
  int64_t images;  // per stack
  std::vector<A> x, gy, out;

  int64_t margin;  // zeros before grad_y's first plane (row_of_taps_adjoint reads back that far)

  explicit Stacks(const Geometry& geo)
      : g(geo), images(std::max<int64_t>(1, std::min<int64_t>(geo.n, kStackElements / geo.padded))),
        margin((geo.kw - 1) * geo.dw) {
    x.resize(size_t((images + 1) * g.padded));
    gy.resize(size_t((images + 1) * g.padded + 2 * margin));
    out.resize(size_t((images + 1) * g.padded));
  }
  // grad_y's first plane
  A* gy0() { return gy.data() + margin; }
  int64_t length(int64_t count) const { return count * g.padded; }

  void load_x(const Planes<T>& xs, int64_t c, int64_t img0, int64_t count) {
    std::fill(x.begin(), x.end(), A(0));
    for (int64_t k = 0; k < count; ++k) g.pad(xs.plane(img0 + k, c), xs.sy, xs.sx, x.data() + k * g.padded);
  }
  void load_gy(const Planes<T>& gys, int64_t c, int64_t img0, int64_t count) {
    std::fill(gy.begin(), gy.end(), A(0));
    for (int64_t k = 0; k < count; ++k) {
      const T* src = gys.plane(img0 + k, c);
      A* dst = gy0() + k * g.padded;
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) dst[oy * g.wp + ox] = A(src[oy * gys.sy + ox * gys.sx]);
    }
  }
};

}  // namespace

// One kernel row of taps over a stack: out[i] += sum_k f[k] * x[i + k dw]
// for i in [0, len). KW > 0 fixes the row's width at compile time, so that
// out is loaded and stored once per row instead of once per tap; KW == 0
// takes kw at run time.
template <int KW, typename A>
void row_of_taps(A* out, const A* x, const A* f, int64_t kw, int64_t dw, int64_t len) {
  if constexpr (KW > 0) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      A acc = out[i];
      for (int k = 0; k < KW; ++k) acc += f[k] * x[i + k * dw];
      out[i] = acc;
    }
  } else {
    for (int64_t k = 0; k < kw; ++k) {
      const A fk = f[k];
      const A* xk = x + k * dw;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) out[i] += fk * xk[i];
    }
  }
}

// The adjoint for the input gradient: out[j] += sum_k f[k] * g[j - k dw]
// for j in [0, len + (kw - 1) dw), g readable (zero) from (kw - 1) dw
// before it.
template <int KW, typename A>
void row_of_taps_adjoint(A* out, const A* g, const A* f, int64_t kw, int64_t dw, int64_t len) {
  const int64_t span = len + (kw - 1) * dw;
  if constexpr (KW > 0) {
#pragma omp simd
    for (int64_t j = 0; j < span; ++j) {
      A acc = out[j];
      for (int k = 0; k < KW; ++k) acc += f[k] * g[j - k * dw];
      out[j] = acc;
    }
  } else {
    for (int64_t k = 0; k < kw; ++k) {
      const A fk = f[k];
      A* ok = out + k * dw;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) ok[i] += fk * g[i];
    }
  }
}

// fn.template operator()<KW>() for the common kernel widths, <0> otherwise.
template <typename F>
void dispatch_width(int64_t kw, F&& fn) {
  switch (kw) {
    case 3: return fn.template operator()<3>();
    case 5: return fn.template operator()<5>();
    case 7: return fn.template operator()<7>();
    default: return fn.template operator()<0>();
  }
}

bool depthwise_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p) {
  if (!applies(x.sizes(), w, p) || (bias.defined() && !bias.is_contiguous())) return false;
  const Geometry g(x.sizes(), y.sizes(), w, p);
  const std::vector<bool> taps = g.taps();
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() {
    using A = acc_type<T>;
    const Planes<T> xs(x);
    const T* wp = w.data<T>();
    const T* bp = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = y.data<T>();
    if (g.sh == 1 && g.sw == 1) {
      parallel_for(0, g.c, 1, [&](int64_t lo, int64_t hi) {
        Stacks<T, A> st(g);
        std::vector<A> f(static_cast<size_t>(g.kh * g.kw));
        for (int64_t c = lo; c < hi; ++c) {
          // the channel's filter, zero at taps that only meet padding
          for (int64_t k = 0; k < g.kh * g.kw; ++k) f[size_t(k)] = taps[size_t(k)] ? A(wp[c * g.kh * g.kw + k]) : A(0);
          for (int64_t img0 = 0; img0 < g.n; img0 += st.images) {
            const int64_t count = std::min(st.images, g.n - img0), len = st.length(count);
            st.load_x(xs, c, img0, count);
            std::fill(st.out.begin(), st.out.begin() + len, bp ? A(bp[c]) : A(0));
            dispatch_width(g.kw, [&]<int KW>() {
              for (int64_t ky = 0; ky < g.kh; ++ky)
                if (g.row_meets(ky))
                  row_of_taps<KW>(st.out.data(), st.x.data() + g.tap_offset(ky, 0), f.data() + ky * g.kw, g.kw,
                                  g.dw, len);
            });
            for (int64_t k = 0; k < count; ++k) {
              T* dst = yp + ((img0 + k) * g.c + c) * g.oh * g.ow;
              const A* o = st.out.data() + k * g.padded;
              for (int64_t oy = 0; oy < g.oh; ++oy)
                for (int64_t ox = 0; ox < g.ow; ++ox) dst[oy * g.ow + ox] = T(o[oy * g.wp + ox]);
            }
          }
        }
      });
      return;
    }
    parallel_for(0, g.n * g.c, 1, [&](int64_t lo, int64_t hi) {
      std::vector<A> in(static_cast<size_t>(g.padded)), out(static_cast<size_t>(g.ow));
      for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t c = plane % g.c;
        g.pad(xs.plane(plane / g.c, c), xs.sy, xs.sx, in.data());
        const T* filter = wp + c * g.kh * g.kw;
        T* dst = yp + plane * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          std::fill(out.begin(), out.end(), bp ? A(bp[c]) : A(0));
          for (int64_t ky = 0; ky < g.kh; ++ky)
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              if (!taps[size_t(ky * g.kw + kx)]) continue;
              const A f = A(filter[ky * g.kw + kx]);
              const A* src = in.data() + oy * g.sh * g.wp + g.tap_offset(ky, kx);
              for (int64_t ox = 0; ox < g.ow; ++ox) out[size_t(ox)] += f * src[ox * g.sw];
            }
          for (int64_t ox = 0; ox < g.ow; ++ox) dst[oy * g.ow + ox] = T(out[size_t(ox)]);
        }
      }
    });
  });
  return true;
}

bool depthwise_conv_backward(const Tensor& grad_y, const Tensor& x, const Shape& x_shape, const Tensor& w,
                             Tensor* grad_x, Tensor* grad_w, const ConvParams& p) {
  if (!applies(x_shape, w, p)) return false;
  const Geometry g(x_shape, grad_y.sizes(), w, p);
  const std::vector<bool> taps = g.taps();
  dispatch_floating(w.dtype(), "conv2d", [&]<typename T>() {
    using A = acc_type<T>;
    const Planes<T> gys(grad_y);
    const T* wp = w.data<T>();
    const std::optional<Planes<T>> xs = grad_w ? std::optional<Planes<T>>(Planes<T>(x)) : std::nullopt;
    T* gxp = grad_x ? grad_x->data<T>() : nullptr;
    T* gwp = grad_w ? grad_w->data<T>() : nullptr;
    if (g.sh == 1 && g.sw == 1) {
      parallel_for(0, g.c, 1, [&](int64_t lo, int64_t hi) {
        Stacks<T, A> st(g);
        std::vector<A> sums(static_cast<size_t>(g.kh * g.kw)), f(static_cast<size_t>(g.kh * g.kw));
        for (int64_t c = lo; c < hi; ++c) {
          for (int64_t k = 0; k < g.kh * g.kw; ++k) f[size_t(k)] = taps[size_t(k)] ? A(wp[c * g.kh * g.kw + k]) : A(0);
          std::fill(sums.begin(), sums.end(), A(0));
          for (int64_t img0 = 0; img0 < g.n; img0 += st.images) {
            const int64_t count = std::min(st.images, g.n - img0), len = st.length(count);
            st.load_gy(gys, c, img0, count);
            if (gwp) st.load_x(*xs, c, img0, count);
            if (gxp) {
              std::fill(st.out.begin(), st.out.end(), A(0));
              dispatch_width(g.kw, [&]<int KW>() {
                for (int64_t ky = 0; ky < g.kh; ++ky)
                  if (g.row_meets(ky))
                    row_of_taps_adjoint<KW>(st.out.data() + g.tap_offset(ky, 0), st.gy0(), f.data() + ky * g.kw,
                                            g.kw, g.dw, len);
              });
            }
            if (gwp)
              for (int64_t tap = 0; tap < g.kh * g.kw; ++tap) {
                if (!taps[size_t(tap)]) continue;
                const A* s = st.gy0();
                const A* xin = st.x.data() + g.tap_offset(tap / g.kw, tap % g.kw);
                A sum = 0;
#pragma omp simd reduction(+ : sum)
                for (int64_t i = 0; i < len; ++i) sum += s[i] * xin[i];
                sums[size_t(tap)] += sum;
              }
            if (gxp)
              for (int64_t k = 0; k < count; ++k) {
                T* dst = gxp + ((img0 + k) * g.c + c) * g.h * g.w;
                const A* acc = st.out.data() + k * g.padded;
                for (int64_t iy = 0; iy < g.h; ++iy)
                  for (int64_t ix = 0; ix < g.w; ++ix)
                    dst[iy * g.w + ix] = T(acc[(iy + g.ph) * g.wp + ix + g.pw]);
              }
          }
          if (gwp)
            for (int64_t k = 0; k < g.kh * g.kw; ++k) gwp[c * g.kh * g.kw + k] = T(sums[size_t(k)]);
        }
      });
      return;
    }
    if (gxp) {
      parallel_for(0, g.n * g.c, 1, [&](int64_t lo, int64_t hi) {
        std::vector<A> acc(static_cast<size_t>(g.padded));
        for (int64_t plane = lo; plane < hi; ++plane) {
          const int64_t c = plane % g.c;
          std::fill(acc.begin(), acc.end(), A(0));
          const T* filter = wp + c * g.kh * g.kw;
          const T* src = gys.plane(plane / g.c, c);
          for (int64_t ky = 0; ky < g.kh; ++ky)
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              if (!taps[size_t(ky * g.kw + kx)]) continue;
              const A f = A(filter[ky * g.kw + kx]);
              A* dst = acc.data() + g.tap_offset(ky, kx);
              for (int64_t oy = 0; oy < g.oh; ++oy)
                for (int64_t ox = 0; ox < g.ow; ++ox)
                  dst[oy * g.sh * g.wp + ox * g.sw] += f * A(src[oy * gys.sy + ox * gys.sx]);
            }
          T* out = gxp + plane * g.h * g.w;
          for (int64_t iy = 0; iy < g.h; ++iy)
            for (int64_t ix = 0; ix < g.w; ++ix) out[iy * g.w + ix] = T(acc[size_t((iy + g.ph) * g.wp + ix + g.pw)]);
        }
      });
    }
    if (gwp) {
      parallel_for(0, g.c, 1, [&](int64_t lo, int64_t hi) {
        std::vector<A> in(static_cast<size_t>(g.padded)), sums(static_cast<size_t>(g.kh * g.kw));
        for (int64_t c = lo; c < hi; ++c) {
          std::fill(sums.begin(), sums.end(), A(0));
          for (int64_t img = 0; img < g.n; ++img) {
            g.pad(xs->plane(img, c), xs->sy, xs->sx, in.data());
            const T* src = gys.plane(img, c);
            for (int64_t ky = 0; ky < g.kh; ++ky)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                if (!taps[size_t(ky * g.kw + kx)]) continue;
                const A* xin = in.data() + g.tap_offset(ky, kx);
                A sum = 0;
                for (int64_t oy = 0; oy < g.oh; ++oy)
                  for (int64_t ox = 0; ox < g.ow; ++ox)
                    sum += A(src[oy * gys.sy + ox * gys.sx]) * xin[oy * g.sh * g.wp + ox * g.sw];
                sums[size_t(ky * g.kw + kx)] += sum;
              }
          }
          for (int64_t k = 0; k < g.kh * g.kw; ++k) gwp[c * g.kh * g.kw + k] = T(sums[size_t(k)]);
        }
      });
    }
  });
  return true;
}

}  // namespace mf::cpu
