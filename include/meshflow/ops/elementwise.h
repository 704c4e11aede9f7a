// Elementwise ops with broadcasting and PyTorch's type promotion.
#pragma once

#include <optional>

#include "meshflow/tensor.h"

namespace mf {

// PyTorch's result_type: dimensioned tensors outrank 0-d tensors, which
// outrank Python scalars, within the same category (bool < int < float).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, Scalar b);
// The shape two shapes broadcast to; throws ShapeError naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

// A 0-d tensor holding s, of s's default dtype (or dtype).
Tensor scalar_tensor(Scalar s, std::optional<DType> dtype = {}, Device device = Device());

// cast
Tensor to(const Tensor& t, DType dtype);  // a copy only when the dtype differs
// A copy on `device` (t itself when already there); non_blocking returns once
// the copy is queued where the backend can (Note [Copies between devices]).
Tensor to(const Tensor& t, Device device, bool non_blocking = false);
// A copy of a CPU tensor in pinned host memory (t itself if it is pinned).
Tensor pin_memory(const Tensor& t);
Tensor cast(const Tensor& t, DType dtype);

// binary arithmetic
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor add(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor rsub(const Tensor& a, Scalar b);  // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
// rounding_mode: "" (true division), "trunc" or "floor".
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode = "");
Tensor div(const Tensor& a, Scalar b, const std::string& rounding_mode = "");
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);  // sign of the divisor, like Python
Tensor remainder(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar b);
Tensor pow(Scalar a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor atan2(const Tensor& a, const Tensor& b);

// unary
Tensor neg(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor sign(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
Tensor log1p(const Tensor& t);
Tensor expm1(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor square(const Tensor& t);
Tensor reciprocal(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor erf(const Tensor& t);
// src/ops/unary_math.cpp: floating functions (integer and bool inputs
// compute in the default float dtype; frac needs a floating input).
Tensor tan(const Tensor& t);
Tensor asin(const Tensor& t);
Tensor acos(const Tensor& t);
Tensor atan(const Tensor& t);
Tensor sinh(const Tensor& t);
Tensor cosh(const Tensor& t);
Tensor asinh(const Tensor& t);
Tensor acosh(const Tensor& t);
Tensor atanh(const Tensor& t);
Tensor log2(const Tensor& t);
Tensor log10(const Tensor& t);
Tensor exp2(const Tensor& t);
Tensor erfc(const Tensor& t);
Tensor erfinv(const Tensor& t);
Tensor sinc(const Tensor& t);
Tensor frac(const Tensor& t);
Tensor deg2rad(const Tensor& t);
Tensor rad2deg(const Tensor& t);
// t = f(t) for the unary function `name` of Python's in-place forms
// (Tensor.sin_()): TypeError when the result's dtype is not t's (an
// integer tensor's exp is float), as PyTorch refuses it.
Tensor& apply_unary_(Tensor& t, Tensor (*f)(const Tensor&), const char* name);
// log|Gamma(x)|, its derivative digamma(x), and the n-th derivative of
// digamma (polygamma(0, x) is digamma(x)); n >= 0.
Tensor lgamma(const Tensor& t);
Tensor digamma(const Tensor& t);
Tensor polygamma(int64_t n, const Tensor& t);
// d sample / d concentration of a standard gamma sample (torch's
// _standard_gamma_grad, computed exactly rather than approximated; not
// differentiable itself).
Tensor standard_gamma_grad(const Tensor& concentration, const Tensor& sample);
Tensor floor(const Tensor& t);
Tensor ceil(const Tensor& t);
Tensor round(const Tensor& t);
Tensor trunc(const Tensor& t);
Tensor relu(const Tensor& t);
// approximate: "none" (erf) or "tanh".
Tensor gelu(const Tensor& t, const std::string& approximate = "none");
Tensor silu(const Tensor& t);
Tensor leaky_relu(const Tensor& t, double negative_slope = 0.01);
Tensor elu(const Tensor& t, double alpha = 1.0);
Tensor softplus(const Tensor& t, double beta = 1.0, double threshold = 20.0);
Tensor clamp(const Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp(const Tensor& t, const Tensor& min, const Tensor& max);

// selection and comparison (comparisons return bool, no gradient)
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, Scalar b);
Tensor where(const Tensor& condition, Scalar a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& t);
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& t);
// a << b and a >> b of integer tensors (Scalar b: the same dtype as a when it
// fits); PyTorch's results for amounts outside [0, bits).
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b);
Tensor bitwise_left_shift(const Tensor& a, Scalar b);
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b);
Tensor bitwise_right_shift(const Tensor& a, Scalar b);
Tensor isnan(const Tensor& t);
Tensor isinf(const Tensor& t);
Tensor isfinite(const Tensor& t);
Tensor masked_fill(const Tensor& t, const Tensor& mask, Scalar value);
Tensor masked_fill(const Tensor& t, const Tensor& mask, const Tensor& value);  // value 0-d
// a + weight * (b - a)
Tensor lerp(const Tensor& a, const Tensor& b, Scalar weight);
Tensor addcmul(const Tensor& t, const Tensor& a, const Tensor& b, Scalar value = 1);
Tensor addcdiv(const Tensor& t, const Tensor& a, const Tensor& b, Scalar value = 1);

// in-place forms: write into t, bump its version, keep autograd history
Tensor& add_(Tensor& t, const Tensor& b, Scalar alpha = 1);
Tensor& add_(Tensor& t, Scalar b, Scalar alpha = 1);
Tensor& sub_(Tensor& t, const Tensor& b, Scalar alpha = 1);
Tensor& sub_(Tensor& t, Scalar b, Scalar alpha = 1);
Tensor& mul_(Tensor& t, const Tensor& b);
Tensor& mul_(Tensor& t, Scalar b);
Tensor& div_(Tensor& t, const Tensor& b);
Tensor& div_(Tensor& t, Scalar b);
Tensor& neg_(Tensor& t);
Tensor& relu_(Tensor& t);
Tensor& clamp_(Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& masked_fill_(Tensor& t, const Tensor& mask, Scalar value);

// operators
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& t);

}  // namespace mf
