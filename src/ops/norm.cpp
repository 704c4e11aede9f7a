// layer_norm and group_norm: fused forward kernels that also return the
// per-row mean and rstd, and fused backward ops for input, weight and bias.
//
// Note [Row normalisation]: both ops normalise contiguous rows of x and
// differ only in how the affine weight lines up with a row. A row is
// `segments` runs of `run` elements; run k of row r uses weight
// (r % groups) * segments + k.
//   layer_norm: rows = prod(leading dims), segments = prod(normalized_shape),
//               run = 1, groups = 1 (every element has its own weight)
//   group_norm: rows = N * G, segments = C / G, run = prod(spatial dims),
//               groups = G (one weight per channel)
// Statistics and gradient sums accumulate in double.
#include <cmath>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/vec_math.h"

namespace mf {
namespace {

using cpu::load_acc;
using cpu::store_acc;

struct RowLayout {
  int64_t rows = 0, segments = 0, run = 1, groups = 1;
  int64_t row_size() const { return segments * run; }
  int64_t num_weights() const { return groups * segments; }
  int64_t weight_base(int64_t row) const { return (row % groups) * segments; }
};

RowLayout layout_from_attrs(const Tensor& x, const Attrs& attrs) {
  RowLayout l;
  if (attrs.has("num_groups")) {
    const int64_t groups = attrs.get_int("num_groups");
    l.groups = groups;
    l.rows = x.sizes()[0] * groups;
    l.segments = x.sizes()[1] / groups;
    for (int64_t d = 2; d < x.dim(); ++d) l.run *= x.sizes()[size_t(d)];
  } else {
    const int64_t k = attrs.get_int("normalized_ndim");
    l.rows = 1, l.segments = 1;
    for (int64_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? l.rows : l.segments) *= x.sizes()[size_t(d)];
  }
  return l;
}

// The affine parameters as acc_type<T> arrays (ones and zeros when absent).
template <typename T>
std::pair<std::vector<acc_type<T>>, std::vector<acc_type<T>>> affine_params(const Tensor& weight, const Tensor& bias,
                                                                            int64_t n) {
  using A = acc_type<T>;
  std::vector<A> w(size_t(n), A(1)), b(size_t(n), A(0));
  for (auto [t, dst] : {std::pair{&weight, &w}, std::pair{&bias, &b}}) {
    if (!t->defined()) continue;
    Tensor c = contiguous(t->detach());
    const T* p = static_cast<const T*>(c.data_ptr());
    for (int64_t i = 0; i < n; ++i) (*dst)[size_t(i)] = A(p[i]);
  }
  return {std::move(w), std::move(b)};
}

int64_t row_grain(const RowLayout& l) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(l.row_size(), 1)); }

// --- forward -------------------------------------------------------------------------

template <typename T>
void forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps, const RowLayout& l,
             TensorList& out) {
  using A = acc_type<T>;
  Tensor x = contiguous(x_in.detach());
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(out[0].data_ptr());
  A* mean_p = static_cast<A*>(out[1].data_ptr());
  A* rstd_p = static_cast<A*>(out[2].data_ptr());
  auto [w, b] = affine_params<T>(weight, bias, l.num_weights());
  const int64_t n = l.row_size();
  parallel_for(0, l.rows, row_grain(l), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xa = xp + r * n;
      T* ya = yp + r * n;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += double(load_acc(xa, i));
      const double mean = n > 0 ? s / double(n) : 0.0;
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < n; ++i) ss += (double(load_acc(xa, i)) - mean) * (double(load_acc(xa, i)) - mean);
      const double rstd = 1.0 / std::sqrt((n > 0 ? ss / double(n) : 0.0) + eps);
      mean_p[r] = A(mean);
      rstd_p[r] = A(rstd);
      const A m = A(mean), rs = A(rstd);
      const A* wr = w.data() + l.weight_base(r);
      const A* br = b.data() + l.weight_base(r);
      if (l.run == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) store_acc(ya, i, (load_acc(xa, i) - m) * rs * wr[i] + br[i]);
      } else {
        for (int64_t k = 0; k < l.segments; ++k) {
          const A scale = rs * wr[k], shift = br[k] - m * scale;
          const T* xk = xa + k * l.run;
          T* yk = ya + k * l.run;
#pragma omp simd
          for (int64_t i = 0; i < l.run; ++i) store_acc(yk, i, load_acc(xk, i) * scale + shift);
        }
      }
    }
  });
}

// --- backward ------------------------------------------------------------------------
// With xhat = (x - mean) * rstd and gw = g * w (w of the element's segment),
// over the L elements of a row:
//   dx = rstd * (gw - sum(gw) / L - xhat * sum(gw * xhat) / L)
//   dw = sum over rows of g * xhat,  db = sum over rows of g

// Rows are split into a fixed number of chunks (independent of the thread
// count) whose weight-gradient partial sums are added in order, so results
// do not depend on the number of threads.
int64_t chunk_count(const RowLayout& l) {
  return std::max<int64_t>(1, std::min({l.rows * l.row_size() / (4 * kGrainSize), l.rows, int64_t(64)}));
}

template <typename T>
void backward(const TensorList& in, TensorList& out, const RowLayout& l, bool need_input, bool need_affine) {
  using A = acc_type<T>;
  Tensor g = contiguous(in[0].detach()), x = contiguous(in[1].detach());
  Tensor mean = contiguous(in[2].detach()), rstd = contiguous(in[3].detach());
  const T* gp = static_cast<const T*>(g.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  const A* mean_p = static_cast<const A*>(mean.data_ptr());
  const A* rstd_p = static_cast<const A*>(rstd.data_ptr());
  std::vector<A> w = affine_params<T>(in[4], Tensor(), l.num_weights()).first;
  T* dxp = need_input ? static_cast<T*>(out[0].data_ptr()) : nullptr;
  const int64_t n = l.row_size(), nw = l.num_weights(), chunks = chunk_count(l);
  // Partial dw (first nw) and db (next nw) of each chunk.
  std::vector<double> partial(need_affine ? size_t(chunks * 2 * nw) : 0, 0.0);
  parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    std::vector<double> seg_g(size_t(l.segments)), seg_gx(size_t(l.segments));
    for (int64_t chunk = cb; chunk < ce; ++chunk) {
      double* dw = need_affine ? partial.data() + chunk * 2 * nw : nullptr;
      double* db = need_affine ? dw + nw : nullptr;
      for (int64_t r = l.rows * chunk / chunks; r < l.rows * (chunk + 1) / chunks; ++r) {
        const T* ga = gp + r * n;
        const T* xa = xp + r * n;
        const A m = mean_p[r], rs = rstd_p[r];
        const A* wr = w.data() + l.weight_base(r);
        double sum_gw = 0, sum_gwx = 0;
        if (l.run == 1) {
#pragma omp simd reduction(+ : sum_gw, sum_gwx)
          for (int64_t i = 0; i < n; ++i) {
            const double gw = double(load_acc(ga, i)) * double(wr[i]);
            sum_gw += gw;
            sum_gwx += gw * double((load_acc(xa, i) - m) * rs);
          }
          if (need_affine) {
            double* dwr = dw + l.weight_base(r);
            double* dbr = db + l.weight_base(r);
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) {
              dwr[i] += double(load_acc(ga, i)) * double((load_acc(xa, i) - m) * rs);
              dbr[i] += double(load_acc(ga, i));
            }
          }
        } else {
          for (int64_t k = 0; k < l.segments; ++k) {
            const T* gk = ga + k * l.run;
            const T* xk = xa + k * l.run;
            double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t i = 0; i < l.run; ++i) {
              sg += double(load_acc(gk, i));
              sgx += double(load_acc(gk, i)) * double((load_acc(xk, i) - m) * rs);
            }
            seg_g[size_t(k)] = sg, seg_gx[size_t(k)] = sgx;
            sum_gw += sg * double(wr[k]);
            sum_gwx += sgx * double(wr[k]);
          }
          if (need_affine)
            for (int64_t k = 0; k < l.segments; ++k) {
              dw[l.weight_base(r) + k] += seg_gx[size_t(k)];
              db[l.weight_base(r) + k] += seg_g[size_t(k)];
            }
        }
        if (!need_input) continue;
        const A a = A(sum_gw / double(n)), b = A(sum_gwx / double(n));
        T* da = dxp + r * n;
        if (l.run == 1) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) store_acc(da, i, rs * (load_acc(ga, i) * wr[i] - a - (load_acc(xa, i) - m) * rs * b));
        } else {
          for (int64_t k = 0; k < l.segments; ++k) {
            const T* gk = ga + k * l.run;
            const T* xk = xa + k * l.run;
            T* dk = da + k * l.run;
            const A wk = wr[k];
#pragma omp simd
            for (int64_t i = 0; i < l.run; ++i) store_acc(dk, i, rs * (load_acc(gk, i) * wk - a - (load_acc(xk, i) - m) * rs * b));
          }
        }
      }
    }
  });
  if (!need_affine) return;
  T* dwp = static_cast<T*>(out[1].data_ptr());
  T* dbp = static_cast<T*>(out[2].data_ptr());
  for (int64_t j = 0; j < nw; ++j) {
    double sw = 0, sb = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      sw += partial[size_t(chunk * 2 * nw + j)];
      sb += partial[size_t(chunk * 2 * nw + nw + j)];
    }
    dwp[j] = T(sw), dbp[j] = T(sb);
  }
}

// --- ops -----------------------------------------------------------------------------

DType stats_dtype(DType d) { return is_reduced_floating(d) ? kFloat32 : d; }

// Shape of the per-row statistics: layer_norm (leading dims), group_norm (N, G).
Shape stats_shape(const Tensor& x, const Attrs& attrs) {
  if (attrs.has("num_groups")) return {x.sizes()[0], attrs.get_int("num_groups")};
  return Shape(x.sizes().begin(), x.sizes().end() - attrs.get_int("normalized_ndim"));
}

Shape affine_shape(const Tensor& x, const Attrs& attrs) {
  if (attrs.has("num_groups")) return {x.sizes()[1]};
  return Shape(x.sizes().end() - attrs.get_int("normalized_ndim"), x.sizes().end());
}

std::vector<TensorMeta> infer_forward(const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Shape stats = stats_shape(x, attrs);
  return {{x.sizes(), x.dtype(), x.device()},
          {stats, stats_dtype(x.dtype()), x.device()},
          {stats, stats_dtype(x.dtype()), x.device()}};
}

void forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const RowLayout l = layout_from_attrs(in[0], attrs);
  dispatch_floating(in[0].dtype(), "norm", [&]<typename T>() {
    forward<T>(in[0], in[1], in[2], attrs.get_float("eps"), l, out);
  });
}

// Inputs (grad, x, mean, rstd, weight); outputs (dx, dweight, dbias), each
// empty when not asked for (attrs need_input, need_affine).
std::vector<TensorMeta> infer_backward(const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[1];
  const bool affine = attrs.get_bool("need_affine");
  const Shape ws = affine ? affine_shape(x, attrs) : Shape{0};
  return {{attrs.get_bool("need_input") ? x.sizes() : Shape{0}, x.dtype(), x.device()},
          {ws, x.dtype(), x.device()},
          {ws, x.dtype(), x.device()}};
}

void backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const RowLayout l = layout_from_attrs(in[1], attrs);
  dispatch_floating(in[1].dtype(), "norm_backward", [&]<typename T>() {
    backward<T>(in, out, l, attrs.get_bool("need_input"), attrs.get_bool("need_affine"));
  });
}

// Note [Twice-differentiable norm backward]: while the graph of a gradient
// is being recorded (create_graph, i.e. grad mode on inside backward), the
// norm ops' backward is written with ops, recomputing the statistics from
// x, so that the gradient can be differentiated again. Otherwise one call of
// the fused backward op does the work.
TensorList composite_norm_backward(const BackwardContext& ctx) {
  const Tensor& g = ctx.grad_outputs[0];
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[1];
  const bool group = ctx.attrs.has("num_groups");
  const Shape rows = group ? Shape{x.sizes()[0] * ctx.attrs.get_int("num_groups"), -1}
                           : Shape{-1, shape_numel(affine_shape(x, ctx.attrs))};
  // Weight and bias line up with x's trailing dims (layer_norm) or dim 1.
  Shape param_view = affine_shape(x, ctx.attrs);
  Shape param_dims;  // dims of x summed for the weight and bias gradients
  if (group) {
    param_view.resize(size_t(x.dim() - 1), 1);
    for (int64_t d = 0; d < x.dim(); ++d)
      if (d != 1) param_dims.push_back(d);
  }
  auto reduce_to_param = [&](const Tensor& t) {
    return group ? sum(t, param_dims) : sum_to(t, affine_shape(x, ctx.attrs));
  };
  Tensor x2 = reshape(x, rows);
  Tensor centered = sub(x2, mean(x2, {1}, true));
  Tensor rstd = rsqrt(add(mean(mul(centered, centered), {1}, true), ctx.attrs.get_float("eps")));
  Tensor xhat2 = mul(centered, rstd);
  Tensor xhat = reshape(xhat2, x.sizes());
  TensorList grads(3);
  if (ctx.needs_input_grad[0]) {
    Tensor gw2 = reshape(w.defined() ? mul(g, reshape(w, param_view)) : g, rows);
    Tensor dx2 = mul(rstd, sub(sub(gw2, mean(gw2, {1}, true)), mul(xhat2, mean(mul(gw2, xhat2), {1}, true))));
    grads[0] = reshape(dx2, x.sizes());
  }
  if (ctx.needs_input_grad[1]) grads[1] = reduce_to_param(mul(g, xhat));
  if (ctx.needs_input_grad[2]) grads[2] = reduce_to_param(g);
  return grads;
}

TensorList norm_backward(const BackwardContext& ctx, const OpDef& backward_op) {
  if (GradMode::is_enabled()) return composite_norm_backward(ctx);
  const bool need_input = ctx.needs_input_grad[0];
  const bool need_affine = ctx.needs_input_grad[1] || ctx.needs_input_grad[2];
  Attrs attrs = ctx.attrs;
  attrs.set("need_input", need_input).set("need_affine", need_affine);
  TensorList g = dispatch::apply(
      backward_op, {ctx.grad_outputs[0], ctx.inputs[0], ctx.outputs[1], ctx.outputs[2], ctx.inputs[1]}, attrs);
  return {need_input ? g[0] : Tensor(), ctx.needs_input_grad[1] ? g[1] : Tensor(),
          ctx.needs_input_grad[2] ? g[2] : Tensor()};
}

// SBP rules: rows are normalised on their own, so a split of a dim before
// the normalised ones (group_norm: the batch dim) splits the output and the
// statistics; the weight and bias gradients of split rows are partial sums.
// Outputs not asked for (empty) stay broadcast.
SbpRuleFn norm_sbp(bool backward) {
  return [backward](const TensorList& in, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
    const Tensor& x = in[backward ? 1 : 0];
    const int64_t free = attrs.has("num_groups") ? 1 : x.dim() - attrs.get_int("normalized_ndim");
    std::vector<SbpSignature> sigs;
    for (int64_t d = 0; d < free; ++d) {
      const Sbp s = Sbp::split(d);
      if (!backward) {
        sigs.push_back({{s, Sbp::broadcast(), Sbp::broadcast()}, {s, s, s}});
      } else {
        const Sbp gx = attrs.get_bool("need_input") ? s : Sbp::broadcast();
        sigs.push_back({{s, s, s, s, Sbp::broadcast()}, {gx, Sbp::partial_sum(), Sbp::partial_sum()}});
      }
    }
    return sigs;
  };
}

MF_REGISTER_OP(OpDef{
    .name = "layer_norm",
    .inputs = {"input", "weight", "bias"},
    .infer = infer_forward,
    .cpu_kernel = forward_kernel,
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("layer_norm_backward");
      return norm_backward(ctx, op);
    },
    .save_inputs = 0b011,
    .save_outputs = 0b110,
    .sbp = norm_sbp(false),
});

MF_REGISTER_OP(OpDef{
    .name = "layer_norm_backward",
    .inputs = {"grad", "input", "mean", "rstd", "weight"},
    .infer = infer_backward,
    .cpu_kernel = backward_kernel,
    .differentiable = false,
    .sbp = norm_sbp(true),
});

MF_REGISTER_OP(OpDef{
    .name = "group_norm",
    .inputs = {"input", "weight", "bias"},
    .infer = infer_forward,
    .cpu_kernel = forward_kernel,
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("group_norm_backward");
      return norm_backward(ctx, op);
    },
    .save_inputs = 0b011,
    .save_outputs = 0b110,
    .sbp = norm_sbp(false),
});

MF_REGISTER_OP(OpDef{
    .name = "group_norm_backward",
    .inputs = {"grad", "input", "mean", "rstd", "weight"},
    .infer = infer_backward,
    .cpu_kernel = backward_kernel,
    .differentiable = false,
    .sbp = norm_sbp(true),
});

// weight/bias checked against `expected` and cast to x's dtype.
Tensor affine_arg(const char* op, const char* name, const Tensor& t, const Shape& expected, DType dtype) {
  if (!t.defined()) return t;
  MF_CHECK(t.sizes() == expected, ShapeError, op, ": ", name, " must have shape ", shape_str(expected), ", got ",
           shape_str(t.sizes()));
  MF_CHECK(is_floating(t.dtype()), TypeError, op, ": ", name, " must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
  return to(t, dtype);
}

void check_floating(const char* op, const Tensor& x) {
  MF_CHECK(is_floating(x.dtype()), TypeError, op, ": expected a floating-point input, got ", dtype_name(x.dtype()));
}

void check_eps(const char* op, double eps) {
  MF_CHECK(eps >= 0, ValueError, op, ": eps must be non-negative, got ", eps);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  static const OpDef& op = dispatch::op("layer_norm");
  check_floating("layer_norm", x);
  check_eps("layer_norm", eps);
  const int64_t k = int64_t(normalized_shape.size());
  MF_CHECK(k <= x.dim() && Shape(x.sizes().end() - k, x.sizes().end()) == normalized_shape, ShapeError,
           "layer_norm: normalized_shape ", shape_str(normalized_shape),
           " must equal the trailing dims of the input, got input of shape ", shape_str(x.sizes()));
  for (int64_t d : normalized_shape)
    MF_CHECK(d > 0, ShapeError, "layer_norm: normalized_shape must contain positive sizes, got ",
             shape_str(normalized_shape));
  return dispatch::apply(op,
                         {x, affine_arg("layer_norm", "weight", weight, normalized_shape, x.dtype()),
                          affine_arg("layer_norm", "bias", bias, normalized_shape, x.dtype())},
                         {{"normalized_ndim", k}, {"eps", eps}})[0];
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  static const OpDef& op = dispatch::op("group_norm");
  check_floating("group_norm", x);
  check_eps("group_norm", eps);
  MF_CHECK(x.dim() >= 2, ShapeError, "group_norm: expected an input of shape (N, C, *), got ", shape_str(x.sizes()));
  MF_CHECK(num_groups > 0, ValueError, "group_norm: num_groups must be positive, got ", num_groups);
  const int64_t channels = x.sizes()[1];
  MF_CHECK(channels % num_groups == 0, ShapeError, "group_norm: expected the number of channels (", channels,
           ") to be divisible by num_groups (", num_groups, "); input shape ", shape_str(x.sizes()));
  return dispatch::apply(op,
                         {x, affine_arg("group_norm", "weight", weight, {channels}, x.dtype()),
                          affine_arg("group_norm", "bias", bias, {channels}, x.dtype())},
                         {{"num_groups", num_groups}, {"eps", eps}})[0];
}

}  // namespace mf
