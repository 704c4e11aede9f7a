// Powers and other broadcasting binary math: pow (tensor ** tensor,
// tensor ** scalar, scalar ** tensor), minimum, maximum, atan2.
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "ops/elementwise_common.h"
#include "backend/cpu/kernels/math.h"

namespace mf {

using namespace elementwise_detail;

namespace {

// Integer power by squaring, wrapping on overflow like PyTorch's powi.
// Negative exponents: 1 ** -n = 1, (-1) ** -n = +-1, anything else 0.
template <typename T>
T int_pow(T base, int64_t exponent) {
  if (exponent < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return exponent % 2 == 0 ? T(1) : T(-1);
    return T(0);
  }
  uint64_t result = 1, b = uint64_t(int64_t(base));
  for (uint64_t e = uint64_t(exponent); e != 0; e >>= 1) {
    if (e & 1u) result *= b;
    b *= b;
  }
  return T(result);
}

MF_REGISTER_OP(OpDef{
    .name = "pow",
    .inputs = {"input", "exponent"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "pow: not supported for bool tensors");
      return infer_broadcast("pow", in);
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs&) {
      dispatch_numeric(in[0].dtype(), "pow", [&]<typename T>() {
        using A = acc_type<T>;
        if constexpr (is_floating_type_v<T>)
          binary_loop<T, T, T>(out[0], in[0], in[1], [](T a, T b) { return std::pow(A(a), A(b)); });
        else
          binary_loop<T, T, T>(out[0], in[0], in[1], [](T a, T b) { return int_pow(a, int64_t(b)); });
      });
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& a = ctx.inputs[0];
      const Tensor& b = ctx.inputs[1];
      TensorList grads(2);
      // Like PyTorch: no gradient to the base where the exponent is 0, none to
      // the exponent where 0 ** b with b >= 0 (log 0 would give nan).
      if (ctx.needs_input_grad[0])
        grads[0] = sum_to(where(eq(b, 0), Scalar(0), mul(g, mul(b, pow(a, sub(b, 1))))), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) {
        Tensor zero_base = logical_and(eq(a, 0), ge(b, 0));
        grads[1] = sum_to(mul(g, where(zero_base, Scalar(0), mul(ctx.outputs[0], log(a)))), ctx.input_metas[1].sizes);
      }
      return grads;
    },
    .save_inputs = 0b11,
    .save_outputs = 0b1,
    .elementwise = true,
});

// x ** e for floating x with common exponents turned into cheaper forms (as
// PyTorch does): x * x for 2, sqrt for 0.5, and so on.
template <typename T>
void pow_scalar_floating(Tensor& out, const Tensor& x, double e) {
  using A = acc_type<T>;
  const A ea = A(e);
  auto run = [&](auto f) { cpu::elementwise<T, T>(out, {&x}, [&](T a) { return f(A(a)); }); };
  if (e == 2.0) run([](A a) { return a * a; });
  else if (e == 3.0) run([](A a) { return a * a * a; });
  else if (e == 0.5) run([](A a) { return cpu::math::sqrt(a); });
  else if (e == -0.5) run([](A a) { return A(1) / cpu::math::sqrt(a); });
  else if (e == -1.0) run([](A a) { return A(1) / a; });
  else if (e == -2.0) run([](A a) { return A(1) / (a * a); });
  else run([ea](A a) { return std::pow(a, ea); });
}

MF_REGISTER_OP(OpDef{
    .name = "pow_scalar",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "pow: not supported for bool tensors");
      Scalar e = attrs.get_scalar("exponent");
      MF_CHECK(is_floating(in[0].dtype()) || (!e.is_floating() && e.to_int() >= 0), ValueError,
               "pow: integers to negative integer powers are not allowed (exponent ", e.str(), " for a ",
               dtype_name(in[0].dtype()), " tensor)");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      Scalar e = attrs.get_scalar("exponent");
      dispatch_numeric(in[0].dtype(), "pow", [&]<typename T>() {
        if constexpr (is_floating_type_v<T>) {
          pow_scalar_floating<T>(out[0], in[0], e.to_double());
        } else {
          const int64_t n = e.to_int();
          if (n == 2) cpu::elementwise<T, T>(out[0], {&in[0]}, [](T a) { return T(a * a); });
          else cpu::elementwise<T, T>(out[0], {&in[0]}, [n](T a) { return int_pow(a, n); });
        }
      });
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& x = ctx.inputs[0];
      Scalar e = ctx.attrs.get_scalar("exponent");
      if (e.to_double() == 0.0) return TensorList{zeros_like(g)};
      Scalar e_minus_one = e.is_floating() ? Scalar(e.to_double() - 1.0) : Scalar(e.to_int() - 1);
      Tensor power = e_minus_one.to_double() == 1.0 ? x : pow(x, e_minus_one);
      return TensorList{mul(g, mul(power, e))};
    },
    .save_inputs = 0b1,
    .elementwise = true,
});

// Elementwise max / min; NaN wins, like PyTorch. Gradients split evenly on
// ties (Note in PyTorch's derivatives.yaml for maximum).
template <bool kMax>
void extremum_kernel(const TensorList& in, TensorList& out, const Attrs&) {
  dispatch_dtype(in[0].dtype(), [&]<typename T>() {
    using A = acc_type<T>;
    if constexpr (std::is_same_v<T, bool>) {
      binary_loop<uint8_t, uint8_t, uint8_t>(out[0], in[0], in[1],
                                             [](uint8_t a, uint8_t b) { return uint8_t(kMax ? (a | b) : (a & b)); });
    } else if constexpr (is_floating_type_v<T>) {
      binary_loop<T, T, T>(out[0], in[0], in[1], [](T ta, T tb) {
        A a = A(ta), b = A(tb);
        A pick = kMax ? (a > b ? a : b) : (a < b ? a : b);
        return a != a ? a : (b != b ? b : pick);
      });
    } else {
      binary_loop<T, T, T>(out[0], in[0], in[1],
                                [](T a, T b) { return kMax ? (a > b ? a : b) : (a < b ? a : b); });
    }
  });
}

// Gradient of maximum (kMax) or minimum w.r.t. each input.
template <bool kMax>
TensorList extremum_backward(const BackwardContext& ctx) {
  const Tensor& g = ctx.grad_outputs[0];
  const Tensor& a = ctx.inputs[0];
  const Tensor& b = ctx.inputs[1];
  Tensor shared = where(eq(a, b), mul(g, 0.5), g);
  TensorList grads(2);
  if (ctx.needs_input_grad[0])
    grads[0] = sum_to(masked_fill(shared, kMax ? lt(a, b) : gt(a, b), 0), ctx.input_metas[0].sizes);
  if (ctx.needs_input_grad[1])
    grads[1] = sum_to(masked_fill(shared, kMax ? gt(a, b) : lt(a, b), 0), ctx.input_metas[1].sizes);
  return grads;
}

MF_REGISTER_OP(OpDef{
    .name = "maximum",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_broadcast("maximum", in); },
    .cpu_kernel = extremum_kernel<true>,
    .backward = extremum_backward<true>,
    .save_inputs = 0b11,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "minimum",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_broadcast("minimum", in); },
    .cpu_kernel = extremum_kernel<false>,
    .backward = extremum_backward<false>,
    .save_inputs = 0b11,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "atan2",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(is_floating(in[0].dtype()), TypeError, "atan2: expected floating-point inputs, got ",
               dtype_name(in[0].dtype()));
      return infer_broadcast("atan2", in);
    },
    .cpu_kernel = floating_binary_kernel("atan2", [](auto a, auto b) { return std::atan2(a, b); }),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& a = ctx.inputs[0];
      const Tensor& b = ctx.inputs[1];
      Tensor scale = div(g, add(square(a), square(b)));
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(mul(scale, b), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(neg(mul(scale, a)), ctx.input_metas[1].sizes);
      return grads;
    },
    .save_inputs = 0b11,
    .elementwise = true,
});

}  // namespace

Tensor pow(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("pow");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

Tensor pow(const Tensor& a, Scalar b) {
  static const OpDef& op = dispatch::op("pow_scalar");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt)}, {{"exponent", b}});
}

Tensor pow(Scalar a, const Tensor& b) {
  static const OpDef& op = dispatch::op("pow");
  DType dt = result_type(b, a);
  return dispatch::apply_one(op, {scalar_tensor(a, dt, b.device()), to(b, dt)});
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("maximum");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("minimum");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

Tensor atan2(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("atan2");
  DType dt = floating_result(result_type(a, b));
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}

}  // namespace mf
