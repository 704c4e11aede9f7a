// softmax and log_softmax over one dim, and their fused backward ops.
//
// Note [Softmax layouts]: the input is made contiguous and seen as
// (outer, n, inner) with n the softmax dim. When inner == 1 each row is
// contiguous and is processed alone, vectorised along the row. Otherwise a
// block of up to kColumnBlock neighbouring inner columns is processed at
// once, vectorised across the columns, so a softmax over dim 1 of
// (N, C, H, W) reads memory in order and needs no transpose.
// Every kernel is two passes over the data for the statistics (max, then
// the exp-sum) and one to write; 16-bit floats compute in float.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/vec_math.h"

namespace mf {
namespace {

using cpu::AccRun;
using cpu::exp_acc;
using cpu::load_acc;
using cpu::store_acc;

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
  Tensor x = contiguous(in[0].detach());
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
  Tensor g = contiguous(in[0].detach());
  Tensor y = contiguous(in[1].detach());
  dispatch_floating(y.dtype(), name, [&]<typename T>() {
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* yp = static_cast<const T*>(y.data_ptr());
    T* dp = static_cast<T*>(out[0].data_ptr());
    if (l.inner == 1) backward_rows<T, Log>(gp, yp, dp, l);
    else backward_columns<T, Log>(gp, yp, dp, l);
  });
}

std::vector<TensorMeta> infer_forward(const TensorList& in, const Attrs& attrs, const char* op) {
  MF_CHECK(is_floating(in[0].dtype()), TypeError, op, ": expected a floating-point input, got ",
           dtype_name(in[0].dtype()));
  softmax_dim(in, attrs, op);
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> infer_backward(const TensorList& in, const Attrs& attrs, const char* op) {
  MF_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), ShapeError, op,
           ": grad and output must have the same shape and dtype, got ", shape_str(in[0].sizes()), " ",
           dtype_name(in[0].dtype()), " and ", shape_str(in[1].sizes()), " ", dtype_name(in[1].dtype()));
  return infer_forward(in, attrs, op);
}

Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  static const OpDef& op = dispatch::op("softmax_backward");
  return dispatch::apply_one(op, {grad, y}, {{"dim", dim}});
}

Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  static const OpDef& op = dispatch::op("log_softmax_backward");
  return dispatch::apply_one(op, {grad, y}, {{"dim", dim}});
}

MF_REGISTER_OP(OpDef{
    .name = "softmax",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_forward(in, attrs, "softmax"); },
    .cpu_kernel = forward_kernel<false>,
    .backward = [](const BackwardContext& ctx) {
      return TensorList{softmax_backward(ctx.grad_outputs[0], ctx.outputs[0], ctx.attrs.get_int("dim"))};
    },
    .save_outputs = 0b1,
    .sbp = sbp::independent_of_attr("dim"),
});

MF_REGISTER_OP(OpDef{
    .name = "log_softmax",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_forward(in, attrs, "log_softmax"); },
    .cpu_kernel = forward_kernel<true>,
    .backward = [](const BackwardContext& ctx) {
      return TensorList{log_softmax_backward(ctx.grad_outputs[0], ctx.outputs[0], ctx.attrs.get_int("dim"))};
    },
    .save_outputs = 0b1,
    .sbp = sbp::independent_of_attr("dim"),
});

// The backward ops are differentiable (double backward), written with ops.
// With s = sum(g * y) over dim, dx = y * (g - s):
//   d<gg, dx>/dg = y * (gg - sum(gg * y))          (softmax_backward(gg, y))
//   d<gg, dx>/dy = gg * (g - s) - g * sum(gg * y)
MF_REGISTER_OP(OpDef{
    .name = "softmax_backward",
    .inputs = {"grad", "output"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_backward(in, attrs, "softmax_backward"); },
    .cpu_kernel = backward_kernel<false>,
    .backward = [](const BackwardContext& ctx) {
      const int64_t dim = ctx.attrs.get_int("dim");
      const Tensor& gg = ctx.grad_outputs[0];
      const Tensor& g = ctx.inputs[0];
      const Tensor& y = ctx.inputs[1];
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = softmax_backward(gg, y, dim);
      if (ctx.needs_input_grad[1]) {
        Tensor s = sum(mul(g, y), {dim}, true);
        grads[1] = sub(mul(gg, sub(g, s)), mul(g, sum(mul(gg, y), {dim}, true)));
      }
      return grads;
    },
    .save_inputs = 0b11,
    .sbp = sbp::independent_of_attr("dim"),
});

// With p = exp(y) and S = sum(g) over dim, dx = g - p * S:
//   d<gg, dx>/dg = gg - sum(gg * p)
//   d<gg, dx>/dy = -gg * p * S
MF_REGISTER_OP(OpDef{
    .name = "log_softmax_backward",
    .inputs = {"grad", "output"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return infer_backward(in, attrs, "log_softmax_backward");
    },
    .cpu_kernel = backward_kernel<true>,
    .backward = [](const BackwardContext& ctx) {
      const int64_t dim = ctx.attrs.get_int("dim");
      const Tensor& gg = ctx.grad_outputs[0];
      const Tensor gg_p = mul(gg, exp(ctx.inputs[1]));
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sub(gg, sum(gg_p, {dim}, true));
      if (ctx.needs_input_grad[1]) grads[1] = neg(mul(gg_p, sum(ctx.inputs[0], {dim}, true)));
      return grads;
    },
    .save_inputs = 0b11,
    .sbp = sbp::independent_of_attr("dim"),
});

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  static const OpDef& op = dispatch::op("softmax");
  return dispatch::apply_one(op, {x}, {{"dim", dim}});
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  static const OpDef& op = dispatch::op("log_softmax");
  return dispatch::apply_one(op, {x}, {{"dim", dim}});
}

}  // namespace mf
