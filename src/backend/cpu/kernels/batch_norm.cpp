// The CPU kernels of batch_norm and batch_norm_backward (src/ops/batch_norm.cpp).
//
// Note [Channel layouts]: x is made contiguous and seen as (N, C, S). With
// S > 1 a task owns one channel and walks its N contiguous runs of S; with
// S == 1 ((N, C) inputs) a task owns a block of kChannelBlock neighbouring
// channels and walks the N rows, vectorised across the block. Either way a
// channel's values are visited in the same order whatever the thread count.
// Both forward and backward reduce to two primitives: per-channel sums and
// a per-channel affine map out = a * alpha[c] + b * beta[c] + gamma[c].
#include <cmath>

#include "backend/cpu/kernels/convert.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;

struct ChannelLayout {
  int64_t n = 1, c = 1, s = 1;
  int64_t per_channel() const { return n * s; }
};

ChannelLayout layout_of(const Tensor& x) {
  ChannelLayout l;
  l.n = x.sizes()[0], l.c = x.sizes()[1];
  for (int64_t d = 2; d < x.dim(); ++d) l.s *= x.sizes()[size_t(d)];
  return l;
}

// Calls fn(c0, c1) over channel blocks in parallel (one channel per block
// when S > 1).
template <typename F>
void for_each_channel_block(const ChannelLayout& l, const F& fn) {
  const int64_t width = l.s == 1 ? kChannelBlock : 1;
  const int64_t blocks = (l.c + width - 1) / width;
  const int64_t work = std::max<int64_t>(1, l.per_channel() * width);
  parallel_for(0, blocks, std::max<int64_t>(1, kGrainSize / work), [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) fn(blk * width, std::min(l.c, (blk + 1) * width));
  });
}

// What channel_sums adds up over the elements of channel c, in double:
//   Values:             a
//   SquaredDeviations:  (a - mean[c])^2
//   GradTimesCentered:  a * (b - mean[c])   (a = grad, b = x)
enum class ChannelSum { Values, SquaredDeviations, GradTimesCentered };

template <ChannelSum Kind, typename T>
inline double channel_term(T a, T b, double mean) {
  if constexpr (Kind == ChannelSum::Values) return double(a);
  else if constexpr (Kind == ChannelSum::SquaredDeviations) return (double(a) - mean) * (double(a) - mean);
  else return double(a) * (double(b) - mean);
}

// Runs of at most this many elements per (image, channel) are summed
// position by position.
constexpr int64_t kShortRun = 64;

// sums[c] += the Kind term over every element of channel c.
template <ChannelSum Kind, typename T>
void channel_sums(const ChannelLayout& l, const T* a, const T* b, const double* mean, double* sums) {
  constexpr bool kUsesB = Kind == ChannelSum::GradTimesCentered;
  for_each_channel_block(l, [&](int64_t c0, int64_t c1) {
    if (l.s == 1) {
      for (int64_t n = 0; n < l.n; ++n) {
        const T* ar = a + n * l.c;
        const T* br = kUsesB ? b + n * l.c : ar;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) sums[c] += channel_term<Kind>(ar[c], br[c], mean ? mean[c] : 0.0);
      }
      return;
    }
    const int64_t c = c0;
    const double m = mean ? mean[c] : 0.0;
    double acc = 0;
    if (l.s <= kShortRun) {
      // Short runs (the deep layers' 4x4 and 8x8 images): one partial sum
      // per position, reduced once per channel rather than once per image.
      double part[kShortRun] = {};
      for (int64_t n = 0; n < l.n; ++n) {
        const T* ar = a + (n * l.c + c) * l.s;
        const T* br = kUsesB ? b + (n * l.c + c) * l.s : ar;
#pragma omp simd
        for (int64_t i = 0; i < l.s; ++i) part[i] += channel_term<Kind>(ar[i], br[i], m);
      }
      for (int64_t i = 0; i < l.s; ++i) acc += part[i];
    } else {
      for (int64_t n = 0; n < l.n; ++n) {
        const T* ar = a + (n * l.c + c) * l.s;
        const T* br = kUsesB ? b + (n * l.c + c) * l.s : ar;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < l.s; ++i) acc += channel_term<Kind>(ar[i], br[i], m);
      }
    }
    sums[c] += acc;
  });
}

// out = a * alpha[c] + b * beta[c] + gamma[c] (b may be null), in float
// for the 16-bit types.
template <typename T>
void channel_affine(const ChannelLayout& l, const T* a, const T* b, T* out, const std::vector<double>& alpha,
                    const std::vector<double>& beta, const std::vector<double>& gamma) {
  using A = acc_type<T>;
  for_each_channel_block(l, [&](int64_t c0, int64_t c1) {
    if (l.s == 1) {
      A al[kChannelBlock], be[kChannelBlock], ga[kChannelBlock];
      for (int64_t c = c0; c < c1; ++c)
        al[c - c0] = A(alpha[size_t(c)]), be[c - c0] = A(beta[size_t(c)]), ga[c - c0] = A(gamma[size_t(c)]);
      for (int64_t n = 0; n < l.n; ++n) {
        const T* ar = a + n * l.c + c0;
        const T* br = b ? b + n * l.c + c0 : nullptr;
        T* orow = out + n * l.c + c0;
        if (br) {
          for (int64_t c = 0; c < c1 - c0; ++c) orow[c] = T(A(ar[c]) * al[c] + A(br[c]) * be[c] + ga[c]);
        } else {
          for (int64_t c = 0; c < c1 - c0; ++c) orow[c] = T(A(ar[c]) * al[c] + ga[c]);
        }
      }
      return;
    }
    const int64_t c = c0;
    const A al = A(alpha[size_t(c)]), be = A(beta[size_t(c)]), ga = A(gamma[size_t(c)]);
    for (int64_t n = 0; n < l.n; ++n) {
      const int64_t off = (n * l.c + c) * l.s;
      const T* ar = a + off;
      const T* br = b ? b + off : nullptr;
      T* orow = out + off;
      if (br) {
        for (int64_t i = 0; i < l.s; ++i) store_acc(orow, i, load_acc(ar, i) * al + load_acc(br, i) * be + ga);
      } else {
        for (int64_t i = 0; i < l.s; ++i) store_acc(orow, i, load_acc(ar, i) * al + ga);
      }
    }
  });
}

// A 1-d floating tensor (any strides) as doubles; `fill` when undefined.
std::vector<double> channel_values(const Tensor& t, int64_t c, double fill) {
  std::vector<double> v(size_t(c), fill);
  if (!t.defined()) return v;
  dispatch_floating(t.dtype(), "batch_norm", [&]<typename T>() {
    const T* p = static_cast<const T*>(t.data_ptr());
    for (int64_t i = 0; i < c; ++i) v[size_t(i)] = double(p[i * t.stride(0)]);
  });
  return v;
}

void write_channel_values(const Tensor& t, const std::vector<double>& v) {
  dispatch_floating(t.dtype(), "batch_norm", [&]<typename T>() {
    T* p = static_cast<T*>(t.data_ptr());
    for (size_t i = 0; i < v.size(); ++i) p[int64_t(i) * t.stride(0)] = T(v[i]);
  });
}

// --- forward -------------------------------------------------------------------------
// Inputs (x, weight, bias, running_mean, running_var); outputs (y, mean,
// invstd) where mean/invstd are the statistics used (batch or running).

void forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const bool training = attrs.get_bool("training");
  const double eps = attrs.get_float("eps"), momentum = attrs.get_float("momentum");
  Scratch taken(out);
  const Tensor x = dense(in[0], taken);
  const ChannelLayout l = layout_of(x);
  std::vector<double> mean(size_t(l.c), 0.0), invstd(size_t(l.c), 0.0);
  dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    if (training) {
      const double count = double(l.per_channel());
      channel_sums<ChannelSum::Values>(l, xp, xp, nullptr, mean.data());
      for (double& m : mean) m = count > 0 ? m / count : 0.0;
      std::vector<double> var(size_t(l.c), 0.0);
      channel_sums<ChannelSum::SquaredDeviations>(l, xp, xp, mean.data(), var.data());
      for (int64_t c = 0; c < l.c; ++c)
        invstd[size_t(c)] = 1.0 / std::sqrt((count > 0 ? var[size_t(c)] / count : 0.0) + eps);
      if (in[3].defined() && count > 1) {
        std::vector<double> rm = channel_values(in[3], l.c, 0.0), rv = channel_values(in[4], l.c, 1.0);
        for (int64_t c = 0; c < l.c; ++c) {
          rm[size_t(c)] = (1 - momentum) * rm[size_t(c)] + momentum * mean[size_t(c)];
          rv[size_t(c)] = (1 - momentum) * rv[size_t(c)] + momentum * var[size_t(c)] / (count - 1);
        }
        write_channel_values(in[3], rm);
        write_channel_values(in[4], rv);
      }
    } else {
      mean = channel_values(in[3], l.c, 0.0);
      std::vector<double> rv = channel_values(in[4], l.c, 1.0);
      for (int64_t c = 0; c < l.c; ++c) invstd[size_t(c)] = 1.0 / std::sqrt(rv[size_t(c)] + eps);
    }
    const std::vector<double> w = channel_values(in[1], l.c, 1.0), b = channel_values(in[2], l.c, 0.0);
    std::vector<double> scale(size_t(l.c)), shift(size_t(l.c));
    for (size_t c = 0; c < size_t(l.c); ++c) {
      scale[c] = invstd[c] * w[c];
      shift[c] = b[c] - mean[c] * scale[c];
    }
    channel_affine(l, xp, static_cast<const T*>(nullptr), static_cast<T*>(out[0].data_ptr()), scale,
                   std::vector<double>(size_t(l.c), 0.0), shift);
  });
  write_channel_values(out[1], mean);
  write_channel_values(out[2], invstd);
}

// --- backward ------------------------------------------------------------------------
// With xhat = (x - mean) * invstd, M = N * S values per channel,
// sg = sum(g), sgx = sum(g * xhat) per channel:
//   training: dx = w * invstd * (g - sg / M - xhat * sgx / M)
//   eval:     dx = w * invstd * g
//   dw = sgx, db = sg
// dx is the affine map g * alpha + x * beta + gamma with alpha = w * invstd,
// beta = -alpha * invstd * sgx / M (0 in eval), gamma = -alpha * sg / M - beta * mean.

void backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const bool training = attrs.get_bool("training");
  const bool need_input = attrs.get_bool("need_input"), need_affine = attrs.get_bool("need_affine");
  Scratch taken(out);
  const Tensor g = dense(in[0], taken), x = dense(in[1], taken);
  const ChannelLayout l = layout_of(x);
  const std::vector<double> mean = channel_values(in[2], l.c, 0.0), invstd = channel_values(in[3], l.c, 1.0);
  const std::vector<double> w = channel_values(in[4], l.c, 1.0);
  dispatch_floating(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    std::vector<double> sg(size_t(l.c), 0.0), sgx(size_t(l.c), 0.0);
    if (training || need_affine) {
      channel_sums<ChannelSum::Values>(l, gp, gp, nullptr, sg.data());
      channel_sums<ChannelSum::GradTimesCentered>(l, gp, xp, mean.data(), sgx.data());
      for (size_t c = 0; c < sgx.size(); ++c) sgx[c] *= invstd[c];
    }
    if (need_input) {
      const double count = double(l.per_channel());
      std::vector<double> alpha(size_t(l.c)), beta(size_t(l.c), 0.0), gamma(size_t(l.c), 0.0);
      for (size_t c = 0; c < size_t(l.c); ++c) {
        alpha[c] = w[c] * invstd[c];
        if (training) {
          beta[c] = -alpha[c] * invstd[c] * sgx[c] / count;
          gamma[c] = -alpha[c] * sg[c] / count - beta[c] * mean[c];
        }
      }
      channel_affine(l, gp, xp, static_cast<T*>(out[0].data_ptr()), alpha, beta, gamma);
    }
    if (need_affine) {
      write_channel_values(out[1], sgx);
      write_channel_values(out[2], sg);
    }
  });
}

}  // namespace

MF_REGISTER_KERNEL("batch_norm", DeviceType::CPU, forward_kernel, dense_inputs_scratch("batch_norm", {0}));
MF_REGISTER_KERNEL("batch_norm_backward", DeviceType::CPU, backward_kernel,
                   dense_inputs_scratch("batch_norm_backward", {0, 1}));

}  // namespace mf::cpu
