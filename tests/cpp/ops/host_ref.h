// Host-side references for the shape and indexing tests: tensors as plain
// row-major vectors with multi-index helpers, so expected values come from
// loops written here rather than from meshflow.
#pragma once

#include <random>
#include <vector>

#include "test_util.h"

namespace mf::testing {

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> dtypes{kBool,    kUInt8,    kInt8,    kInt16,  kInt32,
                                         kInt64,   kFloat16,  kBFloat16, kFloat32, kFloat64};
  return dtypes;
}

inline Shape unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = flat % shape[size_t(d)];
    flat /= shape[size_t(d)];
  }
  return idx;
}

inline int64_t ravel(const Shape& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// A tensor's values on the host, row-major.
struct Host {
  Shape shape;
  std::vector<double> v;
  explicit Host(Shape s, double fill = 0.0) : shape(std::move(s)), v(size_t(shape_numel(shape)), fill) {}
  explicit Host(const Tensor& t) : shape(t.sizes()), v(values(t)) {}
  double& at(const Shape& idx) { return v[size_t(ravel(idx, shape))]; }
  double at(const Shape& idx) const { return v[size_t(ravel(idx, shape))]; }
  int64_t numel() const { return int64_t(v.size()); }
};

inline void expect_host(const Tensor& t, const Host& expected, double atol = 1e-6) {
  ASSERT_EQ(t.sizes(), expected.shape);
  expect_values(t, expected.v, atol, atol);
}

// Values in a small integer range, exact in every dtype (bool: 0/1).
inline Tensor random_values(const Shape& shape, uint32_t seed, DType dtype) {
  std::mt19937 gen(seed);
  const int lo = dtype == kBool ? 0 : dtype == kUInt8 ? 0 : -20, hi = dtype == kBool ? 1 : 20;
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return from_vector(v, shape, {.dtype = dtype});
}

inline Tensor random_indices(const Shape& shape, int64_t lo, int64_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  std::vector<int64_t> v(size_t(shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return from_data(v, shape);
}

inline std::vector<int64_t> int_values(const Tensor& t) {
  std::vector<double> d = values(t);
  return std::vector<int64_t>(d.begin(), d.end());
}

// t as a transposed (non-contiguous) tensor with the same values.
inline Tensor non_contiguous(const Tensor& t) {
  if (t.dim() < 2) {
    Shape doubled = t.sizes();
    if (doubled.empty()) return t;
    doubled[0] *= 2;
    Tensor wide = zeros(doubled, {.dtype = t.dtype()});
    Tensor strided = slice(wide, 0, 0, {}, 2);
    copy_(strided, t);
    return strided;
  }
  Tensor tr = contiguous(transpose(t, 0, 1));
  return transpose(tr, 0, 1);
}

}  // namespace mf::testing

namespace mf::testing {

// Checks double backward: w -> d/dx sum(f(x) * w) is linear in w and its
// derivative runs the backward of f's backward ops. x must require grad.
inline void expect_double_backward(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  Shape out_shape = f(x.detach()).sizes();
  Tensor w = random_tensor(out_shape, 99).requires_grad_();
  expect_gradcheck(
      [&](const TensorList& in) {
        EnableGradGuard enable;
        return autograd::grad({sum(mul(f(x), in[0]))}, {x}, {}, {}, /*create_graph=*/true, /*allow_unused=*/true)[0];
      },
      {w});
}

}  // namespace mf::testing
