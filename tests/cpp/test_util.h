// Helpers for the C++ tests: host values in and out, closeness checks and a
// finite-difference gradient check in float64.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "meshflow/meshflow.h"

namespace mf::testing {

// All values of t (any dtype, any strides) as doubles, in row-major order.
inline std::vector<double> values(const Tensor& t) {
  Tensor c = contiguous(to(t.detach(), DType::Float64));
  const double* p = static_cast<const double*>(c.data_ptr());
  return std::vector<double>(p, p + c.numel());
}

// A float64 tensor of random values in [lo, hi) from a std::mt19937 (the
// reference draws its own numbers: tests never depend on mf's RNG).
inline Tensor random_tensor(const Shape& shape, uint32_t seed, double lo = -1.0, double hi = 1.0,
                            DType dtype = DType::Float64) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return from_vector(v, shape, {.dtype = dtype});
}

inline void expect_values(const Tensor& t, const std::vector<double>& expected, double atol = 1e-6,
                          double rtol = 1e-6) {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
      continue;
    }
    EXPECT_NEAR(got[i], expected[i], atol + rtol * std::fabs(expected[i])) << "element " << i;
  }
}

inline void expect_close(const Tensor& a, const Tensor& b, double atol = 1e-6, double rtol = 1e-6) {
  ASSERT_EQ(a.sizes(), b.sizes());
  expect_values(a, values(b), atol, rtol);
}

// Compares the gradients of sum(f(inputs) * w) (w a fixed random weight)
// with central differences. Inputs must be float64 and require grad.
inline void expect_gradcheck(const std::function<Tensor(const TensorList&)>& f, TensorList inputs,
                             double eps = 1e-6, double atol = 1e-5, double rtol = 1e-4) {
  for (auto& x : inputs)
    if (x.defined()) x.set_grad(Tensor());
  Tensor out = f(inputs);
  Tensor w = random_tensor(out.sizes(), 1234, 0.5, 1.5, out.dtype());
  auto loss_of = [&](const Tensor& o) { return sum(mul(o, w)); };
  loss_of(out).backward();
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    ASSERT_EQ(x.dtype(), DType::Float64) << "gradcheck needs float64 inputs";
    ASSERT_TRUE(x.is_contiguous());
    Tensor analytic = x.grad();
    std::vector<double> numeric(size_t(x.numel()));
    double* p = static_cast<double*>(x.data_ptr());
    for (int64_t j = 0; j < x.numel(); ++j) {
      double orig = p[j];
      p[j] = orig + eps;
      double plus = loss_of(f(inputs)).item<double>();
      p[j] = orig - eps;
      double minus = loss_of(f(inputs)).item<double>();
      p[j] = orig;
      numeric[size_t(j)] = (plus - minus) / (2 * eps);
    }
    if (!analytic.defined()) {
      for (double v : numeric) EXPECT_NEAR(v, 0.0, atol) << "input " << i << " got no gradient";
      continue;
    }
    SCOPED_TRACE("gradient of input " + std::to_string(i));
    expect_values(analytic, numeric, atol, rtol);
  }
}

}  // namespace mf::testing
