// The CPU kernels of softmax and log_softmax over one dim, and of their
// fused backward ops.
//
// Note [Softmax layouts]: the input is made contiguous and seen as
// (outer, n, inner) with n the softmax dim. When inner == 1 each row is
// contiguous and is processed alone, vectorised along the row. Otherwise a
// block of up to kColumnBlock neighbouring inner columns is processed at
// once, vectorised across the columns, so a softmax over dim 1 of
// (N, C, H, W) reads memory in order and needs no transpose.
// Every kernel is two passes over the data for the statistics (max, then
// the exp-sum) and one to write; 16-bit floats compute in float.
#include <cmath>

#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/vec_math.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

constexpr int64_t kColumnBlock = 64;

struct DimLayout {
  int64_t outer = 1, n = 1, inner = 1;
};

DimLayout layout_of(const Shape& sizes, int64_t dim) {
  DimLayout l;
  for (int64_t d = 0; d < int64_t(sizes.size()); ++d) {
    if (d < dim) l.outer *= sizes[size_t(d)];
    else if (d == dim) l.n = sizes[size_t(d)];
    else l.inner *= sizes[size_t(d)];
  }
  return l;
}

int64_t softmax_dim(const TensorList& in, const Attrs& attrs, const char* op) {
  return wrap_dim(attrs.get_int("dim"), std::max<int64_t>(in[0].dim(), 1), op);
}

// Rows of l.n elements per task when inner == 1, else column blocks.
int64_t grain_for(int64_t work_per_task) {
  return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(work_per_task, 1));
}

// Calls fn(outer_index, first_column, width) over every column block of a
// strided layout (inner > 1), in parallel.
template <typename F>
void for_each_column_block(const DimLayout& l, const F& fn) {
  const int64_t blocks = (l.inner + kColumnBlock - 1) / kColumnBlock;
  parallel_for(0, l.outer * blocks, grain_for(l.n * std::min(l.inner, kColumnBlock)), [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / blocks, c0 = (task % blocks) * kColumnBlock;
      fn(o, c0, std::min(kColumnBlock, l.inner - c0));
    }
  });
}

// --- forward -------------------------------------------------------------------------

// Rows read and write T directly (Note [Vectorised bfloat16 conversion]);
// only softmax's exp values wait in a float scratch row for 16-bit T.
template <typename T, bool Log>
void forward_rows(const T* x, T* y, const DimLayout& l) {
  using A = acc_type<T>;
  const int64_t n = l.n;
  parallel_for(0, l.outer, grain_for(n), [&](int64_t b, int64_t e) {
    AccRun<T> exps;
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      A m = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : m)
      for (int64_t i = 0; i < n; ++i) m = load_acc(xr, i) > m ? load_acc(xr, i) : m;
      A s = 0;
      if constexpr (Log) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += exp_acc(load_acc(xr, i) - m);
        const A lse = m + std::log(s);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) store_acc(yr, i, load_acc(xr, i) - lse);
      } else {
        A* ea = exps.scratch(yr, n);
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) {
          ea[i] = exp_acc(load_acc(xr, i) - m);
          s += ea[i];
        }
        const A inv = A(1) / s;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) store_acc(yr, i, ea[i] * inv);
      }
    }
  });
}

template <typename T, bool Log>
void forward_columns(const T* x, T* y, const DimLayout& l) {
  using A = acc_type<T>;
  constexpr bool kDirect = std::is_same_v<T, A>;  // exp values can be kept in y
  for_each_column_block(l, [&](int64_t o, int64_t c0, int64_t w) {
    A m[kColumnBlock], s[kColumnBlock];
    const int64_t base = o * l.n * l.inner + c0;
    for (int64_t c = 0; c < w; ++c) m[c] = -std::numeric_limits<A>::infinity(), s[c] = 0;
    for (int64_t d = 0; d < l.n; ++d) {
      const T* xd = x + base + d * l.inner;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) m[c] = load_acc(xd, c) > m[c] ? load_acc(xd, c) : m[c];
    }
    for (int64_t d = 0; d < l.n; ++d) {
      const T* xd = x + base + d * l.inner;
      T* yd = y + base + d * l.inner;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) {
        const A ev = exp_acc(load_acc(xd, c) - m[c]);
        s[c] += ev;
        if constexpr (!Log && kDirect) yd[c] = ev;
      }
    }
    if constexpr (Log) {
      for (int64_t c = 0; c < w; ++c) m[c] += std::log(s[c]);
      for (int64_t d = 0; d < l.n; ++d) {
        const T* xd = x + base + d * l.inner;
        T* yd = y + base + d * l.inner;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) store_acc(yd, c, load_acc(xd, c) - m[c]);
      }
    } else {
      for (int64_t c = 0; c < w; ++c) s[c] = A(1) / s[c];
      for (int64_t d = 0; d < l.n; ++d) {
        const T* xd = x + base + d * l.inner;
        T* yd = y + base + d * l.inner;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) {
          if constexpr (kDirect) yd[c] *= s[c];
          else store_acc(yd, c, exp_acc(load_acc(xd, c) - m[c]) * s[c]);
        }
      }
    }
  });
}

template <bool Log>
void forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const char* name = Log ? "log_softmax" : "softmax";
  if (out[0].numel() == 0) return;
  const DimLayout l = layout_of(in[0].sizes(), softmax_dim(in, attrs, name));
  Scratch taken(out);
  const Tensor x = dense(in[0], taken);
  dispatch_floating(x.dtype(), name, [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(out[0].data_ptr());
    if (l.inner == 1) forward_rows<T, Log>(xp, yp, l);
    else forward_columns<T, Log>(xp, yp, l);
  });
}

// --- backward ------------------------------------------------------------------------
// softmax:     dx = y * (g - sum(g * y))
// log_softmax: dx = g - exp(y) * sum(g)

template <typename T, bool Log>
void backward_rows(const T* g, const T* y, T* dx, const DimLayout& l) {
  using A = acc_type<T>;
  const int64_t n = l.n;
  parallel_for(0, l.outer, grain_for(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* gr = g + r * n;
      const T* yr = y + r * n;
      T* dr = dx + r * n;
      A s = 0;
      if constexpr (Log) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += load_acc(gr, i);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) store_acc(dr, i, load_acc(gr, i) - exp_acc(load_acc(yr, i)) * s);
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += load_acc(gr, i) * load_acc(yr, i);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) store_acc(dr, i, load_acc(yr, i) * (load_acc(gr, i) - s));
      }
    }
  });
}

template <typename T, bool Log>
void backward_columns(const T* g, const T* y, T* dx, const DimLayout& l) {
  using A = acc_type<T>;
  for_each_column_block(l, [&](int64_t o, int64_t c0, int64_t w) {
    A s[kColumnBlock];
    const int64_t base = o * l.n * l.inner + c0;
    for (int64_t c = 0; c < w; ++c) s[c] = 0;
    for (int64_t d = 0; d < l.n; ++d) {
      const T* gd = g + base + d * l.inner;
      const T* yd = y + base + d * l.inner;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) {
        if constexpr (Log) s[c] += load_acc(gd, c);
        else s[c] += load_acc(gd, c) * load_acc(yd, c);
      }
    }
    for (int64_t d = 0; d < l.n; ++d) {
      const T* gd = g + base + d * l.inner;
      const T* yd = y + base + d * l.inner;
      T* dd = dx + base + d * l.inner;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) {
        if constexpr (Log) store_acc(dd, c, load_acc(gd, c) - exp_acc(load_acc(yd, c)) * s[c]);
        else store_acc(dd, c, load_acc(yd, c) * (load_acc(gd, c) - s[c]));
      }
    }
  });
}

template <bool Log>
void backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const char* name = Log ? "log_softmax_backward" : "softmax_backward";
  if (out[0].numel() == 0) return;
  const DimLayout l = layout_of(in[0].sizes(), softmax_dim(in, attrs, name));
  Scratch taken(out);
  const Tensor g = dense(in[0], taken), y = dense(in[1], taken);
  dispatch_floating(y.dtype(), name, [&]<typename T>() {
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* yp = static_cast<const T*>(y.data_ptr());
    T* dp = static_cast<T*>(out[0].data_ptr());
    if (l.inner == 1) backward_rows<T, Log>(gp, yp, dp, l);
    else backward_columns<T, Log>(gp, yp, dp, l);
  });
}

}  // namespace

MF_REGISTER_KERNEL("softmax", DeviceType::CPU, forward_kernel<false>, dense_inputs_scratch("softmax", {0}));
MF_REGISTER_KERNEL("log_softmax", DeviceType::CPU, forward_kernel<true>, dense_inputs_scratch("log_softmax", {0}));
MF_REGISTER_KERNEL("softmax_backward", DeviceType::CPU, backward_kernel<false>,
                   dense_inputs_scratch("softmax_backward", {0, 1}));
MF_REGISTER_KERNEL("log_softmax_backward", DeviceType::CPU, backward_kernel<true>,
                   dense_inputs_scratch("log_softmax_backward", {0, 1}));

}  // namespace mf::cpu
