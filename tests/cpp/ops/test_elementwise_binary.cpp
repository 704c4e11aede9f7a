// Broadcasting binary math (pow, maximum, minimum, atan2, remainder, rounding
// division), comparisons, logical and bitwise ops.
#include <limits>

#include "elementwise_test_util.h"

namespace mf {
namespace {
using namespace testing;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ref_remainder(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}
double ref_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }
double ref_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }

struct BinaryCase {
  std::string name;
  BinaryFn op;
  BinaryRef ref;
  double a_lo, a_hi, b_lo, b_hi;
  bool differentiable = true;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2, -2, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, ref_max, -2, 2, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, ref_min, -2, 2, -2, 2},
      {"atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); },
       [](double a, double b) { return std::atan2(a, b); }, -2, 2, -2, 2},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, ref_remainder, -5, 5, 0.5, 2},
      {"remainder_neg", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, ref_remainder, -5, 5, -2,
       -0.5},
      {"div_floor", [](const Tensor& a, const Tensor& b) { return div(a, b, "floor"); },
       [](double a, double b) { return std::floor(a / b); }, -5, 5, -2, -0.5},
      {"floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); },
       [](double a, double b) { return std::floor(a / b); }, -5, 5, 0.5, 2},
      {"div_trunc", [](const Tensor& a, const Tensor& b) { return div(a, b, "trunc"); },
       [](double a, double b) { return std::trunc(a / b); }, -5, 5, -2, 2},
  };
}

TEST(ElementwiseBinary, RandomFloat64Broadcast) {
  uint32_t seed = 500;
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor a = random_tensor({4, 1, 5}, seed++, c.a_lo, c.a_hi);
    Tensor b = random_tensor({3, 1}, seed++, c.b_lo, c.b_hi);
    expect_binary_matches(c.op, c.ref, a, b, tolerance_for(kFloat64));
    expect_binary_matches(c.op, c.ref, b, random_tensor({2, 3, 4}, seed++, c.a_lo, c.a_hi), tolerance_for(kFloat64));
  }
}

TEST(ElementwiseBinary, FloatDTypes) {
  uint32_t seed = 600;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const auto& c : binary_cases()) {
      SCOPED_TRACE(c.name + " " + dtype_name(dtype));
      Tensor a = to(random_tensor({1000}, seed++, c.a_lo, c.a_hi), dtype);
      Tensor b = to(random_tensor({1000}, seed++, c.b_lo, c.b_hi), dtype);
      EXPECT_EQ(c.op(a, b).dtype(), dtype);
      Tolerance tol = tolerance_for(dtype);
      expect_binary_matches(c.op, c.ref, a, b, tol);
      // A 0-d operand broadcasts (the hoisted-scalar path of the loop).
      Tensor s = to(random_tensor({}, seed++, c.b_lo, c.b_hi), dtype);
      expect_binary_matches(c.op, c.ref, a, s, tol);
    }
  }
}

TEST(ElementwiseBinary, NonContiguousInputs) {
  uint32_t seed = 700;
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor a = transposed_random(6, 9, seed++, c.a_lo, c.a_hi);
    Tensor b = strided_random(6, 9, seed++, c.b_lo, c.b_hi);
    expect_binary_matches(c.op, c.ref, a, b, tolerance_for(kFloat64));
    expect_binary_matches(c.op, c.ref, a, slice(b, 0, 0, 1), tolerance_for(kFloat64));
  }
}

TEST(ElementwiseBinary, ZeroSize) {
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor y = c.op(zeros({0, 3}), ones({3}));
    EXPECT_EQ(y.sizes(), (Shape{0, 3}));
  }
}

TEST(ElementwiseBinary, Gradients) {
  uint32_t seed = 800;
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor a = random_tensor({2, 3}, seed++, c.a_lo, c.a_hi).requires_grad_();
    Tensor b = random_tensor({3}, seed++, c.b_lo, c.b_hi).requires_grad_();
    expect_gradcheck([&](const TensorList& in) { return c.op(in[0], in[1]); }, {a, b});
  }
}

TEST(ElementwiseBinary, MaximumMinimumTiesAndNaN) {
  Tensor a = from_vector({1, 2, 3, kNaN}, {4});
  Tensor b = from_vector({1, 5, -1, 0}, {4});
  expect_values(maximum(a, b), {1, 5, 3, kNaN});
  expect_values(minimum(a, b), {1, 2, -1, kNaN});
  expect_values(maximum(b, a), {1, 5, 3, kNaN});
  // Ties split the gradient evenly.
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = from_vector({1, 1}, {2}).requires_grad_();
  sum(maximum(x, y)).backward();
  expect_values(x.grad(), {0.5, 1});
  expect_values(y.grad(), {0.5, 0});
  // bool and integers
  Tensor t = from_vector({1, 0, 0}, {3}, {.dtype = kBool});
  Tensor f = from_vector({0, 0, 1}, {3}, {.dtype = kBool});
  expect_values(maximum(t, f), {1, 0, 1});
  expect_values(minimum(t, f), {0, 0, 0});
  Tensor i = from_vector({-5, 7}, {2}, {.dtype = kInt8});
  EXPECT_EQ(maximum(i, from_vector({0, 0}, {2}, {.dtype = kInt8})).dtype(), kInt8);
  expect_values(maximum(i, from_vector({0, 0}, {2}, {.dtype = kInt8})), {0, 7});
  // promotion: a float64 0-d tensor outranks an int32 tensor
  EXPECT_EQ(maximum(from_vector({1}, {1}, {.dtype = kInt32}), full({}, 2.5, {.dtype = kFloat64})).dtype(), kFloat64);
}

TEST(ElementwiseBinary, PowForms) {
  Tensor x = from_vector({1, 2, 3}, {3});
  expect_values(pow(x, 2), {1, 4, 9});
  expect_values(pow(x, 3), {1, 8, 27});
  expect_values(pow(x, 0.5), {1, std::sqrt(2.0), std::sqrt(3.0)});
  expect_values(pow(x, -1), {1, 0.5, 1.0 / 3});
  expect_values(pow(x, -2), {1, 0.25, 1.0 / 9});
  expect_values(pow(x, -0.5), {1, 1 / std::sqrt(2.0), 1 / std::sqrt(3.0)});
  expect_values(pow(x, 0), {1, 1, 1});
  expect_values(pow(x, 1.7), {1, std::pow(2.0, 1.7), std::pow(3.0, 1.7)}, 1e-5, 1e-6);
  expect_values(pow(2, x), {2, 4, 8});
  expect_values(pow(2.5, from_vector({0, 2}, {2}, {.dtype = kFloat64})), {1, 6.25});
  // each fast path of pow(tensor, scalar) against std::pow on random inputs
  for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, 0.0, 1.0}) {
    for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      SCOPED_TRACE(std::to_string(e) + " " + dtype_name(dt));
      Tensor r = to(random_tensor({100}, 9, 0.2, 3), dt);
      expect_unary_matches([e](const Tensor& t) { return pow(t, e); }, [e](double v) { return std::pow(v, e); }, r,
                           tolerance_for(dt));
    }
  }
  // dtypes: int ** int stays int, int ** float and float ** int are float
  Tensor i = from_vector({-2, 3, 0}, {3}, {.dtype = kInt64});
  EXPECT_EQ(pow(i, 3).dtype(), kInt64);
  expect_values(pow(i, 3), {-8, 27, 0});
  expect_values(pow(i, 0), {1, 1, 1});
  EXPECT_EQ(pow(i, 0.5).dtype(), kFloat32);
  EXPECT_EQ(pow(2, i).dtype(), kInt64);
  EXPECT_EQ(pow(2.0, i).dtype(), kFloat32);
  EXPECT_EQ(pow(from_vector({1}, {1}, {.dtype = kInt32}), from_vector({2}, {1})).dtype(), kFloat32);
  // integer ** negative integer tensor: 1 and -1 survive, the rest is 0
  Tensor base = from_vector({1, -1, -1, 2, 0}, {5}, {.dtype = kInt32});
  Tensor ex = from_vector({-3, -3, -2, -1, -1}, {5}, {.dtype = kInt32});
  expect_values(pow(base, ex), {1, -1, 1, 0, 0});
  // wrapping like PyTorch: 3 ** 5 = 243 is -13 in int8
  expect_values(pow(from_vector({3}, {1}, {.dtype = kInt8}), from_vector({5}, {1}, {.dtype = kInt8})), {-13});
  expect_values(pow(from_vector({3}, {1}, {.dtype = kInt64}), 40), {double(int64_t(12157665459056928801ull))});
  EXPECT_THROW(pow(i, -1), ValueError);
  EXPECT_THROW(pow(from_vector({1}, {1}, {.dtype = kBool}), true), TypeError);
  EXPECT_EQ(pow(from_vector({1}, {1}, {.dtype = kBool}), 2).dtype(), kInt64);
}

TEST(ElementwiseBinary, PowGradients) {
  Tensor x = random_tensor({2, 3}, 41, 0.5, 2).requires_grad_();
  for (Scalar e : {Scalar(2), Scalar(3), Scalar(0.5), Scalar(-1.5), Scalar(-1), Scalar(0), Scalar(1)}) {
    SCOPED_TRACE(e.str());
    expect_gradcheck([e](const TensorList& in) { return pow(in[0], e); }, {x});
  }
  Tensor y = random_tensor({3}, 42, -1, 2).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return pow(2.5, in[0]); }, {y});
  // 0 ** b: no nan gradient for b >= 0, zero gradient to the base where b == 0
  Tensor a = from_vector({0, 0, 2}, {3}).requires_grad_();
  Tensor b = from_vector({2, 0, 0}, {3}).requires_grad_();
  sum(pow(a, b)).backward();
  expect_values(a.grad(), {0, 0, 0});
  expect_values(b.grad(), {0, 0, std::log(2.0)});
}

TEST(ElementwiseBinary, IntegerDivisionAndRemainder) {
  for (DType dt : {kInt8, kInt16, kInt32, kInt64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = from_vector({7, -7, 7, -7, 6, 0}, {6}, {.dtype = dt});
    Tensor b = from_vector({2, 2, -2, -2, 3, 5}, {6}, {.dtype = dt});
    EXPECT_EQ(div(a, b, "floor").dtype(), dt);
    expect_values(div(a, b, "floor"), {3, -4, -4, 3, 2, 0});
    expect_values(floor_divide(a, b), {3, -4, -4, 3, 2, 0});
    expect_values(div(a, b, "trunc"), {3, -3, -3, 3, 2, 0});
    expect_values(remainder(a, b), {1, 1, -1, -1, 0, 0});
    expect_values(remainder(a, 3), {1, 2, 1, 2, 0, 0});
    expect_values(remainder(a, -3), {-2, -1, -2, -1, 0, 0});
    EXPECT_EQ(div(a, b).dtype(), kFloat32);  // true division
    EXPECT_THROW(div(a, zeros({6}, {.dtype = dt}), "floor"), Error);
    EXPECT_THROW(div(a, 0, "trunc"), Error);
    EXPECT_THROW(remainder(a, 0), Error);
  }
  Tensor u = from_vector({7, 200}, {2}, {.dtype = kUInt8});
  expect_values(div(u, 2, "floor"), {3, 100});
  expect_values(remainder(u, 3), {1, 2});
  // INT64_MIN / -1 wraps instead of trapping.
  Tensor m = full({1}, std::numeric_limits<int64_t>::min(), {.dtype = kInt64});
  EXPECT_EQ(div(m, -1, "floor").item<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(div(m, -1, "trunc").item<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(remainder(m, -1).item<int64_t>(), 0);
  // float corner cases follow PyTorch: division by zero gives inf/nan
  Tensor f = from_vector({1, -1, 0, 5.5, -5.5}, {5});
  expect_values_inf(div(f, 0.0, "floor"), {kInf, -kInf, kNaN, kInf, -kInf});
  expect_values(remainder(f, 2.0), {1, 1, 0, 1.5, 0.5});
  expect_values(remainder(f, -2.0), {-1, -1, 0, -0.5, -1.5});
  EXPECT_EQ(remainder(from_vector({5}, {1}, {.dtype = kInt64}), 2.5).dtype(), kFloat32);
  EXPECT_THROW(div(f, f, "round"), ValueError);
  Tensor bo = from_vector({1}, {1}, {.dtype = kBool});
  EXPECT_THROW(div(bo, bo, "floor"), TypeError);
  EXPECT_THROW(remainder(bo, bo), TypeError);
}

// --- comparisons, logical and bitwise ops ------------------------------------------------

struct ComparisonCase {
  std::string name;
  BinaryFn op;
  std::function<Tensor(const Tensor&, Scalar)> op_scalar;
  std::function<bool(double, double)> ref;
};

std::vector<ComparisonCase> comparison_cases() {
  return {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](const Tensor& a, Scalar b) { return eq(a, b); },
       std::equal_to<>()},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](const Tensor& a, Scalar b) { return ne(a, b); },
       std::not_equal_to<>()},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](const Tensor& a, Scalar b) { return lt(a, b); },
       std::less<>()},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](const Tensor& a, Scalar b) { return le(a, b); },
       std::less_equal<>()},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](const Tensor& a, Scalar b) { return gt(a, b); },
       std::greater<>()},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](const Tensor& a, Scalar b) { return ge(a, b); },
       std::greater_equal<>()},
  };
}

// Random small integers as dtype, so ties occur.
Tensor random_ints(const Shape& shape, uint32_t seed, DType dtype) {
  return to(floor(random_tensor(shape, seed, 0, 4)), dtype);
}

TEST(ElementwiseCompare, AllDTypesBroadcastAndStrided) {
  uint32_t seed = 900;
  for (const auto& c : comparison_cases()) {
    for (DType dt : {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
      SCOPED_TRACE(c.name + " " + dtype_name(dt));
      Tensor a = random_ints({3, 1, 4}, seed++, dt);
      Tensor b = random_ints({5, 1}, seed++, dt);
      Tensor got = c.op(a, b);
      EXPECT_EQ(got.dtype(), kBool);
      expect_binary_matches(c.op, [&](double x, double y) { return double(c.ref(x, y)); }, a, b, {0, 0});
      Tensor at = transpose(random_ints({4, 3}, seed++, dt), 0, 1);
      expect_binary_matches(c.op, [&](double x, double y) { return double(c.ref(x, y)); }, at,
                            random_ints({3, 4}, seed++, dt), {0, 0});
      expect_unary_matches([&](const Tensor& t) { return c.op_scalar(t, 2); },
                           [&](double x) { return double(c.ref(x, 2.0)); }, a, {0, 0});
    }
  }
}

TEST(ElementwiseCompare, PromotionAndNoGradient) {
  Tensor i = from_vector({1, 2, 3}, {3}, {.dtype = kInt64});
  expect_values(lt(i, 2.5), {1, 1, 0});  // compared in float, not truncated to 2
  expect_values(eq(i, from_vector({1.0, 2.5, 3.0}, {3})), {1, 0, 1});
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor m = gt(x, 1.5);
  EXPECT_EQ(m.dtype(), kBool);
  EXPECT_FALSE(m.requires_grad());
  Tensor n = from_vector({kNaN, 1}, {2});
  expect_values(eq(n, n), {0, 1});
  expect_values(ne(n, n), {1, 0});
  expect_values(eq(zeros({}), 0), {1});
  EXPECT_EQ(eq(zeros({0, 2}), zeros({2})).sizes(), (Shape{0, 2}));
  EXPECT_THROW(eq(zeros({3}), zeros({4})), ShapeError);
}

TEST(ElementwiseCompare, LogicalAndBitwise) {
  Tensor a = from_vector({0, 1, 2, 0}, {4}, {.dtype = kInt32});
  Tensor b = from_vector({0, 0, 0.5, 3}, {4}, {.dtype = kFloat32});
  expect_values(logical_and(a, b), {0, 0, 1, 0});
  expect_values(logical_or(a, b), {0, 1, 1, 1});
  expect_values(logical_xor(a, b), {0, 1, 0, 1});
  expect_values(logical_not(a), {1, 0, 0, 1});
  EXPECT_EQ(logical_and(a, b).dtype(), kBool);
  EXPECT_EQ(logical_not(b).dtype(), kBool);

  Tensor x = from_vector({12, -1, 5}, {3}, {.dtype = kInt64});
  Tensor y = from_vector({10, 7, 0}, {3}, {.dtype = kInt64});
  expect_values(bitwise_and(x, y), {8, 7, 0});
  expect_values(bitwise_or(x, y), {14, -1, 5});
  expect_values(bitwise_xor(x, y), {6, -8, 5});
  expect_values(bitwise_not(x), {-13, 0, -6});
  Tensor u = from_vector({0, 255}, {2}, {.dtype = kUInt8});
  expect_values(bitwise_not(u), {255, 0});
  EXPECT_EQ(bitwise_and(u, from_vector({1, 1}, {2}, {.dtype = kInt8})).dtype(), kInt16);
  Tensor p = from_vector({1, 1, 0}, {3}, {.dtype = kBool});
  Tensor q = from_vector({1, 0, 0}, {3}, {.dtype = kBool});
  EXPECT_EQ(bitwise_xor(p, q).dtype(), kBool);
  expect_values(bitwise_and(p, q), {1, 0, 0});
  expect_values(bitwise_or(p, q), {1, 1, 0});
  expect_values(bitwise_xor(p, q), {0, 1, 0});
  expect_values(bitwise_not(p), {0, 0, 1});
  // broadcasting and strides
  Tensor big = transpose(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = kInt32}), 0, 1);  // (3, 2)
  expect_values(bitwise_and(big, from_vector({1, 6}, {2}, {.dtype = kInt32})), {1, 4, 0, 4, 1, 6});
  EXPECT_THROW(bitwise_and(b, b), TypeError);
  EXPECT_THROW(bitwise_not(b), TypeError);
}

TEST(ElementwiseCompare, IsNanIsInfIsFinite) {
  for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = from_vector({kNaN, kInf, -kInf, 1.5, 0}, {5}, {.dtype = dt});
    expect_values(isnan(x), {1, 0, 0, 0, 0});
    expect_values(isinf(x), {0, 1, 1, 0, 0});
    expect_values(isfinite(x), {0, 0, 0, 1, 1});
    EXPECT_EQ(isnan(x).dtype(), kBool);
  }
  Tensor i = from_vector({1, 2}, {2}, {.dtype = kInt32});
  expect_values(isnan(i), {0, 0});
  expect_values(isinf(i), {0, 0});
  expect_values(isfinite(i), {1, 1});
}

}  // namespace
TEST(ElementwiseBinary, InPlaceRefusesLossyResultTypes) {
  Tensor i = from_vector({1, 2}, {2}, {.dtype = kInt64});
  EXPECT_THROW(add_(i, 1.5), TypeError);
  EXPECT_THROW(mul_(i, from_vector({0.5, 2}, {2})), TypeError);
  Tensor flags = from_vector({1, 0}, {2}, {.dtype = kBool});
  EXPECT_THROW(add_(flags, i), TypeError);
  EXPECT_THROW(sub_(i, 0.25), TypeError);
  expect_values(i, {1, 2});
  add_(i, from_vector({1, 1}, {2}, {.dtype = kInt32}));  // int32 -> int64 is fine
  mul_(i, 3);
  expect_values(i, {6, 9});
  Tensor f = from_vector({1, 2}, {2});
  add_(f, from_vector({1, 1}, {2}, {.dtype = kFloat64}));  // float64 -> float32 keeps the kind
  expect_values(f, {2, 3});
}

}  // namespace mf
