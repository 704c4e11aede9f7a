// Tracing and running graphs: forward, train steps against eager, the state
// the trace must leave untouched, and untraceable calls.
#include <gtest/gtest.h>

#include <limits>

#include "meshflow/amp.h"
#include "meshflow/graph/executor.h"
#include "meshflow/graph/passes.h"
#include "meshflow/graph/trace.h"
#include "meshflow/nn.h"
#include "meshflow/optim.h"
#include "test_util.h"

namespace mf::testing {
namespace {

using graph::Executable;
using graph::Tracer;

std::vector<float> float_values(const Tensor& t) {
  Tensor c = contiguous(t.detach());
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

TEST(GraphTrace, ForwardRecordsNodesWithoutRunningKernels) {
  Tensor w = random_tensor({4, 3}, 1, -1, 1, DType::Float32);
  Tensor b = random_tensor({3}, 2, -1, 1, DType::Float32);
  Tensor x = random_tensor({5, 4}, 3, -1, 1, DType::Float32);
  graph::Graph g;
  {
    Tracer tracer;
    Tensor px = tracer.add_inputs({x})[0];
    EXPECT_FALSE(px.storage()->has_data());
    Tensor y = relu(add(matmul(px, w), b));
    EXPECT_FALSE(y.storage()->has_data());
    EXPECT_EQ(y.sizes(), (Shape{5, 3}));
    g = tracer.finish({y});
  }
  EXPECT_EQ(g.inputs().size(), 1u);
  int variables = 0;
  for (const auto& v : g.values()) variables += v.kind == graph::ValueKind::Variable;
  EXPECT_EQ(variables, 2);
  EXPECT_EQ(g.nodes().size(), 3u);
  const std::string text = g.str();
  EXPECT_NE(text.find("matmul("), std::string::npos) << text;
  EXPECT_NE(text.find("relu("), std::string::npos) << text;

  Executable exe(std::move(g));
  for (uint32_t seed : {3u, 4u}) {
    Tensor xs = random_tensor({5, 4}, seed, -1, 1, DType::Float32);
    Tensor got = exe.run({xs})[0];
    EXPECT_EQ(float_values(got), float_values(relu(add(matmul(xs, w), b))));
  }
}

TEST(GraphTrace, RejectsWrongInputsAndNestedTraces) {
  graph::Graph g;
  {
    Tracer tracer;
    EXPECT_THROW(Tracer(), Error);
    Tensor px = tracer.add_inputs({zeros({2, 2})})[0];
    g = tracer.finish({mul(px, px)});
  }
  EXPECT_FALSE(graph::is_tracing());
  Executable exe(std::move(g));
  EXPECT_THROW(exe.run({zeros({3, 2})}), ShapeError);
  EXPECT_THROW(exe.run({}), ValueError);
}

TEST(GraphTrace, UntraceableCallsNameTheOp) {
  Tensor one = ones({1});
  Tracer tracer;
  Tensor px = tracer.add_inputs({ones({4})})[0];
  Tensor s = sum(px);
  try {
    s.item();
    FAIL() << "item() of a traced tensor did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Tensor.item() is not traceable in graph mode"), std::string::npos)
        << e.what();
  }
  try {
    nonzero(px);
    FAIL() << "nonzero of a traced tensor did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nonzero is not traceable in graph mode"), std::string::npos) << e.what();
  }
  // Tensors made before the trace still have their values; factories
  // called while tracing are traced.
  EXPECT_EQ(one.item<double>(), 1.0);
  EXPECT_THROW(ones({1}).item(), Error);
}

// A small regression model trained with SGD + momentum, eager and traced.
struct Net {
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(6, 8);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(8, 2);
  Tensor forward(const Tensor& x) { return fc2->forward(relu(fc1->forward(x))); }
  TensorList parameters() {
    TensorList p = fc1->parameters();
    for (const Tensor& t : fc2->parameters()) p.push_back(t);
    return p;
  }
};

void copy_parameters(Net& from, Net& to) {
  NoGradGuard no_grad;
  TensorList a = from.parameters(), b = to.parameters();
  for (size_t i = 0; i < a.size(); ++i) copy_(b[i], a[i]);
}

TEST(GraphTrace, TrainStepMatchesEagerBitwise) {
  Net eager, traced;
  copy_parameters(eager, traced);
  optim::SGD eager_opt(eager.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD graph_opt(traced.parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<Tensor> xs, ys;
  for (uint32_t s = 0; s < 4; ++s) {
    xs.push_back(random_tensor({5, 6}, 10 + s, -1, 1, DType::Float32));
    ys.push_back(random_tensor({5, 2}, 20 + s, -1, 1, DType::Float32));
  }
  // A gradient left over from an eager step must survive the trace.
  Tensor stale = full({8, 6}, 7.0);
  traced.fc1->weight().set_grad(stale);

  graph::Graph g;
  {
    Tracer tracer;
    tracer.add_optimizer(graph_opt);
    TensorList in = tracer.add_inputs({xs[0], ys[0]});
    Tensor loss = mse_loss(traced.forward(in[0]), in[1]);
    loss.backward();
    graph_opt.step();
    g = tracer.finish({loss});
  }
  EXPECT_TRUE(traced.fc1->weight().grad().is_same(stale));
  EXPECT_FALSE(traced.fc2->weight().grad().defined());
  graph::optimize(g);
  Executable exe(std::move(g));
  traced.fc1->weight().set_grad(Tensor());

  for (size_t s = 0; s < xs.size(); ++s) {
    eager_opt.zero_grad();
    Tensor loss = mse_loss(eager.forward(xs[s]), ys[s]);
    loss.backward();
    eager_opt.step();
    Tensor graph_loss = exe.run({xs[s], ys[s]})[0];
    EXPECT_EQ(float_values(graph_loss), float_values(loss)) << "step " << s;
    TensorList a = eager.parameters(), b = traced.parameters();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(float_values(a[i]), float_values(b[i])) << "step " << s;
  }
  // The optimizer state is the module's own: eager and graph alternate.
  Tensor buffer = graph_opt.state(traced.fc1->weight()).at("momentum_buffer").to_tensor();
  Tensor eager_buffer = eager_opt.state(eager.fc1->weight()).at("momentum_buffer").to_tensor();
  EXPECT_EQ(float_values(buffer), float_values(eager_buffer));
}

TEST(GraphTrace, LearningRateFollowsTheParameterGroup) {
  Net eager, traced;
  copy_parameters(eager, traced);
  optim::Adam eager_opt(eager.parameters(), {.lr = 0.01});
  optim::Adam graph_opt(traced.parameters(), {.lr = 0.01});
  Tensor x = random_tensor({5, 6}, 30, -1, 1, DType::Float32);
  Tensor y = random_tensor({5, 2}, 31, -1, 1, DType::Float32);
  graph::Graph g;
  {
    Tracer tracer;
    tracer.add_optimizer(graph_opt);
    TensorList in = tracer.add_inputs({x, y});
    Tensor loss = mse_loss(traced.forward(in[0]), in[1]);
    loss.backward();
    graph_opt.step();
    g = tracer.finish({loss});
  }
  Executable exe(std::move(g));
  for (double lr : {0.01, 0.003, 0.05}) {
    eager_opt.param_groups()[0].set_lr(lr);
    graph_opt.param_groups()[0].set_lr(lr);
    eager_opt.zero_grad();
    Tensor loss = mse_loss(eager.forward(x), y);
    loss.backward();
    eager_opt.step();
    exe.run({x, y});
    TensorList a = eager.parameters(), b = traced.parameters();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(float_values(a[i]), float_values(b[i])) << "lr " << lr;
  }
}

TEST(GraphTrace, DetachedHandlesMapToTheirValue) {
  graph::Graph g;
  {
    Tracer tracer;
    Tensor px = tracer.add_inputs({zeros({3})})[0];
    Tensor y = exp(px);
    Tensor z = add(y.detach(), 1.0);
    g = tracer.finish({z});
  }
  Executable exe(std::move(g));
  Tensor x = random_tensor({3}, 5, -1, 1, DType::Float32);
  EXPECT_EQ(float_values(exe.run({x})[0]), float_values(add(exp(x), 1.0)));
}

TEST(GraphTrace, ReplacedParameterMemoryIsFollowed) {
  Tensor w = ones({2, 2});
  graph::Graph g;
  {
    Tracer tracer;
    Tensor px = tracer.add_inputs({zeros({2, 2})})[0];
    g = tracer.finish({matmul(px, t(w))});
  }
  Executable exe(std::move(g));
  Tensor x = random_tensor({2, 2}, 6, -1, 1, DType::Float32);
  EXPECT_EQ(float_values(exe.run({x})[0]), float_values(matmul(x, t(w))));
  w.set_data(full({2, 2}, 3.0));
  EXPECT_EQ(float_values(exe.run({x})[0]), float_values(matmul(x, t(w))));
}

}  // namespace
}  // namespace mf::testing

namespace mf::testing {
namespace {

TEST(GraphTrace, OptimizerStateIsCreatedBeforeTheTrace) {
  Tensor w = zeros({3}).requires_grad_(true);
  optim::Adam adam({w}, {.lr = 0.1, .amsgrad = true});
  adam.init_state();
  const auto& state = adam.state(w);
  for (const char* key : {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    ASSERT_TRUE(state.contains(std::string(key))) << key;
    expect_values(state.at(std::string(key)).to_tensor(), key == std::string("step") ? std::vector<double>{0}
                                                                                      : std::vector<double>{0, 0, 0});
  }
  optim::SGD plain({w}, {.lr = 0.1});
  plain.init_state();
  EXPECT_TRUE(plain.state(w).at(std::string("momentum_buffer")).is_none());
  optim::SGD damped({w}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
  EXPECT_THROW(damped.init_state(), ValueError);
  {
    graph::Tracer tracer;
    EXPECT_THROW(tracer.add_optimizer(damped), ValueError);
  }
  EXPECT_FALSE(graph::is_tracing());
}

// Note [Graph grad scaling]: a compiled step with a grad scaler equals the
// eager GradScaler recipe, skipped steps included.
TEST(GraphTrace, GradScalerStepMatchesEager) {
  Net eager, traced;
  copy_parameters(eager, traced);
  optim::Adam eager_opt(eager.parameters(), {.lr = 0.01});
  optim::Adam graph_opt(traced.parameters(), {.lr = 0.01});
  const amp::GradScalerOptions options{.init_scale = 256.0, .growth_interval = 2};
  amp::GradScaler eager_scaler(options), graph_scaler(options);
  const std::vector<bool> overflow{false, true, false, false, true, false};
  std::vector<Tensor> xs, ys;
  for (uint32_t s = 0; s < overflow.size(); ++s) {
    xs.push_back(random_tensor({5, 6}, 30 + s, -1, 1, DType::Float32));
    ys.push_back(random_tensor({5, 2}, 40 + s, -1, 1, DType::Float32));
    if (overflow[s]) {
      Tensor x = xs.back();
      fill_(x, std::numeric_limits<double>::infinity());
    }
  }
  graph::Graph g;
  {
    Tracer tracer;
    tracer.add_optimizer(graph_opt);
    tracer.set_grad_scaler(graph_scaler);
    EXPECT_THROW(tracer.add_optimizer(eager_opt), Error);  // it would escape the scaler
    TensorList in = tracer.add_inputs({xs[0], ys[0]});
    Tensor loss = mse_loss(traced.forward(in[0]), in[1]);
    loss.backward();
    graph_opt.step();
    g = tracer.finish({loss});
  }
  graph::optimize(g);
  Executable exe(std::move(g));
  for (size_t s = 0; s < xs.size(); ++s) {
    eager_opt.zero_grad();
    Tensor loss = mse_loss(eager.forward(xs[s]), ys[s]);
    eager_scaler.scale(loss).backward();
    EXPECT_EQ(eager_scaler.step(eager_opt), !overflow[s]);
    eager_scaler.update();
    const TensorList before = traced.parameters();
    std::vector<std::vector<float>> old;
    for (const Tensor& p : before) old.push_back(float_values(p));
    Tensor graph_loss = exe.run({xs[s], ys[s]})[0];
    if (!overflow[s]) EXPECT_EQ(float_values(graph_loss), float_values(loss)) << "step " << s;
    EXPECT_EQ(graph_scaler.get_scale(), eager_scaler.get_scale()) << "step " << s;
    EXPECT_EQ(graph_scaler.growth_tracker(), eager_scaler.growth_tracker()) << "step " << s;
    TensorList a = eager.parameters(), b = traced.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(float_values(a[i]), float_values(b[i])) << "step " << s;
      if (overflow[s]) EXPECT_EQ(float_values(b[i]), old[i]) << "step " << s;
      const auto& state_a = eager_opt.state(a[i]);
      const auto& state_b = graph_opt.state(b[i]);
      for (const char* key : {"step", "exp_avg", "exp_avg_sq"})
        EXPECT_EQ(float_values(state_a.at(key).to_tensor()), float_values(state_b.at(key).to_tensor()))
            << key << " step " << s;
    }
  }
  EXPECT_EQ(graph_scaler.get_scale(), 128.0);  // 256, backed off twice, grown once
}

TEST(GraphTrace, GradScalerMisuse) {
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  amp::GradScaler scaler;
  {
    Tracer tracer;
    EXPECT_THROW(tracer.set_grad_scaler(scaler), Error);  // no optimizer
  }
  {
    Tracer tracer;
    tracer.add_optimizer(opt);
    amp::GradScaler off({.enabled = false});
    EXPECT_THROW(tracer.set_grad_scaler(off), ValueError);
    tracer.set_grad_scaler(scaler);
    EXPECT_THROW(tracer.set_grad_scaler(scaler), Error);
    TensorList in = tracer.add_inputs({zeros({2, 6})});
    Tensor out = net.forward(in[0]);
    EXPECT_THROW(tracer.finish({out}), Error);  // no backward: nothing to scale
  }
  EXPECT_FALSE(graph::is_tracing());
}

}  // namespace
}  // namespace mf::testing
