// Automatic mixed precision: the autocast layer of dispatch (policies,
// nesting, cast cache, autograd through the casts) and the gradient-scaling
// ops and GradScaler.
#include <limits>

#include "meshflow/optim/optimizer.h"
#include "test_util.h"

namespace mf {
namespace {

using testing::expect_close;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

Tensor rand_f32(const Shape& shape, uint32_t seed) { return random_tensor(shape, seed, -1.0, 1.0, kFloat32); }

TEST(Autocast, OffByDefault) {
  EXPECT_FALSE(autocast::any_enabled());
  EXPECT_FALSE(autocast::is_enabled(DeviceType::CPU));
  EXPECT_EQ(matmul(rand_f32({2, 3}, 1), rand_f32({3, 4}, 2)).dtype(), kFloat32);
}

TEST(Autocast, LowPrecisionOps) {
  AutocastGuard region(DeviceType::CPU, kBFloat16);
  const Tensor a = rand_f32({4, 8}, 1), b = rand_f32({8, 3}, 2), w = rand_f32({3, 8}, 3), bias = rand_f32({3}, 4);
  EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
  EXPECT_EQ(mm(a, b).dtype(), kBFloat16);
  EXPECT_EQ(bmm(rand_f32({2, 4, 8}, 5), rand_f32({2, 8, 3}, 6)).dtype(), kBFloat16);
  EXPECT_EQ(addmm(rand_f32({4, 3}, 7), a, b).dtype(), kBFloat16);
  EXPECT_EQ(linear(a, w, bias).dtype(), kBFloat16);
  EXPECT_EQ(linear(to(a, kBFloat16), w).dtype(), kBFloat16);  // mixed operands are unified
  EXPECT_EQ(conv2d(rand_f32({1, 2, 5, 5}, 8), rand_f32({3, 2, 3, 3}, 9), rand_f32({3}, 10)).dtype(), kBFloat16);
  EXPECT_EQ(scaled_dot_product_attention(rand_f32({2, 4, 8}, 11), rand_f32({2, 4, 8}, 12), rand_f32({2, 4, 8}, 13))
                .dtype(),
            kBFloat16);
  // The product is the bfloat16 product of the rounded operands.
  const Tensor expected = matmul(to(to(a, kBFloat16), kFloat32), to(to(b, kBFloat16), kFloat32));
  expect_close(to(matmul(a, b), kFloat32), expected, 0.05, 0.02);
}

TEST(Autocast, Fp32AndFollowOps) {
  AutocastGuard region(DeviceType::CPU, kBFloat16);
  const Tensor x = to(rand_f32({4, 5}, 1), kBFloat16);
  const Tensor target = from_vector(std::vector<double>{0, 2, 4, 1}, {4}, {.dtype = kInt64});
  EXPECT_EQ(cross_entropy(x, target).dtype(), kFloat32);
  EXPECT_EQ(nll_loss(log_softmax(x, 1), target).dtype(), kFloat32);
  EXPECT_EQ(mse_loss(x, x).dtype(), kFloat32);
  EXPECT_EQ(prod(x).dtype(), kFloat32);
  // Follow: the inputs' dtype, with the usual promotion.
  EXPECT_EQ(softmax(x, 1).dtype(), kBFloat16);
  EXPECT_EQ(exp(x).dtype(), kBFloat16);
  EXPECT_EQ(sum(x).dtype(), kBFloat16);
  EXPECT_EQ(add(x, rand_f32({4, 5}, 2)).dtype(), kFloat32);
  // mv and dot are not autocast ops in PyTorch.
  EXPECT_EQ(mv(rand_f32({3, 4}, 3), rand_f32({4}, 4)).dtype(), kFloat32);
  EXPECT_EQ(dot(rand_f32({4}, 3), rand_f32({4}, 4)).dtype(), kFloat32);
}

TEST(Autocast, NeverCastsFloat64OrIntegers) {
  AutocastGuard region(DeviceType::CPU, kBFloat16);
  EXPECT_EQ(matmul(random_tensor({2, 3}, 1), random_tensor({3, 2}, 2)).dtype(), kFloat64);
  const Tensor i = ones({2, 2}, {.dtype = kInt64});
  EXPECT_EQ(matmul(i, i).dtype(), kInt64);
  EXPECT_EQ(prod(random_tensor({3}, 3)).dtype(), kFloat64);
}

TEST(Autocast, Float16) {
  AutocastGuard region(DeviceType::CPU, kFloat16);
  EXPECT_EQ(matmul(rand_f32({2, 3}, 1), rand_f32({3, 2}, 2)).dtype(), kFloat16);
  EXPECT_EQ(prod(to(rand_f32({3}, 3), kFloat16)).dtype(), kFloat32);
}

TEST(Autocast, NestingAndDisabledRegions) {
  const Tensor a = rand_f32({2, 3}, 1), b = rand_f32({3, 2}, 2);
  {
    AutocastGuard outer(DeviceType::CPU, kBFloat16);
    {
      AutocastGuard inner(DeviceType::CPU, kFloat16);
      EXPECT_EQ(matmul(a, b).dtype(), kFloat16);
      {
        AutocastGuard off(DeviceType::CPU, std::nullopt, false);
        EXPECT_FALSE(autocast::any_enabled());
        EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
      }
      EXPECT_EQ(matmul(a, b).dtype(), kFloat16);
    }
    EXPECT_EQ(autocast::get_dtype(DeviceType::CPU), kBFloat16);
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
    // A region of another device type leaves CPU tensors alone.
    AutocastGuard cuda_off(DeviceType::CPU, std::nullopt, false);
    AutocastGuard cuda(DeviceType::CUDA);
    EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
  }
  EXPECT_FALSE(autocast::any_enabled());
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
}

TEST(Autocast, GradientsReachFloat32Parameters) {
  Tensor w = rand_f32({3, 8}, 1).requires_grad_();
  Tensor bias = rand_f32({3}, 2).requires_grad_();
  const Tensor x = rand_f32({4, 8}, 3);
  Tensor loss;
  {
    AutocastGuard region(DeviceType::CPU, kBFloat16);
    Tensor y = linear(x, w, bias);
    EXPECT_EQ(y.dtype(), kBFloat16);
    loss = sum(mul(to(y, kFloat32), to(y, kFloat32)));
    loss.backward();  // inside the region: backward ops are not autocast
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(bias.grad().dtype(), kFloat32);
  // Against the float32 gradient: 2 * y^T x, within bfloat16 error.
  Tensor w2 = w.detach().requires_grad_();
  Tensor y32 = linear(x, w2, bias.detach());
  sum(mul(y32, y32)).backward();
  expect_close(w.grad(), w2.grad(), 0.1, 0.05);
}

TEST(Autocast, CachesParameterCastsPerRegion) {
  Tensor w = rand_f32({3, 8}, 1).requires_grad_();
  const Tensor x = rand_f32({4, 8}, 2);
  {
    AutocastGuard region(DeviceType::CPU, kBFloat16);
    Tensor y1 = linear(x, w);
    Tensor y2 = linear(x, w);
    EXPECT_EQ(autocast::cache_size(), 1u);
    {
      AutocastGuard inner(DeviceType::CPU, kBFloat16);
      linear(x, w);
      EXPECT_EQ(autocast::cache_size(), 1u);  // nested regions share the cache
    }
    EXPECT_EQ(autocast::cache_size(), 1u);
    // Both uses reach w through the one cached cast.
    add(sum(y1), sum(y2)).backward();
    Tensor ref = w.detach().requires_grad_();
    Tensor r = linear(to(x, kBFloat16), to(ref, kBFloat16));
    mul(sum(to(r, kFloat32)), 2.0).backward();
    expect_close(w.grad(), ref.grad(), 1e-2, 1e-2);
    // Inputs that are not parameters are not cached.
    linear(rand_f32({4, 8}, 3), rand_f32({3, 8}, 4));
    EXPECT_EQ(autocast::cache_size(), 1u);
  }
  EXPECT_EQ(autocast::cache_size(), 0u);  // cleared with the outermost region
  {
    AutocastGuard region(DeviceType::CPU, kBFloat16, true, false);
    linear(x, w);
    EXPECT_EQ(autocast::cache_size(), 0u);  // cache_enabled = false
  }
}

TEST(Autocast, CacheSeesInPlaceUpdates) {
  Tensor w = rand_f32({2, 2}, 1).requires_grad_();
  const Tensor x = from_vector(std::vector<double>{1, 0, 0, 1}, {2, 2}, {.dtype = kFloat32});
  AutocastGuard region(DeviceType::CPU, kBFloat16);
  Tensor before = linear(x, w);
  {
    NoGradGuard no_grad;
    Tensor data = w.detach();
    fill_(data, 2.0);
  }
  expect_values(linear(x, w), {2, 2, 2, 2});
  EXPECT_NE(values(before)[0], 2.0);
}

TEST(Autocast, BadArguments) {
  EXPECT_THROW(AutocastGuard(DeviceType::CPU, kFloat32), TypeError);
  EXPECT_THROW(autocast::set_dtype(DeviceType::CPU, kInt32), TypeError);
  EXPECT_THROW(autocast::parse_device_type("tpu"), ValueError);
  EXPECT_EQ(autocast::parse_device_type("cpu"), DeviceType::CPU);
  EXPECT_FALSE(autocast::any_enabled());  // a failed guard changes nothing
  try {
    AutocastGuard region(DeviceType::CPU, kFloat64);
    FAIL();
  } catch (const TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
}

// 16-bit inputs accumulate in float32: a bfloat16 accumulator would stop
// growing at 256 when adding ones (its 8-bit mantissa).
TEST(LowPrecisionKernels, AccumulateInFloat32) {
  for (DType dtype : {kBFloat16, kFloat16}) {
    const Tensor x = ones({4096}, {.dtype = dtype});
    expect_values(sum(x), {4096});
    expect_values(mean(x), {1});
    expect_values(narrow(cumsum(x, 0), 0, 4095, 1), {4096});
    const Tensor wide = ones({3, 2048}, {.dtype = dtype});
    expect_values(sum(wide, {1}), {2048, 2048, 2048});
    const Tensor r = rand_f32({4, 1024}, 7);
    const Tensor r16 = to(r, dtype);
    // Computed from the rounded inputs in float32, then rounded once.
    expect_close(to(softmax(r16, 1), kFloat32), softmax(to(r16, kFloat32), 1), 1e-4, 1e-2);
    expect_close(to(layer_norm(r16, {1024}), kFloat32), layer_norm(to(r16, kFloat32), {1024}), 2e-2, 1e-2);
    expect_close(to(var(r16, {1}), kFloat32), var(to(r16, kFloat32), {1}), 1e-3, 1e-2);
  }
}

// bfloat16 conv2d weight gradients on small images run as one GEMM (Note
// [bfloat16 weight gradient by GEMM]); against float64 on the same rounded
// values, strided, padded and 1x1 included.
TEST(LowPrecisionKernels, Conv2dWeightGradBFloat16) {
  struct Case {
    Shape x, w;
    Conv2dArgs args;
  };
  const std::vector<Case> cases{{{4, 8, 6, 6}, {16, 8, 3, 3}, {.padding = {1, 1}}},
                                {{3, 5, 9, 9}, {7, 5, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
                                {{2, 16, 4, 4}, {8, 16, 1, 1}, {.stride = {2, 2}}},
                                {{2, 4, 5, 7}, {6, 4, 3, 2}, {.dilation = {1, 2}}}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Tensor x = to(rand_f32(c.x, seed++), kBFloat16);
    Tensor w = to(rand_f32(c.w, seed++), kBFloat16).requires_grad_();
    Tensor y = conv2d(x, w, Tensor(), c.args);
    const Tensor g = to(rand_f32(y.sizes(), seed++), kBFloat16);
    const Tensor gw = autograd::grad({y}, {w}, {g})[0];
    EXPECT_EQ(gw.dtype(), kBFloat16);
    Tensor w64 = to(w.detach(), kFloat64).requires_grad_();
    Tensor y64 = conv2d(to(x, kFloat64), w64, Tensor(), c.args);
    const Tensor gw64 = autograd::grad({y64}, {w64}, {to(g, kFloat64)})[0];
    expect_close(gw, gw64, 0.05, 0.01);
  }
}

// --- gradient scaling ---------------------------------------------------------------

TEST(AmpUnscale, UnscalesAndFindsNonFinite) {
  for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    Tensor g = to(from_vector(std::vector<double>{2, -4, 8, 16}, {2, 2}), dtype);
    Tensor found = zeros({1}, {.dtype = kFloat32});
    const Tensor inv = full({1}, 0.5, {.dtype = kFloat32});
    amp::non_finite_check_and_unscale_({g}, found, inv);
    expect_values(g, {1, -2, 4, 8});
    EXPECT_EQ(g.dtype(), dtype);
    expect_values(found, {0});
    for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      Tensor h = to(from_vector(std::vector<double>{1, bad, 3}, {3}), dtype);
      Tensor ok = to(from_vector(std::vector<double>{4}, {1}), dtype);
      Tensor f = zeros({1}, {.dtype = kFloat32});
      amp::non_finite_check_and_unscale_({ok, h}, f, inv);
      expect_values(f, {1});
      expect_values(ok, {2});
      EXPECT_EQ(values(h)[2], 1.5);
    }
  }
}

TEST(AmpUnscale, LargeAndStridedGradients) {
  Tensor g = rand_f32({300, 500}, 1);
  const std::vector<double> before = values(g);
  Tensor gt = transpose(g, 0, 1);  // a strided gradient is written in place
  Tensor found = zeros({1}, {.dtype = kFloat32});
  amp::non_finite_check_and_unscale_({gt}, found, full({1}, 0.25, {.dtype = kFloat32}));
  const std::vector<double> after = values(g);
  for (size_t i = 0; i < after.size(); i += 997) EXPECT_FLOAT_EQ(float(after[i]), float(before[i] * 0.25));
  expect_values(found, {0});
  Tensor big = rand_f32({200000}, 2);
  Tensor last = narrow(big, 0, 199999, 1);
  fill_(last, std::numeric_limits<double>::infinity());
  amp::non_finite_check_and_unscale_({big}, found, full({1}, 1.0, {.dtype = kFloat32}));
  expect_values(found, {1});
}

TEST(AmpUnscale, BadInput) {
  Tensor g = rand_f32({3}, 1);
  EXPECT_THROW(amp::non_finite_check_and_unscale_({g}, zeros({2}), ones({1})), TypeError);
  EXPECT_THROW(amp::non_finite_check_and_unscale_({g}, zeros({1}), ones({1}, {.dtype = kFloat64})), TypeError);
  EXPECT_THROW(amp::non_finite_check_and_unscale_({ones({3}, {.dtype = kInt64})}, zeros({1}), ones({1})),
               TypeError);
  EXPECT_THROW(amp::update_scale_(ones({1}), zeros({1}), zeros({1}), 2.0, 0.5, 3), TypeError);
}

TEST(AmpUpdateScale, GrowthAndBackoff) {
  Tensor scale = full({1}, 8.0, {.dtype = kFloat32});
  Tensor tracker = zeros({1}, {.dtype = kInt32});
  const Tensor finite = zeros({1}), inf = ones({1});
  std::vector<std::pair<double, double>> expected{{8, 1}, {8, 2}, {16, 0}, {8, 0}, {8, 1}, {4, 0}, {4, 1}};
  const std::vector<bool> overflow{false, false, false, true, false, true, false};
  for (size_t i = 0; i < overflow.size(); ++i) {
    amp::update_scale_(scale, tracker, overflow[i] ? inf : finite, 2.0, 0.5, 3);
    expect_values(scale, {expected[i].first});
    expect_values(tracker, {expected[i].second});
  }
  // A grown scale that overflows float32 is not kept.
  Tensor huge = full({1}, 3e38, {.dtype = kFloat32});
  Tensor t = full({1}, 2, {.dtype = kInt32});
  amp::update_scale_(huge, t, finite, 2.0, 0.5, 3);
  EXPECT_FLOAT_EQ(float(values(huge)[0]), 3e38f);
  expect_values(t, {0});
}

TEST(GradScaler, SkipsNonFiniteStepsAndAdjustsScale) {
  Tensor p = from_vector(std::vector<double>{1, 2}, {2}, {.dtype = kFloat32}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 4.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 2});
  EXPECT_EQ(scaler.get_scale(), 4.0);
  const std::vector<bool> overflow{false, false, true, false};
  const std::vector<double> scales{4, 8, 4, 4};
  std::vector<double> expected_p{1, 2};
  for (size_t i = 0; i < overflow.size(); ++i) {
    p.set_grad(Tensor());
    scaler.scale(sum(mul(p, 3.0))).backward();  // d/dp = 3 * scale
    expect_values(p.grad(), {3 * scaler.get_scale(), 3 * scaler.get_scale()});
    if (overflow[i]) {
      Tensor g = p.grad();
      fill_(g, std::numeric_limits<double>::infinity());
    }
    const bool stepped = scaler.step(opt);
    EXPECT_EQ(stepped, !overflow[i]);
    if (stepped)
      for (auto& v : expected_p) v -= 0.1 * 3;
    expect_values(p, expected_p, 1e-5);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), scales[i]) << "step " << i;
  }
  scaler.scale(sum(p)).backward();
  scaler.unscale_(opt);
  EXPECT_THROW(scaler.unscale_(opt), Error);
  scaler.step(opt);
  EXPECT_THROW(scaler.step(opt), Error);
  scaler.update(1024.0);
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_THROW(amp::GradScaler({.growth_factor = 0.5}), ValueError);
  amp::GradScaler off({.enabled = false});
  EXPECT_FALSE(off.is_enabled());
  EXPECT_EQ(off.get_scale(), 1.0);
}

}  // namespace
}  // namespace mf
