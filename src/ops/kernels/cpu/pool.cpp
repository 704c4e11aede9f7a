// Pooling loops. Windows are walked kernel row by kernel row and kernel
// column by kernel column, with the output column innermost, so the inner
// loop is a contiguous (stride 1) or strided run the compiler vectorises,
// and each output still sees its window in PyTorch's (row, column) order.
#include "ops/kernels/cpu/pool.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

struct Planes {
  int64_t count, h, w, oh, ow;
};

Planes planes_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

// Runs fn(first, last) over planes in parallel, a plane being `work` elements.
template <typename F>
void for_planes(int64_t count, int64_t work, const F& fn) {
  parallel_for(0, count, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(work, 1)), fn);
}

// Output columns [lo, hi) whose input column o * stride - pad + offset lies in [0, w).
void valid_columns(int64_t ow, int64_t w, int64_t stride, int64_t pad, int64_t offset, int64_t& lo, int64_t& hi) {
  const int64_t shift = pad - offset;  // o * stride >= shift and o * stride < w + shift
  lo = shift <= 0 ? 0 : (shift + stride - 1) / stride;
  hi = w + shift <= 0 ? 0 : std::min(ow, (w + shift - 1) / stride + 1);
  hi = std::max(hi, lo);
}

template <typename T>
void max_forward(const Tensor& x_in, Tensor& y, Tensor& indices, const PoolParams& p) {
  using A = acc_type<T>;
  Tensor x = contiguous(x_in.detach());
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  int64_t* ip = indices.data<int64_t>();
  for_planes(g.count, g.h * g.w, [&](int64_t lo_plane, int64_t hi_plane) {
    std::vector<A> best(static_cast<size_t>(g.ow));
    std::vector<int64_t> where(static_cast<size_t>(g.ow));
    for (int64_t plane = lo_plane; plane < hi_plane; ++plane) {
      const T* in = xp + plane * g.h * g.w;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        std::fill(best.begin(), best.end(), -std::numeric_limits<A>::infinity());
        std::fill(where.begin(), where.end(), -1);
        for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
            int64_t lo, hi;
            valid_columns(g.ow, g.w, p.stride[1], p.padding[1], kw * p.dilation[1], lo, hi);
            const int64_t base = ih * g.w - p.padding[1] + kw * p.dilation[1];
            for (int64_t o = lo; o < hi; ++o) {
              const int64_t at = base + o * p.stride[1];
              const A v = A(in[at]);
              // The first valid element always lands (where < 0), so an
              // all -inf window still points inside itself.
              if (v > best[size_t(o)] || std::isnan(v) || where[size_t(o)] < 0) {
                best[size_t(o)] = v;
                where[size_t(o)] = at;
              }
            }
          }
        }
        T* out = yp + (plane * g.oh + oh) * g.ow;
        int64_t* idx = ip + (plane * g.oh + oh) * g.ow;
        for (int64_t o = 0; o < g.ow; ++o) {
          out[o] = T(best[size_t(o)]);
          idx[o] = where[size_t(o)];
        }
      }
    }
  });
}

template <typename T>
void max_scatter(const Tensor& gy_in, const Tensor& indices_in, Tensor& gx) {
  using A = acc_type<T>;
  Tensor gy = contiguous(gy_in.detach()), indices = contiguous(indices_in.detach());
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  const int64_t* ip = indices.data<int64_t>();
  T* gxp = gx.data<T>();
  for_planes(g.count, g.h * g.w, [&](int64_t lo, int64_t hi) {
    std::vector<A> acc(static_cast<size_t>(g.h * g.w));
    for (int64_t plane = lo; plane < hi; ++plane) {
      std::fill(acc.begin(), acc.end(), A(0));
      const T* src = gyp + plane * g.oh * g.ow;
      const int64_t* idx = ip + plane * g.oh * g.ow;
      for (int64_t i = 0; i < g.oh * g.ow; ++i)
        if (idx[i] >= 0) acc[size_t(idx[i])] += A(src[i]);
      T* dst = gxp + plane * g.h * g.w;
      for (int64_t i = 0; i < g.h * g.w; ++i) dst[i] = T(acc[size_t(i)]);
    }
  });
}

template <typename T>
void max_gather(const Tensor& t_in, const Tensor& indices_in, Tensor& out) {
  Tensor t = contiguous(t_in.detach()), indices = contiguous(indices_in.detach());
  const Planes g = planes_of(t, out);
  const T* tp = t.data<T>();
  const int64_t* ip = indices.data<int64_t>();
  T* op = out.data<T>();
  for_planes(g.count, g.oh * g.ow, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      const T* src = tp + plane * g.h * g.w;
      const int64_t* idx = ip + plane * g.oh * g.ow;
      T* dst = op + plane * g.oh * g.ow;
      for (int64_t i = 0; i < g.oh * g.ow; ++i) dst[i] = idx[i] >= 0 ? src[idx[i]] : T(0);
    }
  });
}

// The window of output (oh, ow) for average pooling: [h0, h1) x [w0, w1)
// clipped to the input, and the divisor PyTorch uses for it.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

AvgWindow avg_window(int64_t oh, int64_t ow, const Planes& g, const PoolParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], g.h + p.padding[0]), w1 = std::min(w0 + p.kernel[1], g.w + p.padding[1]);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.h);
  w1 = std::min(w1, g.w);
  const int64_t divisor = p.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, divisor};
}

template <typename T>
void avg_forward(const Tensor& x_in, Tensor& y, const PoolParams& p) {
  using A = acc_type<T>;
  Tensor x = contiguous(x_in.detach());
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for_planes(g.count, g.h * g.w, [&](int64_t lo_plane, int64_t hi_plane) {
    std::vector<A> sum(static_cast<size_t>(g.ow));
    for (int64_t plane = lo_plane; plane < hi_plane; ++plane) {
      const T* in = xp + plane * g.h * g.w;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        std::fill(sum.begin(), sum.end(), A(0));
        for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + kh;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
            int64_t lo, hi;
            valid_columns(g.ow, g.w, p.stride[1], p.padding[1], kw, lo, hi);
            const T* row = in + ih * g.w - p.padding[1] + kw;
            for (int64_t o = lo; o < hi; ++o) sum[size_t(o)] += A(row[o * p.stride[1]]);
          }
        }
        T* out = yp + (plane * g.oh + oh) * g.ow;
        for (int64_t o = 0; o < g.ow; ++o) {
          const AvgWindow win = avg_window(oh, o, g, p);
          out[o] = win.h0 >= win.h1 || win.w0 >= win.w1 ? T(0) : T(sum[size_t(o)] / A(win.divisor));
        }
      }
    }
  });
}

template <typename T>
void avg_backward(const Tensor& gy_in, Tensor& gx, const PoolParams& p) {
  using A = acc_type<T>;
  Tensor gy = contiguous(gy_in.detach());
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  T* gxp = gx.data<T>();
  for_planes(g.count, g.h * g.w, [&](int64_t lo, int64_t hi) {
    std::vector<A> acc(static_cast<size_t>(g.h * g.w));
    for (int64_t plane = lo; plane < hi; ++plane) {
      std::fill(acc.begin(), acc.end(), A(0));
      const T* src = gyp + plane * g.oh * g.ow;
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const AvgWindow win = avg_window(oh, ow, g, p);
          if (win.h0 >= win.h1 || win.w0 >= win.w1) continue;
          const A share = A(src[oh * g.ow + ow]) / A(win.divisor);
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) acc[size_t(ih * g.w + iw)] += share;
        }
      T* dst = gxp + plane * g.h * g.w;
      for (int64_t i = 0; i < g.h * g.w; ++i) dst[i] = T(acc[size_t(i)]);
    }
  });
}

// Adaptive windows: output i of n over an input of size m covers
// [floor(i * m / n), ceil((i + 1) * m / n)).
int64_t window_start(int64_t i, int64_t n, int64_t m) { return (i * m) / n; }
int64_t window_end(int64_t i, int64_t n, int64_t m) { return ((i + 1) * m + n - 1) / n; }

template <typename T>
void adaptive_forward(const Tensor& x_in, Tensor& y) {
  using A = acc_type<T>;
  Tensor x = contiguous(x_in.detach());
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for_planes(g.count, g.h * g.w, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      const T* in = xp + plane * g.h * g.w;
      T* out = yp + plane * g.oh * g.ow;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t h0 = window_start(oh, g.oh, g.h), h1 = window_end(oh, g.oh, g.h);
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t w0 = window_start(ow, g.ow, g.w), w1 = window_end(ow, g.ow, g.w);
          A sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) sum += A(in[ih * g.w + iw]);
          out[oh * g.ow + ow] = T(sum / A((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

template <typename T>
void adaptive_backward(const Tensor& gy_in, Tensor& gx) {
  using A = acc_type<T>;
  Tensor gy = contiguous(gy_in.detach());
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  T* gxp = gx.data<T>();
  for_planes(g.count, g.h * g.w, [&](int64_t lo, int64_t hi) {
    std::vector<A> acc(static_cast<size_t>(g.h * g.w));
    for (int64_t plane = lo; plane < hi; ++plane) {
      std::fill(acc.begin(), acc.end(), A(0));
      const T* src = gyp + plane * g.oh * g.ow;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t h0 = window_start(oh, g.oh, g.h), h1 = window_end(oh, g.oh, g.h);
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t w0 = window_start(ow, g.ow, g.w), w1 = window_end(ow, g.ow, g.w);
          const A share = A(src[oh * g.ow + ow]) / A((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) acc[size_t(ih * g.w + iw)] += share;
        }
      }
      T* dst = gxp + plane * g.h * g.w;
      for (int64_t i = 0; i < g.h * g.w; ++i) dst[i] = T(acc[size_t(i)]);
    }
  });
}

template <typename F>
void dispatch_pool(DType dtype, const char* op, F&& fn) {
  dispatch_floating(dtype, op, std::forward<F>(fn));
}

}  // namespace

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolParams& p) {
  dispatch_pool(x.dtype(), "max_pool2d", [&]<typename T>() { max_forward<T>(x, y, indices, p); });
}
void max_pool2d_scatter(const Tensor& grad_y, const Tensor& indices, Tensor& grad_x) {
  dispatch_pool(grad_y.dtype(), "max_pool2d", [&]<typename T>() { max_scatter<T>(grad_y, indices, grad_x); });
}
void max_pool2d_gather(const Tensor& t, const Tensor& indices, Tensor& out) {
  dispatch_pool(t.dtype(), "max_pool2d", [&]<typename T>() { max_gather<T>(t, indices, out); });
}
void avg_pool2d_forward(const Tensor& x, Tensor& y, const PoolParams& p) {
  dispatch_pool(x.dtype(), "avg_pool2d", [&]<typename T>() { avg_forward<T>(x, y, p); });
}
void avg_pool2d_backward(const Tensor& grad_y, Tensor& grad_x, const PoolParams& p) {
  dispatch_pool(grad_y.dtype(), "avg_pool2d", [&]<typename T>() { avg_backward<T>(grad_y, grad_x, p); });
}
void adaptive_avg_pool2d_forward(const Tensor& x, Tensor& y) {
  dispatch_pool(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() { adaptive_forward<T>(x, y); });
}
void adaptive_avg_pool2d_backward(const Tensor& grad_y, Tensor& grad_x) {
  dispatch_pool(grad_y.dtype(), "adaptive_avg_pool2d", [&]<typename T>() { adaptive_backward<T>(grad_y, grad_x); });
}

}  // namespace mf::cpu
