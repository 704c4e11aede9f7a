// Reference-loop checks shared by the elementwise op tests: an op is run on
// random inputs and compared, element by element, with a float64 function
// applied to the same (already rounded) input values.
#pragma once

#include <cmath>
#include <functional>
#include <string>

#include "test_util.h"

namespace mf::testing {

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;
using UnaryRef = std::function<double(double)>;
using BinaryRef = std::function<double(double, double)>;

struct Tolerance {
  double atol;
  double rtol;
};

// Tolerance for results stored in dtype (computed in float for 16-bit floats).
inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::Float64: return {1e-12, 1e-12};
    case DType::Float32: return {1e-6, 1e-5};
    case DType::Float16: return {1e-3, 2e-3};
    case DType::BFloat16: return {1e-2, 1e-2};
    default: return {0, 0};
  }
}

// expect_values that also accepts infinities: an infinite expected value
// must come out as the same infinity.
inline void expect_values_inf(const Tensor& t, const std::vector<double>& expected, double atol = 1e-6,
                              double rtol = 1e-6) {
  std::vector<double> got = values(t), finite_expected = expected;
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isinf(expected[i])) continue;
    EXPECT_EQ(got[i], expected[i]) << "element " << i;
    finite_expected[i] = got[i] = 0;
  }
  std::vector<double> finite_got = got;
  Tensor checked = from_vector(finite_got, {int64_t(finite_got.size())}, {.dtype = DType::Float64});
  expect_values(checked, finite_expected, atol, rtol);
}

// Checks op(x) == ref(x) elementwise, with x's values as the input.
inline void expect_unary_matches(const UnaryFn& op, const UnaryRef& ref, const Tensor& x, Tolerance tol) {
  Tensor got = op(x);
  ASSERT_EQ(got.sizes(), x.sizes());
  std::vector<double> xs = values(x), expected(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) expected[i] = ref(xs[i]);
  expect_values_inf(got, expected, tol.atol, tol.rtol);
}

// Checks op(a, b) == ref(a, b) with numpy broadcasting of a and b.
inline void expect_binary_matches(const BinaryFn& op, const BinaryRef& ref, const Tensor& a, const Tensor& b,
                                  Tolerance tol) {
  Tensor got = op(a, b);
  Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  ASSERT_EQ(got.sizes(), shape);
  Tensor ae = contiguous(expand(a.detach(), shape)), be = contiguous(expand(b.detach(), shape));
  std::vector<double> av = values(ae), bv = values(be), expected(av.size());
  for (size_t i = 0; i < av.size(); ++i) expected[i] = ref(av[i], bv[i]);
  expect_values_inf(got, expected, tol.atol, tol.rtol);
}

// A (rows, cols) tensor that is a transposed, non-contiguous view.
inline Tensor transposed_random(int64_t rows, int64_t cols, uint32_t seed, double lo, double hi,
                                DType dtype = DType::Float64) {
  Tensor base = to(random_tensor({cols, rows}, seed, lo, hi), dtype);
  Tensor t = transpose(base, 0, 1);
  EXPECT_FALSE(t.is_contiguous());
  return t;
}

// Every other column of a (rows, 2 * cols) tensor: a strided view.
inline Tensor strided_random(int64_t rows, int64_t cols, uint32_t seed, double lo, double hi,
                             DType dtype = DType::Float64) {
  Tensor base = to(random_tensor({rows, 2 * cols}, seed, lo, hi), dtype);
  return slice(base, 1, 0, 2 * cols, 2);
}

}  // namespace mf::testing
