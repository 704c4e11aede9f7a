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
  // a uint8 condition counts as bool (any nonzero is true)
  expect_values(where(from_vector({2, 0, 1}, {3}, {.dtype = kUInt8}), ones({3}), x), {1, 0, 1});
  EXPECT_THROW(where(ones({3}, {.dtype = kBool}), x, zeros({4})), ShapeError);
}


TEST(ElementwiseMaskedFill, ScalarAndTensorValue) {
  Tensor x = random_tensor({3, 4}, 10);
  Tensor m = random_mask({4}, 11);  // broadcast over rows
  std::vector<double> xv = values(x), mv = values(m), expected;
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 4; ++k) expected.push_back(mv[size_t(k)] != 0 ? 2.5 : xv[size_t(r * 4 + k)]);
  expect_values(masked_fill(x, m, 2.5), expected, 0, 0);
  expect_values(masked_fill(x, m, full({}, 2.5, {.dtype = kFloat32})), expected, 0, 0);
  // strided input, mask larger than the input (the output broadcasts)
  Tensor xt = transposed_random(4, 3, 12, -1, 1);
  Tensor mm = random_mask({2, 4, 3}, 13);
  Tensor got = masked_fill(xt, mm, -1.0);
  ASSERT_EQ(got.sizes(), (Shape{2, 4, 3}));
  std::vector<double> tv = values(xt), mmv = values(mm);
  expected.clear();
  for (size_t i = 0; i < mmv.size(); ++i) expected.push_back(mmv[i] != 0 ? -1.0 : tv[i % 12]);
  expect_values(got, expected, 0, 0);
  for (DType dt : {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = zeros({3}, {.dtype = dt});
    Tensor f = masked_fill(t, from_vector({0, 1, 1}, {3}, {.dtype = kBool}), 1);
    EXPECT_EQ(f.dtype(), dt);
    expect_values(f, {0, 1, 1});
  }
  // the value is cast to the input's dtype
  expect_values(masked_fill(zeros({2}, {.dtype = kInt64}), ones({2}, {.dtype = kBool}), 2.7), {2, 2});
  EXPECT_EQ(masked_fill(zeros({}), full({}, true, {.dtype = kBool}), 3.0).item<double>(), 3.0);
}

TEST(ElementwiseMaskedFill, GradientsAndInPlace) {
  Tensor m = random_mask({3, 4}, 14);
  Tensor x = random_tensor({3, 4}, 15).requires_grad_();
  Tensor v = full({}, 0.7, {.dtype = kFloat64}).requires_grad_();
  expect_gradcheck([&](const TensorList& in) { return masked_fill(in[0], m, in[1]); }, {x, v});
  expect_gradcheck([&](const TensorList& in) { return masked_fill(in[0], m, 3.0); }, {x});

  Tensor y = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor yt = transpose(y, 0, 1);
  masked_fill_(yt, from_vector({1, 0}, {2}, {.dtype = kBool}), 0.0);  // column 0 of yt = row 0 of y
  expect_values(y, {0, 0, 3, 4});
  // in place with autograd: masked positions get no gradient
  Tensor a = random_tensor({4}, 16).requires_grad_();
  Tensor h = mul(a, 3.0);
  masked_fill_(h, from_vector({1, 0, 0, 1}, {4}, {.dtype = kBool}), 0.0);
  sum(h).backward();
  expect_values(a.grad(), {0, 3, 3, 0});
}

TEST(ElementwiseMaskedFill, BadInput) {
  Tensor x = zeros({3});
  EXPECT_THROW(masked_fill(x, zeros({3}, {.dtype = kUInt8}), 1.0), TypeError);
  EXPECT_THROW(masked_fill(x, x, 1.0), TypeError);
  // an integer value out of the tensor's range is an error, not a wrap
  Tensor u = zeros({2}, {.dtype = kUInt8});
  EXPECT_THROW(masked_fill(u, ones({2}, {.dtype = kBool}), -1), Error);
  EXPECT_THROW(masked_fill(zeros({2}, {.dtype = kInt8}), ones({2}, {.dtype = kBool}), 300), Error);
  expect_values(masked_fill(u, ones({2}, {.dtype = kBool}), 255), {255, 255});
  EXPECT_THROW(masked_fill(x, ones({3}, {.dtype = kBool}), zeros({1})), ShapeError);
  EXPECT_THROW(masked_fill(x, ones({4}, {.dtype = kBool}), 1.0), ShapeError);
  Tensor y = zeros({3});
  EXPECT_THROW(masked_fill_(y, ones({2, 3}, {.dtype = kBool}), 1.0), ShapeError);  // would grow y
}

TEST(ElementwiseLerp, AgainstReference) {
  for (double w : {0.0, 0.3, 0.5, 0.8, 1.0, -0.5, 1.5}) {
    for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      SCOPED_TRACE(std::to_string(w) + " " + dtype_name(dt));
      Tensor a = to(random_tensor({7, 1}, 20, -2, 2), dt);
      Tensor b = to(strided_random(1, 9, 21, -2, 2), dt);
      Tensor got = lerp(a, b, w);
      EXPECT_EQ(got.dtype(), dt);
      expect_binary_matches([w](const Tensor& x, const Tensor& y) { return lerp(x, y, w); },
                            [w](double x, double y) { return x + w * (y - x); }, a, b, tolerance_for(dt));
    }
  }
  // exact at both ends
  Tensor a = from_vector({1e8, -3}, {2}, {.dtype = kFloat32});
  Tensor b = from_vector({1, 7}, {2}, {.dtype = kFloat32});
  expect_values(lerp(a, b, 1.0), {1, 7}, 0, 0);
  expect_values(lerp(a, b, 0.0), {1e8, -3}, 0, 0);
  Tensor ga = random_tensor({2, 3}, 22).requires_grad_();
  Tensor gb = random_tensor({3}, 23).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return lerp(in[0], in[1], 0.3); }, {ga, gb});
  expect_gradcheck([](const TensorList& in) { return lerp(in[0], in[1], 0.7); }, {ga, gb});
  EXPECT_THROW(lerp(zeros({2}), zeros({2}, {.dtype = kFloat64}), 0.5), TypeError);
  EXPECT_THROW(lerp(zeros({2}, {.dtype = kInt64}), zeros({2}, {.dtype = kInt64}), 0.5), TypeError);
  EXPECT_THROW(lerp(zeros({2}), zeros({3}), 0.5), ShapeError);
}

TEST(ElementwiseAddc, AgainstReference) {
  for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = to(random_tensor({3, 1, 4}, 30), dt);
    Tensor a = to(transposed_random(5, 4, 31, -1, 1), dt);  // (5, 4) strided
    Tensor b = to(random_tensor({4}, 32, 0.5, 2), dt);
    Shape shape{3, 5, 4};
    std::vector<double> tv = values(contiguous(expand(t, shape))), av = values(contiguous(expand(a, shape))),
                        bv = values(contiguous(expand(b, shape))), mul_expected, div_expected;
    for (size_t i = 0; i < tv.size(); ++i) {
      mul_expected.push_back(tv[i] + 0.5 * av[i] * bv[i]);
      div_expected.push_back(tv[i] - 2.0 * av[i] / bv[i]);
    }
    Tensor m = addcmul(t, a, b, 0.5);
    EXPECT_EQ(m.dtype(), dt);
    ASSERT_EQ(m.sizes(), shape);
    Tolerance tol = tolerance_for(dt);
    expect_values(m, mul_expected, tol.atol * 4, tol.rtol * 4);
    expect_values(addcdiv(t, a, b, -2.0), div_expected, tol.atol * 4, tol.rtol * 4);
  }
  Tensor i = from_vector({1, 2}, {2}, {.dtype = kInt64});
  EXPECT_EQ(addcmul(i, i, i, 2).dtype(), kInt64);
  expect_values(addcmul(i, i, i, 2), {3, 10});
  EXPECT_EQ(addcmul(i, i, from_vector({0.5, 0.5}, {2})).dtype(), kFloat32);
  expect_values(addcdiv(from_vector({1, 1}, {2}), i, i), {2, 2});
  EXPECT_THROW(addcmul(i, i, i, 0.5), TypeError);
  EXPECT_THROW(addcdiv(i, i, i), TypeError);
  EXPECT_THROW(addcmul(zeros({2}), zeros({3}), zeros({2})), ShapeError);

  Tensor gt_ = random_tensor({2, 3}, 33).requires_grad_();
  Tensor ga = random_tensor({3}, 34).requires_grad_();
  Tensor gb = random_tensor({2, 1}, 35, 0.5, 2).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return addcmul(in[0], in[1], in[2], 0.7); }, {gt_, ga, gb});
  expect_gradcheck([](const TensorList& in) { return addcdiv(in[0], in[1], in[2], -1.3); }, {gt_, ga, gb});
}

}  // namespace
}  // namespace mf
