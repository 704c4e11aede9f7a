// Elementwise fusion on hand-built graphs: which nodes fuse, and that a
// fused node gives the separate kernels' bits.
#include <gtest/gtest.h>

#include <algorithm>

#include "meshflow/graph/executor.h"
#include "meshflow/graph/fusion.h"
#include "meshflow/parallel.h"
#include "graph/graph_test_util.h"
#include "test_util.h"

namespace mf::testing {
namespace {

using graph::Graph;
using graph::ValueId;

// n elements: more than one block, with a partial last block.
constexpr int64_t kN = 2 * graph::kFusedBlock + 1000;

TEST(GraphFusion, ChainBecomesOneNodeWithTheSameBits) {
  auto build = [](Graph& g) {
    ValueId x = g.add_input(f32({kN}));
    ValueId y = g.add_input(f32({kN}));
    ValueId zero = g.add_constant(zeros({}));
    ValueId a = g.add_node(op("mul"), {x, y})[0];
    ValueId b = g.add_node(op("exp"), {a})[0];
    ValueId mask = g.add_node(op("gt"), {x, zero})[0];  // bool intermediate
    ValueId c = g.add_node(op("where"), {mask, b, y})[0];
    ValueId d = g.add_node(op("sigmoid"), {c})[0];
    g.set_outputs({d});
  };
  Graph plain, fused;
  build(plain);
  build(fused);
  EXPECT_EQ(graph::fuse_elementwise(fused), 5);
  ASSERT_EQ(op_names(fused), (std::vector<std::string>{"fused_elementwise"}));
  EXPECT_EQ(fused.nodes()[0].inputs.size(), 3u);  // x, y and the 0-d zero
  EXPECT_NE(fused.str().find("s3 = where(s2, s1, in1)"), std::string::npos) << fused.str();
  // Only x, y and the output have buffers: the intermediates live in
  // blocks, in the node's scratch (Note [Fused program scratch]): one slot
  // per thread (at most one per block) holding a block of each of them
  // (float32 a, b, c and the bool mask).
  const int64_t buffer = (kN * 4 + graph::kArenaAlignment - 1) / graph::kArenaAlignment * graph::kArenaAlignment;
  const graph::MemoryPlan fused_plan = graph::plan_memory(fused);
  const int64_t slots = std::min<int64_t>(get_num_threads(), 3);
  EXPECT_EQ(fused_plan.scratch_bytes[0], slots * (3 * 4 + 1) * graph::kFusedBlock);
  EXPECT_EQ(fused_plan.arena_bytes, 3 * buffer + fused_plan.scratch_bytes[0]);
  EXPECT_GT(graph::plan_memory(plain).arena_bytes, 3 * buffer);

  Tensor x = random_tensor({kN}, 1, -2, 2, DType::Float32), y = random_tensor({kN}, 2, -2, 2, DType::Float32);
  graph::Executable a(std::move(plain)), b(std::move(fused));
  const Tensor want = a.run({x, y})[0], got = b.run({x, y})[0];
  EXPECT_EQ(values(want), values(got));
  expect_close(got, sigmoid(where(gt(x, 0.0), exp(mul(x, y)), y)), 1e-6, 1e-6);
}

// The fused ops are those of the OpDef::elementwise trait that write no
// input: casts and atan2 fuse like the arithmetic; updates never do.
TEST(GraphFusion, FusibleOpsComeFromTheElementwiseTrait) {
  for (const OpDef* def : OpRegistry::instance().all())
    EXPECT_EQ(graph::is_elementwise(*def), def->elementwise && def->mutates == 0) << def->name;
  EXPECT_TRUE(graph::is_elementwise(op("cast")));
  EXPECT_FALSE(graph::is_elementwise(op("adamw_update")));  // writes its state
  EXPECT_FALSE(graph::is_elementwise(op("matmul")));
  EXPECT_FALSE(graph::is_elementwise(op("softmax")));
  auto build = [](Graph& g) {
    ValueId x = g.add_input(f32({kN}));
    ValueId y = g.add_input(f32({kN}));
    ValueId a = g.add_node(op("atan2"), {x, y})[0];
    ValueId b = g.add_node(op("cast"), {a}, {{"dtype", DType::Float64}})[0];
    ValueId c = g.add_node(op("exp"), {b})[0];
    g.set_outputs({c});
  };
  Graph plain, fused;
  build(plain);
  build(fused);
  EXPECT_EQ(graph::fuse_elementwise(fused), 3);
  ASSERT_EQ(op_names(fused), (std::vector<std::string>{"fused_elementwise"}));
  Tensor x = random_tensor({kN}, 3, -2, 2, DType::Float32), y = random_tensor({kN}, 4, -2, 2, DType::Float32);
  graph::Executable a(std::move(plain)), b(std::move(fused));
  EXPECT_EQ(values(a.run({x, y})[0]), values(b.run({x, y})[0]));
}

TEST(GraphFusion, ScaledMaskedSoftmaxIsOneNode) {
  const Shape scores_shape{4, 2, 64, 64};  // (N, H, L, S)
  auto build = [&](Graph& g) {
    ValueId scores = g.add_input(f32(scores_shape));
    ValueId mask = g.add_input(f32({64, 64}));  // additive, broadcast over (N, H)
    ValueId scale = g.add_constant(full({}, 0.125));
    ValueId scaled = g.add_node(op("mul"), {scores, scale})[0];
    ValueId masked = g.add_node(op("add"), {scaled, mask})[0];
    ValueId probs = g.add_node(op("softmax"), {masked}, {{"dim", int64_t(3)}})[0];
    g.set_outputs({probs});
  };
  Graph plain, fused;
  build(plain);
  build(fused);
  EXPECT_EQ(graph::fuse_elementwise(fused), 3);
  ASSERT_EQ(op_names(fused), (std::vector<std::string>{"fused_elementwise"}));
  EXPECT_NE(fused.str().find("s2 = softmax(s1; dim=-1)"), std::string::npos) << fused.str();

  Tensor scores = random_tensor(scores_shape, 4, -4, 4, DType::Float32);
  Tensor mask = triu(full({64, 64}, -INFINITY), 1);
  graph::Executable a(std::move(plain)), b(std::move(fused));
  const Tensor want = a.run({scores, mask})[0], got = b.run({scores, mask})[0];
  EXPECT_EQ(values(want), values(got));
  expect_close(got, softmax(add(mul(scores, 0.125), mask), -1), 1e-6, 1e-5);
}

TEST(GraphFusion, StopsAtSharedValuesOutputsAndOtherShapes) {
  Graph g;
  ValueId x = g.add_input(f32({kN}));
  ValueId row = g.add_input(f32({1, kN}));
  ValueId a = g.add_node(op("exp"), {x})[0];      // read twice: stays
  ValueId b = g.add_node(op("neg"), {a})[0];
  ValueId c = g.add_node(op("mul"), {a, b})[0];   // b fuses into c
  ValueId d = g.add_node(op("tanh"), {c})[0];     // c is a graph output: d starts its own group
  ValueId e = g.add_node(op("add"), {d, row})[0];  // broadcasting input: not fusible
  ValueId small = g.add_input(f32({8}));
  ValueId s1 = g.add_node(op("exp"), {small})[0];
  ValueId s2 = g.add_node(op("neg"), {s1})[0];    // too small to fuse
  g.set_outputs({c, e, s2});
  EXPECT_EQ(graph::fuse_elementwise(g), 2);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"exp", "fused_elementwise", "tanh", "add", "exp", "neg"}));
}

TEST(GraphFusion, InPlaceWriteBetweenMembersPreventsFusion) {
  Graph g;
  ValueId x = g.add_input(f32({kN}));
  ValueId buffer = g.add_node(op("neg"), {x})[0];
  ValueId a = g.add_node(op("exp"), {buffer})[0];
  ValueId written = g.add_inplace_node(op("mul"), {buffer, x});  // buffer changes after exp read it
  ValueId b = g.add_node(op("add"), {a, buffer})[0];
  g.set_outputs({b, written});
  EXPECT_EQ(graph::fuse_elementwise(g), 0);
  graph::Executable exe(std::move(g));
  Tensor xs = random_tensor({kN}, 3, -1, 1, DType::Float32);
  expect_close(exe.run({xs})[0], add(exp(neg(xs)), mul(neg(xs), xs)), 1e-6, 1e-6);
}

}  // namespace
}  // namespace mf::testing
