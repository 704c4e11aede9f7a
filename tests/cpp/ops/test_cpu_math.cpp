// The vectorisable float functions of kernels/cpu/math.h against the
// float64 library functions, in units in the last place of the float result.
#include <cmath>
#include <limits>

#include "backend/cpu/kernels/math.h"
#include "test_util.h"

namespace mf {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Distance from got to the float64 value expected, in float ulps at expected.
double ulps(float got, double expected) {
  if (got == expected) return 0;
  double spacing = std::nextafter(float(std::fabs(expected)), kInf) - float(std::fabs(expected));
  if (spacing == 0 || !std::isfinite(spacing)) spacing = std::numeric_limits<float>::denorm_min();
  return std::fabs(double(got) - expected) / spacing;
}

// Checks f against ref on n points spread over [lo, hi]; returns the worst ulp error.
template <typename F, typename Ref>
double worst_ulps(F f, Ref ref, float lo, float hi, int n = 200001) {
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    float x = lo + (hi - lo) * float(i) / float(n - 1);
    worst = std::max(worst, ulps(f(x), ref(double(x))));
  }
  return worst;
}

TEST(CpuMath, ExpLogLog1pTanhAccuracy) {
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::exp(x); }, [](double x) { return std::exp(x); }, -87, 88), 3);
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::exp(x); }, [](double x) { return std::exp(x); }, -1, 1), 3);
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::log(x); }, [](double x) { return std::log(x); }, 1e-6f, 10), 3);
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::log(x); }, [](double x) { return std::log(x); }, 0.5f, 2), 3);
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::log(x); }, [](double x) { return std::log(x); }, 1, 1e30f), 3);
  EXPECT_LE(
      worst_ulps([](float x) { return cpu::math::log1p(x); }, [](double x) { return std::log1p(x); }, -0.99f, 10), 3);
  EXPECT_LE(
      worst_ulps([](float x) { return cpu::math::log1p(x); }, [](double x) { return std::log1p(x); }, -1e-4f, 1e-4f),
      3);
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::expm1(x); }, [](double x) { return std::expm1(x); }, -20, 20),
            4);
  EXPECT_LE(
      worst_ulps([](float x) { return cpu::math::expm1(x); }, [](double x) { return std::expm1(x); }, -1e-3f, 1e-3f),
      3);
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::tanh(x); }, [](double x) { return std::tanh(x); }, -10, 10), 3);
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::tanh(x); }, [](double x) { return std::tanh(x); }, -1e-3f, 1e-3f),
            3);
}

TEST(CpuMath, SqrtIsCorrectlyRounded) {
  // Every 257th non-negative float bit pattern, subnormals included.
  int64_t mismatches = 0;
  for (uint64_t bits = 0; bits < 0x7f800000u; bits += 257) {
    float x = std::bit_cast<float>(uint32_t(bits));
    mismatches += cpu::math::sqrt(x) != std::sqrt(x);
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(cpu::math::sqrt(4.0f), 2.0f);
  EXPECT_EQ(cpu::math::sqrt(kInf), kInf);
  EXPECT_TRUE(std::signbit(cpu::math::sqrt(-0.0f)));
  EXPECT_TRUE(std::isnan(cpu::math::sqrt(-1.0f)));
  EXPECT_TRUE(std::isnan(cpu::math::sqrt(-kInf)));
  EXPECT_TRUE(std::isnan(cpu::math::sqrt(kNaN)));
}

TEST(CpuMath, ErfAccuracy) {
  EXPECT_LE(worst_ulps([](float x) { return cpu::math::erf(x); }, [](double x) { return std::erf(x); }, -0.5f, 0.5f), 4);
  double worst_abs = 0;
  for (int i = 0; i <= 200000; ++i) {
    float x = -6.0f + 12.0f * float(i) / 200000.0f;
    worst_abs = std::max(worst_abs, std::fabs(double(cpu::math::erf(x)) - std::erf(double(x))));
  }
  EXPECT_LE(worst_abs, 3.5e-7);
}

TEST(CpuMath, SpecialValues) {
  using cpu::math::erf;
  using cpu::math::exp;
  using cpu::math::log;
  using cpu::math::log1p;
  using cpu::math::tanh;
  EXPECT_EQ(exp(0.0f), 1.0f);
  EXPECT_EQ(exp(kInf), kInf);
  EXPECT_EQ(exp(-kInf), 0.0f);
  EXPECT_EQ(exp(89.0f), kInf);
  EXPECT_EQ(exp(-104.0f), 0.0f);
  EXPECT_TRUE(std::isnan(exp(kNaN)));
  // gradual underflow: exp(-100) is subnormal in float
  EXPECT_LE(ulps(exp(-100.0f), std::exp(-100.0)), 1);
  EXPECT_EQ(cpu::math::expm1(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(cpu::math::expm1(-0.0f)));
  EXPECT_EQ(cpu::math::expm1(-kInf), -1.0f);
  EXPECT_EQ(cpu::math::expm1(kInf), kInf);
  EXPECT_EQ(cpu::math::expm1(100.0f), kInf);
  EXPECT_TRUE(std::isnan(cpu::math::expm1(kNaN)));
  EXPECT_EQ(log(1.0f), 0.0f);
  EXPECT_EQ(log(0.0f), -kInf);
  EXPECT_EQ(log(-0.0f), -kInf);
  EXPECT_EQ(log(kInf), kInf);
  EXPECT_TRUE(std::isnan(log(-1.0f)));
  EXPECT_TRUE(std::isnan(log(-kInf)));
  EXPECT_TRUE(std::isnan(log(kNaN)));
  EXPECT_LE(ulps(log(1e-40f), std::log(double(1e-40f))), 3);  // subnormal input
  EXPECT_EQ(log1p(0.0f), 0.0f);
  EXPECT_EQ(log1p(-1.0f), -kInf);
  EXPECT_EQ(log1p(kInf), kInf);
  EXPECT_TRUE(std::isnan(log1p(-2.0f)));
  EXPECT_EQ(log1p(1e-10f), 1e-10f);
  EXPECT_EQ(tanh(kInf), 1.0f);
  EXPECT_EQ(tanh(-kInf), -1.0f);
  EXPECT_TRUE(std::signbit(tanh(-0.0f)));
  EXPECT_TRUE(std::isnan(tanh(kNaN)));
  EXPECT_EQ(erf(kInf), 1.0f);
  EXPECT_EQ(erf(-kInf), -1.0f);
  EXPECT_EQ(erf(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(erf(kNaN)));
  EXPECT_EQ(cpu::math::exp(1.0), std::exp(1.0));  // double goes to libm
}

}  // namespace
}  // namespace mf
