// where, masked_fill, lerp, addcmul, addcdiv.
#include "elementwise_test_util.h"

namespace mf {
namespace {
using namespace testing;

Tensor random_mask(const Shape& shape, uint32_t seed) { return gt(random_tensor(shape, seed), 0.0); }

TEST(ElementwiseWhere, RandomBroadcastAgainstReference) {
  Tensor c = random_mask({4, 1, 3}, 1);
  Tensor a = random_tensor({5, 1}, 2);
  Tensor b = strided_random(1, 3, 3, -1, 1);  // (1, 3), every other element
  Tensor got = where(c, a, b);
  ASSERT_EQ(got.sizes(), (Shape{4, 5, 3}));
  std::vector<double> cv = values(c), av = values(a), bv = values(b), expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 3; ++k)
        expected.push_back(cv[size_t(i * 3 + k)] != 0 ? av[size_t(j)] : bv[size_t(k)]);
  expect_values(got, expected, 0, 0);
}

TEST(ElementwiseWhere, DTypesAndPromotion) {
  Tensor c = from_vector({1, 0, 1}, {3}, {.dtype = kBool});
  for (DType dt : {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = from_vector({1, 1, 1}, {3}, {.dtype = dt});
    Tensor b = zeros({3}, {.dtype = dt});
    Tensor w = where(c, a, b);
    EXPECT_EQ(w.dtype(), dt);
    expect_values(w, {1, 0, 1});
  }
  Tensor i = from_vector({1, 2, 3}, {3}, {.dtype = kInt64});
  Tensor f = from_vector({-1, -2, -3}, {3}, {.dtype = kFloat32});
  EXPECT_EQ(where(c, i, f).dtype(), kFloat32);
  expect_values(where(c, i, f), {1, -2, 3});
  EXPECT_EQ(where(c, i, 0.5).dtype(), kFloat32);
  expect_values(where(c, i, 0.5), {1, 0.5, 3});
  EXPECT_EQ(where(c, i, 7).dtype(), kInt64);
  expect_values(where(c, 9, i), {9, 2, 9});
  EXPECT_EQ(where(c, 9.0, f).dtype(), kFloat32);
  // 0-d and empty
  EXPECT_EQ(where(full({}, true, {.dtype = kBool}), full({}, 1.0), full({}, 2.0)).item<double>(), 1.0);
  EXPECT_EQ(where(zeros({0}, {.dtype = kBool}), zeros({0}), 1.0).sizes(), (Shape{0}));
}

TEST(ElementwiseWhere, Gradients) {
  Tensor c = random_mask({3, 4}, 5);
  Tensor a = random_tensor({3, 4}, 6).requires_grad_();
  Tensor b = random_tensor({4}, 7).requires_grad_();
  expect_gradcheck([&](const TensorList& in) { return where(c, in[0], in[1]); }, {a, b});
  expect_gradcheck([&](const TensorList& in) { return where(c, in[0], 2.0); }, {a});
}

TEST(ElementwiseWhere, BadInput) {
  Tensor x = zeros({3});
  EXPECT_THROW(where(x, x, x), TypeError);
  EXPECT_THROW(where(zeros({3}, {.dtype = kInt64}), x, x), TypeError);
  EXPECT_THROW(where(ones({3}, {.dtype = kBool}), x, zeros({4})), ShapeError);
}

}  // namespace
}  // namespace mf
