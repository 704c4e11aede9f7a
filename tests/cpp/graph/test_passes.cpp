// Graph passes and the memory planner on small hand-built graphs.
#include <gtest/gtest.h>

#include "meshflow/graph/executor.h"
#include "meshflow/graph/passes.h"
#include "backend/common/scratch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "graph/graph_test_util.h"
#include "test_util.h"

namespace mf::testing {
namespace {

using graph::Graph;
using graph::ValueId;
using graph::ValueKind;

// --- dead-code elimination ------------------------------------------------------

TEST(GraphPasses, DeadCodeRemovesUnreadChainsOnly) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  ValueId used = g.add_node(op("exp"), {x})[0];
  ValueId dead = g.add_node(op("neg"), {x})[0];
  g.add_node(op("exp"), {dead});  // reads only dead code
  ValueId buffer = g.add_node(op("neg"), {x})[0];
  g.add_inplace_node(op("mul"), {buffer, x});  // writes memory: kept with its input
  g.set_outputs({used});
  EXPECT_EQ(graph::eliminate_dead_code(g), 2);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"exp", "neg", "mul_"}));
  EXPECT_EQ(graph::eliminate_dead_code(g), 0);
}

// --- common subexpressions ----------------------------------------------------------

TEST(GraphPasses, CseMergesIdenticalCalls) {
  Graph g;
  ValueId x = g.add_input(f32({3}));
  ValueId a = g.add_node(op("exp"), {x})[0];
  ValueId b = g.add_node(op("exp"), {x})[0];
  ValueId c = g.add_node(op("add"), {a, b})[0];
  ValueId d = g.add_node(op("add"), {b, a})[0];  // (a, a) too once b is a
  g.set_outputs({c, d});
  EXPECT_EQ(graph::eliminate_common_subexpressions(g), 2);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"exp", "add"}));
  EXPECT_EQ(g.nodes()[1].inputs, (std::vector<ValueId>{a, a}));
  EXPECT_EQ(g.outputs(), (std::vector<ValueId>{c, c}));
  EXPECT_EQ(graph::eliminate_common_subexpressions(g), 0);
}

TEST(GraphPasses, CseRespectsAttributesAndInPlaceWrites) {
  Graph g;
  ValueId x = g.add_input(f32({2, 3}));
  ValueId s0 = g.add_node(op("sum"), {x}, {{"dims", Shape{0}}, {"keepdim", false}, {"dtype", DType::Float32}})[0];
  ValueId s1 = g.add_node(op("sum"), {x}, {{"dims", Shape{1}}, {"keepdim", false}, {"dtype", DType::Float32}})[0];
  ValueId s0_again = g.add_node(op("sum"), {x}, {{"dims", Shape{0}}, {"keepdim", false}, {"dtype", DType::Float32}})[0];
  ValueId t = g.add_node(op("exp"), {x})[0];
  ValueId e1 = g.add_node(op("neg"), {t})[0];
  g.add_inplace_node(op("mul"), {t, x});  // t's buffer changes
  ValueId e2 = g.add_node(op("neg"), {t})[0];  // reads the old value id, but new memory
  ValueId e3 = g.add_node(op("exp"), {x})[0];
  ValueId r1 = g.add_node(op("relu"), {e3})[0];
  g.add_inplace_node(op("mul"), {e3, x});  // the first relu's input was written...
  ValueId r2 = g.add_node(op("relu"), {e3})[0];  // ...so this relu is not the first one
  g.set_outputs({s0, s1, s0_again, e1, e2, r1, r2});
  // Only the repeated sum merges: neg(t) and relu(e3) read buffers written in
  // between, and exp(x)'s first result t was written before the second call.
  EXPECT_EQ(graph::eliminate_common_subexpressions(g), 1);
  EXPECT_EQ(g.outputs()[2], s0);
  EXPECT_EQ(op_names(g).size(), 10u);
}

// OpDef::mutates: an op writing inputs besides input 0 (an update's
// momentum buffer, batch_norm's running statistics) is a write to each.
TEST(GraphPasses, InputsAnOpMutatesAreWrittenByItsNode) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  ValueId p = g.add_node(op("neg"), {x})[0];
  ValueId buf = g.add_node(op("exp"), {x})[0];
  ValueId before = g.add_node(op("relu"), {buf})[0];
  g.add_inplace_node(op("sgd_update"), {p, x, buf, graph::kNoValue},
                     {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.0}, {"weight_decay", 0.0}, {"nesterov", false},
                      {"maximize", false}, {"init_momentum_buffer", false}});
  ValueId after = g.add_node(op("relu"), {buf})[0];  // reads the updated buffer
  g.set_outputs({before, after});
  const graph::Node& update = g.nodes()[3];
  EXPECT_TRUE(update.writes_input(0) && update.writes_input(2));
  EXPECT_FALSE(update.writes_input(1) || update.writes_input(3));
  EXPECT_TRUE(g.writes_buffer(update, buf));
  EXPECT_FALSE(g.writes_buffer(update, x));
  EXPECT_EQ(graph::eliminate_common_subexpressions(g), 0);

  // batch_norm in training writes its running statistics: kept though no
  // output of it is read, and a run updates them.
  Graph h;
  ValueId in = h.add_input(f32({4, 3}));
  const Tensor mean = zeros({3}), var = ones({3});
  ValueId rm = h.add_variable(mean), rv = h.add_variable(var);
  h.add_node(op("batch_norm"), {in, graph::kNoValue, graph::kNoValue, rm, rv},
             {{"training", true}, {"momentum", 0.5}, {"eps", 1e-5}});
  h.set_outputs({h.add_node(op("exp"), {in})[0]});
  EXPECT_EQ(graph::eliminate_dead_code(h), 0);
  Tensor batch = random_tensor({4, 3}, 5, -2, 2, DType::Float32);
  graph::Executable run(std::move(h));
  run.run({batch});
  expect_close(mean, mul(mf::mean(batch, {0}), 0.5), 1e-6, 1e-6);
}

// --- constant folding -------------------------------------------------------------

TEST(GraphPasses, FoldsFactoriesAndOpsOnConstants) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  ValueId r = g.add_node(op("arange"), {}, {{"size", int64_t(4)}, {"start", Scalar(0.0)}, {"step", Scalar(1.0)},
                                            {"dtype", DType::Float32}, {"device", Device()}})[0];
  ValueId two = g.add_node(op("full"), {}, {{"size", Shape{4}}, {"value", Scalar(2.0)}, {"dtype", DType::Float32},
                                            {"device", Device()}})[0];
  ValueId scaled = g.add_node(op("mul"), {r, two})[0];
  ValueId y = g.add_node(op("add"), {x, scaled})[0];
  ValueId acc = g.add_node(op("full"), {}, {{"size", Shape{4}}, {"value", Scalar(0.0)}, {"dtype", DType::Float32},
                                            {"device", Device()}})[0];
  g.add_inplace_node(op("add"), {acc, x});  // state written in place: not a constant
  g.set_outputs({y, acc});
  EXPECT_EQ(graph::fold_constants(g), 3);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"add", "full", "add_"}));
  const ValueId folded = g.nodes()[0].inputs[1];
  EXPECT_EQ(g.value(folded).kind, ValueKind::Constant);
  expect_values(g.value(folded).tensor, {0, 2, 4, 6});

  graph::Executable exe(std::move(g));
  Tensor xs = from_vector(std::vector<double>{1, 1, 1, 1}, {4}, {.dtype = DType::Float32});
  TensorList out = exe.run({xs});
  expect_values(out[0], {1, 3, 5, 7});
  expect_values(out[1], {1, 1, 1, 1});
  // The accumulator starts from zero on every run: it is recomputed, not kept.
  expect_values(exe.run({xs})[1], {1, 1, 1, 1});
}

TEST(GraphPasses, RandomFillsDrawAfreshOnEveryRun) {
  Graph g;
  ValueId buffer = g.add_node(op("full"), {}, {{"size", Shape{8}}, {"value", Scalar(0.0)},
                                               {"dtype", DType::Float32}, {"device", Device()}})[0];
  ValueId drawn = g.add_inplace_node(op("uniform"), {buffer}, {{"from", 0.0}, {"to", 1.0}, {"seed", int64_t(1)},
                                                                {"offset", int64_t(0)}});
  g.nodes()[1].random_counters = 2;
  g.set_outputs({drawn});
  EXPECT_EQ(graph::fold_constants(g), 0);  // the buffer is written in place
  EXPECT_EQ(graph::eliminate_common_subexpressions(g), 0);
  graph::Executable exe(std::move(g));
  manual_seed(5);
  const std::vector<double> first = values(exe.run({})[0]);
  const std::vector<double> second = values(exe.run({})[0]);
  EXPECT_NE(first, second);
  manual_seed(5);
  EXPECT_EQ(values(exe.run({})[0]), first);
}

// --- clone forwarding -------------------------------------------------------------

TEST(GraphPasses, ClonesOfDyingBuffersAreForwarded) {
  Graph g;
  ValueId x = g.add_input(f32({2, 2}));
  ValueId a = g.add_node(op("exp"), {x})[0];
  ValueId view = g.add_node(op("view"), {a}, {{"size", Shape{4}}})[0];
  ValueId copy = g.add_node(op("clone"), {view})[0];  // a dies here: forwarded
  ValueId b = g.add_node(op("neg"), {x})[0];
  ValueId keep = g.add_node(op("clone"), {b})[0];  // b is read later: kept
  ValueId c = g.add_node(op("add"), {b, keep})[0];
  ValueId from_input = g.add_node(op("clone"), {x})[0];  // never forwards an input
  g.set_outputs({copy, c, from_input});
  EXPECT_EQ(graph::forward_clones(g), 1);
  EXPECT_EQ(g.outputs()[0], view);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"exp", "view", "neg", "clone", "add", "clone"}));
  graph::Executable exe(std::move(g));
  Tensor xs = from_vector(std::vector<double>{0, 1, 2, 3}, {2, 2}, {.dtype = DType::Float32});
  TensorList out = exe.run({xs});
  expect_values(out[0], values(exp(xs)), 1e-6);
  expect_values(out[1], {0, -2, -4, -6});
}

// A gradient written in place after AccumulateGrad's clone (GradScaler's
// unscale, clipping) lives in the forwarded buffer: the memory plan must keep
// that buffer until the in-place result's last read.
TEST(GraphPasses, InPlaceWritesOfAForwardedCloneKeepItsBuffer) {
  Graph g;
  ValueId x = g.add_input(f32({64}));
  ValueId a = g.add_node(op("exp"), {x})[0];
  ValueId copy = g.add_node(op("clone"), {a})[0];
  ValueId scaled = g.add_inplace_node(op("mul"), {copy, g.add_input(f32({}))});
  ValueId other = g.add_node(op("neg"), {x})[0];  // may not take a's memory
  ValueId sum = g.add_node(op("add"), {other, scaled})[0];
  g.set_outputs({sum});
  EXPECT_EQ(graph::forward_clones(g), 1);
  EXPECT_EQ(g.value(scaled).root, a);
  graph::Executable exe(std::move(g));
  Tensor xs = random_tensor({64}, 7, -1, 1, DType::Float32);
  Tensor two = full({}, 2.0);
  expect_values(exe.run({xs, two})[0], values(add(neg(xs), mul(exp(xs), two))), 1e-6);
}

// --- slice gradients ----------------------------------------------------------------

Attrs slice_grad(int64_t start) {
  return {{"input_sizes", Shape{2, 6}}, {"dim", int64_t(1)}, {"start", start}, {"step", int64_t(1)}};
}

TEST(GraphPasses, SlicesTilingADimensionSumToACat) {
  Graph g;
  ValueId q = g.add_input(f32({2, 2})), k = g.add_input(f32({2, 2})), v = g.add_input(f32({2, 2}));
  ValueId sv = g.add_node(op("slice_backward"), {v}, slice_grad(4))[0];
  ValueId sq = g.add_node(op("slice_backward"), {q}, slice_grad(0))[0];
  ValueId sum = g.add_node(op("add"), {sv, sq})[0];
  ValueId sk = g.add_node(op("slice_backward"), {k}, slice_grad(2))[0];
  ValueId total = g.add_node(op("add"), {sum, sk})[0];
  // Two slices that leave a gap are a sum, not a cat.
  ValueId a = g.add_node(op("slice_backward"), {q}, slice_grad(0))[0];
  ValueId b = g.add_node(op("slice_backward"), {v}, slice_grad(4))[0];
  ValueId gap = g.add_node(op("add"), {a, b})[0];
  g.set_outputs({total, gap});
  EXPECT_EQ(graph::merge_slice_gradients(g), 5);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"cat", "slice_backward", "slice_backward", "add"}));
  EXPECT_EQ(g.nodes()[0].inputs, (std::vector<ValueId>{q, k, v}));
  graph::Executable exe(std::move(g));
  Tensor qs = random_tensor({2, 2}, 10, -1, 1, DType::Float32), ks = random_tensor({2, 2}, 11, -1, 1, DType::Float32),
         vs = random_tensor({2, 2}, 12, -1, 1, DType::Float32);
  TensorList out = exe.run({qs, ks, vs});
  expect_values(out[0], values(cat({qs, ks, vs}, 1)));
  expect_values(out[1], values(cat({qs, zeros({2, 2}), vs}, 1)));
}

// --- recomputation -------------------------------------------------------------------

TEST(GraphPasses, ElementwiseResultsReadMuchLaterAreRecomputed) {
  Graph g;
  ValueId x = g.add_input(f32({4, 4}));
  ValueId h = g.add_node(op("exp"), {x})[0];
  ValueId a = g.add_node(op("tanh"), {h})[0];  // read early and, through a view, late
  ValueId c = g.add_node(op("neg"), {a})[0];
  for (int k = 0; k < 10; ++k) c = g.add_node(op("neg"), {c})[0];
  ValueId t = g.add_node(op("permute"), {a}, {{"dims", Shape{1, 0}}})[0];
  ValueId e = g.add_node(op("add"), {t, c})[0];
  ValueId f = g.add_node(op("mul"), {h, e})[0];  // h is alive until here
  g.set_outputs({f});
  EXPECT_EQ(graph::recompute_elementwise(g), 1);
  std::vector<std::string> names = op_names(g);
  ASSERT_EQ(names.size(), 18u);
  EXPECT_EQ(std::vector<std::string>(names.end() - 5, names.end()),
            (std::vector<std::string>{"permute", "tanh", "permute", "add", "mul"}));
  EXPECT_EQ(graph::eliminate_dead_code(g), 1);  // the first permute
  // a's buffer now dies at its first reader.
  EXPECT_EQ(graph::plan_memory(g).lifetimes[size_t(a)].second, 2);

  graph::Executable exe(std::move(g));
  Tensor xs = random_tensor({4, 4}, 13, -1, 1, DType::Float32);
  Tensor cs = tanh(exp(xs));
  for (int k = 0; k < 11; ++k) cs = neg(cs);
  expect_values(exe.run({xs})[0], values(mul(exp(xs), add(mf::t(tanh(exp(xs))), cs))), 1e-6);
}

// A variable split along dim 1 gathered whole as boxing does it (on one
// rank here): its transpose copied, gathered, transposed back and copied.
ValueId gather_as_boxing_does(Graph& g, ValueId v) {
  ValueId t = g.add_node(op("permute"), {v}, {{"dims", Shape{1, 0}}})[0];
  ValueId c = g.add_node(op("clone"), {t})[0];
  ValueId a = g.add_node(op("comm_all_gather"), {c}, {{"group", Shape{0}}, {"counts", Shape{2}}})[0];
  ValueId b = g.add_node(op("permute"), {a}, {{"dims", Shape{1, 0}}})[0];
  return g.add_node(op("clone"), {b})[0];
}

TEST(GraphPasses, AParameterGatheredThroughCopiesIsGatheredAgainForLaterReaders) {
  // The gathered copy read early and late is made again, gather and all,
  // before the late reader.
  Graph g;
  const Tensor w = random_tensor({3, 2}, 5, -1, 1, DType::Float32);
  ValueId x = g.add_input(f32({3, 2}));
  ValueId v = g.add_variable(w);
  ValueId gathered = gather_as_boxing_does(g, v);
  ValueId h = g.add_node(op("mul"), {x, gathered})[0];
  for (int k = 0; k < 12; ++k) h = g.add_node(op("neg"), {h})[0];
  ValueId f = g.add_node(op("mul"), {h, gathered})[0];
  g.set_outputs({f});
  EXPECT_EQ(graph::recompute_elementwise(g), 1);
  const std::vector<std::string> names = op_names(g);
  ASSERT_EQ(names.size(), 24u);
  EXPECT_EQ(std::vector<std::string>(names.end() - 6, names.end()),
            (std::vector<std::string>{"permute", "clone", "comm_all_gather", "permute", "clone", "mul"}));
  // The first gathered copy dies at its first reader.
  EXPECT_EQ(graph::plan_memory(g).lifetimes[size_t(gathered)].second, 5);

  graph::Executable exe(std::move(g));
  const Tensor xs = random_tensor({3, 2}, 6, -1, 1, DType::Float32);
  Tensor want = mul(xs, w);
  for (int k = 0; k < 12; ++k) want = neg(want);
  expect_values(exe.run({xs})[0], values(mul(want, w)), 1e-6);
}

TEST(GraphPasses, AGatheredCopyIsKeptWhenItsParameterIsWrittenBetweenItsReaders) {
  Graph g;
  ValueId x = g.add_input(f32({3, 2}));
  ValueId v = g.add_variable(random_tensor({3, 2}, 7, -1, 1, DType::Float32));
  ValueId gathered = gather_as_boxing_does(g, v);
  ValueId h = g.add_node(op("mul"), {x, gathered})[0];
  for (int k = 0; k < 6; ++k) h = g.add_node(op("neg"), {h})[0];
  g.add_inplace_node(op("mul"), {v, x});  // the parameter changes
  for (int k = 0; k < 6; ++k) h = g.add_node(op("neg"), {h})[0];
  ValueId f = g.add_node(op("mul"), {h, gathered})[0];
  g.set_outputs({f});
  EXPECT_EQ(graph::recompute_elementwise(g), 0);
}

// --- in place where safe -------------------------------------------------------------

TEST(GraphPasses, InPlaceWhenTheInputDiesHere) {
  Graph g;
  ValueId x = g.add_input(f32({16}));
  ValueId a = g.add_node(op("exp"), {x})[0];
  ValueId b = g.add_node(op("mul"), {a, x})[0];       // a dies here: b overwrites it
  ValueId c = g.add_node(op("add"), {b, b})[0];       // b is also input 1: not in place
  ValueId d = g.add_node(op("neg"), {c})[0];          // c is read later: not in place
  ValueId e = g.add_node(op("sub"), {c, d})[0];       // c dies here: e overwrites it
  ValueId keep = g.add_node(op("exp"), {x})[0];
  ValueId f = g.add_node(op("mul"), {keep, x})[0];    // keep is a graph output: not overwritten
  ValueId from_input = g.add_node(op("mul"), {x, x})[0];  // graph inputs are never overwritten
  g.set_outputs({e, keep, f, from_input});
  EXPECT_EQ(graph::run_in_place(g), 2);
  std::vector<bool> in_place;
  for (const auto& n : g.nodes()) in_place.push_back(n.inplace);
  EXPECT_EQ(in_place, (std::vector<bool>{false, true, false, false, true, false, false, false}));
  EXPECT_EQ(g.value(b).root, a);
  EXPECT_EQ(g.value(e).root, c);
  graph::MemoryPlan plan = graph::plan_memory(g);
  EXPECT_EQ(plan.offsets[size_t(b)], -1);

  graph::Executable exe(std::move(g));
  Tensor xs = random_tensor({16}, 9, -1, 1, DType::Float32);
  TensorList out = exe.run({xs});
  Tensor cs = add(mul(exp(xs), xs), mul(exp(xs), xs));
  expect_values(out[0], values(sub(cs, neg(cs))), 1e-6);
  expect_values(out[1], values(exp(xs)), 1e-6);
  expect_values(out[2], values(mul(exp(xs), xs)), 1e-6);
}

TEST(GraphPasses, OutputsTakeTheBuffersOfDyingInputsAtAnyPosition) {
  // Note [Outputs over dead inputs]: kernels without an in-place form.
  auto build = [](Graph& g) {
    ValueId x = g.add_input(f32({8, 32}));
    ValueId target = g.add_input({{8}, DType::Int64, Device()});
    ValueId scale = g.add_constant(full({}, 2.0));
    ValueId logits = g.add_node(op("mul"), {x, scale})[0];
    const Attrs ce{{"ignore_index", int64_t(-100)}, {"reduction", std::string("mean")}, {"label_smoothing", 0.0}};
    const auto loss = g.add_node(op("cross_entropy"), {logits, target, graph::kNoValue}, ce);
    ValueId one = g.add_constant(full({}, 1.0));
    ValueId dlogits = g.add_node(op("cross_entropy_backward"),
                                 {one, logits, target, graph::kNoValue, loss[1], loss[2]}, ce)[0];
    ValueId flat = g.add_node(op("view"), {dlogits}, {{"size", Shape{256}}})[0];
    ValueId x_flat = g.add_node(op("view"), {x}, {{"size", Shape{256}}})[0];
    ValueId dx = g.add_node(op("gelu_backward"), {flat, x_flat}, {{"approximate", std::string("none")}})[0];
    g.set_outputs({loss[0], dx});
    return std::pair{dlogits, dx};
  };
  Graph plain, g;
  build(plain);
  const auto [dlogits, dx] = build(g);
  EXPECT_EQ(graph::run_in_place(g), 2);
  std::vector<int32_t> overwrites;
  for (const auto& n : g.nodes())
    if (!n.is_view()) overwrites.push_back(n.overwrites);
  // mul (its input is a graph input), cross_entropy, over the logits, over the gradient.
  EXPECT_EQ(overwrites, (std::vector<int32_t>{-1, -1, 1, 0}));
  const ValueId logits = g.nodes()[0].outputs[0];
  EXPECT_EQ(g.value(dlogits).root, logits);
  EXPECT_EQ(g.value(dx).root, logits);
  EXPECT_EQ(graph::plan_memory(g).offsets[size_t(dlogits)], -1);
  EXPECT_NE(g.str().find("over %"), std::string::npos) << g.str();

  Tensor xs = random_tensor({8, 32}, 21, -2, 2, DType::Float32);
  Tensor ts = from_vector({3, 0, 31, 7, 7, 12, 5, 30}, {8}, {.dtype = DType::Int64});
  graph::Executable a(std::move(plain)), b(std::move(g));
  const TensorList want = a.run({xs, ts}), got = b.run({xs, ts});
  EXPECT_EQ(values(want[0]), values(got[0]));
  EXPECT_EQ(values(want[1]), values(got[1]));
}

// --- early updates ------------------------------------------------------------------

TEST(GraphPasses, UpdatesMoveUpToTheLastUseOfTheirBuffers) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  ValueId w = g.add_variable(full({4}, 2.0), "w");
  ValueId v = g.add_variable(full({4}, 3.0), "v");
  ValueId gw = g.add_node(op("mul"), {x, w})[0];   // 0: last read of w, makes w's "gradient"
  ValueId gv = g.add_node(op("mul"), {x, v})[0];   // 1
  ValueId y = g.add_node(op("add"), {gv, v})[0];   // 2: last read of v
  ValueId z = g.add_node(op("exp"), {y})[0];       // 3
  ValueId w2 = g.add_inplace_node(op("sub"), {w, gw});  // 4: w -= gw, may run right after node 0
  ValueId v2 = g.add_inplace_node(op("sub"), {v, gv});  // 5: v -= gv, after node 2
  g.set_outputs({z, w2, v2});
  EXPECT_EQ(graph::schedule_updates_early(g), 2);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"mul", "sub_", "mul", "add", "sub_", "exp"}));
  EXPECT_EQ(g.value(z).producer, 5);
  graph::Executable exe(std::move(g));
  TensorList out = exe.run({from_vector({1, 2, 3, 4}, {4}, {.dtype = DType::Float32})});
  expect_values(out[0], values(exp(from_vector({6, 9, 12, 15}, {4}))), 1e-6);
  expect_values(out[1], {0, -2, -4, -6});
  expect_values(out[2], {0, -3, -6, -9});
}

// --- memory planning ----------------------------------------------------------------

TEST(GraphMemoryPlan, ReusesBuffersWhoseLifetimesDoNotOverlap) {
  Graph g;
  ValueId x = g.add_input(f32({16}));  // 64 bytes each
  ValueId a = g.add_node(op("exp"), {x})[0];
  ValueId b = g.add_node(op("neg"), {a})[0];
  ValueId c = g.add_node(op("exp"), {b})[0];
  ValueId d = g.add_node(op("neg"), {c})[0];
  g.set_outputs({d});
  graph::MemoryPlan plan = graph::plan_memory(g);
  EXPECT_EQ(plan.total_bytes, 5 * 64);
  EXPECT_EQ(plan.arena_bytes, 2 * 64);
  // Neighbours never share: a kernel reads one while writing the other.
  for (auto [p, q] : {std::pair{x, a}, {a, b}, {b, c}, {c, d}})
    EXPECT_NE(plan.offsets[size_t(p)], plan.offsets[size_t(q)]);
  EXPECT_EQ(plan.lifetimes[size_t(b)], (std::pair<int32_t, int32_t>{1, 2}));
  EXPECT_EQ(plan.lifetimes[size_t(d)], (std::pair<int32_t, int32_t>{3, 4}));

  graph::Executable exe(std::move(g));
  Tensor xs = random_tensor({16}, 7, -1, 1, DType::Float32);
  expect_values(exe.run({xs})[0], values(neg(exp(neg(exp(xs))))), 1e-6);
}

TEST(GraphMemoryPlan, ViewsAndInPlaceWritesKeepTheirBufferAlive) {
  Graph g;
  ValueId x = g.add_input(f32({4, 4}));
  ValueId a = g.add_node(op("exp"), {x})[0];
  ValueId t = g.add_node(op("permute"), {a}, {{"dims", Shape{1, 0}}})[0];
  ValueId b = g.add_node(op("neg"), {x})[0];
  ValueId c = g.add_node(op("neg"), {b})[0];
  ValueId written = g.add_inplace_node(op("add"), {c, t});  // reads a through its view
  ValueId e = g.add_node(op("neg"), {c})[0];
  g.set_outputs({e, t});
  graph::MemoryPlan plan = graph::plan_memory(g);
  EXPECT_EQ(plan.offsets[size_t(t)], -1);  // a view owns nothing
  EXPECT_EQ(plan.offsets[size_t(written)], -1);
  EXPECT_EQ(plan.lifetimes[size_t(a)].second, int32_t(g.nodes().size()));  // a graph output's view
  EXPECT_EQ(plan.lifetimes[size_t(c)], (std::pair<int32_t, int32_t>{3, 5}));

  graph::Executable exe(std::move(g));
  Tensor xs = random_tensor({4, 4}, 8, -1, 1, DType::Float32);
  TensorList out = exe.run({xs});
  expect_values(out[0], values(neg(add(xs, mf::t(exp(xs))))), 1e-6);
  expect_values(out[1], values(mf::t(exp(xs))), 1e-6);
}

// Note [Kernel scratch]: an op whose kernel keeps a float32 copy of its
// input in scratch (as much as its ScratchFn says) and doubles it into the
// output; scratch_seen records the bytes each call got.
std::vector<int64_t>& scratch_seen() {
  static std::vector<int64_t> seen;
  return seen;
}

const OpDef& scratch_op() {
  static const OpDef& def = [] {
    OpRegistry& registry = OpRegistry::instance();
    registry.add(OpDef{
        .name = "test_doubled_through_scratch",
        .inputs = {"input"},
        .infer = [](const TensorList& in, const Attrs&) {
          return std::vector<TensorMeta>{{in[0].sizes(), DType::Float32, in[0].device()}};
        },
        .differentiable = false,
        .sbp = sbp::broadcast_only(),
    });
    registry.set_kernel(
        "test_doubled_through_scratch", DeviceType::CPU,
        [](const TensorList& in, TensorList& out, const Attrs&) {
          scratch_seen().push_back(out.back().numel());
          Scratch taken(out);
          Tensor copy = taken.take(in[0].sizes(), DType::Float32);
          copy_(copy, in[0]);
          copy_(out[0], mul(copy, Scalar(2)));
        },
        [](const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
          return ScratchLayout("test").add(in[0].sizes(), DType::Float32).bytes();
        });
    return std::cref(registry.get("test_doubled_through_scratch"));
  }();
  return def;
}

TEST(GraphMemoryPlan, KernelScratchComesFromTheCallerForOneStep) {
  const OpDef& doubled = scratch_op();
  // Eager: the dispatcher appends the scratch the ScratchFn asks for.
  scratch_seen().clear();
  const Tensor xs = random_tensor({3, 5}, 9, -1, 1, DType::Float32);
  expect_close(dispatch::apply_one(doubled, {t(xs)}), mul(t(xs), Scalar(2)), 0, 0);
  EXPECT_EQ(scratch_seen(), (std::vector<int64_t>{60}));
  // A graph places it in the arena for its own step, beside the buffers
  // live then (a, c and d; b's and x's bytes hold d by then).
  Graph g;
  ValueId x = g.add_input(f32({16}));
  ValueId a = g.add_node(op("exp"), {x})[0];
  ValueId b = g.add_node(op("neg"), {a})[0];
  ValueId c = g.add_node(op("exp"), {b})[0];
  ValueId d = g.add_node(doubled, {a})[0];
  g.set_outputs({c, d});
  graph::MemoryPlan plan = graph::plan_memory(g);
  EXPECT_EQ(plan.scratch_bytes, (std::vector<int64_t>{-1, -1, -1, 64}));
  EXPECT_EQ(plan.scratch_offsets[0], -1);
  const int64_t at = plan.scratch_offsets[3];
  for (ValueId live : {a, c, d}) EXPECT_NE(plan.offsets[size_t(live)], at);
  EXPECT_EQ(plan.offsets[size_t(d)], plan.offsets[size_t(b)]);
  EXPECT_EQ(plan.arena_bytes, 4 * 64);
  EXPECT_EQ(plan.total_bytes, 6 * 64);
  scratch_seen().clear();
  graph::Executable exe(std::move(g));
  const Tensor input = random_tensor({16}, 10, -1, 1, DType::Float32);
  TensorList out = exe.run({input});
  expect_close(out[1], mul(exp(input), Scalar(2)), 0, 0);
  EXPECT_EQ(scratch_seen(), (std::vector<int64_t>{64}));
}

TEST(GraphMemoryPlan, AKernelTakingMoreScratchThanItAskedForFails) {
  Tensor buffer = empty({100}, {.dtype = DType::UInt8});
  Scratch taken({buffer});
  taken.take({10}, DType::Float32);  // bytes 0-39
  try {
    taken.take({10}, DType::Float32);  // bytes 64-103
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a piece of 40 bytes at 64 does not fit the 100 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ScratchLayout("test").add({10}, DType::Float32).add({3}, DType::Int64).bytes(), 64 + 24);
}

TEST(GraphPasses, PrinterShowsNodesAndTypes) {
  Graph g;
  ValueId x = g.add_input(f32({2, 3}), "x");
  ValueId w = g.add_variable(ones({3, 4}), "w");
  g.set_outputs({g.add_node(op("matmul"), {x, w})[0]});
  EXPECT_EQ(g.str(),
            "graph(%x: float32(2, 3)) {\n"
            "  %w: float32(3, 4) variable\n"
            "  %2 = matmul(%x, %w)  # float32(2, 4)\n"
            "  return %2\n"
            "}");
}

// --- prefetching gathers (Note [Prefetching gathers]) -------------------------------------

TEST(GraphPasses, AVariableGatherIsIssuedOneGatherAheadAndNotAboveItsViewOrAWriter) {
  const Attrs one_rank = {{"group", Shape{0}}, {"counts", Shape{2}}};
  Graph g;
  ValueId x = g.add_input(f32({2, 3}));
  const Tensor w1 = ones({2, 3}), w2 = full({2, 3}, 2.0), w3 = full({3, 2}, 3.0);
  ValueId v1 = g.add_variable(w1), v2 = g.add_variable(w2), v3 = g.add_variable(w3);
  ValueId a = g.add_node(op("comm_all_gather"), {v1}, one_rank)[0];  // 0
  ValueId h = g.add_node(op("mul"), {x, a})[0];                      // 1
  g.add_inplace_node(op("mul"), {v2, x});                            // 2: writes v2
  h = g.add_node(op("exp"), {h})[0];                                 // 3
  ValueId b = g.add_node(op("comm_all_gather"), {v2}, one_rank)[0];  // 4: up to after 2, not above it
  h = g.add_node(op("mul"), {h, b})[0];                              // 4
  ValueId t = g.add_node(op("permute"), {v3}, {{"dims", Shape{1, 0}}})[0];  // 5: a view of v3
  h = g.add_node(op("tanh"), {h})[0];                                // 6
  ValueId c = g.add_node(op("comm_all_gather"), {t}, one_rank)[0];  // 7: not above its view (5)
  h = g.add_node(op("mul"), {h, c})[0];                              // 8
  g.set_outputs({h});
  EXPECT_EQ(graph::prefetch_gathers(g), 2);
  const std::vector<std::string> after = op_names(g);
  EXPECT_EQ(after, (std::vector<std::string>{"comm_all_gather", "mul", "mul_", "comm_all_gather", "exp", "mul",
                                             "permute", "comm_all_gather", "tanh", "mul"}));
  // The same values as traced: the gather reads v2 after it was written.
  graph::Executable moved(std::move(g));
  const Tensor in = random_tensor({2, 3}, 3, -1, 1, DType::Float32);
  const Tensor want = mul(tanh(mul(exp(mul(in, w1)), mul(w2, in))), permute(w3, {1, 0}));  // before the run writes w2
  expect_close(moved.run({in})[0], want, 1e-6, 1e-6);
}

}  // namespace
}  // namespace mf::testing
