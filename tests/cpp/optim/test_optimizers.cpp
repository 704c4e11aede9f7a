// Optimizers against float64 reference loops written from the torch.optim
// algorithms, for every option combination, in float64, float32, float16
// and bfloat16; parameter handling; bad input; training a small model.
#include "optim/optim_test_util.h"

namespace mf {
namespace {

using namespace mf::optim;
using namespace mf::testing;
namespace ref = mf::testing::optim_ref;

struct Case {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(TensorList)> make;
  ref::RefUpdate reference;
};

std::vector<Case> sgd_cases() {
  auto sgd = [](SGDOptions o) { return [o](TensorList p) -> std::unique_ptr<Optimizer> { return std::make_unique<SGD>(p, o); }; };
  return {
      {"SGD plain", sgd({.lr = 0.1}), ref::sgd(0.1)},
      {"SGD momentum", sgd({.lr = 0.1, .momentum = 0.9}), ref::sgd(0.1, 0.9)},
      {"SGD dampening", sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.3}), ref::sgd(0.1, 0.9, 0.3)},
      {"SGD nesterov", sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true}), ref::sgd(0.1, 0.9, 0, 0, true)},
      {"SGD weight_decay", sgd({.lr = 0.1, .weight_decay = 0.1}), ref::sgd(0.1, 0, 0, 0.1)},
      {"SGD maximize", sgd({.lr = 0.1, .maximize = true}), ref::sgd(0.1, 0, 0, 0, false, true)},
      {"SGD momentum_decay_maximize", sgd({.lr = 0.05, .momentum = 0.5, .weight_decay = 0.2, .maximize = true}),
       ref::sgd(0.05, 0.5, 0, 0.2, false, true)},
      {"SGD nesterov_decay_dampening0", sgd({.lr = 0.05, .momentum = 0.7, .weight_decay = 0.3, .nesterov = true}),
       ref::sgd(0.05, 0.7, 0, 0.3, true)},
  };
}

std::vector<Case> adam_cases() {
  auto adam = [](AdamOptions o) { return [o](TensorList p) -> std::unique_ptr<Optimizer> { return std::make_unique<Adam>(p, o); }; };
  auto adamw = [](AdamWOptions o) { return [o](TensorList p) -> std::unique_ptr<Optimizer> { return std::make_unique<AdamW>(p, o); }; };
  return {
      {"adam_default", adam({}), ref::adam(1e-3, 0.9, 0.999, 1e-8, 0, false, false, false)},
      {"adam_lr_betas_eps", adam({.lr = 0.05, .betas = {0.5, 0.9}, .eps = 1e-3}),
       ref::adam(0.05, 0.5, 0.9, 1e-3, 0, false, false, false)},
      {"adam_weight_decay", adam({.lr = 0.05, .weight_decay = 0.1}), ref::adam(0.05, 0.9, 0.999, 1e-8, 0.1, false, false, false)},
      {"adam_amsgrad", adam({.lr = 0.05, .amsgrad = true}), ref::adam(0.05, 0.9, 0.999, 1e-8, 0, true, false, false)},
      {"adam_maximize", adam({.lr = 0.05, .maximize = true}), ref::adam(0.05, 0.9, 0.999, 1e-8, 0, false, true, false)},
      {"adam_all", adam({.lr = 0.05, .betas = {0.8, 0.95}, .eps = 1e-6, .weight_decay = 0.2, .amsgrad = true, .maximize = true}),
       ref::adam(0.05, 0.8, 0.95, 1e-6, 0.2, true, true, false)},
      {"adamw_default", adamw({}), ref::adam(1e-3, 0.9, 0.999, 1e-8, 1e-2, false, false, true)},
      {"adamw_no_decay", adamw({.lr = 0.05, .weight_decay = 0}), ref::adam(0.05, 0.9, 0.999, 1e-8, 0, false, false, true)},
      {"adamw_decay_amsgrad", adamw({.lr = 0.05, .weight_decay = 0.3, .amsgrad = true}),
       ref::adam(0.05, 0.9, 0.999, 1e-8, 0.3, true, false, true)},
      {"adamw_all", adamw({.lr = 0.05, .betas = {0.7, 0.9}, .eps = 1e-4, .weight_decay = 0.1, .amsgrad = true, .maximize = true}),
       ref::adam(0.05, 0.7, 0.9, 1e-4, 0.1, true, true, true)},
  };
}

std::vector<Case> rmsprop_cases() {
  auto rms = [](RMSpropOptions o) { return [o](TensorList p) -> std::unique_ptr<Optimizer> { return std::make_unique<RMSprop>(p, o); }; };
  return {
      {"RMSprop default", rms({}), ref::rmsprop(1e-2, 0.99, 1e-8, 0, 0, false, false)},
      {"RMSprop centered", rms({.lr = 0.02, .centered = true}), ref::rmsprop(0.02, 0.99, 1e-8, 0, 0, true, false)},
      {"RMSprop momentum", rms({.lr = 0.02, .momentum = 0.9}), ref::rmsprop(0.02, 0.99, 1e-8, 0, 0.9, false, false)},
      {"RMSprop weight_decay", rms({.lr = 0.02, .weight_decay = 0.1}), ref::rmsprop(0.02, 0.99, 1e-8, 0.1, 0, false, false)},
      {"RMSprop centered_momentum_decay", rms({.lr = 0.02, .weight_decay = 0.1, .momentum = 0.5, .centered = true}),
       ref::rmsprop(0.02, 0.99, 1e-8, 0.1, 0.5, true, false)},
      {"RMSprop maximize_alpha_eps", rms({.lr = 0.02, .alpha = 0.9, .eps = 1e-4, .maximize = true}),
       ref::rmsprop(0.02, 0.9, 1e-4, 0, 0, false, true)},
  };
}

std::vector<Case> adagrad_cases() {
  auto ada = [](AdagradOptions o) { return [o](TensorList p) -> std::unique_ptr<Optimizer> { return std::make_unique<Adagrad>(p, o); }; };
  return {
      {"Adagrad default", ada({}), ref::adagrad(1e-2, 0, 0, 0, 1e-10, false)},
      {"Adagrad lr_decay", ada({.lr = 0.1, .lr_decay = 0.5}), ref::adagrad(0.1, 0.5, 0, 0, 1e-10, false)},
      {"Adagrad weight_decay", ada({.lr = 0.1, .weight_decay = 0.2}), ref::adagrad(0.1, 0, 0.2, 0, 1e-10, false)},
      {"Adagrad initial_accumulator", ada({.lr = 0.1, .initial_accumulator_value = 0.5}), ref::adagrad(0.1, 0, 0, 0.5, 1e-10, false)},
      {"Adagrad all", ada({.lr = 0.1, .lr_decay = 0.1, .weight_decay = 0.1, .initial_accumulator_value = 0.2, .eps = 1e-6, .maximize = true}),
       ref::adagrad(0.1, 0.1, 0.1, 0.2, 1e-6, true)},
  };
}

void run_cases(const std::vector<Case>& cases, DType dtype, double atol, double rtol, int steps = 7,
               const ref::GradFn& grad_of = ref::make_grad) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " in " + dtype_name(dtype));
    TensorList params = ref::make_params(dtype, 17);
    std::unique_ptr<Optimizer> opt = c.make(params);
    ref::expect_matches_reference(*opt, params, c.reference, steps, atol, rtol, grad_of);
  }
}

TEST(OptimSGD, MatchesReferenceFloat64) { run_cases(sgd_cases(), kFloat64, 1e-12, 1e-12); }
TEST(OptimSGD, MatchesReferenceFloat32) { run_cases(sgd_cases(), kFloat32, 2e-6, 2e-5); }
TEST(OptimAdam, MatchesReferenceFloat64) { run_cases(adam_cases(), kFloat64, 1e-12, 1e-10); }
TEST(OptimAdam, MatchesReferenceFloat32) { run_cases(adam_cases(), kFloat32, 2e-6, 2e-5); }
TEST(OptimRMSprop, MatchesReferenceFloat64) { run_cases(rmsprop_cases(), kFloat64, 1e-12, 1e-10); }
TEST(OptimRMSprop, MatchesReferenceFloat32) { run_cases(rmsprop_cases(), kFloat32, 2e-6, 2e-5); }
TEST(OptimAdagrad, MatchesReferenceFloat64) { run_cases(adagrad_cases(), kFloat64, 1e-12, 1e-10); }
TEST(OptimAdagrad, MatchesReferenceFloat32) { run_cases(adagrad_cases(), kFloat32, 2e-6, 2e-5); }

// 16-bit parameters compute in float32 and store each result (parameter
// and state) rounded to their dtype: a few steps stay within a few units in
// the last place of the reference. (With gradients near zero the 16-bit
// states underflow, as PyTorch's do; make_steady_grad keeps away from that.)
TEST(OptimReducedPrecision, Float16AndBFloat16FollowReference) {
  for (const auto& cases : {sgd_cases(), adam_cases(), rmsprop_cases(), adagrad_cases()}) {
    run_cases(cases, kFloat16, 4e-3, 4e-3, 4, ref::make_steady_grad);
    run_cases(cases, kBFloat16, 3e-2, 3e-2, 4, ref::make_steady_grad);
  }
}

// --- the update ops ----------------------------------------------------------------

TEST(OptimUpdateOps, AreRegisteredNonDifferentiableInPlaceOps) {
  for (const char* name : {"sgd_update", "adam_update", "adamw_update", "rmsprop_update", "adagrad_update"}) {
    const OpDef* op = OpRegistry::instance().find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_FALSE(op->differentiable) << name;
    EXPECT_TRUE(op->inplace) << name;
  }
}

TEST(OptimUpdateOps, StepBumpsVersionsOfWhatItWrites) {
  Tensor p = random_tensor({6}, 1).requires_grad_(true);
  Adam opt({p}, {.amsgrad = true});
  p.set_grad(random_tensor({6}, 2));
  opt.step();
  const auto& s = opt.state(p);
  std::vector<uint32_t> before{p.version()};
  for (const char* k : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"}) before.push_back(s.at(k).to_tensor().version());
  opt.step();
  EXPECT_GT(p.version(), before[0]);
  int i = 1;
  for (const char* k : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"})
    EXPECT_GT(s.at(k).to_tensor().version(), before[size_t(i++)]) << k;
}

TEST(OptimUpdateOps, FunctionalSGDMatchesHandValues) {
  // d = g + 0.5 p = (1.5, -0.5); buf = d; p -= 0.1 * (d + 0.9 buf) (Nesterov)
  Tensor p = from_vector({1, -1}, {2}, {.dtype = kFloat64});
  Tensor g = from_vector({1, 0}, {2}, {.dtype = kFloat64});
  Tensor buf = zeros({2}, {.dtype = kFloat64});
  sgd_update_(p, g, buf, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5, .nesterov = true, .init_momentum_buffer = true});
  expect_values(buf, {1.5, -0.5}, 1e-15);
  expect_values(p, {1 - 0.1 * 1.5 * 1.9, -1 + 0.1 * 0.5 * 1.9}, 1e-15);
}

TEST(OptimUpdateOps, FunctionalAdamFirstStepIsSignedLr) {
  // After one step m_hat = g and v_hat = g^2, so p moves by -lr * g / (|g| + eps).
  Tensor p = from_vector({0.5, 0.5, 0.5}, {3}, {.dtype = kFloat64});
  Tensor g = from_vector({2, -0.25, 0}, {3}, {.dtype = kFloat64});
  Tensor m = zeros({3}, {.dtype = kFloat64}), v = zeros({3}, {.dtype = kFloat64});
  Tensor step = zeros({});
  adam_update_(p, g, m, v, Tensor(), step, {.lr = 0.1, .eps = 0});
  expect_values(p, {0.4, 0.6, std::nan("")}, 1e-12);  // 0 / 0 at a zero gradient without eps
  EXPECT_EQ(step.item<double>(), 1.0);
  Tensor p2 = from_vector({0.5}, {1}, {.dtype = kFloat64});
  Tensor g2 = zeros({1}, {.dtype = kFloat64});
  Tensor m2 = zeros({1}, {.dtype = kFloat64}), v2 = zeros({1}, {.dtype = kFloat64});
  adam_update_(p2, g2, m2, v2, Tensor(), zeros({}), {.lr = 0.1});
  expect_values(p2, {0.5}, 0);
}

TEST(OptimUpdateOps, BadOperandsThrow) {
  Tensor p = zeros({3}), g = zeros({3});
  EXPECT_THROW(sgd_update_(p, zeros({4}), Tensor(), {.lr = 0.1}), ShapeError);
  EXPECT_THROW(sgd_update_(p, zeros({3}, {.dtype = kFloat64}), Tensor(), {.lr = 0.1}), TypeError);
  EXPECT_THROW(sgd_update_(p, Tensor(), Tensor(), {.lr = 0.1}), ValueError);
  EXPECT_THROW(sgd_update_(p, g, Tensor(), {.lr = 0.1, .momentum = 0.9}), ValueError);  // buffer missing
  EXPECT_THROW(sgd_update_(p, g, zeros({3}), {.lr = 0.1}), ValueError);                  // buffer without momentum
  EXPECT_THROW(sgd_update_(p, g, zeros({2}), {.lr = 0.1, .momentum = 0.9}), ShapeError);
  EXPECT_THROW(sgd_update_(p, g, zeros({3}), {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               ValueError);
  EXPECT_THROW(sgd_update_(zeros({3}, {.dtype = kInt64}), zeros({3}, {.dtype = kInt64}), Tensor(), {.lr = 0.1}),
               TypeError);
  EXPECT_THROW(adam_update_(p, g, zeros({3}), zeros({3}), Tensor(), zeros({2}), {}), TypeError);  // step shape
  EXPECT_THROW(adam_update_(p, g, zeros({3}), zeros({3}), Tensor(), zeros({}, {.dtype = kInt64}), {}), TypeError);
  EXPECT_THROW(adam_update_(p, g, zeros({3}), zeros({3}), Tensor(), zeros({}), {.amsgrad = true}), ValueError);
  EXPECT_THROW(rmsprop_update_(p, g, zeros({3}), Tensor(), Tensor(), zeros({}), {.centered = true}), ValueError);
  EXPECT_THROW(adagrad_update_(p, g, zeros({3}, {.dtype = kFloat64}), zeros({}), {}), TypeError);
  // Overlapping operands (the fused loops assume they are distinct).
  EXPECT_THROW(sgd_update_(p, p, Tensor(), {.lr = 0.1}), ValueError);
  Tensor both = zeros({6});
  EXPECT_THROW(adam_update_(p, g, slice(both, 0, 0, 3), slice(both, 0, 2, 5), Tensor(), zeros({}), {}), ValueError);
  EXPECT_NO_THROW(adam_update_(p, g, slice(both, 0, 0, 3), slice(both, 0, 3, 6), Tensor(), zeros({}), {}));
  EXPECT_THROW(adagrad_update_(p, g, zeros({3}), slice(p, 0, 2, 3), {}), ValueError);
  // A written operand whose elements share memory; a broadcast gradient is fine.
  EXPECT_THROW(sgd_update_(expand(zeros({1}), {3}), g, Tensor(), {.lr = 0.1}), ValueError);
  EXPECT_NO_THROW(sgd_update_(p, expand(ones({1}), {3}), Tensor(), {.lr = 0.1}));
  expect_values(p, {-0.1, -0.1, -0.1}, 1e-7);
}

// --- parameter handling -----------------------------------------------------------------

TEST(OptimParams, ParametersWithoutGradAreSkipped) {
  Tensor a = random_tensor({4}, 3).requires_grad_(true), b = random_tensor({4}, 4).requires_grad_(true);
  const std::vector<double> b0 = values(b);
  Adam opt({a, b}, {.lr = 0.1});
  a.set_grad(ones({4}, {.dtype = kFloat64}));
  opt.step();
  expect_values(b, b0, 0);
  EXPECT_FALSE(opt.has_state(b));
  EXPECT_TRUE(opt.has_state(a));
  EXPECT_EQ(opt.state_dict().at("state").to_dict().size(), 1u);
}

TEST(OptimParams, ZeroGradSetsToNoneOrZeroes) {
  Tensor p = random_tensor({3}, 5).requires_grad_(true);
  SGD opt({p}, {.lr = 0.1});
  Tensor g = ones({3}, {.dtype = kFloat64});
  p.set_grad(g);
  opt.zero_grad(false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_TRUE(p.grad().is_same(g));
  expect_values(p.grad(), {0, 0, 0}, 0);
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(OptimParams, StepWithClosureReturnsTheLoss) {
  Tensor p = from_vector({3}, {1}, {.dtype = kFloat64}).requires_grad_(true);
  SGD opt({p}, {.lr = 0.25});
  Tensor loss = opt.step([&] {
    opt.zero_grad();
    Tensor l = sum(mul(p, p));
    l.backward();
    return l;
  });
  EXPECT_EQ(loss.item<double>(), 9.0);
  expect_values(p, {3 - 0.25 * 6}, 1e-15);
}

TEST(OptimParams, GroupsKeepTheirOwnOptionsAndFillDefaults) {
  Tensor a = random_tensor({3}, 6).requires_grad_(true), b = random_tensor({3}, 7).requires_grad_(true);
  SGD opt(std::vector<ParamGroup>{{{a}, {}}, {{b}, {{"lr", 0.5}, {"momentum", 0.9}}}}, {.lr = 0.1, .momentum = 0.1});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(opt.param_groups()[0].get_double("momentum"), 0.1);
  EXPECT_EQ(opt.param_groups()[1].lr(), 0.5);
  EXPECT_EQ(opt.param_groups()[1].get_double("momentum"), 0.9);
  EXPECT_FALSE(opt.param_groups()[1].get_bool("nesterov"));
  const std::vector<double> a0 = values(a), b0 = values(b);
  a.set_grad(ones({3}, {.dtype = kFloat64}));
  b.set_grad(ones({3}, {.dtype = kFloat64}));
  opt.step();
  expect_values(a, {a0[0] - 0.1, a0[1] - 0.1, a0[2] - 0.1}, 1e-15);
  expect_values(b, {b0[0] - 0.5, b0[1] - 0.5, b0[2] - 0.5}, 1e-15);

  Tensor c = random_tensor({2}, 8).requires_grad_(true);
  opt.add_param_group({{c}, {{"lr", 0.01}}});
  EXPECT_EQ(opt.param_groups()[2].get_double("momentum"), 0.1);
  EXPECT_THROW(opt.add_param_group({{a}, {}}), ValueError);  // already optimized
  EXPECT_THROW(opt.add_param_group({{random_tensor({2}, 9)}, {{"lr", -1.0}}}), ValueError);
  EXPECT_THROW(opt.add_param_group({{random_tensor({2}, 9)}, {{"momentum", "high"}}}), TypeError);
}

TEST(OptimParams, AdagradCreatesStateForEveryParameterUpFront) {
  Tensor a = random_tensor({2, 2}, 10).requires_grad_(true);
  Adagrad opt({a}, {.initial_accumulator_value = 0.25});
  ASSERT_TRUE(opt.has_state(a));
  expect_values(opt.state(a).at("sum").to_tensor(), {0.25, 0.25, 0.25, 0.25}, 0);
  EXPECT_EQ(opt.state(a).at("step").to_tensor().item<double>(), 0.0);
  Tensor b = random_tensor({3}, 11).requires_grad_(true);
  opt.add_param_group({{b}, {{"initial_accumulator_value", 1.0}}});
  expect_values(opt.state(b).at("sum").to_tensor(), {1, 1, 1}, 0);
}

// --- bad input -----------------------------------------------------------------------------

TEST(OptimBadInput, InvalidHyperParametersThrowValueError) {
  auto p = [] { return TensorList{random_tensor({2}, 1).requires_grad_(true)}; };
  EXPECT_THROW(SGD(p(), SGDOptions{}), ValueError);  // lr is required
  EXPECT_THROW(SGD(p(), {.lr = -0.1}), ValueError);
  EXPECT_THROW(SGD(p(), {.lr = 0.1, .momentum = -0.1}), ValueError);
  EXPECT_THROW(SGD(p(), {.lr = 0.1, .weight_decay = -1}), ValueError);
  EXPECT_THROW(SGD(p(), {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), ValueError);
  EXPECT_THROW(SGD(p(), {.lr = 0.1, .nesterov = true}), ValueError);  // Nesterov without momentum
  EXPECT_NO_THROW(SGD(p(), {.lr = 0.1, .momentum = 0.9, .nesterov = true}));

  EXPECT_THROW(Adam(p(), {.lr = -1e-3}), ValueError);
  EXPECT_THROW(Adam(p(), {.betas = {1.0, 0.999}}), ValueError);
  EXPECT_THROW(Adam(p(), {.betas = {-0.1, 0.999}}), ValueError);
  EXPECT_THROW(Adam(p(), {.betas = {0.9, 1.0}}), ValueError);
  EXPECT_THROW(Adam(p(), {.betas = {0.9, -0.5}}), ValueError);
  EXPECT_THROW(Adam(p(), {.eps = -1e-8}), ValueError);
  EXPECT_THROW(Adam(p(), {.weight_decay = -0.1}), ValueError);
  EXPECT_NO_THROW(Adam(p(), {.betas = {0.0, 0.0}, .eps = 0}));
  EXPECT_THROW(AdamW(p(), {.lr = -1}), ValueError);
  EXPECT_THROW(AdamW(p(), {.betas = {0.9, 1.5}}), ValueError);
  EXPECT_THROW(AdamW(p(), {.eps = -1}), ValueError);
  EXPECT_THROW(AdamW(p(), {.weight_decay = -1e-2}), ValueError);

  EXPECT_THROW(RMSprop(p(), {.lr = -1}), ValueError);
  EXPECT_THROW(RMSprop(p(), {.alpha = -0.5}), ValueError);
  EXPECT_THROW(RMSprop(p(), {.eps = -1}), ValueError);
  EXPECT_THROW(RMSprop(p(), {.weight_decay = -1}), ValueError);
  EXPECT_THROW(RMSprop(p(), {.momentum = -1}), ValueError);

  EXPECT_THROW(Adagrad(p(), {.lr = -1}), ValueError);
  EXPECT_THROW(Adagrad(p(), {.lr_decay = -1}), ValueError);
  EXPECT_THROW(Adagrad(p(), {.weight_decay = -1}), ValueError);
  EXPECT_THROW(Adagrad(p(), {.initial_accumulator_value = -1}), ValueError);
  EXPECT_THROW(Adagrad(p(), {.eps = -1}), ValueError);
}

TEST(OptimBadInput, BadParameterListsThrow) {
  EXPECT_THROW(SGD(TensorList{}, {.lr = 0.1}), ValueError);
  EXPECT_THROW(Adam(std::vector<ParamGroup>{}), ValueError);
  Tensor leaf = random_tensor({2}, 1).requires_grad_(true);
  Tensor non_leaf = mul(leaf, 2.0);
  EXPECT_THROW(SGD({non_leaf}, {.lr = 0.1}), ValueError);
  EXPECT_THROW(SGD({zeros({2}, {.dtype = kInt64})}, {.lr = 0.1}), TypeError);
  EXPECT_THROW(SGD({Tensor()}, {.lr = 0.1}), TypeError);
  EXPECT_THROW(SGD({leaf, leaf}, {.lr = 0.1}), ValueError);
  EXPECT_THROW(Adam(std::vector<ParamGroup>{{{leaf}, {}}, {{leaf}, {}}}), ValueError);
}

TEST(OptimBadInput, GradientOfTheWrongShapeThrowsShapeError) {
  Tensor p = random_tensor({3}, 1).requires_grad_(true);
  Adam opt({p});
  p.set_grad(zeros({3}, {.dtype = kFloat64}));
  opt.step();
  opt.state(p)["exp_avg"] = zeros({4}, {.dtype = kFloat64});
  EXPECT_THROW(opt.step(), ShapeError);
  opt.state(p).erase("exp_avg");
  EXPECT_THROW(opt.step(), ValueError);
}

// --- training -----------------------------------------------------------------------------

// Linear regression y = x w^T + b on 64 points: every optimizer must bring
// the mean squared error well down from its start.
double train_linear_regression(const std::function<std::unique_ptr<Optimizer>(TensorList)>& make, int steps) {
  Tensor x = random_tensor({64, 3}, 21);
  Tensor w_true = from_vector({1.5, -2.0, 0.5}, {1, 3}, {.dtype = kFloat64});
  Tensor y = add(linear(x, w_true), 0.75);
  Tensor w = zeros({1, 3}, {.dtype = kFloat64}).requires_grad_(true);
  Tensor b = zeros({1}, {.dtype = kFloat64}).requires_grad_(true);
  std::unique_ptr<Optimizer> opt = make({w, b});
  double first = 0, last = 0;
  for (int i = 0; i < steps; ++i) {
    opt->zero_grad();
    Tensor loss = mse_loss(linear(x, w, b), y);
    loss.backward();
    opt->step();
    last = loss.item<double>();
    if (i == 0) first = last;
  }
  EXPECT_GT(first, 1.0);
  return last / first;
}

TEST(OptimTraining, EveryOptimizerFitsALinearRegression) {
  using Make = std::function<std::unique_ptr<Optimizer>(TensorList)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"SGD", [](TensorList p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1}); }},
      {"SGD momentum", [](TensorList p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9}); }},
      {"SGD nesterov",
       [](TensorList p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true}); }},
      {"Adam", [](TensorList p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.1}); }},
      {"Adam amsgrad", [](TensorList p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.1, .amsgrad = true}); }},
      {"AdamW", [](TensorList p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.1}); }},
      {"RMSprop", [](TensorList p) { return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.01}); }},
      {"RMSprop centered momentum",
       [](TensorList p) { return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true}); }},
      {"Adagrad", [](TensorList p) { return std::make_unique<Adagrad>(p, AdagradOptions{.lr = 0.5}); }},
  };
  for (const auto& [name, make] : makers) {
    const double ratio = train_linear_regression(make, 300);
    EXPECT_LT(ratio, 1e-3) << name << ": loss fell only to " << ratio << " of its start";
  }
}

// Note [Skipped updates]: a nonzero found_inf leaves the parameter, every
// state tensor and the step counter as they were; zero runs the update.
TEST(OptimUpdates, FoundInfSkipsTheUpdate) {
  auto vec = [](std::vector<double> v) { return from_vector(v, {int64_t(v.size())}, {.dtype = kFloat32}); };
  auto snapshot = [](const TensorList& ts) {
    std::vector<std::vector<double>> out;
    for (const Tensor& t : ts) out.push_back(values(t));
    return out;
  };
  using Update = std::function<void(const TensorList&, const Tensor&)>;
  const std::vector<std::pair<std::string, Update>> updates{
      {"sgd", [](const TensorList& t, const Tensor& f) {
         sgd_update_(t[0], t[1], t[2], {.lr = 0.1, .momentum = 0.9, .found_inf = f});
       }},
      {"adam", [](const TensorList& t, const Tensor& f) {
         adam_update_(t[0], t[1], t[2], t[3], Tensor(), t[4], {.found_inf = f});
       }},
      {"adamw", [](const TensorList& t, const Tensor& f) {
         adamw_update_(t[0], t[1], t[2], t[3], Tensor(), t[4], {.weight_decay = 0.1, .found_inf = f});
       }},
      {"rmsprop", [](const TensorList& t, const Tensor& f) {
         rmsprop_update_(t[0], t[1], t[2], Tensor(), t[3], t[4], {.momentum = 0.5, .found_inf = f});
       }},
      {"adagrad", [](const TensorList& t, const Tensor& f) {
         adagrad_update_(t[0], t[1], t[2], t[4], {.found_inf = f});
       }},
  };
  for (const auto& [name, update] : updates) {
    // param, grad, two state tensors, step
    TensorList t{vec({1, -2, 3}), vec({0.5, 0.25, -1}), vec({0.1, 0.2, 0.3}), vec({0.4, 0.5, 0.6}),
                 zeros({}, {.dtype = kFloat32})};
    const auto before = snapshot(t);
    update(t, full({1}, 1.0, {.dtype = kFloat32}));
    EXPECT_EQ(snapshot(t), before) << name;
    update(t, full({1}, 0.0, {.dtype = kFloat32}));
    EXPECT_NE(values(t[0]), before[0]) << name;
    if (name != "sgd") EXPECT_EQ(values(t[4])[0], 1.0) << name;  // SGD counts no steps
  }
  Tensor p = vec({1, 2}), g = vec({1, 1});
  EXPECT_THROW(sgd_update_(p, g, Tensor(), {.lr = 0.1, .found_inf = zeros({2})}), TypeError);
  EXPECT_THROW(sgd_update_(p, g, Tensor(), {.lr = 0.1, .found_inf = zeros({1}, {.dtype = kFloat64})}), TypeError);
}

}  // namespace
}  // namespace mf
