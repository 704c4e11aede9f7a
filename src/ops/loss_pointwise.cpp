// Pointwise losses: mse_loss and binary_cross_entropy_with_logits.
#include <cmath>

#include "meshflow/dispatch.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "ops/kernels/cpu/loops.h"
#include "ops/loss_common.h"

namespace mf {

using loss_detail::parse_reduction;
using loss_detail::Reduction;

namespace {

// --- mse_loss ------------------------------------------------------------------------
// Inputs (input, target) of one dtype, broadcast together; output the
// squared errors ("none") or their sum or mean (0-d). The reduced forms sum
// fixed chunks in double and add the partial sums in order.

void mse_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Reduction r = parse_reduction("mse_loss", attrs.get_string("reduction"));
  dispatch_floating(in[0].dtype(), "mse_loss", [&]<typename T>() {
    using A = acc_type<T>;
    if (r == Reduction::None) {
      cpu::elementwise<T, T, T>(out[0], {&in[0], &in[1]}, [](T a, T b) {
        const A d = A(a) - A(b);
        return d * d;
      });
      return;
    }
    const Shape shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss");
    Tensor a = contiguous(expand(in[0].detach(), shape)), b = contiguous(expand(in[1].detach(), shape));
    const T* ap = static_cast<const T*>(a.data_ptr());
    const T* bp = static_cast<const T*>(b.data_ptr());
    const int64_t n = a.numel(), chunks = (n + kGrainSize - 1) / kGrainSize;
    std::vector<double> partial(size_t(chunks), 0.0);
    parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        double s = 0;
        const int64_t end = std::min(n, (c + 1) * kGrainSize);
#pragma omp simd reduction(+ : s)
        for (int64_t i = c * kGrainSize; i < end; ++i) {
          const double d = double(ap[i]) - double(bp[i]);
          s += d * d;
        }
        partial[size_t(c)] = s;
      }
    });
    double total = 0;
    for (double p : partial) total += p;
    *static_cast<T*>(out[0].data_ptr()) = T(r == Reduction::Mean ? total / double(n) : total);
  });
}

MF_REGISTER_OP(OpDef{
    .name = "mse_loss",
    .inputs = {"input", "target"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "mse_loss");
      const bool none = parse_reduction("mse_loss", attrs.get_string("reduction")) == Reduction::None;
      return std::vector<TensorMeta>{{none ? shape : Shape{}, in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = mse_kernel,
    // d/dinput = 2 * (input - target) * g (/ n for "mean"), summed back to
    // each input's shape; written with ops, so it is twice differentiable.
    .backward = [](const BackwardContext& ctx) {
      const Tensor& x = ctx.inputs[0];
      const Tensor& t = ctx.inputs[1];
      const Reduction r = parse_reduction("mse_loss", ctx.attrs.get_string("reduction"));
      Tensor d = sub(x, t);
      double factor = 2.0;
      if (r == Reduction::Mean) factor /= double(std::max<int64_t>(d.numel(), 1));
      Tensor grad = mul(d, mul(ctx.grad_outputs[0], factor));
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(grad, ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = neg(sum_to(grad, ctx.input_metas[1].sizes));
      return grads;
    },
    .save_inputs = 0b11,
});

// --- binary_cross_entropy_with_logits ------------------------------------------------
// Per element, with sp(z) = log(1 + exp(z)) computed as max(z, 0) + log1p(exp(-|z|)),
// lw = 1 + (pos_weight - 1) * t:
//   loss = w * ((1 - t) * x + lw * sp(-x))
//   d/dx = w * ((1 - t) - lw * sigmoid(-x))
//   d/dt = w * (-x + (pos_weight - 1) * sp(-x))
//   d/dpos_weight = w * t * sp(-x)
//   d/dw = loss / w
// Inputs (x, t, w, pos_weight); w and pos_weight broadcast to x's shape and
// may be undefined (1).

template <typename A>
inline A softplus_neg(A x) {  // sp(-x)
  return std::max(-x, A(0)) + std::log1p(std::exp(-std::abs(x)));
}

template <typename A>
inline A sigmoid_neg(A x) {  // sigmoid(-x)
  if (x >= 0) {
    const A z = std::exp(-x);
    return z / (1 + z);
  }
  return 1 / (1 + std::exp(x));
}

// t, or a 0-d one of dtype when t is undefined.
Tensor or_one(const Tensor& t, DType dtype) { return t.defined() ? t : full({}, 1, {.dtype = dtype}); }

void bce_kernel(const TensorList& in, TensorList& out, const Attrs&) {
  const TensorList args{in[0], in[1], or_one(in[2], in[0].dtype()), or_one(in[3], in[0].dtype())};
  dispatch_floating(in[0].dtype(), "binary_cross_entropy_with_logits", [&]<typename T>() {
    using A = acc_type<T>;
    cpu::elementwise<T, T, T, T, T>(out[0], {&args[0], &args[1], &args[2], &args[3]}, [](T xv, T tv, T wv, T pv) {
      const A x = A(xv), t = A(tv);
      const A lw = 1 + (A(pv) - 1) * t;
      return A(wv) * ((1 - t) * x + lw * softplus_neg(x));
    });
  });
}

// Inputs (grad, x, t, w, pos_weight); attr wrt: "input", "target" or
// "pos_weight"; output the elementwise gradient in x's shape.
void bce_backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const std::string& wrt = attrs.get_string("wrt");
  const TensorList args{in[0], in[1], in[2], or_one(in[3], in[1].dtype()), or_one(in[4], in[1].dtype())};
  dispatch_floating(in[1].dtype(), "binary_cross_entropy_with_logits_backward", [&]<typename T>() {
    using A = acc_type<T>;
    auto run = [&](auto f) {
      cpu::elementwise<T, T, T, T, T, T>(out[0], {&args[0], &args[1], &args[2], &args[3], &args[4]},
                                         [&](T gv, T xv, T tv, T wv, T pv) {
                                           return A(gv) * A(wv) * f(A(xv), A(tv), A(pv));
                                         });
    };
    if (wrt == "input") run([](A x, A t, A pw) { return (1 - t) - (1 + (pw - 1) * t) * sigmoid_neg(x); });
    else if (wrt == "target") run([](A x, A, A pw) { return -x + (pw - 1) * softplus_neg(x); });
    else run([](A x, A t, A) { return t * softplus_neg(x); });
  });
}

Tensor bce_elementwise(const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw) {
  static const OpDef& op = dispatch::op("binary_cross_entropy_with_logits");
  return dispatch::apply_one(op, {x, t, w, pw});
}

MF_REGISTER_OP(OpDef{
    .name = "binary_cross_entropy_with_logits",
    .inputs = {"input", "target", "weight", "pos_weight"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = bce_kernel,
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("binary_cross_entropy_with_logits_backward");
      const Tensor& g = ctx.grad_outputs[0];
      const TensorList& in = ctx.inputs;
      TensorList grads(4);
      for (auto [i, wrt] : {std::pair{0, "input"}, std::pair{1, "target"}, std::pair{3, "pos_weight"}}) {
        if (!ctx.needs_input_grad[size_t(i)]) continue;
        Tensor full_grad = dispatch::apply_one(op, {g, in[0], in[1], in[2], in[3]}, {{"wrt", wrt}});
        grads[size_t(i)] = sum_to(full_grad, ctx.input_metas[size_t(i)].sizes);
      }
      if (ctx.needs_input_grad[2])
        grads[2] = sum_to(mul(g, bce_elementwise(in[0], in[1], Tensor(), in[3])), ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b1111,
});

MF_REGISTER_OP(OpDef{
    .name = "binary_cross_entropy_with_logits_backward",
    .inputs = {"grad", "input", "target", "weight", "pos_weight"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[1].sizes(), in[1].dtype(), in[1].device()}};
    },
    .cpu_kernel = bce_backward_kernel,
    .differentiable = false,
});

Tensor reduce_loss(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::None: return loss;
    case Reduction::Sum: return sum(loss);
    case Reduction::Mean: return mean(loss);
  }
  return loss;
}

// Checks that t (if defined) broadcasts to `shape` and casts it to dtype.
Tensor broadcastable_arg(const char* op, const char* name, const Tensor& t, const Shape& shape, DType dtype) {
  if (!t.defined()) return t;
  MF_CHECK(is_floating(t.dtype()), TypeError, op, ": ", name, " must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
  MF_CHECK(broadcast_shapes(t.sizes(), shape, op) == shape, ShapeError, op, ": ", name, " of shape ",
           shape_str(t.sizes()), " must broadcast to the input's shape ", shape_str(shape));
  return to(t, dtype);
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  static const OpDef& op = dispatch::op("mse_loss");
  parse_reduction("mse_loss", reduction);
  const DType dt = result_type(input, target);
  MF_CHECK(is_floating(dt), TypeError, "mse_loss: expected floating-point input and target, got ",
           dtype_name(input.dtype()), " and ", dtype_name(target.dtype()));
  return dispatch::apply_one(op, {to(input, dt), to(target, dt)}, {{"reduction", reduction}});
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, const std::string& reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  const Reduction r = parse_reduction(op, reduction);
  MF_CHECK(is_floating(input.dtype()), TypeError, op, ": expected a floating-point input, got ",
           dtype_name(input.dtype()));
  MF_CHECK(target.sizes() == input.sizes(), ValueError, op, ": target size ", shape_str(target.sizes()),
           " must be the same as input size ", shape_str(input.sizes()));
  const DType dt = input.dtype();
  Tensor loss = bce_elementwise(input, to(target, dt), broadcastable_arg(op, "weight", weight, input.sizes(), dt),
                                broadcastable_arg(op, "pos_weight", pos_weight, input.sizes(), dt));
  return reduce_loss(loss, r);
}

}  // namespace mf
