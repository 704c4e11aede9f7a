// Ordering a traced pipelined step by a schedule; see Note [Pipeline
// schedules in graph mode] in include/meshflow/graph/passes.h.
#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "meshflow/dispatch.h"
#include "meshflow/graph/passes.h"

namespace mf::graph {

namespace pp = distributed::pipelining;

namespace {

constexpr int kUnset = -3;
constexpr int kPrologue = -1;

// An action's slot: 0 forward, 1 backward (or its input part), 2 weight part.
int slot_of(pp::ActionType type) {
  switch (type) {
    case pp::ActionType::Forward: return 0;
    case pp::ActionType::Backward:
    case pp::ActionType::BackwardInput: return 1;
    case pp::ActionType::BackwardWeight: return 2;
    default: return -1;
  }
}

std::string where(const Node& n) {
  std::ostringstream os;
  os << n.op->name << " (stage " << n.pipeline.stage << ", micro-batch " << n.pipeline.micro_batch << ", "
     << (n.pipeline.phase == Phase::Forward ? "forward" : n.pipeline.phase == Phase::Backward ? "backward" : "other")
     << ")";
  return os.str();
}

}  // namespace

std::string schedule_pipeline(Graph& graph, const std::vector<pp::Action>& rank_actions) {
  static const OpDef& send = dispatch::op("comm_send");
  static const OpDef& recv = dispatch::op("comm_recv");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  const int n = int(nodes.size());

  std::vector<pp::Action> actions;
  for (const pp::Action& a : rank_actions)
    if (a.is_compute()) actions.push_back(a);
  const int epilogue = int(actions.size());
  std::map<std::tuple<int, int, int>, int> index;  // (stage, micro-batch, slot) -> position
  bool split = false;
  for (size_t k = 0; k < actions.size(); ++k) {
    index[{actions[k].stage, actions[k].microbatch, slot_of(actions[k].type)}] = int(k);
    split = split || actions[k].type == pp::ActionType::BackwardInput;
  }
  auto key_of = [&](const Node& node, int stage) {
    const int slot = node.pipeline.phase == Phase::Forward ? 0 : 1;
    auto it = index.find({stage, node.pipeline.micro_batch, slot});
    MF_CHECK(it != index.end(), Error, "graph pipeline: ", where(node), " was attributed to stage ", stage,
             ", whose actions this rank's schedule does not run; a stage's module must take its inputs through "
             "to_global(placement=<the stage's placement>)");
    return it->second;
  };

  // Producer node of each input, consumers of each node.
  std::vector<std::vector<int>> producers(static_cast<size_t>(n)), consumers(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j)
    for (ValueId in : nodes[size_t(j)].inputs) {
      if (in == kNoValue || values[size_t(in)].producer < 0) continue;
      const int p = values[size_t(in)].producer;
      producers[size_t(j)].push_back(p);
      consumers[size_t(p)].push_back(j);
    }

  // 1. The nodes the tracer attributed to a stage of this rank.
  std::vector<int> key(static_cast<size_t>(n), kUnset), stage(static_cast<size_t>(n), -1);
  for (int j = 0; j < n; ++j) {
    const Node& node = nodes[size_t(j)];
    if (node.pipeline.phase == Phase::None) key[size_t(j)] = kPrologue;
    else if (node.pipeline.phase == Phase::Update) key[size_t(j)] = epilogue;
    else if (node.pipeline.stage >= 0 && index.count({node.pipeline.stage, node.pipeline.micro_batch, 0})) {
      stage[size_t(j)] = node.pipeline.stage;
      key[size_t(j)] = key_of(node, node.pipeline.stage);
    }
  }
  // 2. The others (the loss after the last stage, boxing between stages):
  // the stage of their latest producer that has one, else of their earliest
  // consumer that has one.
  for (int j = 0; j < n; ++j) {
    if (key[size_t(j)] != kUnset) continue;
    int best = -1;
    for (int p : producers[size_t(j)])
      if (stage[size_t(p)] >= 0 && (best < 0 || key[size_t(p)] > key[size_t(best)])) best = p;
    if (best >= 0) {
      stage[size_t(j)] = stage[size_t(best)];
      key[size_t(j)] = key_of(nodes[size_t(j)], stage[size_t(j)]);
    }
  }
  // A collective that depends on no stage's node (the boxing of a build()
  // input from a placement wider than its stage, e.g. a target gathered for
  // the last stage) runs in the prologue on every rank of its group, with
  // what it reads: attached to a consumer's action it would run there only
  // on the ranks that have that consumer, and the others, which run it in
  // their prologue, would wait for it while the consumer's rank waits for
  // their messages.
  std::vector<int> hoist;
  for (int j = 0; j < n; ++j)
    if (key[size_t(j)] == kUnset && nodes[size_t(j)].op->collective) hoist.push_back(j);
  while (!hoist.empty()) {
    const int j = hoist.back();
    hoist.pop_back();
    if (key[size_t(j)] != kUnset) continue;
    key[size_t(j)] = kPrologue;
    for (int p : producers[size_t(j)])
      if (key[size_t(p)] == kUnset) hoist.push_back(p);
  }
  for (int j = n - 1; j >= 0; --j) {
    if (key[size_t(j)] != kUnset) continue;
    int best = -1;
    for (int c : consumers[size_t(j)])
      if (stage[size_t(c)] >= 0 && (best < 0 || key[size_t(c)] < key[size_t(best)])) best = c;
    if (best >= 0) {
      stage[size_t(j)] = stage[size_t(best)];
      key[size_t(j)] = key_of(nodes[size_t(j)], stage[size_t(j)]);
    }
  }
  for (int j = 0; j < n; ++j) {
    if (key[size_t(j)] != kUnset) continue;
    key[size_t(j)] = kPrologue;
    for (int p : producers[size_t(j)]) key[size_t(j)] = std::max(key[size_t(j)], key[size_t(p)]);
  }

  // 3. Zero-bubble schedules: a backward's nodes that lead to what leaves
  // the stage (a send, a node of another stage, a collective whose result
  // only another rank reads) are its input part I; the rest (weight
  // gradients and their sums) its weight part W.
  int64_t weight_nodes = 0;
  if (split) {
    std::vector<bool> input_part(static_cast<size_t>(n), false);
    for (int j = n - 1; j >= 0; --j) {
      const Node& node = nodes[size_t(j)];
      if (node.pipeline.phase != Phase::Backward || stage[size_t(j)] < 0) continue;
      // A collective whose result this rank does not read feeds another
      // rank: the root of a stage of several ranks sends what the others
      // gathered with it, so it leaves the stage on every rank of the stage.
      bool leaves = node.op == &send || (node.op->collective && consumers[size_t(j)].empty());
      for (int c : consumers[size_t(j)])
        leaves = leaves || (key[size_t(c)] != key[size_t(j)] && stage[size_t(c)] >= 0 &&
                            stage[size_t(c)] != stage[size_t(j)]) ||
                 (key[size_t(c)] == key[size_t(j)] && input_part[size_t(c)]);
      input_part[size_t(j)] = leaves;
    }
    for (int j = 0; j < n; ++j) {
      Node& node = nodes[size_t(j)];
      if (node.pipeline.phase != Phase::Backward || stage[size_t(j)] < 0 || input_part[size_t(j)]) continue;
      auto it = index.find({stage[size_t(j)], node.pipeline.micro_batch, 2});
      MF_CHECK(it != index.end(), Error, "graph pipeline: no weight-gradient action for ", where(node));
      key[size_t(j)] = it->second;
      node.pipeline.phase = Phase::Weight;
      ++weight_nodes;
    }
  }

  // The actions' stages, for timelines (Executable::timeline).
  for (int j = 0; j < n; ++j)
    if (nodes[size_t(j)].pipeline.stage < 0 && stage[size_t(j)] >= 0) nodes[size_t(j)].pipeline.stage = stage[size_t(j)];

  // 4. Receives are posted one action early (the message arrives while the
  // rank computes); everything else keeps its trace order within its action.
  auto order_key = [&](int j) {
    const bool early = nodes[size_t(j)].op == &recv && key[size_t(j)] > 0 && key[size_t(j)] < epilogue;
    return std::make_tuple(early ? key[size_t(j)] - 1 : key[size_t(j)], early ? 0 : 1, j);
  };
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) order[size_t(j)] = j;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return order_key(a) < order_key(b); });

  // 5. The order must keep every dependency: producers first, and the trace
  // order of a write with every other access of its buffer.
  std::vector<int> position(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) position[size_t(order[size_t(k)])] = k;
  // Accessors of each buffer that some node writes: a write keeps its trace
  // order with every other access (views and in-place results included).
  std::map<ValueId, std::vector<int>> accessors;
  std::map<ValueId, std::vector<int>> writers;
  for (int c = 0; c < n; ++c) {
    const Node& node = nodes[size_t(c)];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == kNoValue) continue;
      const ValueId root = values[size_t(node.inputs[i])].root;
      auto& list = accessors[root];
      if (list.empty() || list.back() != c) list.push_back(c);
      if (node.writes_input(i)) writers[root].push_back(c);
    }
  }
  for (int j = 0; j < n; ++j) {
    const Node& node = nodes[size_t(j)];
    for (int p : producers[size_t(j)])
      MF_CHECK(position[size_t(p)] < position[size_t(j)], Error, "graph pipeline: ", where(node), " reads a value of ",
               where(nodes[size_t(p)]),
               " that the schedule runs later; every value that passes between stages must go through "
               "to_global(placement=<the next stage's placement>)");
  }
  for (const auto& [root, ws] : writers)
    for (int w : ws)
      for (int c : accessors[root])
        MF_CHECK(c == w || (c < w) == (position[size_t(c)] < position[size_t(w)]), Error, "graph pipeline: ",
                 where(nodes[size_t(std::min(c, w))]), " and ", where(nodes[size_t(std::max(c, w))]),
                 " touch one buffer, the second writing it, and the schedule would run them in the other order");

  // 6. Each message gets a tag of its own: the k-th send to a rank in trace
  // order (the same program order on every rank) meets the k-th receive
  // from it, whatever order the schedule runs them in.
  std::map<std::pair<bool, int64_t>, int64_t> count;
  int64_t messages = 0;
  for (Node& node : nodes) {
    const bool is_send = node.op == &send;
    if (!is_send && node.op != &recv) continue;
    const int64_t peer = node.attrs.get_int(is_send ? "dst" : "src");
    node.attrs.set("tag", int64_t(kPipelineTagBase + count[{is_send, peer}]++ % kPipelineTags));
    ++messages;
  }

  graph.reorder(order);
  std::ostringstream os;
  os << actions.size() << " actions, " << n << " nodes, " << messages << " messages";
  if (split) os << ", " << weight_nodes << " weight-gradient nodes";
  return os.str();
}

}  // namespace mf::graph
