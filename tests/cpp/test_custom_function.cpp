// Custom functions (Note [Custom functions]), saved tensor hooks (Note
// [Saved tensor hooks]) and activation checkpointing (Note [Activation
// checkpointing]) from C++.
#include "test_util.h"

namespace mf {
namespace {

using testing::random_tensor;
using testing::values;

void expect_bitwise_equal(const Tensor& a, const Tensor& b) {
  ASSERT_TRUE(a.defined());
  ASSERT_TRUE(b.defined());
  EXPECT_EQ(values(a), values(b));
}

// cube(x) = x^3 with a hand-written backward 3 x^2 g, written with ops.
Tensor cube(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = mul(mul(x, x), x);
  }
  autograd::CustomFunction fn;
  fn.name = "CubeBackward";
  fn.saved = {x};
  fn.backward = [](const TensorList& grads, const std::vector<bool>& needs, const TensorList& saved) {
    EXPECT_EQ(needs.size(), 1u);
    return TensorList{mul(mul(mul(saved[0], saved[0]), 3.0), grads[0])};
  };
  return autograd::link(std::move(fn), {x}, {y})[0];
}

TEST(CustomFunction, GradientAndDoubleBackward) {
  Tensor x = random_tensor({5}, 1).requires_grad_();
  Tensor y = cube(x);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "CubeBackward");
  TensorList g = autograd::grad({sum(y)}, {x}, {}, std::nullopt, /*create_graph=*/true);
  Tensor x2 = clone(x.detach()).requires_grad_();
  TensorList g_ref = autograd::grad({sum(mul(mul(x2, x2), x2))}, {x2}, {}, std::nullopt, true);
  testing::expect_close(g[0], g_ref[0], 1e-12, 1e-12);
  // The backward was recorded: its own gradient is 6x.
  TensorList gg = autograd::grad({sum(g[0])}, {x});
  testing::expect_close(gg[0], mul(x.detach(), 6.0), 1e-12, 1e-12);
}

TEST(CustomFunction, InputReturnedAsIsBecomesAnAlias) {
  Tensor x = random_tensor({3}, 2).requires_grad_();
  autograd::CustomFunction fn;
  fn.name = "IdentityBackward";
  fn.backward = [](const TensorList& grads, const std::vector<bool>&, const TensorList&) { return grads; };
  Tensor y = autograd::link(std::move(fn), {x}, {x})[0];
  EXPECT_NE(y.impl(), x.impl());
  EXPECT_TRUE(x.is_leaf());  // the input itself is untouched
  EXPECT_EQ(y.data_ptr(), x.data_ptr());
  sum(mul(y, 2.0)).backward();
  testing::expect_values(x.grad(), {2, 2, 2});
}

TEST(CustomFunction, WrongGradientCountAndShapeAreErrors) {
  Tensor x = random_tensor({3}, 3).requires_grad_();
  auto make = [&](std::function<TensorList(const TensorList&)> body) {
    autograd::CustomFunction fn;
    fn.name = "BadBackward";
    fn.backward = [body](const TensorList& grads, const std::vector<bool>&, const TensorList&) { return body(grads); };
    Tensor y;
    {
      NoGradGuard no_grad;
      y = mul(x, 2.0);
    }
    return autograd::link(std::move(fn), {x}, {y})[0];
  };
  Tensor two = make([](const TensorList& g) { return TensorList{g[0], g[0]}; });
  EXPECT_THROW(sum(two).backward(), ValueError);
  Tensor shape = make([](const TensorList&) { return TensorList{zeros({4}, {.dtype = DType::Float64})}; });
  EXPECT_THROW(sum(shape).backward(), ShapeError);
}

TEST(SavedTensorHooks, EverySaveGoesThroughPackAndUnpackIsChecked) {
  Tensor x = random_tensor({4}, 4).requires_grad_();
  int packs = 0, unpacks = 0;
  auto hooks = std::make_shared<SavedTensorHooks>();
  hooks->pack = [&](const Tensor& t) -> std::shared_ptr<void> {
    ++packs;
    return std::make_shared<Tensor>(clone(t.detach()));
  };
  hooks->unpack = [&](const std::shared_ptr<void>& p) {
    ++unpacks;
    return *static_cast<Tensor*>(p.get());
  };
  Tensor loss;
  {
    autograd::SavedTensorHooksGuard guard(hooks);
    loss = sum(sin(mul(x, x)));  // mul saves both inputs, sin its input
  }
  EXPECT_EQ(packs, 3);
  loss.backward();
  EXPECT_EQ(unpacks, 3);
  Tensor xd = x.detach();
  testing::expect_close(x.grad(), mul(mul(xd, 2.0), cos(mul(xd, xd))), 1e-12, 1e-12);

  auto wrong = std::make_shared<SavedTensorHooks>();
  wrong->pack = [](const Tensor&) -> std::shared_ptr<void> { return nullptr; };
  wrong->unpack = [](const std::shared_ptr<void>&) { return zeros({7}, {.dtype = DType::Float64}); };
  {
    autograd::SavedTensorHooksGuard guard(wrong);
    loss = sum(mul(x, x));
  }
  EXPECT_THROW(loss.backward(), ShapeError);
}

// A block with dropout and a saved input used twice.
TensorList block(const TensorList& in, const Tensor& w) {
  Tensor h = tanh(matmul(in[0], w));
  return {mul(dropout(h, 0.3, true), h)};
}

TEST(Checkpoint, GradientsEqualTheUncheckpointedRunBitForBit) {
  Tensor w = random_tensor({6, 6}, 5).requires_grad_();
  Tensor x0 = random_tensor({4, 6}, 6);

  Tensor xr = clone(x0).requires_grad_();
  manual_seed(7);
  Tensor ref = block({xr}, w)[0];
  sum(ref).backward();
  Tensor gw = clone(w.grad());
  w.set_grad(Tensor());

  Tensor xc = clone(x0).requires_grad_();
  manual_seed(7);
  auto fn = [&w](const TensorList& in) { return block(in, w); };
  Tensor out = autograd::checkpoint(fn, {xc})[0];
  expect_bitwise_equal(out, ref);
  // Draws after the forward are the uncheckpointed run's draws: the
  // recomputation puts the generator back where backward found it.
  const uint64_t offset = default_generator().offset();
  sum(out).backward();
  EXPECT_EQ(default_generator().offset(), offset);
  expect_bitwise_equal(xc.grad(), xr.grad());
  expect_bitwise_equal(w.grad(), gw);
}

TEST(Checkpoint, KeepsNoActivations) {
  Tensor w = random_tensor({64, 64}, 8).requires_grad_();
  Tensor x = random_tensor({64, 64}, 9).requires_grad_();
  auto deep = [&w](const TensorList& in) {
    Tensor h = in[0];
    for (int i = 0; i < 8; ++i) h = tanh(matmul(h, w));
    return TensorList{h};
  };
  const int64_t before = memory_stats(Device()).allocated_bytes;
  Tensor plain = deep({x})[0];
  const int64_t kept_plain = memory_stats(Device()).allocated_bytes - before;
  plain = Tensor();
  const int64_t before2 = memory_stats(Device()).allocated_bytes;
  Tensor checkpointed = autograd::checkpoint(deep, {x})[0];
  const int64_t kept_checkpointed = memory_stats(Device()).allocated_bytes - before2;
  // 8 activations of 32 KiB against the output alone.
  EXPECT_GE(kept_plain, 8 * 64 * 64 * 8);
  EXPECT_LE(kept_checkpointed, 2 * 64 * 64 * 8);
  sum(checkpointed).backward();
  EXPECT_TRUE(w.grad().defined());
}

TEST(Checkpoint, AnInputWrittenInPlaceOrAnotherComputationIsACheckpointError) {
  Tensor w = random_tensor({3, 3}, 10).requires_grad_();
  Tensor x = random_tensor({2, 3}, 11);
  Tensor out = autograd::checkpoint([&w](const TensorList& in) { return TensorList{tanh(matmul(in[0], w))}; }, {x})[0];
  add_(x, 1.0);
  EXPECT_THROW(sum(out).backward(), CheckpointError);

  int calls = 0;
  auto changing = [&](const TensorList& in) {
    ++calls;
    Tensor h = calls == 1 ? in[0] : narrow(in[0], 1, 0, 2);
    return TensorList{sum(tanh(matmul(h, narrow(w, 0, 0, h.sizes()[1]))))};
  };
  Tensor loss = autograd::checkpoint(changing, {random_tensor({2, 3}, 12)})[0];
  EXPECT_THROW(loss.backward(), CheckpointError);
}

TEST(Checkpoint, BatchNormRunningStatisticsAreUpdatedOnce) {
  Tensor x = random_tensor({8, 3}, 13).requires_grad_();
  Tensor rm = zeros({3}, {.dtype = DType::Float64}), rv = ones({3}, {.dtype = DType::Float64});
  Tensor out = autograd::checkpoint(
      [&](const TensorList& in) { return TensorList{relu(batch_norm(in[0], rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5))}; },
      {x})[0];
  std::vector<double> after_forward = values(rm);
  sum(out).backward();
  EXPECT_EQ(values(rm), after_forward);
  EXPECT_NE(after_forward, std::vector<double>(3, 0.0));
}

}  // namespace
}  // namespace mf
