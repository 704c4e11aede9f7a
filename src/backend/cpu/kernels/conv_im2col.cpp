// Convolution by im2col + GEMM (Chellapilla et al. 2006): the reference
// path for float64 and the fallback for shapes or types oneDNN lacks.
// The float32 and float16 fallbacks run here in float32.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/conv_internal.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/loops.h"

namespace mf::cpu {
namespace {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Sizes of one convolution, in the names of the GEMMs. Spatial entries
// are (depth, height, width); a 2-d convolution has depth 1 throughout.
struct Geometry {
  int64_t n, c, o, groups;
  int64_t in[3], kernel[3], out[3];
  int64_t c_group() const { return c / groups; }
  int64_t o_group() const { return o / groups; }
  int64_t col_rows() const { return c_group() * kernel[0] * kernel[1] * kernel[2]; }  // rows of the column matrix
  int64_t pixels() const { return out[0] * out[1] * out[2]; }
  int64_t image() const { return in[0] * in[1] * in[2]; }  // elements of one input channel
};

Geometry geometry_of(const Shape& x, const Shape& w, const ConvParams& p) {
  Geometry g{x[0], x[1], w[0], p.groups, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  const size_t first = 5 - x.size();  // a 2-d convolution's shapes have no depth
  for (size_t d = first; d < 3; ++d) {
    g.in[d] = x[2 + d - first];
    g.kernel[d] = w[2 + d - first];
    g.out[d] = (g.in[d] + p.padding[d] + p.padding_end[d] - p.dilation[d] * (g.kernel[d] - 1) - 1) / p.stride[d] + 1;
  }
  return g;
}

// Output rows at least this wide are filled by memset and memmove.
constexpr int64_t kLongRow = 32;

// One output plane (OH, OW) of a column-matrix row: the input plane (H, W)
// read at kernel offsets (i, j); zero outside the plane.
template <typename T>
void im2col_plane(const T* plane, T* out_plane, int64_t i, int64_t j, const Geometry& g, const ConvParams& p) {
  const int64_t h = g.in[1], w = g.in[2], oh = g.out[1], ow = g.out[2];
  for (int64_t y = 0; y < oh; ++y) {
    const int64_t iy = y * p.stride[1] - p.padding[1] + i * p.dilation[1];
    T* out = out_plane + y * ow;
    if (iy < 0 || iy >= h) {
      std::fill(out, out + ow, T(0));
      continue;
    }
    const T* in = plane + iy * w;
    // Output columns x reading inside the row: 0 <= x * stride + off < w.
    const int64_t stride = p.stride[2], off = j * p.dilation[2] - p.padding[2];
    const int64_t lo = off >= 0 ? 0 : std::min(ow, (stride - 1 - off) / stride);
    const int64_t hi = std::max(lo, std::min(ow, w - off <= 0 ? 0 : (w - off + stride - 1) / stride));
    if (stride == 1 && ow >= kLongRow) {
      std::fill(out, out + lo, T(0));
      std::copy(in + lo + off, in + hi + off, out + lo);
      std::fill(out + hi, out + ow, T(0));
    } else {
      // Short or strided rows in one pass without library calls: on 4- and
      // 8-pixel rows a memset and a memmove per row cost more than the copy
      // (the clamp keeps the unused reads in the row).
      for (int64_t x = 0; x < ow; ++x) {
        const int64_t ix = std::clamp<int64_t>(x * stride + off, 0, w - 1);
        out[x] = x >= lo && x < hi ? in[ix] : T(0);
      }
    }
  }
}

// Calls fn(row, plane, i, j, at) for each row of the column matrix (its
// channel and kernel offset (a, i, j)) and each output depth z: plane is
// the input plane (H, W) that row reads at z, null where it reads depth
// padding, and `at` the offset of z's (OH, OW) block in the row.
template <typename T, typename F>
void for_col_planes(T* image, const Geometry& g, const ConvParams& p, const F& fn) {
  const int64_t plane = g.in[1] * g.in[2], out_plane = g.out[1] * g.out[2];
  for (int64_t c = 0; c < g.c_group(); ++c)
    for (int64_t a = 0; a < g.kernel[0]; ++a)
      for (int64_t i = 0; i < g.kernel[1]; ++i)
        for (int64_t j = 0; j < g.kernel[2]; ++j) {
          const int64_t row = ((c * g.kernel[0] + a) * g.kernel[1] + i) * g.kernel[2] + j;
          for (int64_t z = 0; z < g.out[0]; ++z) {
            const int64_t iz = z * p.stride[0] - p.padding[0] + a * p.dilation[0];
            T* in = iz < 0 || iz >= g.in[0] ? nullptr : image + (c * g.in[0] + iz) * plane;
            fn(row, in, i, j, z * out_plane);
          }
        }
}

// col (C_g*KD*KH*KW, OD*OH*OW) from image (C_g, D, H, W); zero outside the
// image. Row r of col starts at col + r * ld (ld = OD*OH*OW when col is its
// own matrix).
template <typename T>
void im2col(const T* image, T* col, const Geometry& g, const ConvParams& p, int64_t ld) {
  const int64_t out_plane = g.out[1] * g.out[2];
  for_col_planes(image, g, p, [&](int64_t row, const T* in, int64_t i, int64_t j, int64_t at) {
    T* out = col + row * ld + at;
    if (in) im2col_plane(in, out, i, j, g, p);
    else std::fill(out, out + out_plane, T(0));
  });
}

// image (C_g, D, H, W) += the columns of col, the adjoint of im2col.
template <typename T>
void col2im(const T* col, T* image, const Geometry& g, const ConvParams& p) {
  const int64_t h = g.in[1], w = g.in[2], oh = g.out[1], ow = g.out[2];
  for_col_planes(image, g, p, [&](int64_t row, T* plane, int64_t i, int64_t j, int64_t at) {
    if (!plane) return;
    const T* src = col + row * g.pixels() + at;
    for (int64_t y = 0; y < oh; ++y) {
      const int64_t iy = y * p.stride[1] - p.padding[1] + i * p.dilation[1];
      if (iy < 0 || iy >= h) continue;
      T* out = plane + iy * w;
      for (int64_t x = 0; x < ow; ++x) {
        const int64_t ix = x * p.stride[2] - p.padding[2] + j * p.dilation[2];
        if (ix >= 0 && ix < w) out[ix] += src[y * ow + x];
      }
    }
  });
}

// Column buffers for the images' threads: one per thread (at most one per
// image), image n using buffer n % count.
std::vector<Tensor> column_buffers(const Geometry& g, int64_t images, DType dtype, Workspace& ws) {
  return ws.take_slots(std::min<int64_t>(get_num_threads(), images),
                       {checked_mul(g.col_rows(), g.pixels(), "conv", "column buffer elements")}, dtype);
}

// fn(n, col) for every image n, in parallel over the column buffers.
template <typename T, typename F>
void for_images(int64_t images, const std::vector<Tensor>& cols, const F& fn) {
  for_each_slot(images, int64_t(cols.size()),
                [&](int64_t slot, int64_t n) { fn(n, static_cast<T*>(cols[size_t(slot)].data_ptr())); });
}

template <typename T>
void forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, Tensor& y, const ConvParams& p,
             Workspace& ws) {
  const Geometry g = geometry_of(x_in.sizes(), w_in.sizes(), p);
  const Tensor x = dense(x_in, ws), w = dense(w_in, ws), bias = dense(bias_in, ws);
  const std::vector<Tensor> cols = column_buffers(g, g.n, y.dtype(), ws);
  if (ws.measuring()) return;
  const T* xp = x.data<T>();
  const T* wp = w.data<T>();
  const T* bp = bias.defined() ? bias.data<T>() : nullptr;
  T* yp = y.data<T>();
  // Images in parallel, each thread with its own column buffer.
  for_images<T>(g.n, cols, [&](int64_t n, T* col) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* image = xp + (n * g.c + grp * g.c_group()) * g.image();
      T* out = yp + (n * g.o + grp * g.o_group()) * g.pixels();
      im2col(image, col, g, p, g.pixels());
      gemm<T>(false, false, g.o_group(), g.pixels(), g.col_rows(), T(1), wp + grp * g.o_group() * g.col_rows(),
              g.col_rows(), col, g.pixels(), T(0), out, g.pixels());
      if (bp)
        for (int64_t o = 0; o < g.o_group(); ++o) {
          const T b = bp[grp * g.o_group() + o];
          for (int64_t i = 0; i < g.pixels(); ++i) out[o * g.pixels() + i] += b;
        }
    }
  });
}

template <typename T>
void backward(const Tensor& gy_in, const Tensor& x_in, const Shape& x_shape, const Tensor& w_in, Tensor* gx,
              Tensor* gw, const ConvParams& p, Workspace& ws) {
  const Geometry g = geometry_of(x_shape, w_in.sizes(), p);
  const Tensor gy = dense(gy_in, ws);
  const Tensor w = gx ? dense(w_in, ws) : Tensor(), x = gw ? dense(x_in, ws) : Tensor();
  const std::vector<Tensor> cols = column_buffers(g, gx ? g.n : 1, gy_in.dtype(), ws);
  if (ws.measuring()) return;
  const T* gyp = gy.data<T>();
  if (gx) {
    const T* wp = w.data<T>();
    T* gxp = gx->data<T>();
    for_images<T>(g.n, cols, [&](int64_t n, T* col) {
      std::fill(gxp + n * g.c * g.image(), gxp + (n + 1) * g.c * g.image(), T(0));
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        // col = W_g^T (C_g*K, O_g) @ gy_g (O_g, pixels)
        gemm<T>(true, false, g.col_rows(), g.pixels(), g.o_group(), T(1), wp + grp * g.o_group() * g.col_rows(),
                g.col_rows(), gyp + (n * g.o + grp * g.o_group()) * g.pixels(), g.pixels(), T(0), col,
                g.pixels());
        col2im(col, gxp + (n * g.c + grp * g.c_group()) * g.image(), g, p);
      }
    });
  }
  if (gw) {
    const T* xp = x.data<T>();
    T* gwp = gw->data<T>();
    T* col = static_cast<T*>(cols[0].data_ptr());
    std::fill(gwp, gwp + gw->numel(), T(0));
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        im2col(xp + (n * g.c + grp * g.c_group()) * g.image(), col, g, p, g.pixels());
        // gW_g (O_g, C_g*K) += gy_g (O_g, pixels) @ col^T
        gemm<T>(false, true, g.o_group(), g.col_rows(), g.pixels(), T(1),
                gyp + (n * g.o + grp * g.o_group()) * g.pixels(), g.pixels(), col, g.pixels(), T(1),
                gwp + grp * g.o_group() * g.col_rows(), g.col_rows());
      }
  }
}

// t as a contiguous float32 copy in ws (the 16-bit types' fallback).
Tensor as_float32(const Tensor& t, Workspace& ws) {
  if (!t.defined()) return t;
  Tensor out = ws.take(t.sizes(), DType::Float32);
  if (!ws.measuring()) copy_cast(out, t);
  return out;
}

}  // namespace

void im2col_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p,
                         Workspace& ws) {
  if (y.dtype() == DType::Float64) return forward<double>(x, w, bias, y, p, ws);
  if (y.dtype() == DType::Float32) return forward<float>(x, w, bias, y, p, ws);
  Tensor y32 = ws.take(y.sizes(), DType::Float32);
  forward<float>(as_float32(x, ws), as_float32(w, ws), as_float32(bias, ws), y32, p, ws);
  if (!ws.measuring()) copy_cast(y, y32);
}

void im2col_conv_backward(const Tensor& grad_y, const Tensor& x, const Shape& x_shape, const Tensor& w,
                          Tensor* grad_x, Tensor* grad_w, const ConvParams& p, Workspace& ws) {
  const DType dtype = grad_y.dtype();
  if (dtype == DType::Float64) return backward<double>(grad_y, x, x_shape, w, grad_x, grad_w, p, ws);
  if (dtype == DType::Float32) return backward<float>(grad_y, x, x_shape, w, grad_x, grad_w, p, ws);
  Tensor gx32 = grad_x ? ws.take(grad_x->sizes(), DType::Float32) : Tensor();
  Tensor gw32 = grad_w ? ws.take(grad_w->sizes(), DType::Float32) : Tensor();
  backward<float>(as_float32(grad_y, ws), grad_w ? as_float32(x, ws) : Tensor(), x_shape, as_float32(w, ws),
                  grad_x ? &gx32 : nullptr, grad_w ? &gw32 : nullptr, p, ws);
  if (ws.measuring()) return;
  if (grad_x) copy_cast(*grad_x, gx32);
  if (grad_w) copy_cast(*grad_w, gw32);
}

// Note [bfloat16 weight gradient by GEMM]: oneDNN 2.6's bfloat16
// weight-gradient kernel reduces over the batch with barriers between its
// threads; on small images (deep ResNet layers) it took 10 to 40 times the
// float32 kernel's time whenever a core was shared with another process. As
// one GEMM, gW (O, C*K) = gy (O, N*pixels) @ cols (C*K, N*pixels)^T (K the
// kernel size, pixels the output size)
// runs on the bfloat16 matmul (float32 accumulation) at its usual rate.
bool gemm_conv_weight_grad(const Tensor& grad_y, const Tensor& x_in, Tensor& grad_w, const ConvParams& p,
                           Workspace& ws) {
  const Geometry g = geometry_of(x_in.sizes(), grad_w.sizes(), p);
  const DType dtype = grad_w.dtype();
  if (g.groups != 1 || (dtype != DType::BFloat16 && dtype != DType::Float16)) return false;
  const int64_t np = g.n * g.pixels();
  const Tensor x = dense(x_in, ws), gy_dense = dense(grad_y, ws);
  Tensor cols = ws.take({g.col_rows(), np}, dtype);
  // grad_y (N, O, pixels) as (O, N * pixels).
  Tensor gy = ws.take({g.o, g.n, g.pixels()}, dtype);
  // gW (O, C*K) = gy @ cols^T
  Tensor gw = make_view(grad_w, {g.o, g.col_rows()}, {g.col_rows(), 1}, grad_w.storage_offset());
  const Tensor gy_rows = make_view(gy, {g.o, np}, {np, 1}, gy.storage_offset());
  const Tensor cols_t = make_view(cols, {np, g.col_rows()}, {1, np}, cols.storage_offset());
  if (ws.measuring()) {
    matmul(gy_rows, cols_t, gw, 1, 0, ws);
    return true;
  }
  copy_cast(gy, make_view(gy_dense, {g.o, g.n, g.pixels()}, {g.pixels(), g.o * g.pixels(), 1},
                          gy_dense.storage_offset()));
  dispatch_floating(dtype, "conv", [&]<typename T>() {
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      const T* xp = x.data<T>();
      T* cp = cols.data<T>();
      parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t n = lo; n < hi; ++n) im2col(xp + n * g.c * g.image(), cp + n * g.pixels(), g, p, np);
      });
    }
  });
  matmul(gy_rows, cols_t, gw, 1, 0, ws);
  return true;
}

}  // namespace mf::cpu
