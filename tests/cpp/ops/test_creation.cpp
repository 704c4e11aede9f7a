// Range factories: arange, linspace, eye.
#include "test_util.h"

namespace mf {
namespace {
using testing::expect_values;
using testing::values;

TEST(Arange, IntegralArgumentsGiveInt64) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(a.sizes(), (Shape{5}));
  expect_values(a, {0, 1, 2, 3, 4});
  expect_values(arange(2, 9, 3), {2, 5, 8});
  expect_values(arange(10, 0, -3), {10, 7, 4, 1});
  expect_values(arange(-3, 2), {-3, -2, -1, 0, 1});
  EXPECT_EQ(arange(int64_t(1) << 40, (int64_t(1) << 40) + 2).dtype(), kInt64);
  EXPECT_EQ(values(arange(int64_t(1) << 40, (int64_t(1) << 40) + 2))[1], double((int64_t(1) << 40) + 1));
}

TEST(Arange, FloatingArgumentsGiveTheDefaultDType) {
  Tensor a = arange(0, 1, 0.25);
  EXPECT_EQ(a.dtype(), kFloat32);
  expect_values(a, {0, 0.25, 0.5, 0.75});
  expect_values(arange(0.0, 1.0, 0.3), {0, 0.3, 0.6, 0.9});  // ceil((1 - 0) / 0.3) = 4
  expect_values(arange(1, 2.5, 0.5), {1, 1.5, 2});
  expect_values(arange(2.5), {0, 1, 2});
  set_default_dtype(kFloat64);
  Tensor d = arange(0, 1, 0.1);
  set_default_dtype(kFloat32);
  EXPECT_EQ(d.dtype(), kFloat64);
  ASSERT_EQ(d.numel(), 10);
  // start + i * step, not a running sum.
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(values(d)[size_t(i)], 0.0 + double(i) * 0.1);
}

TEST(Arange, ExplicitDType) {
  for (DType dt : {kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = arange(0, 6, 2, dt);
    EXPECT_EQ(a.dtype(), dt);
    expect_values(a, {0, 2, 4});
  }
  EXPECT_EQ(arange(3, kFloat64).dtype(), kFloat64);
  Tensor big = arange(0, 100000, 1, kFloat32);
  std::vector<double> v = values(big);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], double(i));
}

TEST(Arange, EmptyRanges) {
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_EQ(arange(3, 3).numel(), 0);
  EXPECT_EQ(arange(1.5, 1.5, 0.5).numel(), 0);
}

TEST(Arange, BadArguments) {
  EXPECT_THROW(arange(0, 5, 0), Error);
  EXPECT_THROW(arange(0.0, 1.0, 0.0), Error);
  EXPECT_THROW(arange(0, 5, -1), Error);
  EXPECT_THROW(arange(5, 0), Error);
  EXPECT_THROW(arange(-1), Error);
  EXPECT_THROW(arange(0.0, std::numeric_limits<double>::quiet_NaN()), Error);
  EXPECT_THROW(arange(0.0, std::numeric_limits<double>::infinity()), Error);
  EXPECT_THROW(arange(0, 3, 1, kBool), TypeError);
  EXPECT_THROW(arange(0, 2.5, 0.5, kInt64), Error);  // the step truncates to 0
  expect_values(arange(0, 2.5, 1.5, kInt64), {0, 1});
  EXPECT_THROW(arange(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()), Error);
}

TEST(Linspace, Values) {
  Tensor a = linspace(0, 1, 5);
  EXPECT_EQ(a.dtype(), kFloat32);
  expect_values(a, {0, 0.25, 0.5, 0.75, 1});
  expect_values(linspace(1, 0, 3), {1, 0.5, 0});
  expect_values(linspace(2, 7, 1), {2});
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  expect_values(linspace(-1, 1, 4, {.dtype = kFloat64}), {-1, -1.0 / 3, 1.0 / 3, 1}, 1e-15);
  Tensor i = linspace(0, 10, 4, {.dtype = kInt64});
  EXPECT_EQ(i.dtype(), kInt64);
  expect_values(i, {0, 3, 6, 10});
  // Both ends exact, the rest within rounding of start + i * step.
  Tensor d = linspace(0.1, 0.7, 1001, {.dtype = kFloat64});
  std::vector<double> v = values(d);
  EXPECT_EQ(v.front(), 0.1);
  EXPECT_EQ(v.back(), 0.7);
  for (size_t k = 0; k < v.size(); ++k) EXPECT_NEAR(v[k], 0.1 + double(k) * 0.6 / 1000, 1e-15);
  EXPECT_TRUE(linspace(0, 1, 3, {.requires_grad = true}).requires_grad());
  EXPECT_THROW(linspace(0, 1, -1), Error);
  EXPECT_THROW(linspace(0, 1, 3, {.dtype = kBool}), TypeError);
}

TEST(Eye, Values) {
  Tensor e = eye(3);
  EXPECT_EQ(e.sizes(), (Shape{3, 3}));
  EXPECT_EQ(e.dtype(), kFloat32);
  expect_values(e, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  expect_values(eye(2, 3), {1, 0, 0, 0, 1, 0});
  expect_values(eye(3, 2), {1, 0, 0, 1, 0, 0});
  EXPECT_EQ(eye(0).sizes(), (Shape{0, 0}));
  EXPECT_EQ(eye(3, 0).sizes(), (Shape{3, 0}));
  for (DType dt : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat64}) {
    Tensor x = eye(2, {}, {.dtype = dt});
    EXPECT_EQ(x.dtype(), dt);
    expect_values(x, {1, 0, 0, 1});
  }
  Tensor big = eye(300, 200);
  std::vector<double> v = values(big);
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 200; ++j) ASSERT_EQ(v[size_t(i * 200 + j)], i == j ? 1.0 : 0.0);
  EXPECT_THROW(eye(-1), Error);
  EXPECT_THROW(eye(2, -3), Error);
}

}  // namespace

TEST(Creation, FillValuesOutOfAnIntegerRangeThrow) {
  EXPECT_THROW(full({2}, 300, {.dtype = kUInt8}), Error);
  EXPECT_THROW(full({2}, -1.5, {.dtype = kUInt8}), Error);
  Tensor t = zeros({2}, {.dtype = kInt8});
  EXPECT_THROW(fill_(t, 128), Error);
  expect_values(t, {0, 0});
  expect_values(full({2}, 255, {.dtype = kUInt8}), {255, 255});
  expect_values(fill_(t, -128), {-128, -128});
}

}  // namespace mf
