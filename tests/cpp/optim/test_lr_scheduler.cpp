// lr schedulers over many steps against closed-form references written
// here from PyTorch's documented schedules; chaining, SequentialLR,
// OneCycleLR with momentum cycling, state dicts and bad input.
#include <cmath>
#include <numbers>

#include "optim/optim_test_util.h"

namespace mf {
namespace {

using namespace mf::optim;
using namespace mf::testing;

constexpr double kPi = std::numbers::pi;

// An SGD optimizer with two groups (lr 0.1 and 0.02) over small parameters.
struct Fixture {
  Tensor a = random_tensor({2}, 1).requires_grad_(true);
  Tensor b = random_tensor({3}, 2).requires_grad_(true);
  SGD opt{std::vector<ParamGroup>{{{a}, {}}, {{b}, {{"lr", 0.02}}}}, {.lr = 0.1, .momentum = 0.9}};
  std::vector<double> base{0.1, 0.02};

  std::vector<double> lrs() const { return {opt.param_groups()[0].lr(), opt.param_groups()[1].lr()}; }
};

// Steps `steps` epochs (the constructor made epoch 0) and checks the lr of
// each group at every epoch against expected(epoch, group).
void expect_schedule(LRScheduler& s, Fixture& f, int steps, const std::function<double(int, size_t)>& expected,
                     double tol = 1e-12) {
  for (int epoch = 0; epoch <= steps; ++epoch) {
    if (epoch > 0) s.step();
    for (size_t g = 0; g < 2; ++g) {
      const double want = expected(epoch, g);
      EXPECT_NEAR(f.lrs()[g], want, tol * std::max(1.0, std::fabs(want))) << "epoch " << epoch << " group " << g;
      EXPECT_EQ(s.get_last_lr()[g], f.lrs()[g]);
    }
    EXPECT_EQ(s.last_epoch(), epoch);
  }
}

TEST(OptimLRScheduler, StepLR) {
  Fixture f;
  StepLR s(f.opt, 3, 0.5);
  expect_schedule(s, f, 20, [&](int e, size_t g) { return f.base[g] * std::pow(0.5, e / 3); });
  EXPECT_EQ(f.opt.param_groups()[0].get_double("initial_lr"), 0.1);
  s.step(7);  // closed form
  EXPECT_NEAR(f.lrs()[0], 0.1 * 0.25, 1e-15);
  EXPECT_EQ(s.last_epoch(), 7);
}

TEST(OptimLRScheduler, MultiStepLRCountsRepeatedMilestones) {
  Fixture f;
  const std::vector<int64_t> milestones{9, 2, 5, 5};
  MultiStepLR s(f.opt, milestones, 0.1);
  auto expected = [&](int e, size_t g) {
    int passed = 0;
    for (int64_t m : milestones) passed += m <= e;
    return f.base[g] * std::pow(0.1, passed);
  };
  expect_schedule(s, f, 15, expected);
  s.step(6);
  EXPECT_NEAR(f.lrs()[1], expected(6, 1), 1e-15);
}

TEST(OptimLRScheduler, ExponentialLR) {
  Fixture f;
  ExponentialLR s(f.opt, 0.9);
  expect_schedule(s, f, 40, [&](int e, size_t g) { return f.base[g] * std::pow(0.9, e); });
  s.step(3);
  EXPECT_NEAR(f.lrs()[0], 0.1 * 0.729, 1e-15);
}

TEST(OptimLRScheduler, CosineAnnealingLRFollowsTheCosineThroughSeveralCycles) {
  Fixture f;
  const double eta_min = 0.001;
  CosineAnnealingLR s(f.opt, 10, eta_min);
  // The chainable form reproduces the closed form, which is periodic in 2 T_max.
  expect_schedule(s, f, 45, [&](int e, size_t g) {
    return eta_min + (f.base[g] - eta_min) * (1 + std::cos(kPi * e / 10)) / 2;
  }, 1e-10);
  s.step(5);
  EXPECT_NEAR(f.lrs()[0], eta_min + (0.1 - eta_min) / 2, 1e-15);
}

TEST(OptimLRScheduler, CosineAnnealingLRResumesFromTheClosedForm) {
  Fixture f;
  for (auto& g : f.opt.param_groups()) g.options["initial_lr"] = g.lr();
  CosineAnnealingLR s(f.opt, 8, 0.0, /*last_epoch=*/3);
  EXPECT_EQ(s.last_epoch(), 4);
  for (int e = 4; e < 12; ++e) {
    if (e > 4) s.step();
    EXPECT_NEAR(f.lrs()[0], 0.1 * (1 + std::cos(kPi * e / 8)) / 2, 1e-12) << e;
  }
}

TEST(OptimLRScheduler, LambdaLROneFunctionOrOnePerGroup) {
  {
    Fixture f;
    LambdaLR s(f.opt, [](int64_t e) { return 1.0 / double(e + 1); });
    expect_schedule(s, f, 12, [&](int e, size_t g) { return f.base[g] / (e + 1); });
  }
  Fixture f;
  LambdaLR s(f.opt, std::vector<LambdaLR::LambdaFn>{[](int64_t e) { return std::pow(0.95, double(e)); },
                                                    [](int64_t e) { return e % 2 ? 1.0 : 0.5; }});
  expect_schedule(s, f, 12, [&](int e, size_t g) { return f.base[g] * (g == 0 ? std::pow(0.95, e) : e % 2 ? 1.0 : 0.5); });
  EXPECT_EQ(s.state_dict().at("lr_lambdas").str(), "[None, None]");
}

TEST(OptimLRScheduler, LinearLR) {
  Fixture f;
  LinearLR s(f.opt, 0.25, 0.75, 4);
  auto expected = [&](int e, size_t g) { return f.base[g] * (0.25 + 0.5 * std::min(e, 4) / 4.0); };
  expect_schedule(s, f, 10, expected);
  s.step(2);
  EXPECT_NEAR(f.lrs()[1], expected(2, 1), 1e-15);
}

TEST(OptimLRScheduler, ChainedSchedulersMultiplyTheirFactors) {
  Fixture f;
  StepLR step(f.opt, 3, 0.5);
  ExponentialLR exp(f.opt, 0.9);
  for (int e = 0; e <= 15; ++e) {
    if (e > 0) {
      step.step();
      exp.step();
    }
    for (size_t g = 0; g < 2; ++g)
      EXPECT_NEAR(f.lrs()[g], f.base[g] * std::pow(0.5, e / 3) * std::pow(0.9, e), 1e-14) << e;
  }
}

TEST(OptimLRScheduler, SequentialLRHandsOverAtMilestones) {
  Fixture f;
  auto warmup = std::make_shared<LinearLR>(f.opt, 0.1, 1.0, 2);
  auto decay = std::make_shared<ExponentialLR>(f.opt, 0.9);
  auto cosine = std::make_shared<CosineAnnealingLR>(f.opt, 4, 0.0);
  SequentialLR s(f.opt, {warmup, decay, cosine}, {2, 6});
  // Epochs 0-1 warm up linearly; the exponential decay restarts at epoch 2
  // from the base lr; the cosine takes over at epoch 6, again from the base.
  auto expected = [&](int e, size_t g) {
    if (e < 2) return f.base[g] * (0.1 + 0.9 * e / 2.0);
    if (e < 6) return f.base[g] * std::pow(0.9, e - 2);
    return f.base[g] * (1 + std::cos(kPi * (e - 6) / 4)) / 2;
  };
  expect_schedule(s, f, 14, expected);
  EXPECT_THROW(s.step(3), ValueError);
}

// --- OneCycleLR --------------------------------------------------------------------------

// The 1cycle schedule from its definition: phases of linear or cosine
// interpolation between the group's initial, max and min lr (momentum the
// other way round).
struct OneCycleReference {
  double max_lr, div_factor = 25, final_div_factor = 1e4, pct_start = 0.3;
  int total;
  bool cosine = true, three_phase = false;
  double base_m = 0.85, max_m = 0.95;

  double anneal(double start, double end, double pct) const {
    return cosine ? end + (start - end) / 2 * (std::cos(kPi * pct) + 1) : start + (end - start) * pct;
  }
  // {lr, momentum} at step t.
  std::pair<double, double> at(int t) const {
    const double initial = max_lr / div_factor, min_lr = initial / final_div_factor;
    const double up = pct_start * total - 1;
    if (t <= up) return {anneal(initial, max_lr, t / up), anneal(max_m, base_m, t / up)};
    if (!three_phase) {
      const double pct = (t - up) / (total - 1 - up);
      return {anneal(max_lr, min_lr, pct), anneal(base_m, max_m, pct)};
    }
    const double down = 2 * pct_start * total - 2;
    if (t <= down) return {anneal(max_lr, initial, (t - up) / (down - up)), anneal(base_m, max_m, (t - up) / (down - up))};
    return {anneal(initial, min_lr, (t - down) / (total - 1 - down)), max_m};
  }
};

TEST(OptimOneCycleLR, MatchesTheScheduleForEveryVariant) {
  for (bool cosine : {true, false}) {
    for (bool three_phase : {false, true}) {
      SCOPED_TRACE(std::string(cosine ? "cos" : "linear") + (three_phase ? " three_phase" : ""));
      Fixture f;
      OneCycleLR s(f.opt, {.max_lr = {1.0, 0.5},
                           .total_steps = 40,
                           .anneal_strategy = cosine ? "cos" : "linear",
                           .three_phase = three_phase});
      const OneCycleReference r0{.max_lr = 1.0, .total = 40, .cosine = cosine, .three_phase = three_phase};
      const OneCycleReference r1{.max_lr = 0.5, .total = 40, .cosine = cosine, .three_phase = three_phase};
      for (int t = 0; t < 40; ++t) {
        if (t > 0) s.step();
        EXPECT_NEAR(f.lrs()[0], r0.at(t).first, 1e-12) << t;
        EXPECT_NEAR(f.lrs()[1], r1.at(t).first, 1e-12) << t;
        EXPECT_NEAR(f.opt.param_groups()[0].get_double("momentum"), r0.at(t).second, 1e-12) << t;
      }
      s.step();  // step 40 is the last one allowed
      EXPECT_THROW(s.step(), ValueError);
    }
  }
}

TEST(OptimOneCycleLR, CyclesAdamsBeta1AndAcceptsEpochs) {
  Tensor p = random_tensor({2}, 1).requires_grad_(true);
  Adam opt({p}, {.betas = {0.9, 0.99}});
  OneCycleLR s(opt, {.max_lr = {0.01}, .epochs = 4, .steps_per_epoch = 5, .pct_start = 0.25,
                     .base_momentum = {0.8}, .max_momentum = {0.9}});
  EXPECT_EQ(s.total_steps(), 20);
  const OneCycleReference r{.max_lr = 0.01, .pct_start = 0.25, .total = 20, .base_m = 0.8, .max_m = 0.9};
  for (int t = 0; t < 20; ++t) {
    if (t > 0) s.step();
    const auto [beta1, beta2] = opt.param_groups()[0].get_pair("betas");
    EXPECT_NEAR(opt.param_groups()[0].lr(), r.at(t).first, 1e-14) << t;
    EXPECT_NEAR(beta1, r.at(t).second, 1e-12) << t;
    EXPECT_EQ(beta2, 0.99);
  }
}

TEST(OptimOneCycleLR, WithoutMomentumCycling) {
  Tensor p = random_tensor({2}, 1).requires_grad_(true);
  Adagrad opt({p});
  OneCycleLR s(opt, {.max_lr = {0.1}, .total_steps = 10, .cycle_momentum = false});
  EXPECT_NEAR(opt.param_groups()[0].lr(), 0.1 / 25, 1e-15);
  EXPECT_FALSE(opt.param_groups()[0].options.contains("momentum"));
}

// --- state dicts -----------------------------------------------------------------------------

using MakeScheduler = std::function<std::unique_ptr<LRScheduler>(Optimizer&)>;

// Five steps, save optimizer and scheduler, load both into fresh ones, then
// ten more steps on each: the lrs (and momenta) agree exactly.
void expect_scheduler_round_trip(const MakeScheduler& make) {
  Fixture fa;
  std::unique_ptr<LRScheduler> a = make(fa.opt);
  for (int i = 0; i < 5; ++i) a->step();
  const StateValue opt_state = fa.opt.state_dict();
  const StateValue sched_state = a->state_dict();

  Fixture fb;
  std::unique_ptr<LRScheduler> b = make(fb.opt);
  fb.opt.load_state_dict(opt_state);
  b->load_state_dict(sched_state);
  EXPECT_EQ(b->last_epoch(), a->last_epoch());
  EXPECT_EQ(b->get_last_lr(), a->get_last_lr());
  for (int i = 0; i < 10; ++i) {
    a->step();
    b->step();
    EXPECT_EQ(fb.lrs(), fa.lrs()) << "step " << i;
    EXPECT_EQ(fb.opt.param_groups()[0].get_double("momentum"), fa.opt.param_groups()[0].get_double("momentum"));
  }
}

TEST(OptimLRScheduler, StateDictRoundTrips) {
  const std::vector<std::pair<std::string, MakeScheduler>> makers = {
      {"StepLR", [](Optimizer& o) { return std::make_unique<StepLR>(o, 2, 0.5); }},
      {"MultiStepLR", [](Optimizer& o) { return std::make_unique<MultiStepLR>(o, std::vector<int64_t>{3, 7, 7}); }},
      {"ExponentialLR", [](Optimizer& o) { return std::make_unique<ExponentialLR>(o, 0.8); }},
      {"CosineAnnealingLR", [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 6, 0.01); }},
      {"LambdaLR", [](Optimizer& o) { return std::make_unique<LambdaLR>(o, [](int64_t e) { return 1.0 / (1 + e); }); }},
      {"LinearLR", [](Optimizer& o) { return std::make_unique<LinearLR>(o, 0.5, 1.0, 8); }},
      {"SequentialLR",
       [](Optimizer& o) {
         return std::make_unique<SequentialLR>(
             o, std::vector<std::shared_ptr<LRScheduler>>{std::make_shared<LinearLR>(o, 0.5, 1.0, 3),
                                                          std::make_shared<ExponentialLR>(o, 0.7)},
             std::vector<int64_t>{4});
       }},
      {"OneCycleLR",
       [](Optimizer& o) {
         return std::make_unique<OneCycleLR>(o, OneCycleLROptions{.max_lr = {0.5}, .total_steps = 20, .three_phase = true});
       }},
  };
  for (const auto& [name, make] : makers) {
    SCOPED_TRACE(name);
    expect_scheduler_round_trip(make);
  }
}

TEST(OptimLRScheduler, StateDictKeys) {
  Fixture f;
  StepLR s(f.opt, 4, 0.3);
  s.step();
  const StateValue sd = s.state_dict();
  EXPECT_EQ(sd.str(), "{'_last_lr': [0.1, 0.02], '_step_count': 2, 'base_lrs': [0.1, 0.02], 'gamma': 0.3, "
                      "'last_epoch': 1, 'step_size': 4}");
  Fixture g;
  MultiStepLR m(g.opt, {5, 2, 5});
  EXPECT_EQ(m.state_dict().at("milestones").str(), "{2: 1, 5: 2}");
  EXPECT_THROW(s.load_state_dict(StateValue::Dict{{"last_epoch", "three"}}), TypeError);
  EXPECT_THROW(s.load_state_dict(StateValue::Dict{{"step_size", 0}}), ValueError);
  EXPECT_EQ(s.last_epoch(), 1);  // a rejected state dict changes nothing
}

// --- bad input -----------------------------------------------------------------------------

TEST(OptimLRScheduler, BadArgumentsThrowValueError) {
  Fixture f;
  EXPECT_THROW(StepLR(f.opt, 0), ValueError);
  EXPECT_THROW(CosineAnnealingLR(f.opt, 0), ValueError);
  EXPECT_THROW(LinearLR(f.opt, 0.0), ValueError);
  EXPECT_THROW(LinearLR(f.opt, 1.5), ValueError);
  EXPECT_THROW(LinearLR(f.opt, 0.5, -0.1), ValueError);
  EXPECT_THROW(LinearLR(f.opt, 0.5, 1.0, 0), ValueError);
  EXPECT_THROW(LambdaLR(f.opt, std::vector<LambdaLR::LambdaFn>{[](int64_t) { return 1.0; }}), ValueError);
  EXPECT_EQ(f.lrs(), f.base);  // the failed constructions left the lrs alone

  Fixture fresh;
  EXPECT_THROW(StepLR(fresh.opt, 2, 0.1, /*last_epoch=*/5), ValueError);  // resuming needs initial_lr

  Fixture other;
  auto s1 = std::make_shared<ExponentialLR>(f.opt, 0.9);
  auto s2 = std::make_shared<ExponentialLR>(other.opt, 0.9);
  EXPECT_THROW(SequentialLR(f.opt, {s1, s2}, {3}), ValueError);
  EXPECT_THROW(SequentialLR(f.opt, {s1, s1}, {3, 4}), ValueError);
  EXPECT_THROW(SequentialLR(f.opt, {}, {}), ValueError);

  EXPECT_THROW(OneCycleLR(f.opt, {.max_lr = {0.1}}), ValueError);  // no step count
  EXPECT_THROW(OneCycleLR(f.opt, {.max_lr = {0.1}, .total_steps = 0}), ValueError);
  EXPECT_THROW(OneCycleLR(f.opt, {.max_lr = {0.1}, .epochs = 3}), ValueError);
  EXPECT_THROW(OneCycleLR(f.opt, {.max_lr = {0.1}, .total_steps = 10, .pct_start = 1.5}), ValueError);
  EXPECT_THROW(OneCycleLR(f.opt, {.max_lr = {0.1}, .total_steps = 10, .anneal_strategy = "step"}), ValueError);
  EXPECT_THROW(OneCycleLR(f.opt, {.max_lr = {0.1, 0.2, 0.3}, .total_steps = 10}), ValueError);
  Tensor p = random_tensor({2}, 1).requires_grad_(true);
  Adagrad adagrad({p});
  EXPECT_THROW(OneCycleLR(adagrad, {.max_lr = {0.1}, .total_steps = 10}), ValueError);  // nothing to cycle
  EXPECT_FALSE(adagrad.param_groups()[0].options.contains("max_lr"));
}

TEST(OptimLRScheduler, DrivesTraining) {
  // SGD with a step schedule fits y = 2x: the lr the optimizer uses is the scheduled one.
  Tensor x = random_tensor({32, 1}, 3);
  Tensor y = mul(x, 2.0);
  Tensor w = zeros({1, 1}, {.dtype = kFloat64}).requires_grad_(true);
  SGD opt({w}, {.lr = 0.5});
  StepLR sched(opt, 10, 0.5);
  for (int i = 0; i < 40; ++i) {
    opt.zero_grad();
    mse_loss(linear(x, w), y).backward();
    opt.step();
    sched.step();
  }
  EXPECT_NEAR(w.item<double>(), 2.0, 1e-2);
  EXPECT_NEAR(opt.param_groups()[0].lr(), 0.5 / 16, 1e-15);
}

}  // namespace
}  // namespace mf
