// State dicts: the StateValue tree, PyTorch's structure, round trips that
// continue exactly like an uninterrupted run, and mismatched state dicts.
#include "optim/optim_test_util.h"

namespace mf {
namespace {

using namespace mf::optim;
using namespace mf::testing;
namespace ref = mf::testing::optim_ref;

// --- StateValue -------------------------------------------------------------------

TEST(OptimStateValue, KindsAndAccess) {
  StateValue none;
  EXPECT_TRUE(none.is_none());
  EXPECT_EQ(StateValue(true).to_bool(), true);
  EXPECT_EQ(StateValue(3).to_int(), 3);
  EXPECT_EQ(StateValue(int64_t(1) << 40).to_int(), int64_t(1) << 40);
  EXPECT_EQ(StateValue(3).to_double(), 3.0);  // ints read as numbers
  EXPECT_EQ(StateValue(0.5).to_double(), 0.5);
  EXPECT_EQ(StateValue("adam").to_string(), "adam");
  EXPECT_TRUE(StateValue(zeros({2})).is_tensor());
  EXPECT_FALSE(StateValue(true).is_number());
  EXPECT_THROW(StateValue(true).to_double(), TypeError);
  EXPECT_THROW(StateValue(0.5).to_int(), TypeError);
  EXPECT_THROW(StateValue("x").to_tensor(), TypeError);
  EXPECT_THROW(StateValue(1).to_list(), TypeError);

  StateValue d;
  d["lr"] = 0.1;  // None becomes a dict
  d[int64_t(3)] = StateValue::List{1, 2.5, "x", nullptr};
  EXPECT_TRUE(d.is_dict());
  EXPECT_TRUE(d.contains("lr"));
  EXPECT_TRUE(d.contains(int64_t(3)));
  EXPECT_FALSE(d.contains("3"));
  EXPECT_EQ(d.at("lr").to_double(), 0.1);
  EXPECT_THROW(d.at("momentum"), ValueError);
  EXPECT_EQ(d.str(), "{3: [1, 2.5, 'x', None], 'lr': 0.1}");
  EXPECT_THROW(StateValue(1)["x"], TypeError);
}

TEST(OptimStateValue, CopiesShareTensorsDeepCopiesClone) {
  Tensor t = zeros({3}, {.dtype = kFloat64});
  StateValue v = StateValue::Dict{{"buf", t}, {"nested", StateValue::List{t}}};
  StateValue shallow = v;
  StateValue deep = v.deep_copy();
  EXPECT_TRUE(shallow.at("buf").to_tensor().is_same(t));
  EXPECT_FALSE(deep.at("buf").to_tensor().shares_storage(t));
  EXPECT_FALSE(deep.at("nested").to_list()[0].to_tensor().shares_storage(t));
  fill_(t, 2.0);
  expect_values(shallow.at("buf").to_tensor(), {2, 2, 2}, 0);
  expect_values(deep.at("buf").to_tensor(), {0, 0, 0}, 0);
}

// --- structure --------------------------------------------------------------------

TEST(OptimStateDict, HasPyTorchsStructure) {
  TensorList params = ref::make_params(kFloat32, 3);
  Adam opt(std::vector<ParamGroup>{{{params[0], params[1]}, {}}, {{params[2], params[3]}, {{"lr", 0.5}}}},
           {.amsgrad = true});
  for (size_t i = 0; i < 3; ++i) params[i].set_grad(ref::make_grad(params[i], i, 0));  // params[3]: no grad
  opt.step();
  StateValue sd = opt.state_dict();
  ASSERT_TRUE(sd.is_dict());
  EXPECT_EQ(sd.to_dict().size(), 2u);
  const StateValue& state = sd.at("state");
  ASSERT_EQ(state.to_dict().size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    const StateValue& s = state.at(i);
    const Tensor& step = s.at("step").to_tensor();
    EXPECT_EQ(step.dim(), 0);
    EXPECT_EQ(step.dtype(), kFloat32);
    EXPECT_EQ(step.item<double>(), 1.0);
    for (const char* k : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
      EXPECT_EQ(s.at(k).to_tensor().sizes(), params[size_t(i)].sizes()) << k;
      // Shared with the optimizer, as PyTorch's state_dict is.
      EXPECT_TRUE(s.at(k).to_tensor().is_same(opt.state(params[size_t(i)]).at(k).to_tensor()));
    }
  }
  const StateValue::List& groups = sd.at("param_groups").to_list();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].at("lr").to_double(), 1e-3);
  EXPECT_EQ(groups[1].at("lr").to_double(), 0.5);
  EXPECT_EQ(groups[0].at("betas").str(), "[0.9, 0.999]");
  EXPECT_EQ(groups[0].at("eps").to_double(), 1e-8);
  EXPECT_EQ(groups[0].at("weight_decay").to_double(), 0.0);
  EXPECT_TRUE(groups[1].at("amsgrad").to_bool());
  EXPECT_FALSE(groups[1].at("maximize").to_bool());
  EXPECT_EQ(groups[0].at("params").str(), "[0, 1]");
  EXPECT_EQ(groups[1].at("params").str(), "[2, 3]");
}

TEST(OptimStateDict, SGDWithoutMomentumRecordsNone) {
  Tensor p = random_tensor({2}, 1).requires_grad_(true);
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(ones({2}, {.dtype = kFloat64}));
  opt.step();
  EXPECT_EQ(opt.state_dict().at("state").str(), "{0: {'momentum_buffer': None}}");
}

// --- round trips ----------------------------------------------------------------------

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

std::vector<ParamGroup> two_groups(const TensorList& p) {
  return {{{p[0], p[1]}, {}}, {{p[2], p[3]}, {{"lr", 0.02}}}};
}

TensorList copy_params(const TensorList& params) {
  TensorList out;
  for (const Tensor& p : params) out.push_back(clone(p.detach()).requires_grad_(true));
  return out;
}

void set_grads(const TensorList& params, int k) {
  for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(ref::make_grad(params[i], i, k));
}

// Three steps, save, load into a fresh optimizer on copies of the
// parameters, then four more steps on both: they must agree exactly.
void expect_round_trip(const Make& make, DType dtype) {
  TensorList pa = ref::make_params(dtype, 5);
  std::unique_ptr<Optimizer> a = make(two_groups(pa));
  for (int k = 0; k < 3; ++k) {
    set_grads(pa, k);
    a->step();
  }
  a->param_groups()[1].set_lr(0.03);  // changed hyper-parameters travel too
  const StateValue sd = a->state_dict();

  TensorList pb = copy_params(pa);
  std::unique_ptr<Optimizer> b = make(two_groups(pb));
  b->load_state_dict(sd);
  EXPECT_EQ(b->param_groups()[1].lr(), 0.03);
  for (int k = 3; k < 7; ++k) {
    set_grads(pa, k);
    set_grads(pb, k);
    a->step();
    b->step();
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    SCOPED_TRACE("param " + std::to_string(i));
    expect_close(pb[i], pa[i], 0, 0);
    for (const auto& [key, value] : a->state(pa[i])) {
      if (!value.is_tensor()) continue;
      SCOPED_TRACE("state " + key_str(key));
      expect_close(b->state(pb[i]).at(key).to_tensor(), value.to_tensor(), 0, 0);
    }
  }
}

TEST(OptimStateDict, RoundTripContinuesLikeAnUninterruptedRun) {
  const std::vector<std::pair<std::string, Make>> makers = {
      {"SGD", [](auto g) { return std::make_unique<SGD>(g, SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}); }},
      {"SGD plain", [](auto g) { return std::make_unique<SGD>(g, SGDOptions{.lr = 0.1}); }},
      {"Adam", [](auto g) { return std::make_unique<Adam>(g, AdamOptions{.lr = 0.05, .amsgrad = true}); }},
      {"AdamW", [](auto g) { return std::make_unique<AdamW>(g, AdamWOptions{.lr = 0.05}); }},
      {"RMSprop",
       [](auto g) { return std::make_unique<RMSprop>(g, RMSpropOptions{.momentum = 0.5, .centered = true}); }},
      {"Adagrad", [](auto g) { return std::make_unique<Adagrad>(g, AdagradOptions{.lr_decay = 0.1}); }},
  };
  for (const auto& [name, make] : makers) {
    for (DType dtype : {kFloat32, kFloat64}) {
      SCOPED_TRACE(name + " in " + dtype_name(dtype));
      expect_round_trip(make, dtype);
    }
  }
}

TEST(OptimStateDict, LoadCastsStateToTheParameterDtype) {
  Tensor a = random_tensor({3}, 1).requires_grad_(true);  // float64
  Adam oa({a});
  a.set_grad(ones({3}, {.dtype = kFloat64}));
  oa.step();
  Tensor b = random_tensor({3}, 1, -1, 1, kFloat32).requires_grad_(true);
  Adam ob({b});
  ob.load_state_dict(oa.state_dict());
  EXPECT_EQ(ob.state(b).at("exp_avg").to_tensor().dtype(), kFloat32);
  EXPECT_EQ(ob.state(b).at("step").to_tensor().dtype(), kFloat32);
  b.set_grad(ones({3}));
  ob.step();
  EXPECT_EQ(ob.state(b).at("step").to_tensor().item<double>(), 2.0);
}

TEST(OptimStateDict, NumericStepFromOlderStateDictsIsAccepted) {
  Tensor p = random_tensor({2}, 1).requires_grad_(true);
  Adam opt({p});
  StateValue sd = StateValue::Dict{
      {"state", StateValue::Dict{{int64_t(0), StateValue::Dict{{"step", 4},
                                                               {"exp_avg", zeros({2}, {.dtype = kFloat64})},
                                                               {"exp_avg_sq", zeros({2}, {.dtype = kFloat64})}}}}},
      {"param_groups", StateValue::List{opt.state_dict().at("param_groups").to_list()[0]}}};
  opt.load_state_dict(sd);
  p.set_grad(ones({2}, {.dtype = kFloat64}));
  opt.step();
  EXPECT_EQ(opt.state(p).at("step").to_tensor().item<double>(), 5.0);
}

// --- mismatches -------------------------------------------------------------------------

TEST(OptimStateDict, MismatchedStateDictsThrowAndLeaveTheOptimizerAsItWas) {
  TensorList pa = ref::make_params(kFloat64, 5);
  Adam a(two_groups(pa));
  set_grads(pa, 0);
  a.step();
  const StateValue sd = a.state_dict();

  Adam one_group({pa[0]});
  EXPECT_THROW(one_group.load_state_dict(sd), ValueError);

  TensorList pb = copy_params(pa);
  Adam fewer(std::vector<ParamGroup>{{{pb[0]}, {}}, {{pb[2], pb[3]}, {}}});
  EXPECT_THROW(fewer.load_state_dict(sd), ValueError);

  // Same counts, other shapes: (4, 5) where (5, 4) was saved.
  TensorList pc = copy_params(pa);
  pc[0] = random_tensor({5, 4}, 9).requires_grad_(true);
  Adam shaped(two_groups(pc));
  try {
    shaped.load_state_dict(sd);
    ADD_FAILURE() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(5, 4)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(shaped.has_state(pc[1]));  // nothing was loaded
  EXPECT_EQ(shaped.param_groups()[0].lr(), 1e-3);

  Adam target(two_groups(copy_params(pa)));
  EXPECT_THROW(target.load_state_dict(StateValue(3)), TypeError);
  EXPECT_THROW(target.load_state_dict(StateValue::Dict{{"state", StateValue::Dict{}}}), ValueError);
  StateValue bad_index = sd.deep_copy();
  bad_index["state"][int64_t(9)] = StateValue::Dict{};
  EXPECT_THROW(target.load_state_dict(bad_index), ValueError);
  StateValue bad_option = sd.deep_copy();
  bad_option["param_groups"].to_list()[0]["lr"] = -1.0;
  EXPECT_THROW(target.load_state_dict(bad_option), ValueError);
  StateValue bad_params = sd.deep_copy();
  bad_params["param_groups"].to_list()[0]["params"] = StateValue::List{"a", "b"};
  EXPECT_THROW(target.load_state_dict(bad_params), TypeError);
}

TEST(OptimStateDict, StateOfAnotherOptimizerFailsAtStep) {
  Tensor p = random_tensor({2}, 1).requires_grad_(true);
  SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(ones({2}, {.dtype = kFloat64}));
  sgd.step();
  Tensor q = random_tensor({2}, 1).requires_grad_(true);
  Adam adam({q});
  StateValue sd = sgd.state_dict();
  sd["param_groups"] = adam.state_dict().at("param_groups");
  adam.load_state_dict(sd);
  q.set_grad(ones({2}, {.dtype = kFloat64}));
  EXPECT_THROW(adam.step(), ValueError);  // no 'step' / 'exp_avg' in the state
}

}  // namespace
}  // namespace mf
