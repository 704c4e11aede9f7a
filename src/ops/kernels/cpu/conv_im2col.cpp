// Convolution by im2col + GEMM (Chellapilla et al. 2006): the reference
// path for float64 and the fallback for shapes or types oneDNN lacks.
// The float32 and float16 fallbacks run here in float32.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "meshflow/autograd.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "ops/kernels/cpu/conv.h"
#include "ops/kernels/cpu/conv_internal.h"
#include "ops/kernels/cpu/gemm.h"
#include "ops/kernels/cpu/loops.h"

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

// Sizes of one convolution, in the names of the GEMMs.
struct Geometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  int64_t c_group() const { return c / groups; }
  int64_t o_group() const { return o / groups; }
  int64_t col_rows() const { return c_group() * kh * kw; }  // rows of the column matrix
  int64_t pixels() const { return oh * ow; }
};

Geometry geometry_of(const Tensor& x, const Tensor& w, const ConvParams& p) {
  Geometry g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), 0, 0, p.groups};
  g.oh = (g.h + 2 * p.padding[0] - p.dilation[0] * (g.kh - 1) - 1) / p.stride[0] + 1;
  g.ow = (g.w + 2 * p.padding[1] - p.dilation[1] * (g.kw - 1) - 1) / p.stride[1] + 1;
  return g;
}

// Output rows at least this wide are filled by memset and memmove.
constexpr int64_t kLongRow = 32;

// col (C_g*KH*KW, OH*OW) from image (C_g, H, W); zero outside the image.
// Row r of col starts at col + r * ld (ld = OH*OW when col is its own matrix).

template <typename T>
void im2col(const T* image, T* col, const Geometry& g, const ConvParams& p, int64_t ld) {
  for (int64_t c = 0; c < g.c_group(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        for (int64_t y = 0; y < g.oh; ++y) {
          const int64_t iy = y * p.stride[0] - p.padding[0] + i * p.dilation[0];
          T* out = row + y * g.ow;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, T(0));
            continue;
          }
          const T* in = image + (c * g.h + iy) * g.w;
          // Output columns x reading inside the row: 0 <= x * stride + off < w.
          const int64_t stride = p.stride[1], off = j * p.dilation[1] - p.padding[1];
          const int64_t lo = off >= 0 ? 0 : std::min(g.ow, (stride - 1 - off) / stride);
          const int64_t hi = std::max(lo, std::min(g.ow, g.w - off <= 0 ? 0 : (g.w - off + stride - 1) / stride));
          if (stride == 1 && g.ow >= kLongRow) {
            std::fill(out, out + lo, T(0));
            std::copy(in + lo + off, in + hi + off, out + lo);
            std::fill(out + hi, out + g.ow, T(0));
          } else {
            // Short or strided rows in one pass without library calls: on
            // 4- and 8-pixel rows a memset and a memmove per row cost more
            // than the copy (the clamp keeps the unused reads in the row).
            for (int64_t x = 0; x < g.ow; ++x) {
              const int64_t ix = std::clamp<int64_t>(x * stride + off, 0, g.w - 1);
              out[x] = x >= lo && x < hi ? in[ix] : T(0);
            }
          }
        }
      }
}

// image (C_g, H, W) += the columns of col, the adjoint of im2col.
template <typename T>
void col2im(const T* col, T* image, const Geometry& g, const ConvParams& p) {
  for (int64_t c = 0; c < g.c_group(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * g.pixels();
        for (int64_t y = 0; y < g.oh; ++y) {
          const int64_t iy = y * p.stride[0] - p.padding[0] + i * p.dilation[0];
          if (iy < 0 || iy >= g.h) continue;
          T* out = image + (c * g.h + iy) * g.w;
          for (int64_t x = 0; x < g.ow; ++x) {
            const int64_t ix = x * p.stride[1] - p.padding[1] + j * p.dilation[1];
            if (ix >= 0 && ix < g.w) out[ix] += row[y * g.ow + x];
          }
        }
      }
}

template <typename T>
void forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, Tensor& y, const ConvParams& p) {
  const Geometry g = geometry_of(x_in, w_in, p);
  Tensor x = contiguous(x_in.detach()), w = contiguous(w_in.detach());
  Tensor bias = bias_in.defined() ? contiguous(bias_in.detach()) : Tensor();
  const T* xp = x.data<T>();
  const T* wp = w.data<T>();
  const T* bp = bias.defined() ? bias.data<T>() : nullptr;
  T* yp = y.data<T>();
  // One image per thread, each with its own column buffer.
  parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> col(static_cast<size_t>(g.col_rows() * g.pixels()));
    for (int64_t n = lo; n < hi; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const T* image = xp + (n * g.c + grp * g.c_group()) * g.h * g.w;
        T* out = yp + (n * g.o + grp * g.o_group()) * g.pixels();
        im2col(image, col.data(), g, p, g.pixels());
        gemm<T>(false, false, g.o_group(), g.pixels(), g.col_rows(), T(1), wp + grp * g.o_group() * g.col_rows(),
                g.col_rows(), col.data(), g.pixels(), T(0), out, g.pixels());
        if (bp)
          for (int64_t o = 0; o < g.o_group(); ++o) {
            const T b = bp[grp * g.o_group() + o];
            for (int64_t i = 0; i < g.pixels(); ++i) out[o * g.pixels() + i] += b;
          }
      }
  });
}

template <typename T>
void backward(const Tensor& gy_in, const Tensor& x_in, const Tensor& w_in, Tensor* gx, Tensor* gw,
              const ConvParams& p) {
  const Geometry g = geometry_of(x_in, w_in, p);
  Tensor gy = contiguous(gy_in.detach());
  const T* gyp = gy.data<T>();
  if (gx) {
    Tensor w = contiguous(w_in.detach());
    const T* wp = w.data<T>();
    T* gxp = gx->data<T>();
    parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> col(static_cast<size_t>(g.col_rows() * g.pixels()));
      for (int64_t n = lo; n < hi; ++n) {
        std::fill(gxp + n * g.c * g.h * g.w, gxp + (n + 1) * g.c * g.h * g.w, T(0));
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          // col = W_g^T (C_g*KH*KW, O_g) @ gy_g (O_g, OH*OW)
          gemm<T>(true, false, g.col_rows(), g.pixels(), g.o_group(), T(1), wp + grp * g.o_group() * g.col_rows(),
                  g.col_rows(), gyp + (n * g.o + grp * g.o_group()) * g.pixels(), g.pixels(), T(0), col.data(),
                  g.pixels());
          col2im(col.data(), gxp + (n * g.c + grp * g.c_group()) * g.h * g.w, g, p);
        }
      }
    });
  }
  if (gw) {
    Tensor x = contiguous(x_in.detach());
    const T* xp = x.data<T>();
    T* gwp = gw->data<T>();
    std::fill(gwp, gwp + gw->numel(), T(0));
    std::vector<T> col(static_cast<size_t>(g.col_rows() * g.pixels()));
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        im2col(xp + (n * g.c + grp * g.c_group()) * g.h * g.w, col.data(), g, p, g.pixels());
        // gW_g (O_g, C_g*KH*KW) += gy_g (O_g, OH*OW) @ col^T
        gemm<T>(false, true, g.o_group(), g.col_rows(), g.pixels(), T(1),
                gyp + (n * g.o + grp * g.o_group()) * g.pixels(), g.pixels(), col.data(), g.pixels(), T(1),
                gwp + grp * g.o_group() * g.col_rows(), g.col_rows());
      }
  }
}

// t as a contiguous float32 copy (the 16-bit types' fallback).
Tensor as_float32(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor out = make_empty(t.sizes(), DType::Float32);
  copy_cast(out, t);
  return out;
}

}  // namespace

void im2col_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p) {
  if (y.dtype() == DType::Float64) return forward<double>(x, w, bias, y, p);
  if (y.dtype() == DType::Float32) return forward<float>(x, w, bias, y, p);
  Tensor y32 = make_empty(y.sizes(), DType::Float32);
  forward<float>(as_float32(x), as_float32(w), as_float32(bias), y32, p);
  copy_cast(y, y32);
}

void im2col_conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& w, Tensor* grad_x, Tensor* grad_w,
                            const ConvParams& p) {
  const DType dtype = grad_y.dtype();
  if (dtype == DType::Float64) return backward<double>(grad_y, x, w, grad_x, grad_w, p);
  if (dtype == DType::Float32) return backward<float>(grad_y, x, w, grad_x, grad_w, p);
  Tensor gx32 = grad_x ? make_empty(grad_x->sizes(), DType::Float32) : Tensor();
  Tensor gw32 = grad_w ? make_empty(grad_w->sizes(), DType::Float32) : Tensor();
  backward<float>(as_float32(grad_y), as_float32(x), as_float32(w), grad_x ? &gx32 : nullptr,
                  grad_w ? &gw32 : nullptr, p);
  if (grad_x) copy_cast(*grad_x, gx32);
  if (grad_w) copy_cast(*grad_w, gw32);
}

// Note [bfloat16 weight gradient by GEMM]: oneDNN 2.6's bfloat16
// weight-gradient kernel reduces over the batch with barriers between its
// threads; on small images (deep ResNet layers) it took 10 to 40 times the
// float32 kernel's time whenever a core was shared with another process. As
// one GEMM, gW (O, C*KH*KW) = gy (O, N*OH*OW) @ cols (C*KH*KW, N*OH*OW)^T
// runs on the bfloat16 matmul (float32 accumulation) at its usual rate.
bool gemm_conv2d_weight_grad(const Tensor& grad_y, const Tensor& x_in, Tensor& grad_w, const ConvParams& p) {
  const Geometry g = geometry_of(x_in, grad_w, p);
  const DType dtype = grad_w.dtype();
  if (g.groups != 1 || (dtype != DType::BFloat16 && dtype != DType::Float16)) return false;
  NoGradGuard no_grad;
  const int64_t np = g.n * g.pixels();
  const Tensor x = contiguous(x_in.detach());
  Tensor cols = make_empty({g.col_rows(), np}, dtype);
  dispatch_floating(dtype, "conv2d", [&]<typename T>() {
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      const T* xp = x.data<T>();
      T* cp = cols.data<T>();
      parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t n = lo; n < hi; ++n) im2col(xp + n * g.c * g.h * g.w, cp + n * g.pixels(), g, p, np);
      });
    }
  });
  const Tensor gy = reshape(contiguous(permute(reshape(grad_y.detach(), {g.n, g.o, g.pixels()}), {1, 0, 2})),
                            {g.o, np});
  Tensor gw = make_view(grad_w, {g.o, g.col_rows()}, {g.col_rows(), 1}, grad_w.storage_offset());
  matmul(gy, transpose(cols, 0, 1), gw);
  return true;
}

}  // namespace mf::cpu
