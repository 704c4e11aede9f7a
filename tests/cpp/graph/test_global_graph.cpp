// Global tensors in graphs on one process (placement [0]): traced global ops
// hold their boxing's communication nodes, passes keep collectives in
// order, and the executor keeps a collective's buffers until its wait.
// The multi-rank runs are tests/python/dist_scripts/graph_global.py.
#include <gtest/gtest.h>

#include "meshflow/distributed/global.h"
#include "meshflow/graph/executor.h"
#include "meshflow/graph/passes.h"
#include "meshflow/graph/trace.h"
#include "graph/graph_test_util.h"
#include "test_util.h"

namespace mf::testing {
namespace {

using graph::Executable;
using graph::Tracer;

const Placement& one_rank() {
  static const Placement p(DeviceType::CPU, {0});
  return p;
}

std::vector<float> float_values(const Tensor& t) {
  Tensor c = contiguous(t.detach());
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

TEST(GraphGlobal, TracedGlobalOpOnOneRankBoxesNothing) {
  Tensor w = local_to_global(random_tensor({3, 2}, 1, -1, 1, DType::Float32), one_rank(), {Sbp::broadcast()});
  Tensor x = local_to_global(random_tensor({4, 3}, 2, -1, 1, DType::Float32), one_rank(), {Sbp::split(0)});
  graph::Graph g;
  {
    Tracer tracer;
    Tensor px = tracer.add_inputs({x})[0];
    ASSERT_TRUE(px.is_global());
    EXPECT_EQ(px.sizes(), (Shape{4, 3}));
    // (S(0), B) -> S(0); the sum over the split dim is a partial sum. On
    // one rank a shard is the whole value under every layout, so making it
    // whole (an all-reduce) or gathering y (an all-gather) moves nothing:
    // the graph records no collective.
    Tensor y = matmul(px, w);
    EXPECT_EQ(sbp_of(y), (NdSbp{Sbp::split(0)}));
    Tensor total = to_global(sum(y), one_rank(), {Sbp::broadcast()});
    Tensor gathered = to_global(y, one_rank(), {Sbp::broadcast()});
    g = tracer.finish({total, gathered});
  }
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"matmul", "sum"})) << g.str();
  ASSERT_TRUE(g.output_layouts()[0].has_value());
  EXPECT_EQ(g.output_layouts()[0]->sbp, (NdSbp{Sbp::broadcast()}));
  EXPECT_NE(g.str().find("global (S(0),) of (4, 3)"), std::string::npos) << g.str();
  EXPECT_NE(g.str().find("# float32(4, 2) of global (S(0),) (4, 2)"), std::string::npos) << g.str();

  for (bool overlap : {true, false}) {
    Executable exe(graph::Graph(g), overlap);
    Tensor xs = local_to_global(random_tensor({4, 3}, 5, -1, 1, DType::Float32), one_rank(), {Sbp::split(0)});
    TensorList got = exe.run({xs});
    ASSERT_TRUE(got[0].is_global() && got[1].is_global());
    EXPECT_EQ(got[1].sizes(), (Shape{4, 2}));
    Tensor expected = matmul(global_to_local(xs), global_to_local(w));
    EXPECT_EQ(float_values(global_to_local(got[1])), float_values(expected));
    EXPECT_EQ(float_values(global_to_local(got[0])), float_values(sum(expected)));
  }
}

TEST(GraphGlobal, GlobalInputsMustMatchTheTracedLayout) {
  Tensor x = local_to_global(random_tensor({4, 3}, 2, -1, 1, DType::Float32), one_rank(), {Sbp::split(0)});
  graph::Graph g;
  {
    Tracer tracer;
    Tensor px = tracer.add_inputs({x})[0];
    g = tracer.finish({relu(px)});
  }
  Executable exe(std::move(g));
  EXPECT_THROW(exe.run({global_to_local(x)}), ValueError);
  EXPECT_THROW(exe.run({local_to_global(global_to_local(x), one_rank(), {Sbp::broadcast()})}), ValueError);
  EXPECT_TRUE(exe.run({x})[0].is_global());
}

// Note [Collectives in passes]: DCE, CSE and constant folding would each
// take one of these all-reduces away; every rank must keep all of them, in
// order.
TEST(GraphGlobal, PassesKeepCollectivesInOrder) {
  const Attrs group{{"group", Shape{0}}};
  graph::Graph g;
  const auto a = g.add_input({{8}, DType::Float32, Device()});
  const auto c = g.add_constant(full({8}, 2.0f));
  const auto first = g.add_node(op("comm_all_reduce"), {a}, group)[0];
  const auto same = g.add_node(op("comm_all_reduce"), {a}, group)[0];  // CSE would merge it
  const auto folded = g.add_node(op("comm_all_reduce"), {c}, group)[0];  // folding would run it now
  g.add_node(op("comm_all_reduce"), {first}, group);  // unread: DCE would drop it
  const auto sum = g.add_node(op("add"), {same, folded})[0];
  g.set_outputs({g.add_node(op("add"), {first, sum})[0]});
  std::vector<std::vector<graph::ValueId>> before;
  for (const auto& n : g.nodes())
    if (n.op->collective) before.push_back(n.inputs);
  graph::optimize(g);
  std::vector<std::vector<graph::ValueId>> after;
  for (const auto& n : g.nodes())
    if (n.op->collective) after.push_back(n.inputs);
  EXPECT_EQ(after, before) << g.str();
  Executable exe(std::move(g));
  Tensor x = random_tensor({8}, 3, -1, 1, DType::Float32);
  EXPECT_EQ(float_values(exe.run({x})[0]), float_values(add(x, add(x, full({8}, 2.0f)))));
}

// Note [Overlapping communication]: the run waits for a collective before
// its first reader, and its buffers stay live (no other buffer placed over
// them) until then.
TEST(GraphGlobal, CollectiveBuffersLiveUntilTheWait) {
  graph::Graph g;
  const auto a = g.add_input({{256}, DType::Float32, Device()});
  const auto reduced = g.add_node(op("comm_all_reduce"), {a}, {{"group", Shape{0}}})[0];
  const auto b = g.add_node(op("exp"), {a})[0];           // independent compute: overlaps
  const auto c = g.add_node(op("neg"), {b})[0];           // b dies here
  const auto d = g.add_node(op("sin"), {c})[0];           // could reuse b's buffer
  const auto out = g.add_node(op("add"), {reduced, d})[0];  // waits here
  g.set_outputs({out});
  const std::vector<int32_t> waits = graph::communication_waits(g);
  EXPECT_EQ(waits, (std::vector<int32_t>{4, -1, -1, -1, -1}));
  const graph::MemoryPlan plan = graph::plan_memory(g);
  EXPECT_EQ(plan.lifetimes[size_t(a)].second, 4);
  EXPECT_EQ(plan.lifetimes[size_t(reduced)], (std::pair<int32_t, int32_t>{0, 4}));
  const int64_t bytes = 256 * 4;
  auto overlaps = [&](graph::ValueId u, graph::ValueId v) {
    return plan.offsets[size_t(u)] < plan.offsets[size_t(v)] + bytes &&
           plan.offsets[size_t(v)] < plan.offsets[size_t(u)] + bytes;
  };
  for (graph::ValueId other : {b, c, d}) {
    EXPECT_FALSE(overlaps(other, a)) << other;
    EXPECT_FALSE(overlaps(other, reduced)) << other;
  }
  Tensor x = random_tensor({256}, 7, -1, 1, DType::Float32);
  const std::vector<float> expected = float_values(add(x, sin(neg(exp(x)))));
  for (bool overlap : {true, false}) {
    Executable exe(graph::Graph(g), overlap);
    EXPECT_EQ(float_values(exe.run({x})[0]), expected);
  }
}

// Note [Early updates]: an update reading a collective's result stays after
// the compute it can overlap; one reading a local result moves up to its
// last reader.
TEST(GraphGlobal, UpdatesOfCommunicatedGradientsStayLate) {
  graph::Graph g;
  const auto w1 = g.add_variable(zeros({4}), "w1");
  const auto w2 = g.add_variable(zeros({4}), "w2");
  const auto a = g.add_input({{4}, DType::Float32, Device()});
  const auto reduced = g.add_node(op("comm_all_reduce"), {a}, {{"group", Shape{0}}})[0];
  const auto b = g.add_node(op("exp"), {a})[0];
  const auto c = g.add_node(op("neg"), {b})[0];
  const auto d = g.add_node(op("sin"), {c})[0];
  g.add_inplace_node(op("add"), {w1, reduced});
  g.add_inplace_node(op("add"), {w2, b});
  g.set_outputs({d});
  EXPECT_EQ(graph::schedule_updates_early(g), 1);
  std::vector<std::string> order;
  for (const auto& n : g.nodes())
    order.push_back(n.op->name + (n.inplace ? "_" + g.value(n.inputs[0]).name : ""));
  EXPECT_EQ(order, (std::vector<std::string>{"comm_all_reduce", "exp", "neg", "add_w2", "sin", "add_w1"})) << g.str();
}

}  // namespace
}  // namespace mf::testing
