// Unary math and activations: values against float64 reference loops on
// random inputs, dtypes, strided inputs, gradients and bad input.
#include <limits>

#include "elementwise_test_util.h"

namespace mf {
namespace {
using namespace testing;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ref_sign(double x) { return double((0 < x) - (x < 0)); }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_softplus(double x) { return 2.0 * x > 5.0 ? x : std::log1p(std::exp(2.0 * x)) / 2.0; }

struct UnaryCase {
  std::string name;
  UnaryFn op;
  UnaryRef ref;
  double lo, hi;  // the input domain
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -3, 3},
      {"sign", [](const Tensor& x) { return sign(x); }, ref_sign, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.1, 5},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, -0.5, 5},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); }, -3, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.1, 5},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, -3, 3},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, 0.5, 3},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -4, 4},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, -6, 6},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, -3, 3},
      {"floor", [](const Tensor& x) { return floor(x); }, [](double x) { return std::floor(x); }, -5, 5},
      {"ceil", [](const Tensor& x) { return ceil(x); }, [](double x) { return std::ceil(x); }, -5, 5},
      {"round", [](const Tensor& x) { return round(x); }, [](double x) { return std::nearbyint(x); }, -5, 5},
      {"trunc", [](const Tensor& x) { return trunc(x); }, [](double x) { return std::trunc(x); }, -5, 5},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x < 0 ? 0 : x; }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); }, ref_gelu, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, ref_gelu_tanh, -4, 4},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * ref_sigmoid(x); }, -5, 5},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); },
       [](double x) { return x > 0 ? x : 0.1 * x; }, -3, 3},
      {"elu", [](const Tensor& x) { return elu(x, 1.5); }, [](double x) { return x > 0 ? x : 1.5 * std::expm1(x); },
       -3, 3},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 5.0); }, ref_softplus, -5, 5},
      {"clamp", [](const Tensor& x) { return clamp(x, Scalar(-1.0), Scalar(0.5)); },
       [](double x) { return std::min(std::max(x, -1.0), 0.5); }, -3, 3},
      {"clamp_min", [](const Tensor& x) { return clamp(x, Scalar(-1.0), std::nullopt); },
       [](double x) { return std::max(x, -1.0); }, -3, 3},
      {"clamp_max", [](const Tensor& x) { return clamp(x, std::nullopt, Scalar(0.5)); },
       [](double x) { return std::min(x, 0.5); }, -3, 3},
  };
}

TEST(ElementwiseUnary, RandomFloat64AgainstReference) {
  uint32_t seed = 100;
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = random_tensor({5, 17}, seed++, c.lo, c.hi);
    Tensor y = c.op(x);
    EXPECT_EQ(y.dtype(), kFloat64);
    expect_unary_matches(c.op, c.ref, x, tolerance_for(kFloat64));
  }
}

TEST(ElementwiseUnary, FloatDTypes) {
  uint32_t seed = 200;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const auto& c : unary_cases()) {
      SCOPED_TRACE(c.name + " " + dtype_name(dtype));
      // 1000 elements: more than one vector width, plus a remainder.
      Tensor x = to(random_tensor({1000}, seed++, c.lo, c.hi), dtype);
      EXPECT_EQ(c.op(x).dtype(), dtype);
      expect_unary_matches(c.op, c.ref, x, tolerance_for(dtype));
    }
  }
}

TEST(ElementwiseUnary, LargeParallelInput) {
  // Big enough to split across threads.
  Tensor x = to(random_tensor({300000}, 7, -3, 3), kFloat32);
  expect_unary_matches([](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); }, x,
                       tolerance_for(kFloat32));
  expect_unary_matches([](const Tensor& t) { return relu(t); }, [](double v) { return v < 0 ? 0 : v; }, x,
                       tolerance_for(kFloat32));
}

TEST(ElementwiseUnary, NonContiguousInputs) {
  uint32_t seed = 300;
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    for (DType dtype : {kFloat64, kFloat32}) {
      expect_unary_matches(c.op, c.ref, transposed_random(6, 9, seed++, c.lo, c.hi, dtype), tolerance_for(dtype));
      expect_unary_matches(c.op, c.ref, strided_random(4, 7, seed++, c.lo, c.hi, dtype), tolerance_for(dtype));
    }
  }
}

TEST(ElementwiseUnary, ZeroDimAndEmpty) {
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    double v = 0.5 * (c.lo + c.hi) + 0.123;
    Tensor s = full({}, v, {.dtype = kFloat64});
    Tensor y = c.op(s);
    EXPECT_EQ(y.dim(), 0);
    EXPECT_NEAR(y.item<double>(), c.ref(v), 1e-12);
    Tensor e = c.op(zeros({0, 3}, {.dtype = kFloat32}));
    EXPECT_EQ(e.sizes(), (Shape{0, 3}));
    EXPECT_EQ(e.dtype(), kFloat32);
  }
}

TEST(ElementwiseUnary, Gradients) {
  uint32_t seed = 400;
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = random_tensor({3, 4}, seed++, c.lo, c.hi).requires_grad_();
    expect_gradcheck([&](const TensorList& in) { return c.op(in[0]); }, {x});
  }
}

TEST(ElementwiseUnary, HandValues) {
  Tensor x = from_vector({-2.0, -0.5, 0.0, 0.5, 2.5}, {5});
  expect_values(abs(x), {2, 0.5, 0, 0.5, 2.5});
  expect_values(sign(x), {-1, -1, 0, 1, 1});
  expect_values(relu(x), {0, 0, 0, 0.5, 2.5});
  expect_values(round(x), {-2, -0, 0, 0, 2});  // half to even
  expect_values(floor(x), {-2, -1, 0, 0, 2});
  expect_values(ceil(x), {-2, -0, 0, 1, 3});
  expect_values(trunc(x), {-2, 0, 0, 0, 2});
  expect_values(clamp(x, Scalar(-1), Scalar(1)), {-1, -0.5, 0, 0.5, 1});
  expect_values(leaky_relu(x), {-0.02, -0.005, 0, 0.5, 2.5});
  expect_values(exp(from_vector({0.0, 1.0}, {2})), {1.0, M_E}, 1e-6);
  expect_values(log(from_vector({1.0, M_E}, {2})), {0.0, 1.0}, 1e-6);
  expect_values(sqrt(from_vector({4.0, 9.0}, {2})), {2.0, 3.0});
  expect_values(rsqrt(from_vector({4.0, 0.25}, {2})), {0.5, 2.0});
  expect_values(sigmoid(from_vector({0.0}, {1})), {0.5});
  expect_values(tanh(from_vector({0.0}, {1})), {0.0});
  expect_values(gelu(from_vector({0.0, 1.0}, {2})), {0.0, 0.8413447460685429}, 1e-6);
  expect_values(silu(from_vector({1.0}, {1})), {0.7310585786300049}, 1e-6);
}

TEST(ElementwiseUnary, SpecialValues) {
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = from_vector({kNaN, kInf, -kInf, 0.0}, {4}, {.dtype = dtype});
    expect_values_inf(exp(x), {kNaN, kInf, 0.0, 1.0});
    expect_values_inf(relu(x), {kNaN, kInf, 0.0, 0.0});
    expect_values_inf(sigmoid(x), {kNaN, 1.0, 0.0, 0.5});
    expect_values_inf(tanh(x), {kNaN, 1.0, -1.0, 0.0});
    expect_values_inf(sign(x), {0.0, 1.0, -1.0, 0.0});
    expect_values_inf(clamp(x, Scalar(-1), Scalar(1)), {kNaN, 1.0, -1.0, 0.0});
    expect_values_inf(log(from_vector({0.0, -1.0}, {2}, {.dtype = dtype})), {-kInf, kNaN});
    expect_values_inf(sqrt(from_vector({-1.0}, {1}, {.dtype = dtype})), {kNaN});
    expect_values_inf(gelu(from_vector({-kInf, kInf}, {2}, {.dtype = dtype})), {kNaN, kInf});
  }
  // softplus switches to the identity above the threshold (no overflow).
  expect_values(softplus(from_vector({1000.0}, {1}, {.dtype = kFloat32})), {1000.0});
}

TEST(ElementwiseUnary, IntegerInputs) {
  Tensor i = from_vector({-3, 0, 2, 5}, {4}, {.dtype = kInt64});
  // Floating functions compute in float32.
  for (auto [name, op] : std::vector<std::pair<std::string, UnaryFn>>{
           {"exp", [](const Tensor& t) { return exp(t); }},
           {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
           {"sin", [](const Tensor& t) { return sin(t); }},
           {"reciprocal", [](const Tensor& t) { return reciprocal(t); }}}) {
    SCOPED_TRACE(name);
    Tensor y = op(i);
    EXPECT_EQ(y.dtype(), kFloat32);
    expect_values_inf(y, values(op(to(i, kFloat32))));
  }
  EXPECT_EQ(sqrt(i).dtype(), kFloat32);
  expect_values(sqrt(from_vector({4, 9}, {2}, {.dtype = kInt32})), {2, 3});
  EXPECT_EQ(exp(from_vector({1}, {1}, {.dtype = kBool})).dtype(), kFloat32);
  // Integer-preserving ops keep the dtype.
  for (DType dt : {kUInt8, kInt8, kInt16, kInt32, kInt64}) {
    SCOPED_TRACE(dtype_name(dt));
    bool is_unsigned = dt == kUInt8;
    Tensor t = from_vector(is_unsigned ? std::vector<double>{0, 3, 200} : std::vector<double>{-3, 0, 7}, {3},
                           {.dtype = dt});
    EXPECT_EQ(abs(t).dtype(), dt);
    EXPECT_EQ(relu(t).dtype(), dt);
    EXPECT_EQ(floor(t).dtype(), dt);
    EXPECT_EQ(square(t).dtype(), dt);
    EXPECT_EQ(sign(t).dtype(), dt);
    if (is_unsigned) {
      expect_values(abs(t), {0, 3, 200});
      expect_values(sign(t), {0, 1, 1});
      expect_values(clamp(t, Scalar(1), Scalar(100)), {1, 3, 100});
    } else {
      expect_values(abs(t), {3, 0, 7});
      expect_values(sign(t), {-1, 0, 1});
      expect_values(relu(t), {0, 0, 7});
      expect_values(square(t), {9, 0, 49});
      expect_values(round(t), {-3, 0, 7});
      expect_values(clamp(t, Scalar(-1), Scalar(5)), {-1, 0, 5});
    }
  }
  // square of bool is int64 (pow(x, 2)); sign of bool stays bool.
  Tensor b = from_vector({1, 0}, {2}, {.dtype = kBool});
  EXPECT_EQ(square(b).dtype(), kInt64);
  EXPECT_EQ(sign(b).dtype(), kBool);
  expect_values(sign(b), {1, 0});
}

TEST(ElementwiseUnary, ClampPromotionAndTensorBounds) {
  Tensor i = from_vector({1, 2, 3}, {3}, {.dtype = kInt64});
  Tensor c = clamp(i, Scalar(1.5), std::nullopt);
  EXPECT_EQ(c.dtype(), kFloat32);
  expect_values(c, {1.5, 2, 3});
  EXPECT_THROW(clamp(i, std::nullopt, std::nullopt), ValueError);
  EXPECT_THROW(clamp(from_vector({3}, {1}, {.dtype = kUInt8}), Scalar(-1), std::nullopt), Error);
  expect_values(clamp(from_vector({3}, {1}, {.dtype = kInt8}), Scalar(-100), Scalar(2)), {2});

  // Tensor bounds broadcast; min is applied before max, as in PyTorch.
  Tensor x = random_tensor({4, 5}, 11, -2, 2);
  Tensor lo = random_tensor({5}, 12, -1, 0);
  Tensor hi = random_tensor({4, 1}, 13, 0, 1);
  Tensor got = clamp(x, lo, hi);
  std::vector<double> xv = values(x), lv = values(lo), hv = values(hi), expected;
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 5; ++k)
      expected.push_back(std::min(std::max(xv[size_t(r * 5 + k)], lv[size_t(k)]), hv[size_t(r)]));
  expect_values(got, expected);
  expect_values(clamp(x, lo, Tensor()), values(maximum(x, lo)));
  expect_values(clamp(x, Tensor(), hi), values(minimum(x, hi)));
  EXPECT_THROW(clamp(x, Tensor(), Tensor()), ValueError);

  auto xg = random_tensor({4, 5}, 14, -2, 2).requires_grad_();
  auto lg = random_tensor({5}, 15, -1, 0).requires_grad_();
  auto hg = random_tensor({4, 1}, 16, 0, 1).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return clamp(in[0], in[1], in[2]); }, {xg, lg, hg});
}

TEST(ElementwiseUnary, InPlace) {
  Tensor x = from_vector({-1, 2, -3, 4}, {2, 2});
  Tensor xt = transpose(x, 0, 1);  // in place through a strided view
  relu_(xt);
  expect_values(x, {0, 2, 0, 4});
  Tensor y = from_vector({-1, 2, -3, 4}, {4});
  clamp_(y, Scalar(-2), Scalar(3));
  expect_values(y, {-1, 2, -2, 3});
  uint32_t v = y.version();
  clamp_(y, std::nullopt, Scalar(0));
  EXPECT_GT(y.version(), v);
  expect_values(y, {-1, 0, -2, 0});
  Tensor i = from_vector({1, 2}, {2}, {.dtype = kInt64});
  EXPECT_THROW(clamp_(i, Scalar(0.5), std::nullopt), TypeError);

  // Gradients flow through the in-place forms.
  Tensor a = random_tensor({6}, 21, -1, 1).requires_grad_();
  Tensor h = mul(a, 2.0);
  relu_(h);
  sum(h).backward();
  std::vector<double> av = values(a), expected;
  for (double v2 : av) expected.push_back(v2 > 0 ? 2.0 : 0.0);
  expect_values(a.grad(), expected);

  Tensor b = random_tensor({6}, 22, -1, 1).requires_grad_();
  Tensor k = mul(b, 1.0);
  clamp_(k, Scalar(-0.5), Scalar(0.5));
  sum(k).backward();
  expected.clear();
  for (double v2 : values(b)) expected.push_back(v2 >= -0.5 && v2 <= 0.5 ? 1.0 : 0.0);
  expect_values(b.grad(), expected);
}

TEST(ElementwiseUnary, DoubleBackward) {
  // d2/dx2 of sigmoid, tanh and gelu through create_graph.
  Tensor x = random_tensor({5}, 31, -2, 2).requires_grad_();
  for (auto [name, op, second] : std::vector<std::tuple<std::string, UnaryFn, UnaryRef>>{
           {"sigmoid", [](const Tensor& t) { return sigmoid(t); },
            [](double v) { double s = ref_sigmoid(v); return s * (1 - s) * (1 - 2 * s); }},
           {"tanh", [](const Tensor& t) { return tanh(t); },
            [](double v) { double t = std::tanh(v); return -2 * t * (1 - t * t); }},
           {"gelu", [](const Tensor& t) { return gelu(t); },
            [](double v) { return std::exp(-v * v / 2) / std::sqrt(2 * M_PI) * (2 - v * v); }},
           {"gelu_tanh", [](const Tensor& t) { return gelu(t, "tanh"); },
            [](double v) {
              // Central difference of the analytic first derivative.
              auto d1 = [](double x) {
                const double c = std::sqrt(2 / M_PI), k = 0.044715;
                const double t = std::tanh(c * (x + k * x * x * x));
                return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x);
              };
              const double h = 1e-5;
              return (d1(v + h) - d1(v - h)) / (2 * h);
            }},
           {"exp", [](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); }}}) {
    SCOPED_TRACE(name);
    x.set_grad(Tensor());
    Tensor y = sum(op(x));
    y.backward(Tensor(), false, true);
    Tensor g = x.grad();
    x.set_grad(Tensor());
    sum(g).backward();
    std::vector<double> expected;
    for (double v : values(x)) expected.push_back(second(v));
    expect_values(x.grad(), expected, 1e-7, 1e-7);
  }
}

TEST(ElementwiseUnary, ReducedPrecisionGradients) {
  // Backward runs in the input's dtype; compare with float64 gradients.
  for (DType dt : {kFloat16, kBFloat16, kFloat32}) {
    for (const auto& c : unary_cases()) {
      SCOPED_TRACE(c.name + " " + dtype_name(dt));
      Tensor x64 = random_tensor({16}, 50, c.lo, c.hi);
      Tensor x = to(x64, dt).requires_grad_();
      sum(c.op(x)).backward();
      ASSERT_TRUE(x.grad().defined());
      EXPECT_EQ(x.grad().dtype(), dt);
      Tensor xr = to(to(x64, dt), kFloat64).requires_grad_();
      sum(c.op(xr)).backward();
      Tolerance tol = tolerance_for(dt);
      expect_values(x.grad(), values(xr.grad()), 4 * tol.atol + 5e-3 * (dt != kFloat32), 4 * tol.rtol);
    }
  }
}

TEST(ElementwiseUnary, BadInput) {
  Tensor i = from_vector({1, 2}, {2}, {.dtype = kInt64});
  Tensor b = from_vector({1, 0}, {2}, {.dtype = kBool});
  EXPECT_THROW(gelu(i), TypeError);
  EXPECT_THROW(silu(i), TypeError);
  EXPECT_THROW(elu(i), TypeError);
  EXPECT_THROW(softplus(i), TypeError);
  EXPECT_THROW(leaky_relu(i), TypeError);
  EXPECT_THROW(abs(b), TypeError);
  EXPECT_THROW(relu(b), TypeError);
  EXPECT_THROW(floor(b), TypeError);
  EXPECT_THROW(clamp(b, Scalar(false), Scalar(true)), TypeError);
  EXPECT_EQ(clamp(b, Scalar(0), Scalar(1)).dtype(), kInt64);  // promoted
  EXPECT_THROW(gelu(zeros({2}), "fast"), ValueError);
  Tensor leaf = zeros({2}).requires_grad_();
  EXPECT_THROW(relu_(leaf), Error);
}

}  // namespace
}  // namespace mf
