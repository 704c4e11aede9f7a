// The graph passes of passes.h (elementwise fusion is in fusion.cpp): DCE,
// CSE, constant folding, clone forwarding, slice-gradient merging,
// recomputation, in place where safe and early updates.
#include "meshflow/graph/passes.h"

#include <algorithm>
#include <numeric>
#include <map>
#include <sstream>
#include <unordered_map>

#include "meshflow/dispatch.h"
#include "meshflow/graph/fusion.h"

namespace mf::graph {

int eliminate_dead_code(Graph& graph) {
  auto& nodes = graph.nodes();
  std::vector<bool> live_value(graph.values().size(), false);
  for (ValueId id : graph.outputs()) live_value[size_t(id)] = true;
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node& n = nodes[i];
    bool live = n.writes_inputs() || n.op->collective;
    for (ValueId out : n.outputs) live = live || live_value[size_t(out)];
    if (!live) {
      removed[i] = true;
      ++count;
      continue;
    }
    for (ValueId in : n.inputs)
      if (in != kNoValue) live_value[size_t(in)] = true;
  }
  if (count) graph.remove_nodes(removed);
  return count;
}

int eliminate_common_subexpressions(Graph& graph) {
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  // writes[root]: how many nodes so far wrote the buffer of root.
  std::vector<int32_t> writes(values.size(), 0);
  struct Seen {
    size_t node;
    std::vector<int32_t> output_writes;
  };
  std::unordered_map<std::string, Seen> seen;
  std::vector<bool> removed(nodes.size(), false);
  auto root_writes = [&](ValueId id) { return writes[size_t(values[size_t(id)].root)]; };
  int count = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.writes_inputs()) {
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (n.writes_input(k) && n.inputs[k] != kNoValue) ++writes[size_t(values[size_t(n.inputs[k])].root)];
      continue;
    }
    // Note [Recomputed nodes]: merging a recomputation into the forward
    // would keep the forward's activations alive until backward.
    if (n.random_counters || n.outputs.empty() || n.op->collective || n.recomputed) continue;
    std::ostringstream key;
    key << n.op->name << '(' << n.attrs.str() << ')';
    for (ValueId in : n.inputs) key << ' ' << in << '@' << (in == kNoValue ? 0 : root_writes(in));
    std::vector<int32_t> output_writes;
    for (ValueId out : n.outputs) output_writes.push_back(root_writes(out));
    auto [it, inserted] = seen.try_emplace(key.str(), Seen{i, output_writes});
    if (inserted) continue;
    const Node& first = nodes[it->second.node];
    std::vector<int32_t> first_now;
    for (ValueId out : first.outputs) first_now.push_back(root_writes(out));
    if (first_now != it->second.output_writes) {
      // The earlier outputs were written since: this node is the new original.
      it->second = Seen{i, output_writes};
      continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) graph.replace_uses(n.outputs[k], first.outputs[k]);
    removed[i] = true;
    ++count;
  }
  if (count) graph.remove_nodes(removed);
  return count;
}

int fold_constants(Graph& graph) {
  auto& nodes = graph.nodes();
  // A buffer written in place is state, not a constant.
  std::vector<bool> written(graph.values().size(), false);
  for (const Node& n : nodes)
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.writes_input(k) && n.inputs[k] != kNoValue) written[size_t(graph.value(n.inputs[k]).root)] = true;
  // Folding adds constants, and views of a folded value then have one as
  // their root: values past the first count were never written.
  auto is_written = [&](ValueId id) {
    const auto root = size_t(graph.value(id).root);
    return root < written.size() && written[root];
  };
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  NoGradGuard no_grad;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node n = nodes[i];
    if (n.writes_inputs() || n.random_counters || n.op->collective) continue;
    bool constant = true;
    for (ValueId out : n.outputs) constant = constant && !is_written(out);
    TensorList inputs;
    for (ValueId in : n.inputs) {
      if (in == kNoValue) {
        inputs.emplace_back();
        continue;
      }
      const Value& v = graph.value(in);
      constant = constant && v.kind == ValueKind::Constant;
      inputs.push_back(v.tensor);
    }
    if (!constant) continue;
    TensorList outputs = dispatch::apply(*n.op, inputs, n.attrs);
    for (size_t k = 0; k < outputs.size(); ++k) graph.replace_uses(n.outputs[k], graph.add_constant(outputs[k]));
    removed[i] = true;
    ++count;
  }
  if (count) graph.remove_nodes(removed);
  return count;
}

int forward_clones(Graph& graph) {
  static const OpDef& clone_op = dispatch::op("clone");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  BufferUses uses(graph);
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op != &clone_op) continue;
    const ValueId source = n.inputs[0];
    const Value& src = values[size_t(source)];
    const Value& dst = values[size_t(n.outputs[0])];
    const ValueId root = src.root;
    if (values[size_t(root)].kind != ValueKind::Intermediate || !uses.dies_at(root, i) || src.strides != dst.strides ||
        src.offset != dst.offset)
      continue;
    graph.replace_uses(n.outputs[0], source);
    removed[i] = true;
    ++count;
    // The source's buffer now lives as long as the clone's did.
    uses.merge(root, n.outputs[0]);
  }
  if (count) graph.remove_nodes(removed);
  return count;
}

int merge_slice_gradients(Graph& graph) {
  static const OpDef& add_op = dispatch::op("add");
  static const OpDef& slice_backward_op = dispatch::op("slice_backward");
  static const OpDef& cat_op = dispatch::op("cat");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  const std::vector<int32_t> uses = graph.use_counts();
  std::vector<bool> is_output(values.size(), false);
  for (ValueId id : graph.outputs()) is_output[size_t(id)] = true;
  auto single_use = [&](ValueId v) { return uses[size_t(v)] == 1 && !is_output[size_t(v)]; };
  auto producer = [&](ValueId v) -> const Node* {
    const int32_t p = values[size_t(v)].producer;
    return p < 0 ? nullptr : &nodes[size_t(p)];
  };
  auto is_sum = [&](const Node* n) { return n && n->op == &add_op && !n->inplace && n->attrs.items().empty(); };
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!is_sum(&nodes[i]) || removed[i]) continue;
    // The leaves of the tree of single-use adds rooted here.
    std::vector<const Node*> slices, sums{&nodes[i]};
    bool ok = true;
    for (size_t k = 0; k < sums.size() && ok; ++k)
      for (ValueId in : sums[k]->inputs) {
        const Node* p = producer(in);
        ok = ok && p && single_use(in);
        if (!ok) break;
        if (is_sum(p)) sums.push_back(p);
        else if (p->op == &slice_backward_op && p->attrs.get_int("step") == 1) slices.push_back(p);
        else ok = false;
      }
    if (!ok) continue;
    const int64_t dim = slices[0]->attrs.get_int("dim");
    const Shape& full = slices[0]->attrs.get_shape("input_sizes");
    std::sort(slices.begin(), slices.end(),
              [](const Node* a, const Node* b) { return a->attrs.get_int("start") < b->attrs.get_int("start"); });
    int64_t next = 0;
    for (const Node* s : slices) {
      ok = ok && s->attrs.get_int("dim") == dim && s->attrs.get_shape("input_sizes") == full &&
           s->attrs.get_int("start") == next;
      next += values[size_t(s->inputs[0])].sizes[size_t(dim)];
    }
    if (!ok || next != full[size_t(dim)]) continue;
    // The cat reads the slice gradients where the root add was: nothing in
    // between may write them.
    size_t first = i;
    for (const Node* s : slices) first = std::min(first, size_t(s - nodes.data()));
    for (size_t j = first; j < i && ok; ++j)
      for (const Node* s : slices)
        ok = ok && !graph.writes_buffer(nodes[j], values[size_t(s->inputs[0])].root);
    if (!ok) continue;
    Node cat{.op = &cat_op, .attrs = {{"dim", dim}}, .outputs = nodes[i].outputs};
    for (const Node* s : slices) {
      cat.inputs.push_back(s->inputs[0]);
      removed[size_t(s - nodes.data())] = true;
    }
    for (size_t k = 1; k < sums.size(); ++k) removed[size_t(sums[k] - nodes.data())] = true;
    cat.pipeline = nodes[i].pipeline;
    nodes[i] = std::move(cat);
    count += int(slices.size() + sums.size());
  }
  if (count) graph.remove_nodes(removed);
  return count;
}

int recompute_elementwise(Graph& graph) {
  auto& nodes = graph.nodes();
  auto& values = graph.values();
  const size_t n_nodes = nodes.size();
  auto root_of = [&](ValueId id) { return values[size_t(id)].root; };
  // Note [Buffer uses]: the non-view nodes using each buffer (through any
  // view), its last use, and the nodes writing it.
  const BufferUses buffer_uses(graph);
  const auto& readers = buffer_uses.users;
  const auto& writes = buffer_uses.writers;
  const auto& last_use = buffer_uses.last_use;

  // A recomputation of value (made by the last of the nodes `chain`, in
  // order) before node `before`.
  struct Plan {
    size_t before;
    std::vector<size_t> chain;
    ValueId value;
  };
  static const OpDef& clone_op = dispatch::op("clone");
  static const OpDef& layer_norm_op = dispatch::op("layer_norm");
  // A parameter's all-gather (ZeRO-3) is run again for backward rather than
  // its result kept from forward: the parameter (a variable) is alive and
  // unwritten until the update, so backward gathers it anew.
  static const OpDef& all_gather_op = dispatch::op("comm_all_gather");
  auto gathers_a_variable = [&](const Node& n) {
    return n.op == &all_gather_op && n.inputs.size() == 1 && n.inputs[0] != kNoValue &&
           values[size_t(root_of(n.inputs[0]))].kind == ValueKind::Variable;
  };
  // The nodes that make node p's outputs from variables alone, through
  // views, clones and gathers (a parameter gathered along a dim other than
  // 0 is a permuted copy, gathered, then copied back: see boxing.cpp), in
  // order and ending with p; empty if p reads anything else.
  auto variable_chain = [&](size_t p) {
    std::vector<size_t> chain;
    std::vector<size_t> todo{p};
    while (!todo.empty() && chain.size() <= 8) {
      const size_t q = todo.back();
      todo.pop_back();
      const Node& n = nodes[q];
      if (!(n.is_view() || n.op == &clone_op || n.op == &all_gather_op) || n.inplace || n.random_counters)
        return std::vector<size_t>{};
      chain.push_back(q);
      for (ValueId in : n.inputs) {
        if (in == kNoValue) return std::vector<size_t>{};
        const Value& v = values[size_t(in)];
        if (v.kind == ValueKind::Variable) continue;
        if (v.kind != ValueKind::Intermediate || v.producer < 0) return std::vector<size_t>{};
        todo.push_back(size_t(v.producer));
      }
    }
    if (!todo.empty()) return std::vector<size_t>{};
    std::sort(chain.begin(), chain.end());
    chain.erase(std::unique(chain.begin(), chain.end()), chain.end());
    return chain;
  };
  auto variables_written_between = [&](const std::vector<size_t>& chain, size_t from, size_t to) {
    for (size_t q : chain)
      for (ValueId in : nodes[q].inputs)
        if (values[size_t(in)].kind == ValueKind::Variable)
          for (size_t w : writes[size_t(root_of(in))])
            if (w >= from && w <= to) return true;
    return false;
  };
  // A buffer may live this many nodes longer to feed a recomputation.
  const auto slack = int64_t(n_nodes / 64);
  std::vector<Plan> plans;
  for (size_t p = 0; p < n_nodes; ++p) {
    const Node& n = nodes[p];
    const bool cheap =
        is_elementwise(*n.op) || n.op == &clone_op || n.op == &layer_norm_op || gathers_a_variable(n);
    if (n.fused || n.inplace || n.random_counters || n.outputs.empty() || !cheap) continue;
    const ValueId v = n.outputs[0];
    if (readers[size_t(v)].size() < 2 || buffer_uses.outputs[size_t(v)] > 0 || root_of(v) != v ||
        !writes[size_t(v)].empty())
      continue;
    const std::vector<size_t> uses(readers[size_t(v)].begin(), readers[size_t(v)].end());
    // Made from variables through a gather: made again for every reader
    // past the gap while the variables are unwritten.
    if (n.op == &clone_op) {
      std::vector<size_t> chain = variable_chain(p);
      const bool gathers = std::any_of(chain.begin(), chain.end(), [&](size_t q) { return nodes[q].op == &all_gather_op; });
      if (gathers && chain.size() > 1) {
        size_t split = uses.size();
        for (size_t k = uses.size(); k-- > 1 && !variables_written_between(chain, p, uses[k]);) split = k;
        if (split < uses.size() && uses[split] - uses[split - 1] >= std::max<size_t>(2, n_nodes / 32))
          plans.push_back({uses[split], chain, v});
        continue;
      }
    }
    // The earliest reader from which on the inputs are still alive and
    // unwritten: the readers from there on get the recomputed value.
    size_t split = uses.size();
    for (size_t k = uses.size(); k-- > 1;) {
      bool alive = true;
      for (ValueId in : n.inputs) {
        if (in == kNoValue) continue;
        const ValueId root = root_of(in);
        const ValueKind kind = values[size_t(root)].kind;
        if (kind == ValueKind::Intermediate || kind == ValueKind::Input)
          alive = alive && last_use[size_t(root)] + slack >= int64_t(uses[k]);
        for (size_t w : writes[size_t(root)]) alive = alive && (w < p || w > uses[k]);
      }
      if (!alive) break;
      split = k;
    }
    // Worth it only across a long gap (forward to backward), where the
    // buffer would otherwise be held; a thirty-second of the step still
    // covers the last block, whose activations are live at the start of
    // backward, where the memory peaks.
    if (split == uses.size() || uses[split] - uses[split - 1] < std::max<size_t>(2, n_nodes / 32)) continue;
    plans.push_back({uses[split], {p}, v});
  }
  if (plans.empty()) return 0;
  std::sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) { return a.before < b.before; });
  const std::vector<Node> original = nodes;  // nodes[] is moved from below
  std::vector<Node> rebuilt;
  rebuilt.reserve(n_nodes + 2 * plans.size());
  size_t next_plan = 0;
  for (size_t i = 0; i < n_nodes; ++i) {
    for (; next_plan < plans.size() && plans[next_plan].before == i; ++next_plan) {
      const Plan& plan = plans[next_plan];
      // The producer again, then the views of its result that readers from
      // here on use; those readers are renamed to the new values.
      std::unordered_map<ValueId, ValueId> renamed;
      auto recreate = [&](const Node& original) {
        Node copy = original;
        for (ValueId& in : copy.inputs)
          if (auto it = renamed.find(in); it != renamed.end()) in = it->second;
        for (ValueId& out : copy.outputs) {
          Value value = values[size_t(out)];
          const auto id = ValueId(values.size());
          value.root = original.is_view() ? values[size_t(copy.inputs[0])].root : id;
          values.push_back(value);
          renamed[out] = id;
          out = id;
        }
        rebuilt.push_back(std::move(copy));
      };
      for (size_t q : plan.chain) recreate(original[q]);
      const size_t producer = plan.chain.back();
      for (size_t k = producer + 1; k < i; ++k)
        if (original[k].is_view() && renamed.contains(original[k].inputs[0])) recreate(original[k]);
      for (ValueId out : original[producer].outputs)
        for (size_t r : readers[size_t(out)])
          if (r >= i)
            for (ValueId& in : nodes[r].inputs)
              if (auto it = renamed.find(in); it != renamed.end()) in = it->second;
    }
    rebuilt.push_back(std::move(nodes[i]));
  }
  nodes = std::move(rebuilt);
  graph.remove_nodes(std::vector<bool>(nodes.size(), false));
  return int(plans.size());
}

namespace {

bool is_whole_kernel_output(const Value& v, ValueId id) {
  return v.kind == ValueKind::Intermediate && is_whole_buffer(v, id);
}

// Whether the buffer of value x is a kernel output's, whole and in order,
// that a node at index i is the last to touch.
bool is_dying_whole_buffer(const std::vector<Value>& values, const BufferUses& uses, ValueId x, size_t i) {
  const Value& xv = values[size_t(x)];
  const Value& root = values[size_t(xv.root)];
  return root.kind == ValueKind::Intermediate && is_whole_buffer(root, xv.root) && xv.offset == 0 &&
         xv.strides == contiguous_strides(xv.sizes) && shape_numel(xv.sizes) == shape_numel(root.sizes) &&
         uses.dies_at(xv.root, i);
}

// The inputs whose buffer a node's kernel may write its output 0 over
// (Note [Outputs over dead inputs]): every input of an elementwise node,
// of a fused elementwise node that writes only its last step's result, and
// the logits of cross_entropy_backward (row by row, each element read
// before it is written).
std::vector<size_t> overwritable_inputs(const Node& n) {
  static const OpDef& cross_entropy_backward = dispatch::op("cross_entropy_backward");
  if (n.op == &cross_entropy_backward) return {1};
  bool elementwise = !n.fused && is_elementwise(*n.op);
  if (n.fused && n.op == &fused_elementwise_op() && !n.fused->product_first) {
    elementwise = true;
    for (size_t k = 0; k + 1 < n.fused->steps.size(); ++k) elementwise = elementwise && n.fused->steps[k].outputs[0] < 0;
  }
  std::vector<size_t> inputs;
  if (elementwise)
    for (size_t k = 0; k < n.inputs.size(); ++k) inputs.push_back(k);
  return inputs;
}

}  // namespace

int run_in_place(Graph& graph) {
  auto& nodes = graph.nodes();
  auto& values = graph.values();
  BufferUses uses(graph);
  int count = 0;
  // Input `input` of node n is replaced by its output 0; true if done.
  auto try_input = [&](Node& n, size_t i, size_t input, bool inplace) {
    const ValueId x = n.inputs[input], out = n.outputs[0];
    if (x == kNoValue) return false;
    const Value& xv = values[size_t(x)];
    const Value& ov = values[size_t(out)];
    const ValueId root = xv.root;
    bool safe = is_dying_whole_buffer(values, uses, x, i) && is_whole_kernel_output(ov, out) &&
                xv.sizes == ov.sizes && xv.dtype == ov.dtype && (!inplace || root == x);
    for (size_t k = 0; k < n.inputs.size() && safe; ++k)
      safe = k == input || n.inputs[k] == kNoValue || values[size_t(n.inputs[k])].root != root;
    if (!safe) return false;
    if (inplace) n.inplace = true;
    else n.overwrites = int32_t(input);
    // The output and every view of it now live in x's buffer.
    for (Value& v : values)
      if (v.root == out) v.root = root;
    uses.merge(root, out);
    return true;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.inplace || n.is_view() || n.outputs.empty() || n.inputs.empty()) continue;
    if (n.op->inplace && n.outputs.size() == 1 && try_input(n, i, 0, true)) {
      ++count;
      continue;
    }
    for (size_t k : overwritable_inputs(n))
      if (try_input(n, i, k, false)) {
        ++count;
        break;
      }
  }
  return count;
}

int schedule_updates_early(Graph& graph) {
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  auto root_of = [&](ValueId id) { return values[size_t(id)].root; };
  std::vector<size_t> order;  // node indices in their new order
  order.reserve(nodes.size());
  int count = 0;
  // Buffers written by collectives: an update reading one stays where it is.
  std::vector<bool> communicated(values.size(), false);
  for (const Node& n : nodes)
    if (n.op->collective)
      for (ValueId out : n.outputs) communicated[size_t(root_of(out))] = true;
  auto reads_communicated = [&](const Node& n) {
    for (ValueId in : n.inputs)
      if (in != kNoValue && communicated[size_t(root_of(in))]) return true;
    return false;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const bool update = n.inplace && !n.op->collective && !reads_communicated(n);
    if (!update) {
      order.push_back(i);
      continue;
    }
    std::vector<ValueId> roots;
    for (ValueId in : n.inputs)
      if (in != kNoValue) roots.push_back(root_of(in));
    auto touches = [&](const Node& m) {
      for (const auto* list : {&m.inputs, &m.outputs})
        for (ValueId v : *list)
          if (v != kNoValue && std::find(roots.begin(), roots.end(), root_of(v)) != roots.end()) return true;
      return false;
    };
    size_t at = order.size();
    while (at > 0 && !touches(nodes[order[at - 1]])) --at;
    if (at < order.size()) ++count;
    order.insert(order.begin() + std::ptrdiff_t(at), i);
  }
  if (count) {
    std::vector<Node> reordered;
    reordered.reserve(nodes.size());
    for (size_t i : order) reordered.push_back(std::move(nodes[i]));
    nodes = std::move(reordered);
    graph.remove_nodes(std::vector<bool>(nodes.size(), false));
  }
  return count;
}

int prefetch_gathers(Graph& graph) {
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  static const OpDef& all_gather_op = dispatch::op("comm_all_gather");
  auto gathered_variable = [&](const Node& n) -> ValueId {
    if (n.op != &all_gather_op || n.inputs.size() != 1 || n.inputs[0] == kNoValue) return kNoValue;
    const ValueId root = values[size_t(n.inputs[0])].root;
    return values[size_t(root)].kind == ValueKind::Variable ? root : kNoValue;
  };
  // The node making each value (-1: none, a variable).
  std::vector<int64_t> producer(values.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId out : nodes[i].outputs) producer[size_t(out)] = int64_t(i);
  // Sort keys: 2 * index for a node where it is; 2 * j + 1 to follow node j.
  std::vector<int64_t> key(nodes.size());
  int count = 0;
  int64_t previous = -1;  // index of the previous variable gather, as traced
  for (size_t i = 0; i < nodes.size(); ++i) {
    key[i] = 2 * int64_t(i);
    const ValueId variable = gathered_variable(nodes[i]);
    if (variable == kNoValue) continue;
    // Not above the view of the variable it reads, if it reads one.
    int64_t after = std::max(previous, producer[size_t(nodes[i].inputs[0])]);
    for (int64_t j = int64_t(i) - 1; j > after && j >= 0; --j)
      if (graph.writes_buffer(nodes[size_t(j)], variable)) {
        after = j;
        break;
      }
    if (after >= 0 && after + 1 < int64_t(i)) {
      key[i] = 2 * after + 1;
      ++count;
    }
    previous = int64_t(i);
  }
  if (!count) return 0;
  std::vector<size_t> order(nodes.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
  std::vector<Node> reordered;
  reordered.reserve(nodes.size());
  for (size_t i : order) reordered.push_back(std::move(nodes[i]));
  nodes = std::move(reordered);
  graph.remove_nodes(std::vector<bool>(nodes.size(), false));
  return count;
}

std::string optimize(Graph& graph, bool exact) {
  // The fused programs and constant folding run CPU loops (Note
  // [Device-generic graphs] in executor.cpp): a graph on another device
  // gets the passes that only rearrange nodes.
  const bool on_cpu = std::all_of(graph.values().begin(), graph.values().end(),
                                  [](const Value& v) { return v.device.is_cpu(); });
  std::ostringstream os;
  if (on_cpu) os << "fold_constants " << fold_constants(graph) << ", ";
  os << "cse " << eliminate_common_subexpressions(graph);
  os << ", forward_clones " << forward_clones(graph);
  os << ", dce " << eliminate_dead_code(graph);
  os << ", merge_slice_gradients " << merge_slice_gradients(graph);
  os << ", recompute " << recompute_elementwise(graph);
  if (on_cpu) {
    os << ", fuse_linear_activations " << fuse_linear_activations(graph);
    os << ", fuse_add_layer_norms " << fuse_add_layer_norms(graph);
    os << ", fuse_gelu_with_backward " << fuse_gelu_with_backward(graph);
    os << ", fuse_elementwise " << fuse_elementwise(graph);
    if (!exact) os << ", fuse_bias_gradients " << fuse_bias_gradients(graph);
    if (!exact) os << ", fuse_updates_into_gemms " << fuse_updates_into_gemms(graph);
  }
  os << ", in_place " << run_in_place(graph);
  os << ", early_updates " << schedule_updates_early(graph);
  os << ", prefetch_gathers " << prefetch_gathers(graph);
  return os.str();
}

}  // namespace mf::graph
