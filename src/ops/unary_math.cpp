// More unary math, as unary.cpp's floating functions: tan, asin, acos,
// atan, sinh, cosh, asinh, acosh, atanh, log2, log10, exp2, erfc, erfinv,
// sinc, frac, deg2rad, rad2deg. Integer and bool inputs compute in the
// default float dtype (frac excepted: PyTorch refuses them); each backward
// is written with ops. The kernels are the shared elementwise functors
// (backend/common/elementwise_functors.h), in acc_type<T>; on the CPU with
// the C library's functions (erfinv: backend/common/special_math.h).
#include <cmath>
#include <numbers>

#include "meshflow/autograd.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "ops/elementwise_common.h"

namespace mf {

using namespace elementwise_detail;

namespace {

using Backward = TensorList (*)(const BackwardContext&);

// One floating unary op (its kernel: functors::Tan, ... in the shared
// elementwise table), gradient from the saved input (x) or output (y).
OpDef floating_unary(const char* name, Backward backward, bool save_input, bool save_output) {
  return OpDef{
      .name = name,
      .inputs = {"input"},
      .infer = infer_unary(name, is_floating, "a floating-point"),
      .backward = backward,
      .save_inputs = uint32_t(save_input ? 0b1 : 0),
      .save_outputs = uint32_t(save_output ? 0b1 : 0),
      .elementwise = true,
  };
}

const Tensor& x_of(const BackwardContext& ctx) { return ctx.inputs[0]; }
const Tensor& y_of(const BackwardContext& ctx) { return ctx.outputs[0]; }
const Tensor& g_of(const BackwardContext& ctx) { return ctx.grad_outputs[0]; }

// 1 - x^2 and x^2 + 1, the arguments of the inverse functions' derivatives.
Tensor one_minus_square(const Tensor& x) { return rsub(square(x), 1); }

constexpr double kPi = std::numbers::pi;

MF_REGISTER_OP(floating_unary(
    "tan",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), add(square(y_of(c)), 1))}; }, false, true));
MF_REGISTER_OP(floating_unary(
    "asin",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), rsqrt(one_minus_square(x_of(c))))}; }, true,
    false));
MF_REGISTER_OP(floating_unary(
    "acos",
    [](const BackwardContext& c) { return TensorList{neg(mul(g_of(c), rsqrt(one_minus_square(x_of(c)))))}; }, true,
    false));
MF_REGISTER_OP(floating_unary(
    "atan",
    [](const BackwardContext& c) { return TensorList{div(g_of(c), add(square(x_of(c)), 1))}; }, true, false));
MF_REGISTER_OP(floating_unary(
    "sinh",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), cosh(x_of(c)))}; }, true, false));
MF_REGISTER_OP(floating_unary(
    "cosh",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), sinh(x_of(c)))}; }, true, false));
MF_REGISTER_OP(floating_unary(
    "asinh",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), rsqrt(add(square(x_of(c)), 1)))}; }, true, false));
MF_REGISTER_OP(floating_unary(
    "acosh",
    [](const BackwardContext& c) {
      const Tensor& x = x_of(c);
      return TensorList{mul(g_of(c), rsqrt(mul(sub(x, 1), add(x, 1))))};
    },
    true, false));
MF_REGISTER_OP(floating_unary(
    "atanh",
    [](const BackwardContext& c) { return TensorList{div(g_of(c), one_minus_square(x_of(c)))}; }, true, false));
MF_REGISTER_OP(floating_unary(
    "log2",
    [](const BackwardContext& c) { return TensorList{div(g_of(c), mul(x_of(c), std::numbers::ln2))}; }, true,
    false));
MF_REGISTER_OP(floating_unary(
    "log10",
    [](const BackwardContext& c) { return TensorList{div(g_of(c), mul(x_of(c), std::numbers::ln10))}; }, true,
    false));
MF_REGISTER_OP(floating_unary(
    "exp2",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), mul(y_of(c), std::numbers::ln2))}; }, false,
    true));
MF_REGISTER_OP(floating_unary(
    "erfc",
    [](const BackwardContext& c) {
      return TensorList{mul(g_of(c), mul(exp(neg(square(x_of(c)))), -2.0 / std::sqrt(kPi)))};
    },
    true, false));
// d/dx erfinv(x) = sqrt(pi) / 2 * exp(erfinv(x)^2)
MF_REGISTER_OP(floating_unary(
    "erfinv",
    [](const BackwardContext& c) {
      return TensorList{mul(g_of(c), mul(exp(square(y_of(c))), std::sqrt(kPi) / 2))};
    },
    false, true));
// sinc(x) = sin(pi x) / (pi x), 1 at 0; its derivative (cos(pi x) pi x -
// sin(pi x)) / (pi x^2) is 0 there.
MF_REGISTER_OP(floating_unary(
    "sinc",
    [](const BackwardContext& c) {
      const Tensor& x = x_of(c);
      const Tensor px = mul(x, kPi);
      const Tensor d = div(sub(mul(cos(px), px), sin(px)), mul(square(x), kPi));
      return TensorList{mul(g_of(c), where(eq(x, Scalar(0)), zeros_like(d), d))};
    },
    true, false));
MF_REGISTER_OP(floating_unary(
    "frac",
    [](const BackwardContext& c) { return TensorList{g_of(c)}; }, false, false));
MF_REGISTER_OP(floating_unary(
    "deg2rad",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), kPi / 180)}; }, false, false));
MF_REGISTER_OP(floating_unary(
    "rad2deg",
    [](const BackwardContext& c) { return TensorList{mul(g_of(c), 180 / kPi)}; }, false, false));

}  // namespace

Tensor unary_math(const std::string& name, const Tensor& t) {
  const OpDef& op = dispatch::op(name);
  MF_CHECK(name != "frac" || is_floating(t.dtype()), TypeError, "frac: expected a floating-point tensor, got ",
           dtype_name(t.dtype()));
  return dispatch::apply_one(op, {to(t, floating_result(t.dtype()))});
}

#define MF_UNARY_MATH(name) \
  Tensor name(const Tensor& t) { return unary_math(#name, t); }
MF_UNARY_MATH(tan)
MF_UNARY_MATH(asin)
MF_UNARY_MATH(acos)
MF_UNARY_MATH(atan)
MF_UNARY_MATH(sinh)
MF_UNARY_MATH(cosh)
MF_UNARY_MATH(asinh)
MF_UNARY_MATH(acosh)
MF_UNARY_MATH(atanh)
MF_UNARY_MATH(log2)
MF_UNARY_MATH(log10)
MF_UNARY_MATH(exp2)
MF_UNARY_MATH(erfc)
MF_UNARY_MATH(erfinv)
MF_UNARY_MATH(sinc)
MF_UNARY_MATH(frac)
MF_UNARY_MATH(deg2rad)
MF_UNARY_MATH(rad2deg)
#undef MF_UNARY_MATH

Tensor& apply_unary_(Tensor& t, Tensor (*f)(const Tensor&), const char* name) {
  // A backward that reads its input must not see the in-place write: it gets a copy.
  Tensor y = f(GradMode::is_enabled() && t.requires_grad() ? clone(t) : t);
  MF_CHECK(y.dtype() == t.dtype(), TypeError, name, "_: result type ", dtype_name(y.dtype()),
           " can't be cast to the desired output type ", dtype_name(t.dtype()));
  return copy_(t, y);
}

}  // namespace mf
