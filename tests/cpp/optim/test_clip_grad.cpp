// clip_grad_norm_ against a float64 reference over all gradient elements.
#include <cmath>
#include <limits>

#include "meshflow/optim/clip_grad.h"
#include "test_util.h"

namespace mf {
namespace {

using namespace mf::testing;
using mf::nn::utils::clip_grad_norm_;

constexpr double kInf = std::numeric_limits<double>::infinity();

double reference_norm(const std::vector<std::vector<double>>& grads, double p) {
  double acc = 0;
  for (const auto& g : grads)
    for (double v : g) acc = std::isinf(p) ? std::max(acc, std::fabs(v)) : acc + std::pow(std::fabs(v), p);
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

TEST(OptimClipGradNorm, ScalesGradientsToMaxNormForEveryNormType) {
  for (double p : {2.0, 1.0, 3.0, kInf}) {
    for (double max_norm : {0.5, 1e3}) {
      SCOPED_TRACE("p = " + std::to_string(p) + ", max_norm = " + std::to_string(max_norm));
      TensorList params{random_tensor({4, 3}, 1).requires_grad_(true), random_tensor({7}, 2).requires_grad_(true),
                        random_tensor({}, 3).requires_grad_(true), random_tensor({2}, 4).requires_grad_(true)};
      std::vector<std::vector<double>> grads;
      for (size_t i = 0; i < 3; ++i) {  // params[3] has no gradient
        Tensor g = transpose(random_tensor({3, 4}, uint32_t(10 + i), -2, 2), 0, 1);  // non-contiguous for i = 0
        if (i > 0) g = random_tensor(params[i].sizes(), uint32_t(10 + i), -2, 2);
        params[i].set_grad(g);
        grads.push_back(values(g));
      }
      const double total = reference_norm(grads, p);
      Tensor got = clip_grad_norm_(params, max_norm, p);
      EXPECT_EQ(got.dim(), 0);
      EXPECT_NEAR(got.item<double>(), total, 1e-12 * total);
      const double coef = std::min(1.0, max_norm / (total + 1e-6));
      for (size_t i = 0; i < 3; ++i) {
        std::vector<double> expected = grads[i];
        for (double& v : expected) v *= coef;
        expect_values(params[i].grad(), expected, 1e-14, 1e-12);
      }
      EXPECT_FALSE(params[3].grad().defined());
      if (max_norm < total) EXPECT_NEAR(reference_norm({values(params[0].grad()), values(params[1].grad()),
                                                        values(params[2].grad())}, p), max_norm, 1e-5);
    }
  }
}

TEST(OptimClipGradNorm, Float32AndMixedDtypes) {
  Tensor a = random_tensor({5}, 1, -1, 1, kFloat32).requires_grad_(true);
  Tensor b = random_tensor({3}, 2).requires_grad_(true);
  a.set_grad(random_tensor({5}, 3, -1, 1, kFloat32));
  b.set_grad(random_tensor({3}, 4));
  const std::vector<double> ga = values(a.grad()), gb = values(b.grad());
  const double total = reference_norm({ga, gb}, 2);
  Tensor got = clip_grad_norm_({a, b}, 0.1);
  EXPECT_EQ(got.dtype(), kFloat64);  // float32 and float64 norms meet in float64
  EXPECT_NEAR(got.item<double>(), total, 1e-6);
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  const double coef = 0.1 / (total + 1e-6);
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(values(a.grad())[i], ga[i] * coef, 1e-7);
  // The float32 gradient's norm carries float32 rounding into the common factor.
  for (size_t i = 0; i < gb.size(); ++i) EXPECT_NEAR(values(b.grad())[i], gb[i] * coef, 1e-8);
}

TEST(OptimClipGradNorm, NoGradientsGiveZero) {
  Tensor p = random_tensor({3}, 1).requires_grad_(true);
  Tensor got = clip_grad_norm_({p}, 1.0);
  EXPECT_EQ(got.item<double>(), 0.0);
  EXPECT_EQ(clip_grad_norm_({}, 1.0).item<double>(), 0.0);
}

TEST(OptimClipGradNorm, NonFiniteNorms) {
  Tensor p = random_tensor({3}, 1).requires_grad_(true);
  p.set_grad(from_vector({1.0, std::nan(""), 2.0}, {3}, {.dtype = kFloat64}));
  EXPECT_THROW(clip_grad_norm_({p}, 1.0, 2.0, /*error_if_nonfinite=*/true), Error);
  expect_values(p.grad(), {1.0, std::nan(""), 2.0}, 0);  // untouched by the refused call
  EXPECT_TRUE(std::isnan(clip_grad_norm_({p}, 1.0).item<double>()));
  EXPECT_TRUE(std::isnan(values(p.grad())[0]));  // scaled by the NaN norm, as PyTorch does
}

TEST(OptimClipGradNorm, BadInput) {
  EXPECT_THROW(clip_grad_norm_({Tensor()}, 1.0), ValueError);
}

}  // namespace
}  // namespace mf
