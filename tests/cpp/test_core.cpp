// Tensor core, elementwise binary ops, views and autograd basics.
#include "test_util.h"

namespace mf {
namespace {
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

TEST(Tensor, ZerosOnesFull) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  expect_values(z, std::vector<double>(6, 0.0));
  expect_values(full({2}, 2.5, {.dtype = DType::Float64}), {2.5, 2.5});
  Tensor s = ones({});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<double>(), 1.0);
  Tensor e = zeros({0, 4});
  EXPECT_EQ(e.numel(), 0);
}

TEST(Tensor, NegativeSizeThrows) { EXPECT_THROW(zeros({2, -1}), ValueError); }

TEST(Promotion, Table) {
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kFloat32, kFloat64), kFloat64);
  Tensor i = zeros({2}, {.dtype = kInt32});
  EXPECT_EQ(result_type(i, Scalar(2.5)), kFloat32);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kUInt8}), Scalar(int64_t(5))), kUInt8);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kFloat16}), zeros({}, {.dtype = kFloat64})), kFloat16);
  EXPECT_EQ(result_type(zeros({2}, {.dtype = kInt32}), zeros({}, {.dtype = kFloat64})), kFloat64);
  EXPECT_EQ(add(i, 1.5).dtype(), kFloat32);
}

TEST(Half, RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-7f, 3.14159f}) {
    EXPECT_NEAR(float(Half(f)), f, std::fabs(f) * 1e-3 + 1e-7);
    EXPECT_NEAR(float(BFloat16(f)), f, std::fabs(f) * 1e-2 + 1e-7);
  }
  EXPECT_TRUE(std::isinf(float(Half(70000.0f))));
  EXPECT_TRUE(std::isnan(float(BFloat16(NAN))));
}

TEST(Binary, BroadcastForward) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector({10, 20, 30}, {3});
  expect_values(add(a, b), {11, 22, 33, 14, 25, 36});
  expect_values(sub(a, b, 2), {-19, -38, -57, -16, -35, -54});
  expect_values(mul(a, from_vector({2, 3}, {2, 1})), {2, 4, 6, 12, 15, 18});
  expect_values(div(a, 2), {0.5, 1, 1.5, 2, 2.5, 3});
  expect_values(neg(a), {-1, -2, -3, -4, -5, -6});
  EXPECT_THROW(add(a, zeros({4})), ShapeError);
}

TEST(Binary, NonContiguous) {
  Tensor a = random_tensor({3, 4}, 1);
  Tensor at = transpose(a, 0, 1);  // (4, 3) strided
  Tensor b = random_tensor({4, 3}, 2);
  Tensor got = add(at, b);
  std::vector<double> av = values(a), bv = values(b), expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) expected.push_back(av[size_t(j * 4 + i)] + bv[size_t(i * 3 + j)]);
  expect_values(got, expected);
}

TEST(Binary, Gradients) {
  auto a = random_tensor({2, 3}, 3).requires_grad_();
  auto b = random_tensor({3}, 4, 0.5, 2.0).requires_grad_();
  expect_gradcheck([](const TensorList& x) { return add(x[0], x[1]); }, {a, b});
  expect_gradcheck([](const TensorList& x) { return sub(x[0], x[1]); }, {a, b});
  expect_gradcheck([](const TensorList& x) { return mul(x[0], x[1]); }, {a, b});
  expect_gradcheck([](const TensorList& x) { return div(x[0], x[1]); }, {a, b});
}

TEST(Views, ShareStorage) {
  Tensor a = from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = view(a, {3, 2});
  EXPECT_TRUE(v.shares_storage(a));
  Tensor tr = transpose(a, 0, 1);
  EXPECT_FALSE(tr.is_contiguous());
  expect_values(tr, {0, 3, 1, 4, 2, 5});
  EXPECT_THROW(view(tr, {6}), Error);
  expect_values(reshape(tr, {6}), {0, 3, 1, 4, 2, 5});
  Tensor s = slice(a, 1, 0, 3, 2);
  expect_values(s, {0, 2, 3, 5});
  Tensor e = expand(from_vector({7, 8}, {2, 1}), {2, 3});
  expect_values(e, {7, 7, 7, 8, 8, 8});
  expect_values(select(a, 1, -1), {2, 5});
  EXPECT_EQ(unsqueeze(a, 0).sizes(), (Shape{1, 2, 3}));
  EXPECT_EQ(squeeze(unsqueeze(a, 2)).sizes(), (Shape{2, 3}));
  EXPECT_THROW(select(a, 1, 3), IndexError);
  EXPECT_THROW(permute(a, {0, 0}), ValueError);
}

TEST(Views, Gradients) {
  auto a = random_tensor({2, 3, 4}, 5).requires_grad_();
  expect_gradcheck([](const TensorList& x) { return permute(x[0], {2, 0, 1}); }, {a});
  expect_gradcheck([](const TensorList& x) { return slice(x[0], 2, 1, 4, 2); }, {a});
  expect_gradcheck([](const TensorList& x) { return select(x[0], 1, 1); }, {a});
  expect_gradcheck([](const TensorList& x) { return reshape(transpose(x[0], 0, 2), {4, 6}); }, {a});
  auto b = random_tensor({3, 1}, 6).requires_grad_();
  expect_gradcheck([](const TensorList& x) { return expand(x[0], {2, 3, 5}); }, {b});
}

TEST(Sum, ForwardAndGrad) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(sum(a), {21});
  expect_values(sum(a, {0}), {5, 7, 9});
  expect_values(sum(a, {1}, true), {6, 15});
  EXPECT_EQ(sum(a, {1}, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(sum(zeros({2}, {.dtype = kInt32})).dtype(), kInt64);
  expect_values(sum(zeros({0, 3}), {0}), {0, 0, 0});
  auto x = random_tensor({3, 4, 2}, 7).requires_grad_();
  expect_gradcheck([](const TensorList& t) { return sum(t[0], {0, 2}); }, {x});
  expect_gradcheck([](const TensorList& t) { return mean(t[0], {1}, true); }, {x});
}

TEST(Autograd, AccumulatesAndChecksRetain) {
  Tensor x = from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor y = sum(mul(x, x));
  y.backward({}, true);
  expect_values(x.grad(), {2, 4, 6});
  y.backward();
  expect_values(x.grad(), {4, 8, 12});
  EXPECT_THROW(y.backward(), Error);  // saved tensors were freed
}

TEST(Autograd, NonScalarNeedsGradient) {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.backward(), Error);
  y.backward(from_vector({1, 2, 3}, {3}));
  expect_values(x.grad(), {2, 4, 6});
}

TEST(Autograd, InplaceModifiedSavedTensorIsReported) {
  Tensor x = ones({3}).requires_grad_();
  Tensor a = mul(x, 1.0);
  Tensor y = mul(a, a);
  add_(a, 1.0);
  EXPECT_THROW(sum(y).backward(), Error);
  EXPECT_THROW(add_(x, 1.0), Error);  // leaf requiring grad
}

TEST(Autograd, InplaceHistory) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor a = mul(x, 3.0);
  mul_(a, 2.0);
  add_(a, x);
  sum(a).backward();
  expect_values(x.grad(), {7, 7});
}

TEST(Autograd, GradAndDoubleBackward) {
  Tensor x = from_vector({1, 2, 3}, {3}, {.dtype = kFloat64}).requires_grad_();
  Tensor y = sum(mul(mul(x, x), x));  // sum x^3
  TensorList g = autograd::grad({y}, {x}, {}, {}, /*create_graph=*/true);
  expect_values(g[0], {3, 12, 27});
  EXPECT_FALSE(x.grad().defined());
  sum(g[0]).backward();  // d/dx sum 3x^2 = 6x
  expect_values(x.grad(), {6, 12, 18});
}

TEST(Autograd, HooksAndRetainGrad) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor h = mul(x, 2.0);
  h.retain_grad();
  int calls = 0;
  h.register_hook([&](const Tensor& g) {
    calls++;
    return mul(g, 10.0);
  });
  sum(h).backward();
  EXPECT_EQ(calls, 1);
  expect_values(x.grad(), {20, 20});
  ASSERT_TRUE(h.grad().defined());
  x.register_hook([](const Tensor& g) { return mul(g, 0.5); });
  x.set_grad(Tensor());
  sum(mul(x, 4.0)).backward();
  expect_values(x.grad(), {2, 2});
}

TEST(Autograd, PostAccumulateHooksAndCallbacksRunInOrder) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor w = from_vector({3, 4}, {2}).requires_grad_();
  std::vector<std::string> events;
  x.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    events.push_back("x");
    expect_values(leaf.grad(), {3, 4});
    autograd::queue_callback([&] { events.push_back("end"); });
  });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w"); });
  sum(mul(x, w)).backward();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events.back(), "end");  // after every node of the pass
  EXPECT_THROW(autograd::queue_callback([] {}), Error);  // no pass is running
  EXPECT_THROW(mul(x, 2.0).register_post_accumulate_grad_hook([](const Tensor&) {}), Error);
}

TEST(Autograd, HooksMayNotChangeTheGradientsShapeOrDType) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  x.register_hook([](const Tensor&) { return ones({3}); });
  EXPECT_THROW(sum(mul(x, 2.0)).backward(), ShapeError);
  EXPECT_FALSE(x.grad().defined());
  Tensor y = from_vector({1, 2}, {2}).requires_grad_();
  Tensor h = mul(y, 2.0);
  h.register_hook([](const Tensor& g) { return to(g, kFloat64); });
  EXPECT_THROW(sum(h).backward(), TypeError);
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    EXPECT_FALSE(mul(x, 2.0).requires_grad());
  }
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
  EXPECT_FALSE(x.detach().requires_grad());
  EXPECT_THROW(zeros({2}, {.dtype = kInt64}).requires_grad_(), TypeError);
}

TEST(Allocator, StatsTrackPeak) {
  reset_peak_memory_stats();
  auto before = memory_stats();
  {
    Tensor big = empty({1 << 20});
    auto during = memory_stats();
    EXPECT_GE(during.allocated_bytes - before.allocated_bytes, 4 << 20);
  }
  auto after = memory_stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.peak_allocated_bytes - before.allocated_bytes, 4 << 20);
  Tensor again = empty({1 << 20});
  EXPECT_GT(memory_stats().num_cache_hits, after.num_cache_hits);
}

TEST(Print, LikePyTorch) {
  EXPECT_EQ(from_vector({1, 2, 3, 4}, {2, 2}).to_string(), "tensor([[1., 2.],\n        [3., 4.]])");
  EXPECT_EQ(from_vector({1.5, -2.25}, {2}).to_string(), "tensor([ 1.5000, -2.2500])");
  EXPECT_EQ(zeros({2}, {.dtype = kInt64}).to_string(), "tensor([0, 0])");
  EXPECT_EQ(ones({}, {.dtype = kFloat64}).to_string(), "tensor(1., dtype=meshflow.float64)");
  // Whole numbers spanning more than three decades print in scientific notation, as in PyTorch.
  EXPECT_EQ(from_vector({1, 2000}, {2}).to_string(), "tensor([1.0000e+00, 2.0000e+03])");
}

}  // namespace
}  // namespace mf
