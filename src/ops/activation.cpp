// Activations and clamping: relu, gelu, silu, leaky_relu, elu, softplus,
// clamp (scalar and tensor bounds), and the in-place relu_ / clamp_.
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "ops/elementwise_common.h"
#include "backend/cpu/kernels/math.h"

namespace mf {

using namespace elementwise_detail;

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;       // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;     // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;    // sqrt(2/pi)
constexpr double kGeluTanhCoeff = 0.044715;

InferFn infer_floating(const char* op) { return infer_unary(op, is_floating, "a floating-point"); }

// gelu''(x) from ops: phi(x) (2 - x^2) for "none"; for "tanh" (see
// gelu_backward) (1 - t^2) du + x (1 - t^2) (6 c k x - 2 t du^2) / 2.
Tensor gelu_second_derivative(const Tensor& x, const std::string& approximate) {
  Tensor x2 = square(x);
  if (approximate == "tanh") {
    Tensor t = tanh(mul(add(x, mul(mul(x2, x), kGeluTanhCoeff)), kSqrt2OverPi));
    Tensor du = mul(add(mul(x2, 3 * kGeluTanhCoeff), 1.0), kSqrt2OverPi);
    Tensor sech2 = rsub(square(t), 1.0);
    Tensor inner = sub(mul(x, 6 * kSqrt2OverPi * kGeluTanhCoeff), mul(mul(t, square(du)), 2.0));
    return add(mul(sech2, du), mul(mul(mul(x, sech2), inner), 0.5));
  }
  Tensor pdf = mul(exp(mul(x2, -0.5)), kInvSqrt2Pi);
  return mul(pdf, rsub(x2, 2.0));
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  static const OpDef& op = dispatch::op("gelu_backward");
  return dispatch::apply_one(op, {grad, x}, {{"approximate", approximate}});
}

MF_REGISTER_OP(OpDef{
    .name = "relu",
    .inputs = {"input"},
    .infer = infer_unary("relu", is_numeric, "a numeric (non-bool)"),
    // a < 0 ? 0 : a keeps NaN (PyTorch's relu propagates it).
    .cpu_kernel = unary_kernel("relu", [](auto a) { return a < decltype(a)(0) ? decltype(a)(0) : a; }),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{where(gt(ctx.outputs[0], 0), ctx.grad_outputs[0], Scalar(0))};
    },
    .save_outputs = 0b1,
    .inplace = true,
    .elementwise = true,
});

// gelu(x) = x Phi(x), Phi the standard normal CDF; "tanh" approximates Phi
// by (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2.
MF_REGISTER_OP(OpDef{
    .name = "gelu",
    .inputs = {"input"},
    .infer = infer_floating("gelu"),
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const bool tanh_form = attrs.get_string("approximate") == "tanh";
      dispatch_floating(in[0].dtype(), "gelu", [&]<typename T>() {
        using A = acc_type<T>;
        if (tanh_form) {
          cpu::elementwise<T, T>(out[0], {&in[0]}, [](T t) __attribute__((flatten)) {
            A x = A(t);
            A inner = A(kSqrt2OverPi) * (x + A(kGeluTanhCoeff) * x * x * x);
            return A(0.5) * x * (A(1) + cpu::math::tanh(inner));
          });
        } else {
          cpu::elementwise<T, T>(out[0], {&in[0]}, [](T t) __attribute__((flatten)) {
            A x = A(t);
            return A(0.5) * x * (A(1) + cpu::math::erf(x * A(kSqrtHalf)));
          });
        }
      });
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{gelu_backward(ctx.grad_outputs[0], ctx.inputs[0], ctx.attrs.get_string("approximate"))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// gelu_backward(grad, x) = grad * gelu'(x) in one pass:
//   "none": Phi(x) + x phi(x)
//   "tanh": (1 + t) / 2 + x (1 - t^2) du / 2,  t = tanh(u), u = c (x + k x^3),
//           du = c (1 + 3 k x^2)
// It is linear in grad; its derivative in x is grad * gelu''(x), composed
// from ops (gelu_second_derivative) so that higher derivatives work.
MF_REGISTER_OP(OpDef{
    .name = "gelu_backward",
    .inputs = {"grad", "input"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), ShapeError,
               "gelu_backward: grad ", shape_str(in[0].sizes()), " and input ", shape_str(in[1].sizes()),
               " must have the same shape and dtype");
      return std::vector<TensorMeta>{{in[1].sizes(), in[1].dtype(), in[1].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const bool tanh_form = attrs.get_string("approximate") == "tanh";
      dispatch_floating(in[1].dtype(), "gelu_backward", [&]<typename T>() {
        using A = acc_type<T>;
        if (tanh_form) {
          cpu::elementwise<T, T, T>(out[0], {&in[0], &in[1]}, [](T g, T t) __attribute__((always_inline, flatten)) {
            A x = A(t), x2 = x * x;
            A th = cpu::math::tanh(A(kSqrt2OverPi) * (x + A(kGeluTanhCoeff) * x2 * x));
            A du = A(kSqrt2OverPi) * (A(1) + A(3 * kGeluTanhCoeff) * x2);
            return A(g) * (A(0.5) * (A(1) + th) + A(0.5) * x * (A(1) - th * th) * du);
          });
        } else {
          cpu::elementwise<T, T, T>(out[0], {&in[0], &in[1]}, [](T g, T t) __attribute__((always_inline, flatten)) {
            A x = A(t);
            A cdf = A(0.5) * (A(1) + cpu::math::erf(x * A(kSqrtHalf)));
            A pdf = cpu::math::exp(A(-0.5) * x * x) * A(kInvSqrt2Pi);
            return A(g) * (cdf + x * pdf);
          });
        }
      });
    },
    .backward = [](const BackwardContext& ctx) {
      const std::string& approximate = ctx.attrs.get_string("approximate");
      const Tensor& gg = ctx.grad_outputs[0];
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = gelu_backward(gg, ctx.inputs[1], approximate);
      if (ctx.needs_input_grad[1])
        grads[1] = mul(mul(gg, ctx.inputs[0]), gelu_second_derivative(ctx.inputs[1], approximate));
      return grads;
    },
    .save_inputs = 0b11,
    .elementwise = true,
});

// gelu(x) and gelu_backward(grad, x) in one pass, erf computed once:
// (grad * gelu'(x), gelu(x)). Graph mode runs a recomputed GELU this
// way together with its gradient (Note [GELU with its gradient] in
// graph/fusion.h); each output has the bits of its own op.
template <typename T>
void gelu_with_backward_loop(const T* g, const T* x, T* dx, T* y, int64_t n, bool tanh_form) {
  using A = acc_type<T>;
  if (tanh_form) {
    // gelu and gelu_backward round the cube differently, (c x) x x against
    // c (x x) x: two tanh, one pass.
    for (int64_t i = 0; i < n; ++i) {
      const A v = A(x[i]), v2 = v * v;
      y[i] = T(A(0.5) * v * (A(1) + cpu::math::tanh(A(kSqrt2OverPi) * (v + A(kGeluTanhCoeff) * v * v * v))));
      const A th = cpu::math::tanh(A(kSqrt2OverPi) * (v + A(kGeluTanhCoeff) * v2 * v));
      const A du = A(kSqrt2OverPi) * (A(1) + A(3 * kGeluTanhCoeff) * v2);
      dx[i] = T(A(g[i]) * (A(0.5) * (A(1) + th) + A(0.5) * v * (A(1) - th * th) * du));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const A v = A(x[i]);
      const A e = cpu::math::erf(v * A(kSqrtHalf));
      y[i] = T(A(0.5) * v * (A(1) + e));
      const A cdf = A(0.5) * (A(1) + e);
      const A pdf = cpu::math::exp(A(-0.5) * v * v) * A(kInvSqrt2Pi);
      dx[i] = T(A(g[i]) * (cdf + v * pdf));
    }
  }
}

MF_REGISTER_OP(OpDef{
    .name = "gelu_with_backward",
    .inputs = {"grad", "input"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype() && is_floating(in[1].dtype()),
               ShapeError, "gelu_with_backward: grad ", dtype_name(in[0].dtype()), shape_str(in[0].sizes()),
               " and input ", dtype_name(in[1].dtype()), shape_str(in[1].sizes()),
               " must have the same shape and floating-point dtype");
      const TensorMeta meta{in[1].sizes(), in[1].dtype(), in[1].device()};
      return std::vector<TensorMeta>{meta, meta};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const bool tanh_form = attrs.get_string("approximate") == "tanh";
      const Tensor g = contiguous(in[0].detach()), x = contiguous(in[1].detach());
      dispatch_floating(x.dtype(), "gelu_with_backward", [&]<typename T>() {
        const T* gp = static_cast<const T*>(g.data_ptr());
        const T* xp = static_cast<const T*>(x.data_ptr());
        T* dxp = static_cast<T*>(out[0].data_ptr());
        T* yp = static_cast<T*>(out[1].data_ptr());
        parallel_for(0, x.numel(), kGrainSize, [&](int64_t b, int64_t e) {
          gelu_with_backward_loop<T>(gp + b, xp + b, dxp + b, yp + b, e - b, tanh_form);
        });
      });
    },
    .differentiable = false,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "silu",
    .inputs = {"input"},
    .infer = infer_floating("silu"),
    .cpu_kernel = floating_unary_kernel("silu", [](auto x) {
      using A = decltype(x);
      return x / (A(1) + cpu::math::exp(-x));
    }),
    .backward = [](const BackwardContext& ctx) {
      // s (1 + x (1 - s)), s = sigmoid(x)
      const Tensor& x = ctx.inputs[0];
      Tensor s = sigmoid(x);
      return TensorList{mul(ctx.grad_outputs[0], mul(s, add(mul(x, rsub(s, 1.0)), 1.0)))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "leaky_relu",
    .inputs = {"input"},
    .infer = infer_floating("leaky_relu"),
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const double slope = attrs.get_float("negative_slope");
      dispatch_floating(in[0].dtype(), "leaky_relu", [&]<typename T>() {
        using A = acc_type<T>;
        const A s = A(slope);
        cpu::elementwise<T, T>(out[0], {&in[0]}, [s](T t) {
          const A x = A(t), scaled = x * s;
          return cpu::math::select(x > A(0), x, scaled);
        });
      });
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      return TensorList{where(gt(ctx.inputs[0], 0), g, mul(g, ctx.attrs.get_float("negative_slope")))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "elu",
    .inputs = {"input"},
    .infer = infer_floating("elu"),
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const double alpha = attrs.get_float("alpha");
      dispatch_floating(in[0].dtype(), "elu", [&]<typename T>() {
        using A = acc_type<T>;
        const A al = A(alpha);
        cpu::elementwise<T, T>(out[0], {&in[0]}, [al](T t) __attribute__((flatten)) {
          const A x = A(t), negative = al * cpu::math::expm1(x);
          return cpu::math::select(x > A(0), x, negative);
        });
      });
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& x = ctx.inputs[0];
      const double alpha = ctx.attrs.get_float("alpha");
      return TensorList{where(gt(x, 0), g, mul(g, mul(exp(x), alpha)))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// softplus(x) = log(1 + exp(beta x)) / beta, and x where beta x > threshold.
MF_REGISTER_OP(OpDef{
    .name = "softplus",
    .inputs = {"input"},
    .infer = infer_floating("softplus"),
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const double beta = attrs.get_float("beta"), threshold = attrs.get_float("threshold");
      dispatch_floating(in[0].dtype(), "softplus", [&]<typename T>() {
        using A = acc_type<T>;
        const A b = A(beta), th = A(threshold);
        cpu::elementwise<T, T>(out[0], {&in[0]}, [b, th](T t) __attribute__((flatten)) {
          A x = A(t);
          return cpu::math::select(x * b > th, x, cpu::math::log1p(cpu::math::exp(x * b)) / b);
        });
      });
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      Tensor bx = mul(ctx.inputs[0], ctx.attrs.get_float("beta"));
      return TensorList{where(gt(bx, ctx.attrs.get_float("threshold")), g, mul(g, sigmoid(bx)))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// --- clamp ------------------------------------------------------------------------------

// clamp with scalar bounds: min(max(x, lo), hi), NaN kept. Attrs "min" and
// "max" are present only for the bounds given.
MF_REGISTER_OP(OpDef{
    .name = "clamp",
    .inputs = {"input"},
    .infer = infer_unary("clamp", is_numeric, "a numeric (non-bool)"),
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const bool has_min = attrs.has("min"), has_max = attrs.has("max");
      dispatch_numeric(in[0].dtype(), "clamp", [&]<typename T>() {
        using A = acc_type<T>;
        const A lo = has_min ? attrs.get_scalar("min").to<A>() : A(0);
        const A hi = has_max ? attrs.get_scalar("max").to<A>() : A(0);
        if (has_min && has_max)
          cpu::elementwise<T, T>(out[0], {&in[0]}, [lo, hi](T t) {
            A x = A(t);
            x = x < lo ? lo : x;
            return x > hi ? hi : x;
          });
        else if (has_min)
          cpu::elementwise<T, T>(out[0], {&in[0]}, [lo](T t) { return A(t) < lo ? lo : A(t); });
        else
          cpu::elementwise<T, T>(out[0], {&in[0]}, [hi](T t) { return A(t) > hi ? hi : A(t); });
      });
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& x = ctx.inputs[0];
      Tensor keep;
      if (ctx.attrs.has("min")) keep = ge(x, ctx.attrs.get_scalar("min"));
      if (ctx.attrs.has("max")) {
        Tensor below = le(x, ctx.attrs.get_scalar("max"));
        keep = keep.defined() ? logical_and(keep, below) : below;
      }
      return TensorList{where(keep, ctx.grad_outputs[0], Scalar(0))};
    },
    .save_inputs = 0b1,
    .inplace = true,
    .elementwise = true,
});

// One tensor bound: kMin gives max(x, bound), else min(x, bound). The
// gradient reaches x where it is kept (ties included, as in PyTorch) and the
// bound elsewhere.
template <bool kMin>
OpDef clamp_tensor_op(const char* name) {
  return OpDef{
      .name = name,
      .inputs = {"input", kMin ? "min" : "max"},
      .infer = [name](const TensorList& in, const Attrs&) {
        MF_CHECK(in[0].dtype() != DType::Bool, TypeError, name, ": not supported for bool tensors");
        return infer_broadcast(name, in);
      },
      .cpu_kernel = binary_kernel(name, [](auto x, auto bound) {
        if constexpr (kMin) return x < bound ? bound : x;
        else return x > bound ? bound : x;
      }),
      .backward = [](const BackwardContext& ctx) {
        const Tensor& g = ctx.grad_outputs[0];
        Tensor keep = kMin ? ge(ctx.inputs[0], ctx.inputs[1]) : le(ctx.inputs[0], ctx.inputs[1]);
        TensorList grads(2);
        if (ctx.needs_input_grad[0]) grads[0] = sum_to(where(keep, g, Scalar(0)), ctx.input_metas[0].sizes);
        if (ctx.needs_input_grad[1]) grads[1] = sum_to(where(keep, Scalar(0), g), ctx.input_metas[1].sizes);
        return grads;
      },
      .save_inputs = 0b11,
      .elementwise = true,
  };
}

MF_REGISTER_OP(clamp_tensor_op<true>("clamp_min_tensor"));
MF_REGISTER_OP(clamp_tensor_op<false>("clamp_max_tensor"));

const OpDef& op_relu() {
  static const OpDef& op = dispatch::op("relu");
  return op;
}
const OpDef& op_clamp() {
  static const OpDef& op = dispatch::op("clamp");
  return op;
}

// The dtype of clamp(t, min, max) with scalar bounds, and its attrs.
DType clamp_dtype(const Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max, Attrs& attrs) {
  MF_CHECK(min || max, ValueError, "clamp: at least one of 'min' or 'max' must not be None");
  DType dt = t.dtype();
  if (min) {
    dt = result_type(t, *min);
    attrs.set("min", *min);
  }
  if (max) {
    DType with_max = result_type(t, *max);
    dt = promote_types(dt, with_max);
    attrs.set("max", *max);
  }
  if (min) check_scalar_fits(*min, dt, "clamp", "min");
  if (max) check_scalar_fits(*max, dt, "clamp", "max");
  return dt;
}

}  // namespace

Tensor relu(const Tensor& t) { return dispatch::apply_one(op_relu(), {t}); }
Tensor& relu_(Tensor& t) {
  dispatch::apply_inplace(op_relu(), {t});
  return t;
}

Tensor gelu(const Tensor& t, const std::string& approximate) {
  static const OpDef& op = dispatch::op("gelu");
  MF_CHECK(approximate == "none" || approximate == "tanh", ValueError,
           "gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
  return dispatch::apply_one(op, {t}, {{"approximate", approximate}});
}
Tensor silu(const Tensor& t) {
  static const OpDef& op = dispatch::op("silu");
  return dispatch::apply_one(op, {t});
}
Tensor leaky_relu(const Tensor& t, double negative_slope) {
  static const OpDef& op = dispatch::op("leaky_relu");
  return dispatch::apply_one(op, {t}, {{"negative_slope", negative_slope}});
}
Tensor elu(const Tensor& t, double alpha) {
  static const OpDef& op = dispatch::op("elu");
  return dispatch::apply_one(op, {t}, {{"alpha", alpha}});
}
Tensor softplus(const Tensor& t, double beta, double threshold) {
  static const OpDef& op = dispatch::op("softplus");
  return dispatch::apply_one(op, {t}, {{"beta", beta}, {"threshold", threshold}});
}

Tensor clamp(const Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max) {
  Attrs attrs;
  DType dt = clamp_dtype(t, min, max, attrs);
  return dispatch::apply_one(op_clamp(), {to(t, dt)}, attrs);
}
Tensor& clamp_(Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max) {
  Attrs attrs;
  DType dt = clamp_dtype(t, min, max, attrs);
  MF_CHECK(dt == t.dtype() || is_floating(t.dtype()), TypeError, "clamp_: result type ", dtype_name(dt),
           " can't be cast to the desired output type ", dtype_name(t.dtype()));
  dispatch::apply_inplace(op_clamp(), {t}, attrs);
  return t;
}

Tensor clamp(const Tensor& t, const Tensor& min, const Tensor& max) {
  static const OpDef& op_min = dispatch::op("clamp_min_tensor");
  static const OpDef& op_max = dispatch::op("clamp_max_tensor");
  MF_CHECK(min.defined() || max.defined(), ValueError, "clamp: at least one of 'min' or 'max' must not be None");
  DType dt = t.dtype();
  if (min.defined() && max.defined()) dt = common_dtype({&t, &min, &max});
  else dt = result_type(t, min.defined() ? min : max);
  Tensor out = to(t, dt);
  if (min.defined()) out = dispatch::apply_one(op_min, {out, to(min, dt)});
  if (max.defined()) out = dispatch::apply_one(op_max, {out, to(max, dt)});
  return out;
}

}  // namespace mf
