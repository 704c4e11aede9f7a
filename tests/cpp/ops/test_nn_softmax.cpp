// softmax and log_softmax: forward against a float64 reference loop, every
// layout (last dim, inner dims, 0-d, 0-size), 16-bit floats, gradients and
// double backward.
#include <cmath>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_close;
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

// Reference over a contiguous row-major tensor of `shape`.
std::vector<double> reference_softmax(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log) {
  int64_t outer = 1, n = shape.empty() ? 1 : shape[size_t(dim)], inner = 1;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    if (d < dim) outer *= shape[size_t(d)];
    if (d > dim) inner *= shape[size_t(d)];
  }
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t i) { return size_t((o * n + i) * inner + c); };
      double m = -INFINITY;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, x[at(i)]);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::exp(x[at(i)] - m);
      for (int64_t i = 0; i < n; ++i)
        y[at(i)] = log ? x[at(i)] - m - std::log(s) : std::exp(x[at(i)] - m) / s;
    }
  return y;
}

TEST(Softmax, HandValues) {
  Tensor x = from_vector({1, 2, 3, 1, 1, 1}, {2, 3});
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), s = e1 + e2 + e3;
  expect_values(softmax(x, 1), {e1 / s, e2 / s, e3 / s, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  expect_values(softmax(x, 0), {0.5, 1 / (1 + std::exp(-1.0)), 1 / (1 + std::exp(-2.0)), 0.5,
                                1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(2.0))});
  expect_values(log_softmax(x, -1), {1 - std::log(s), 2 - std::log(s), 3 - std::log(s), -std::log(3.0),
                                     -std::log(3.0), -std::log(3.0)});
}

TEST(Softmax, LargeValuesAreStable) {
  Tensor x = from_vector({1000, 1001, -1000}, {3});
  std::vector<double> y = values(softmax(x, 0));
  EXPECT_NEAR(y[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(y[1], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(y[2], 0.0);
  std::vector<double> ly = values(log_softmax(x, 0));
  EXPECT_NEAR(ly[2], -2001 - std::log1p(std::exp(-1.0)), 1e-3);
  // A NaN poisons its own row only.
  std::vector<double> nan_rows = values(softmax(from_vector({1, NAN, 2, 1, 2, 3}, {2, 3}), 1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(nan_rows[size_t(i)]));
  for (int i = 3; i < 6; ++i) EXPECT_FALSE(std::isnan(nan_rows[size_t(i)]));
  // -inf entries (masked positions) get exactly zero probability.
  expect_values(softmax(from_vector({0, -INFINITY, 0}, {3}), 0), {0.5, 0.0, 0.5});
}

TEST(Softmax, ReferenceEveryDim) {
  for (DType dt : {kFloat32, kFloat64}) {
    const Shape shape{3, 5, 70, 2};
    Tensor x = random_tensor(shape, 11, -5, 5);
    std::vector<double> xv = values(x);
    for (int64_t dim = 0; dim < 4; ++dim)
      for (bool log : {false, true}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + (log ? " log" : "") + " " + dtype_name(dt));
        Tensor y = log ? log_softmax(to(x, dt), dim) : softmax(to(x, dt), dim);
        EXPECT_EQ(y.dtype(), dt);
        expect_values(y, reference_softmax(xv, shape, dim, log), 1e-6, 1e-5);
      }
  }
}

TEST(Softmax, LongRowsAndManyColumns) {
  // Rows longer than a vector and column blocks wider than one block.
  for (const Shape& shape : {Shape{4, 1000}, Shape{2, 7, 130}}) {
    Tensor x = random_tensor(shape, 12, -20, 20);
    expect_values(softmax(to(x, kFloat32), 1), reference_softmax(values(x), shape, 1, false), 1e-7, 1e-5);
    expect_values(log_softmax(to(x, kFloat32), 1), reference_softmax(values(x), shape, 1, true), 1e-5, 1e-6);
  }
}

TEST(Softmax, NonContiguousInput) {
  Tensor base = random_tensor({6, 4}, 13);
  Tensor xt = transpose(base, 0, 1);  // (4, 6)
  Tensor ref = contiguous(xt);
  for (int64_t dim : {0, 1}) {
    expect_close(softmax(xt, dim), softmax(ref, dim), 1e-12);
    expect_close(log_softmax(xt, dim), log_softmax(ref, dim), 1e-12);
  }
  Tensor sliced = slice(base, 0, 0, 6, 2);  // (3, 4), row stride 8
  expect_values(softmax(sliced, 1), reference_softmax(values(sliced), {3, 4}, 1, false), 1e-12);
}

TEST(Softmax, ZeroDimAndEmpty) {
  Tensor s = scalar_tensor(3.0, kFloat64);
  expect_values(softmax(s, 0), {1.0});
  expect_values(log_softmax(s, -1), {0.0});
  EXPECT_EQ(softmax(s, 0).dim(), 0);
  EXPECT_THROW(softmax(s, 1), IndexError);
  Tensor e = zeros({0, 3});
  EXPECT_EQ(softmax(e, 1).sizes(), (Shape{0, 3}));
  EXPECT_EQ(log_softmax(zeros({2, 0}), 1).sizes(), (Shape{2, 0}));
}

TEST(Softmax, HalfAndBFloat16) {
  const Shape shape{4, 33, 3};
  Tensor x = random_tensor(shape, 14, -4, 4);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor xl = to(x, dt);
    std::vector<double> xv = values(xl);  // reference on the rounded inputs
    for (int64_t dim : {1, 2}) {
      Tensor y = softmax(xl, dim);
      EXPECT_EQ(y.dtype(), dt);
      const double tol = dt == kFloat16 ? 2e-3 : 1e-2;
      expect_values(y, reference_softmax(xv, shape, dim, false), tol, tol);
      expect_values(log_softmax(xl, dim), reference_softmax(xv, shape, dim, true), tol * 4, tol);
    }
  }
}

TEST(Softmax, BadInput) {
  EXPECT_THROW(softmax(zeros({2, 3}, {.dtype = kInt64}), 1), TypeError);
  EXPECT_THROW(log_softmax(zeros({2, 3}), 2), IndexError);
  EXPECT_THROW(softmax(zeros({2, 3}), -3), IndexError);
}

TEST(Softmax, Gradients) {
  auto x = random_tensor({3, 4, 5}, 15, -2, 2).requires_grad_();
  for (int64_t dim : {0, 1, 2}) {
    expect_gradcheck([dim](const TensorList& t) { return softmax(t[0], dim); }, {x});
    expect_gradcheck([dim](const TensorList& t) { return log_softmax(t[0], dim); }, {x});
  }
  auto xt = random_tensor({5, 3}, 16).requires_grad_();
  expect_gradcheck([](const TensorList& t) { return softmax(transpose(t[0], 0, 1), 1); }, {xt});
}

TEST(Softmax, FloatBackwardMatchesDouble) {
  Tensor x = random_tensor({2, 9, 70}, 17, -3, 3);
  Tensor g = random_tensor({2, 9, 70}, 18);
  for (int64_t dim : {1, 2})
    for (bool log : {false, true}) {
      auto grad_of = [&](DType dt) {
        Tensor xd = to(x, dt).detach().requires_grad_();
        Tensor y = log ? log_softmax(xd, dim) : softmax(xd, dim);
        y.backward(to(g, dt));
        return xd.grad();
      };
      expect_close(grad_of(kFloat32), grad_of(kFloat64), 1e-6, 1e-4);
    }
}

TEST(Softmax, DoubleBackward) {
  // Gradients of the gradient: d/dx sum(w * J(x)^T v) for both ops and
  // every dim, and through the gradient w.r.t. the incoming grad itself.
  auto x = random_tensor({3, 4}, 19).requires_grad_();
  auto v = random_tensor({3, 4}, 20).requires_grad_();
  for (bool log : {false, true})
    for (int64_t dim : {0, 1}) {
      SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim));
      expect_gradcheck(
          [&](const TensorList& t) {
            EnableGradGuard enable;  // the numeric pass runs under no_grad
            Tensor y = log ? log_softmax(t[0], dim) : softmax(t[0], dim);
            return autograd::grad({y}, {t[0]}, {t[1]}, {}, /*create_graph=*/true)[0];
          },
          {x, v});
    }
}

}  // namespace
}  // namespace mf
