// autograd::backward_input + DeferredBackward (Note [Split backward]) give
// the same gradients as one backward pass, in two phases.
#include "test_util.h"

namespace mf {
namespace {

using testing::random_tensor;
using testing::values;

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_TRUE(a.defined());
  ASSERT_TRUE(b.defined());
  std::vector<double> x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-12 * (1 + std::abs(y[i]))) << "element " << i;
}

struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(uint32_t seed)
      : w1(random_tensor({6, 4}, seed).requires_grad_()),
        b1(random_tensor({6}, seed + 1).requires_grad_()),
        w2(random_tensor({3, 6}, seed + 2).requires_grad_()),
        b2(random_tensor({3}, seed + 3).requires_grad_()) {}
  Tensor operator()(const Tensor& x) const { return linear(tanh(linear(x, w1, b1)), w2, b2); }
  TensorList params() const { return {w1, b1, w2, b2}; }
};

TEST(SplitBackward, MatchesOneBackwardForAnMlp) {
  Mlp ref(1), split(1);
  Tensor x0 = random_tensor({5, 4}, 9);
  Tensor g = random_tensor({5, 3}, 10);

  Tensor xr = clone(x0).requires_grad_();
  ref(xr).backward(g);

  Tensor xs = clone(x0).requires_grad_();
  Tensor y = split(xs);
  auto [input_grads, deferred] = autograd::backward_input({y}, {g}, {xs});
  ASSERT_EQ(input_grads.size(), 1u);
  expect_same(input_grads[0], xr.grad());
  // Phase 1 wrote no .grad: not the input's, not any parameter's.
  EXPECT_FALSE(xs.grad().defined());
  for (const Tensor& p : split.params()) EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE(deferred.pending());
  deferred.run();
  EXPECT_FALSE(deferred.pending());
  TensorList pr = ref.params(), ps = split.params();
  for (size_t i = 0; i < pr.size(); ++i) expect_same(ps[i].grad(), pr[i].grad());
  EXPECT_FALSE(xs.grad().defined());  // the input's gradient was returned, not accumulated
  EXPECT_THROW(deferred.run(), Error);  // once only
}

TEST(SplitBackward, ConvolutionAndReusedParameters) {
  // The weight is used twice (two convolutions share it) and the input once:
  // phase 1 must not leave half of the weight's gradient behind.
  Tensor w0 = random_tensor({2, 2, 3, 3}, 3), x0 = random_tensor({2, 2, 6, 6}, 4);
  auto model = [](const Tensor& x, const Tensor& w) { return sum(mul(conv2d(relu(conv2d(x, w)), w), 0.5)); };

  Tensor wr = clone(w0).requires_grad_(), xr = clone(x0).requires_grad_();
  model(xr, wr).backward();

  Tensor ws = clone(w0).requires_grad_(), xs = clone(x0).requires_grad_();
  Tensor loss = model(xs, ws);
  auto [gx, deferred] = autograd::backward_input({loss}, {}, {xs});
  expect_same(gx[0], xr.grad());
  EXPECT_FALSE(ws.grad().defined());
  deferred.run();
  expect_same(ws.grad(), wr.grad());
}

TEST(SplitBackward, WithoutInputsEverythingIsDeferred) {
  // The first pipeline stage: its input needs no gradient.
  Mlp ref(5), split(5);
  Tensor x = random_tensor({3, 4}, 6);
  sum(ref(x)).backward();
  Tensor loss = sum(split(x));
  auto [none, deferred] = autograd::backward_input({loss}, {}, {});
  EXPECT_TRUE(none.empty());
  for (const Tensor& p : split.params()) EXPECT_FALSE(p.grad().defined());
  deferred.run();
  TensorList pr = ref.params(), ps = split.params();
  for (size_t i = 0; i < pr.size(); ++i) expect_same(ps[i].grad(), pr[i].grad());
}

TEST(SplitBackward, AnInputTheOutputDoesNotUseGetsNoGradient) {
  // As autograd::grad(..., allow_unused=true): an undefined tensor.
  Tensor x = random_tensor({3}, 1).requires_grad_();
  Tensor unused = random_tensor({3}, 2).requires_grad_();
  Tensor loss = sum(mul(x, 2.0));
  auto [g, deferred] = autograd::backward_input({loss}, {}, {unused, x});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_FALSE(g[0].defined());
  testing::expect_values(g[1], {2, 2, 2});
  deferred.run();
  EXPECT_FALSE(x.grad().defined());
}

TEST(SplitBackward, GradientsAccumulateAcrossMicrobatches) {
  // Two microbatches with the weight phase of the first run after the
  // input phase of the second, as a zero-bubble schedule orders them.
  Mlp ref(7), split(7);
  Tensor a = random_tensor({2, 4}, 8), b = random_tensor({2, 4}, 9);
  sum(ref(a)).backward();
  sum(ref(b)).backward();

  Tensor xa = clone(a).requires_grad_(), xb = clone(b).requires_grad_();
  Tensor la = sum(split(xa)), lb = sum(split(xb));
  auto [ga, wa] = autograd::backward_input({la}, {}, {xa});
  auto [gb, wb] = autograd::backward_input({lb}, {}, {xb});
  wb.run();
  wa.run();
  TensorList pr = ref.params(), ps = split.params();
  for (size_t i = 0; i < pr.size(); ++i) expect_same(ps[i].grad(), pr[i].grad());
}

}  // namespace
}  // namespace mf
