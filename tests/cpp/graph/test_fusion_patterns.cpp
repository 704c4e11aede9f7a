// The pattern fusions of fusion.h on hand-built graphs: linear epilogues,
// bias gradients and residual layer norms. Each rewrite is checked against
// the same graph unfused and against eager ops.
#include <gtest/gtest.h>

#include "meshflow/graph/executor.h"
#include "meshflow/graph/fusion.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "graph/graph_test_util.h"
#include "test_util.h"

namespace mf::testing {
namespace {

using graph::Graph;
using graph::ValueId;

const Attrs kUnitScales{{"beta", Scalar(1)}, {"alpha", Scalar(1)}};
const Attrs kExactGelu{{"approximate", std::string("none")}};

// Runs both graphs on the same inputs; every output must have the same bits.
TensorList expect_same_bits(Graph plain, Graph fused, const TensorList& inputs) {
  graph::Executable a(std::move(plain)), b(std::move(fused));
  const TensorList want = a.run(inputs), got = b.run(inputs);
  EXPECT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(values(want[i]), values(got[i])) << "output " << i;
  return got;
}

// (n, m) outputs of more than one block of m-element rows (the last partial).
constexpr int64_t kRows = 96, kInner = 40, kCols = 300;

TEST(GraphFusionPatterns, LinearGeluKeepsThePreActivationForBackward) {
  auto build = [](Graph& g) {
    ValueId x = g.add_input(f32({kRows, kInner}));
    ValueId w = g.add_input(f32({kCols, kInner}));
    ValueId b = g.add_input(f32({kCols}));
    ValueId grad = g.add_input(f32({kRows, kCols}));
    ValueId wt = g.add_node(op("permute"), {w}, {{"dims", Shape{1, 0}}})[0];
    ValueId pre = g.add_node(op("addmm"), {b, x, wt}, kUnitScales)[0];
    ValueId act = g.add_node(op("gelu"), {pre}, kExactGelu)[0];
    ValueId back = g.add_node(op("gelu_backward"), {grad, pre}, kExactGelu)[0];
    g.set_outputs({act, back});
  };
  Graph plain, fused;
  build(plain);
  build(fused);
  EXPECT_EQ(graph::fuse_linear_activations(fused), 2);
  ASSERT_EQ(op_names(fused), (std::vector<std::string>{"permute", "fused_linear", "gelu_backward"}));
  EXPECT_EQ(fused.nodes()[1].outputs.size(), 2u);  // the pre-activation and GELU's output
  EXPECT_NE(fused.str().find("in0 = addmm(bias, a, b); s0 = gelu(in0"), std::string::npos) << fused.str();

  Tensor x = random_tensor({kRows, kInner}, 1, -1, 1, DType::Float32);
  Tensor w = random_tensor({kCols, kInner}, 2, -1, 1, DType::Float32);
  Tensor b = random_tensor({kCols}, 3, -1, 1, DType::Float32);
  Tensor grad = random_tensor({kRows, kCols}, 4, -1, 1, DType::Float32);
  const TensorList got = expect_same_bits(std::move(plain), std::move(fused), {x, w, b, grad});
  expect_close(got[0], gelu(addmm(b, x, t(w))), 1e-6, 1e-5);
}

TEST(GraphFusionPatterns, LinearReluWritesOverTheProduct) {
  auto build = [](Graph& g) {
    ValueId x = g.add_input(f32({kRows, kInner}));
    ValueId w = g.add_input(f32({kInner, kCols}));
    ValueId b = g.add_input(f32({1, kCols}));
    ValueId pre = g.add_node(op("addmm"), {b, x, w}, kUnitScales)[0];
    ValueId shaped = g.add_node(op("view"), {pre}, {{"size", Shape{2, kRows / 2, kCols}}})[0];
    ValueId act = g.add_node(op("relu"), {shaped})[0];
    g.set_outputs({act});
  };
  Graph plain, fused;
  build(plain);
  build(fused);
  EXPECT_EQ(graph::fuse_linear_activations(fused), 2);
  ASSERT_EQ(op_names(fused), (std::vector<std::string>{"fused_linear"}));  // the view died with the product
  EXPECT_EQ(fused.nodes()[0].outputs.size(), 1u);
  EXPECT_LT(graph::plan_memory(fused).arena_bytes, graph::plan_memory(plain).arena_bytes);

  Tensor x = random_tensor({kRows, kInner}, 5, -1, 1, DType::Float32);
  Tensor w = random_tensor({kInner, kCols}, 6, -1, 1, DType::Float32);
  Tensor b = random_tensor({1, kCols}, 7, -1, 1, DType::Float32);
  const TensorList got = expect_same_bits(std::move(plain), std::move(fused), {x, w, b});
  expect_close(got[0], view(relu(addmm(b, x, w)), {2, kRows / 2, kCols}), 1e-6, 1e-5);
}

TEST(GraphFusionPatterns, AnyUnaryElementwiseOpIsAnEpilogue) {
  // The rule is the op trait, not a list of activations: exp, abs and
  // softplus (with its attrs) fuse as relu does; a cast, which changes the
  // dtype, and a binary op do not.
  const std::vector<std::pair<const char*, Attrs>> unary{
      {"exp", {}}, {"abs", {}}, {"softplus", {{"beta", 2.0}, {"threshold", 5.0}}}};
  for (const auto& [name, attrs] : unary) {
    SCOPED_TRACE(name);
    auto build = [&, name = name, attrs = attrs](Graph& g) {
      ValueId x = g.add_input(f32({kRows, kInner}));
      ValueId w = g.add_input(f32({kInner, kCols}));
      ValueId b = g.add_input(f32({kCols}));
      ValueId pre = g.add_node(op("addmm"), {b, x, w}, kUnitScales)[0];
      g.set_outputs({g.add_node(op(name), {pre}, attrs)[0]});
    };
    Graph plain, fused;
    build(plain);
    build(fused);
    EXPECT_EQ(graph::fuse_linear_activations(fused), 2);
    ASSERT_EQ(op_names(fused), (std::vector<std::string>{"fused_linear"}));
    Tensor x = random_tensor({kRows, kInner}, 30, -0.3, 0.3, DType::Float32);
    Tensor w = random_tensor({kInner, kCols}, 31, -0.3, 0.3, DType::Float32);
    Tensor b = random_tensor({kCols}, 32, -1, 1, DType::Float32);
    expect_same_bits(std::move(plain), std::move(fused), {x, w, b});
  }
  Graph g;
  ValueId x = g.add_input(f32({kRows, kInner}));
  ValueId w = g.add_input(f32({kInner, kCols}));
  ValueId b = g.add_input(f32({kCols}));
  ValueId pre = g.add_node(op("addmm"), {b, x, w}, kUnitScales)[0];
  ValueId wide = g.add_node(op("cast"), {pre}, {{"dtype", DType::Float64}})[0];
  ValueId pre2 = g.add_node(op("addmm"), {b, x, w}, kUnitScales)[0];
  ValueId sum = g.add_node(op("add"), {pre2, pre2})[0];
  g.set_outputs({wide, sum});
  EXPECT_EQ(graph::fuse_linear_activations(g), 0);
}

TEST(GraphFusionPatterns, OnlyTheFirstReaderOfAProductOrSumIsFused) {
  // A later activation or layer norm is a recomputation: hoisting it next
  // to the addmm or add would keep its result alive again.
  Graph g;
  ValueId x = g.add_input(f32({kRows, kInner}));
  ValueId w = g.add_input(f32({kInner, kCols}));
  ValueId b = g.add_input(f32({kCols}));
  ValueId pre = g.add_node(op("addmm"), {b, x, w}, kUnitScales)[0];
  ValueId scaled = g.add_node(op("mul"), {pre, pre})[0];
  ValueId act = g.add_node(op("relu"), {pre})[0];
  ValueId sum = g.add_node(op("add"), {scaled, act})[0];
  ValueId twice = g.add_node(op("mul"), {sum, sum})[0];
  const auto normed = g.add_node(op("layer_norm"), {sum, b, b}, {{"normalized_ndim", int64_t(1)}, {"eps", 1e-5}});
  g.set_outputs({twice, normed[0]});
  EXPECT_EQ(graph::fuse_linear_activations(g), 0);
  EXPECT_EQ(graph::fuse_add_layer_norms(g), 0);
}

TEST(GraphFusionPatterns, RecomputedGeluRunsWithItsGradient) {
  const Shape shape{3, 70, 200};  // several blocks, the last partial
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const Attrs form{{"approximate", std::string(approximate)}};
    auto build = [&](Graph& g) {
      ValueId x = g.add_input(f32(shape));
      ValueId upstream = g.add_input(f32({shape[0] * shape[1], shape[2]}));
      ValueId pre = g.add_node(op("mul"), {x, x})[0];
      ValueId y = g.add_node(op("gelu"), {pre}, form)[0];  // forward
      ValueId grad = g.add_node(op("neg"), {upstream})[0];  // the gradient, written before...
      ValueId again = g.add_node(op("gelu"), {pre}, form)[0];  // ...the recomputation
      ValueId read = g.add_node(op("exp"), {again})[0];
      ValueId grad3 = g.add_node(op("view"), {grad}, {{"size", shape}})[0];
      ValueId dx = g.add_node(op("gelu_backward"), {grad3, pre}, form)[0];
      g.set_outputs({y, read, dx});
    };
    Graph plain, fused;
    build(plain);
    build(fused);
    EXPECT_EQ(graph::fuse_gelu_with_backward(fused), 1);
    ASSERT_EQ(op_names(fused), (std::vector<std::string>{"mul", "gelu", "neg", "fused_elementwise", "exp"}));
    EXPECT_NE(fused.str().find("gelu_with_backward"), std::string::npos) << fused.str();
    Tensor x = random_tensor(shape, 20, -3, 3, DType::Float32);
    Tensor upstream = random_tensor({shape[0] * shape[1], shape[2]}, 21, -1, 1, DType::Float32);
    expect_same_bits(std::move(plain), std::move(fused), {x, upstream});
  }
}

TEST(GraphFusionPatterns, BiasGradientIsSummedInTheProducersBlocks) {
  const int64_t n = 200, m = 300;  // four blocks of whole rows
  auto build = [&](Graph& g) {
    ValueId grad = g.add_input(f32({n, m}));
    ValueId x = g.add_input(f32({2, n / 2, m}));
    ValueId grad3 = g.add_node(op("view"), {grad}, {{"size", Shape{2, n / 2, m}}})[0];
    ValueId dx = g.add_node(op("gelu_backward"), {grad3, x}, kExactGelu)[0];
    ValueId rows = g.add_node(op("view"), {dx}, {{"size", Shape{n, m}}})[0];
    ValueId db = g.add_node(op("sum"), {rows}, {{"dims", Shape{0}}, {"keepdim", true}, {"dtype", DType::Float32}})[0];
    g.set_outputs({dx, db});
  };
  Graph plain, fused;
  build(plain);
  build(fused);
  EXPECT_EQ(graph::fuse_bias_gradients(fused), 1);
  ASSERT_EQ(op_names(fused), (std::vector<std::string>{"view", "fused_elementwise"}));  // the sum's view died
  EXPECT_EQ(fused.nodes()[1].outputs.size(), 2u);
  EXPECT_NE(fused.str().find("column sum"), std::string::npos) << fused.str();

  Tensor grad = random_tensor({n, m}, 8, -1, 1, DType::Float32);
  Tensor x = random_tensor({2, n / 2, m}, 9, -3, 3, DType::Float32);
  graph::Executable a(std::move(plain)), b(std::move(fused));
  const TensorList want = a.run({grad, x}), got = b.run({grad, x});
  EXPECT_EQ(values(want[0]), values(got[0]));  // the gradient itself: same kernel
  EXPECT_EQ(got[1].sizes(), (Shape{1, m}));
  // The sum, block by block then over partial rows, against eager's sum.
  expect_close(got[1], sum(view(want[0], {n, m}), {0}, true), 1e-5, 1e-5);
}

TEST(GraphFusionPatterns, BiasGradientLeavesProducersOfOtherLayoutsAlone) {
  // The gradient of mean(y ** 2) * scale: a scalar expanded to (n, m) (strides
  // (0, 0)) times 2y. The fused program reads inputs of the output's layout
  // or broadcast over leading dims only, so the sum stays its own node.
  const int64_t n = 64, m = 32;
  Graph g;
  ValueId scale = g.add_input(f32({}));
  ValueId y2 = g.add_input(f32({n, m}));
  ValueId s11 = g.add_node(op("view"), {scale}, {{"size", Shape{1, 1}}})[0];
  ValueId wide = g.add_node(op("expand"), {s11}, {{"size", Shape{n, m}}})[0];
  ValueId dy = g.add_node(op("mul"), {wide, y2})[0];
  ValueId db = g.add_node(op("sum"), {dy}, {{"dims", Shape{0}}, {"keepdim", false}, {"dtype", DType::Float32}})[0];
  g.set_outputs({dy, db});
  EXPECT_EQ(graph::fuse_bias_gradients(g), 0);
  Tensor s = from_vector({0.25}, {}, {.dtype = kFloat32});
  Tensor y = random_tensor({n, m}, 3, -1, 1, DType::Float32);
  graph::Executable plan(std::move(g));
  const TensorList got = plan.run({s, y});
  expect_close(got[1], sum(mul(y, s), {0}), 1e-5, 1e-5);
}

TEST(GraphFusionPatterns, ReluGradientChainGetsTheBiasSumToo) {
  const int64_t n = 128, m = 256;
  auto build = [&](Graph& g) {
    ValueId y = g.add_input(f32({n, m}));
    ValueId grad = g.add_input(f32({n, m}));
    ValueId zero = g.add_constant(zeros({}));
    ValueId mask = g.add_node(op("gt"), {y, zero})[0];
    ValueId dy = g.add_node(op("where"), {mask, grad, zero})[0];
    ValueId db = g.add_node(op("sum"), {dy}, {{"dims", Shape{0}}, {"keepdim", false}, {"dtype", DType::Float32}})[0];
    g.set_outputs({dy, db});
  };
  Graph plain, fused;
  build(plain);
  build(fused);
  EXPECT_EQ(graph::fuse_elementwise(fused), 2);
  EXPECT_EQ(graph::fuse_bias_gradients(fused), 1);
  ASSERT_EQ(op_names(fused), (std::vector<std::string>{"fused_elementwise"}));

  Tensor y = random_tensor({n, m}, 10, -1, 1, DType::Float32);
  Tensor grad = random_tensor({n, m}, 11, -1, 1, DType::Float32);
  graph::Executable a(std::move(plain)), b(std::move(fused));
  const TensorList want = a.run({y, grad}), got = b.run({y, grad});
  EXPECT_EQ(values(want[0]), values(got[0]));
  EXPECT_EQ(got[1].sizes(), (Shape{m}));
  expect_close(got[1], sum(where(gt(y, 0.0), grad, Scalar(0)), {0}), 1e-5, 1e-5);
}

TEST(GraphFusionPatterns, ResidualAddAndLayerNormAreOneNodeWithTheSameBits) {
  const Shape shape{4, 50, 256};
  for (const bool sum_read_later : {true, false}) {
    SCOPED_TRACE(sum_read_later ? "sum read later" : "sum read by the norm only");
    auto build = [&](Graph& g) {
      ValueId x = g.add_input(f32(shape));
      ValueId h = g.add_input(f32(shape));
      ValueId w = g.add_input(f32({256}));
      ValueId b = g.add_input(f32({256}));
      ValueId sum = g.add_node(op("add"), {x, h})[0];
      const auto normed =
          g.add_node(op("layer_norm"), {sum, w, b}, {{"normalized_ndim", int64_t(1)}, {"eps", 1e-5}});
      std::vector<ValueId> outputs(normed.begin(), normed.end());
      if (sum_read_later) outputs.push_back(g.add_node(op("add"), {sum, normed[0]})[0]);  // the next residual
      g.set_outputs(outputs);
    };
    Graph plain, fused;
    build(plain);
    build(fused);
    EXPECT_EQ(graph::fuse_add_layer_norms(fused), 2);
    EXPECT_EQ(fused.nodes()[0].op->name, "fused_add_layer_norm");
    EXPECT_EQ(fused.nodes()[0].outputs.size(), sum_read_later ? 4u : 3u);

    Tensor x = random_tensor(shape, 12, -2, 2, DType::Float32), h = random_tensor(shape, 13, -2, 2, DType::Float32);
    Tensor w = random_tensor({256}, 14, 0.5, 1.5, DType::Float32), b = random_tensor({256}, 15, -1, 1, DType::Float32);
    const TensorList got = expect_same_bits(std::move(plain), std::move(fused), {x, h, w, b});
    expect_close(got[0], layer_norm(add(x, h), {256}, w, b, 1e-5), 1e-5, 1e-5);
  }
}

Attrs plain_sgd(double lr, bool maximize, double weight_decay = 0.0) {
  return {{"lr", lr},
          {"momentum", 0.0},
          {"dampening", 0.0},
          {"weight_decay", weight_decay},
          {"nesterov", false},
          {"maximize", maximize},
          {"init_momentum_buffer", false}};
}

TEST(GraphFusionPatterns, PlainSgdUpdateRunsInsideTheWeightGradientGemm) {
  const int64_t out = 48, in = 40, batch = 32;
  for (const bool maximize : {false, true}) {
    SCOPED_TRACE(maximize ? "maximize, no weight decay" : "minimize, weight decay 0.1");
    const double decay = maximize ? 0.0 : 0.1;
    Tensor w0 = random_tensor({out, in}, 16, -1, 1, DType::Float32);
    // weight -= lr * (g^T x), the gradient laid out as the weight through
    // two transposes, as linear's backward gives it.
    auto build = [&](Graph& g, const Tensor& weight) {
      ValueId w = g.add_variable(weight);
      ValueId grad_out = g.add_input(f32({batch, out}));
      ValueId x = g.add_input(f32({batch, in}));
      ValueId g_t = g.add_node(op("permute"), {grad_out}, {{"dims", Shape{1, 0}}})[0];
      ValueId product = g.add_node(op("matmul"), {g_t, x})[0];
      ValueId flipped = g.add_node(op("permute"), {product}, {{"dims", Shape{1, 0}}})[0];
      ValueId grad = g.add_node(op("permute"), {flipped}, {{"dims", Shape{1, 0}}})[0];
      ValueId updated = g.add_inplace_node(op("sgd_update"), {w, grad, graph::kNoValue}, plain_sgd(0.25, maximize, decay));
      g.set_outputs({updated});
    };
    Tensor w_plain = clone(w0), w_fused = clone(w0);
    Graph plain, fused;
    build(plain, w_plain);
    build(fused, w_fused);
    EXPECT_EQ(graph::fuse_updates_into_gemms(fused), 1);
    ASSERT_EQ(op_names(fused), (std::vector<std::string>{"permute", "matmul_sgd_update_"}));
    EXPECT_TRUE(fused.nodes()[1].inplace);

    Tensor g_out = random_tensor({batch, out}, 17, -1, 1, DType::Float32);
    Tensor x = random_tensor({batch, in}, 18, -1, 1, DType::Float32);
    graph::Executable a(std::move(plain)), b(std::move(fused));
    a.run({g_out, x});
    b.run({g_out, x});
    const Tensor step = mul(matmul(t(g_out), x), maximize ? 0.25 : -0.25);
    expect_close(w_fused, w_plain, 1e-6, 1e-6);
    expect_close(w_fused, add(mul(w0, 1.0 - 0.25 * decay), step), 1e-6, 1e-6);
  }
}

TEST(GraphFusionPatterns, SgdUpdateStaysWhenTheWeightIsReadAfterItsGradient) {
  Graph g;
  ValueId w = g.add_variable(random_tensor({8, 6}, 19, -1, 1, DType::Float32));
  ValueId a = g.add_input(f32({8, 4}));
  ValueId b = g.add_input(f32({4, 6}));
  ValueId grad = g.add_node(op("matmul"), {a, b})[0];
  ValueId read = g.add_node(op("mul"), {w, w})[0];  // the old weight, after the product
  ValueId updated = g.add_inplace_node(op("sgd_update"), {w, grad, graph::kNoValue}, plain_sgd(0.1, false));
  g.set_outputs({read, updated});
  EXPECT_EQ(graph::fuse_updates_into_gemms(g), 0);
}

}  // namespace
}  // namespace mf::testing
