// The backward engine: runs the graph below the given outputs in reverse
// topological order, summing gradients that meet at a node.
#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "meshflow/autocast.h"
#include "meshflow/autograd.h"
#include "autograd/observer.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "meshflow/profiler.h"

namespace mf::autograd {
namespace {

// The synthetic node whose edges are the roots of one backward call.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> edges, TensorList grads) : grads_(std::move(grads)) {
    next_edges_ = std::move(edges);
  }
  // A copy: a split backward (Note [Split backward]) may apply the root twice.
  TensorList apply(TensorList&&) override { return grads_; }
  void release_variables() override { grads_.clear(); }
  std::string name() const override { return "GraphRoot"; }

 private:
  TensorList grads_;
};

struct Capture {
  uint32_t input_nr;
  size_t result_index;
};

struct CompareSeq {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr() < b->sequence_nr();  // newest first
  }
};

// Nodes reachable from root in post-order (every node after its children).
std::vector<Node*> post_order(Node* root, std::unordered_map<Node*, int>& dependencies) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen{root};
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->next_edges().size()) {
      Node* child = node->next_edges()[next++].fn.get();
      if (!child) continue;
      dependencies[child]++;
      if (seen.insert(child).second) stack.emplace_back(child, 0);
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

// Callbacks queued by queue_callback, one list per running execute() of
// this thread (a hook may start a nested backward).
thread_local std::vector<std::vector<std::function<void()>>> callback_stack;
thread_local LossScaling* tls_loss_scaling = nullptr;
thread_local BackwardObserver* tls_observer = nullptr;

// Pushes this pass's callback list and pops it on exit; run() runs the
// callbacks (a callback may queue more).
struct CallbackScope {
  CallbackScope() { callback_stack.emplace_back(); }
  ~CallbackScope() { callback_stack.pop_back(); }
  void run() {
    for (size_t i = 0; i < callback_stack.back().size(); ++i) {
      std::function<void()> fn = std::move(callback_stack.back()[i]);
      fn();
    }
  }
};

// What one pass over the graph runs. A plain backward runs every reached
// node; autograd::grad runs only the nodes that lead to its inputs and
// captures the gradients arriving there; the two halves of a split
// backward (Note [Split backward]) run complementary parts.
struct Pass {
  bool retain_graph = false;
  bool create_graph = false;
  // Run only these nodes (null: every node reached).
  const std::unordered_set<Node*>* only = nullptr;
  // Per node, the edges this pass computes and follows (absent: all).
  const std::unordered_map<Node*, std::vector<bool>>* edge_masks = nullptr;
  // false: AccumulateGrad nodes do not run (leaves are not touched).
  bool accumulate = true;
  const std::unordered_map<Node*, std::vector<Capture>>* captures = nullptr;
  size_t num_results = 0;
  // Nodes whose variables survive this pass although retain_graph is off.
  const std::unordered_set<Node*>* keep = nullptr;
  // Called with each node of `keep` that ran and the gradients it got.
  std::function<void(const std::shared_ptr<Node>&, const TensorList&)> kept;
};

thread_local const std::vector<bool>* tls_edge_mask = nullptr;

struct EdgeMaskScope {
  const std::vector<bool>* prev;
  explicit EdgeMaskScope(const std::vector<bool>* mask) : prev(std::exchange(tls_edge_mask, mask)) {}
  ~EdgeMaskScope() { tls_edge_mask = prev; }
};

// Runs a pass from seeds (nodes with their incoming gradients, hooks
// already applied to them when seeded from an earlier pass), given the
// number of parents each node waits for.
TensorList run_pass(std::vector<std::pair<std::shared_ptr<Node>, TensorList>> seeds, bool seeds_hooked,
                    std::unordered_map<Node*, int> dependencies, const Pass& pass) {
  // Backward ops run in the dtypes their forward ops ran in, not autocast's
  // (Note [Autocast] in autocast.h).
  std::optional<AutocastGuard> no_autocast_cpu, no_autocast_cuda;
  if (autocast::any_enabled()) {
    no_autocast_cpu.emplace(DeviceType::CPU, std::nullopt, false);
    no_autocast_cuda.emplace(DeviceType::CUDA, std::nullopt, false);
  }
  CallbackScope callbacks;
  TensorList results(pass.num_results);
  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_set<Node*> hooked;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, CompareSeq> ready;
  for (auto& [node, grads] : seeds) {
    buffers[node.get()] = std::move(grads);
    if (seeds_hooked) hooked.insert(node.get());
    ready.push(node);
  }
  GradMode::set_enabled(pass.create_graph);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    if (tls_observer) tls_observer->node_started(node->sequence_nr());
    TensorList inputs;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      inputs = std::move(it->second);
      buffers.erase(it);
    }
    inputs.resize(node->num_outputs());
    bool any_defined = dynamic_cast<GraphRoot*>(node.get()) != nullptr;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (node->has_tensor_hooks() && !hooked.count(node.get()))
        inputs[i] = node->run_tensor_hooks(uint32_t(i), inputs[i]);
      any_defined = any_defined || inputs[i].defined();
    }
    if (pass.captures)
      if (auto it = pass.captures->find(node.get()); it != pass.captures->end())
        for (const Capture& c : it->second) results[c.result_index] = inputs[c.input_nr];

    const std::vector<bool>* mask = nullptr;
    if (pass.edge_masks)
      if (auto it = pass.edge_masks->find(node.get()); it != pass.edge_masks->end()) mask = &it->second;
    TensorList outputs;
    bool run = any_defined && (!pass.only || pass.only->count(node.get()));
    if (!pass.accumulate && dynamic_cast<AccumulateGrad*>(node.get())) run = false;
    if (run) {
      const bool keep = pass.keep && pass.keep->count(node.get());
      if (keep && pass.kept) pass.kept(node, inputs);
      {
        EdgeMaskScope scope(mask);
        profiler::Span span("autograd", [&] { return node->name(); }, 0);
        outputs = node->apply(std::move(inputs));
      }
      if (!pass.retain_graph && !keep) node->release_variables();
    }
    outputs.resize(node->next_edges().size());

    for (size_t i = 0; i < node->next_edges().size(); ++i) {
      const Edge& edge = node->next_edges()[i];
      if (!edge.fn || (mask && !(*mask)[i])) continue;
      Node* child = edge.fn.get();
      if (outputs[i].defined()) {
        TensorList& buf = buffers[child];
        if (buf.size() <= edge.input_nr) buf.resize(std::max<size_t>(child->num_outputs(), edge.input_nr + 1));
        Tensor& slot = buf[edge.input_nr];
        slot = slot.defined() ? add(slot, outputs[i]) : std::move(outputs[i]);
      }
      if (--dependencies[child] == 0) ready.push(edge.fn);
    }
  }
  callbacks.run();
  if (tls_observer) tls_observer->pass_ended();
  return results;
}

// The nodes of `order` (children first) from which a captured node can be
// reached.
std::unordered_set<Node*> nodes_leading_to(const std::vector<Node*>& order,
                                           const std::unordered_map<Node*, std::vector<Capture>>& captures) {
  std::unordered_set<Node*> needed;
  for (Node* n : order) {
    bool need = captures.count(n) > 0;
    for (const auto& e : n->next_edges()) need = need || (e.fn && needed.count(e.fn.get()));
    if (need) needed.insert(n);
  }
  return needed;
}

// Runs the graph. With captures (autograd::grad), the gradients arriving at
// the captured (node, input) pairs are returned and leaves are not touched.
TensorList execute(const std::vector<Edge>& root_edges, TensorList root_grads, bool retain_graph,
                   bool create_graph, const std::unordered_map<Node*, std::vector<Capture>>& captures,
                   size_t num_results) {
  const bool capture_mode = num_results > 0 || !captures.empty();
  auto root = std::make_shared<GraphRoot>(root_edges, std::move(root_grads));
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> order = post_order(root.get(), dependencies);
  std::unordered_set<Node*> needed;
  Pass pass;
  pass.retain_graph = retain_graph;
  pass.create_graph = create_graph;
  if (capture_mode) {
    needed = nodes_leading_to(order, captures);
    pass.only = &needed;
    pass.accumulate = false;
    pass.captures = &captures;
    pass.num_results = num_results;
  }
  std::vector<std::pair<std::shared_ptr<Node>, TensorList>> seeds;
  seeds.emplace_back(root, TensorList{});
  return run_pass(std::move(seeds), false, std::move(dependencies), pass);
}

// Restores grad mode when the engine returns or throws.
struct GradModeRestore {
  bool prev = GradMode::is_enabled();
  ~GradModeRestore() { GradMode::set_enabled(prev); }
};

void make_root_grads(const TensorList& outputs, const TensorList& grad_outputs, const char* fn,
                     std::vector<Edge>& edges, TensorList& grads) {
  MF_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), ValueError, fn,
           ": got ", grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    MF_CHECK(out.defined(), ValueError, fn, ": output ", i, " is undefined");
    MF_CHECK(out.requires_grad(), Error, fn, ": element ", i,
             " of tensors does not require grad and does not have a grad_fn");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      MF_CHECK(out.numel() == 1, Error, fn, ": grad can be implicitly created only for scalar outputs; output ",
               i, " has shape ", shape_str(out.sizes()));
      g = ones_like(out);
    } else {
      MF_CHECK(g.sizes() == out.sizes(), ShapeError, fn, ": grad_outputs[", i, "] has shape ",
               shape_str(g.sizes()), " but output ", i, " has shape ", shape_str(out.sizes()));
    }
    edges.push_back(gradient_edge(out));
    grads.push_back(g);
  }
}

}  // namespace

const std::vector<bool>* current_edge_mask() { return tls_edge_mask; }

void queue_callback(std::function<void()> fn) {
  MF_CHECK(!callback_stack.empty(), Error, "queue_callback: no backward pass is running on this thread");
  callback_stack.back().push_back(std::move(fn));
}

LossScaling* set_loss_scaling(LossScaling* scaling) { return std::exchange(tls_loss_scaling, scaling); }

BackwardObserver* set_backward_observer(BackwardObserver* observer) { return std::exchange(tls_observer, observer); }

void backward(const TensorList& outputs, const TensorList& grad_outputs, bool retain_graph,
              bool create_graph) {
  GradModeRestore restore;
  std::vector<Edge> edges;
  TensorList grads;
  make_root_grads(outputs, grad_outputs, "backward", edges, grads);
  LossScaling* scaling = tls_loss_scaling;
  if (scaling) {
    // As the gradient of loss * scale: grad * scale in float32, then the
    // output's shape and dtype.
    NoGradGuard no_grad;
    for (size_t i = 0; i < grads.size(); ++i)
      grads[i] = to(reshape(mul(grads[i], scaling->scale), outputs[i].sizes()), outputs[i].dtype());
  }
  execute(edges, std::move(grads), retain_graph || create_graph, create_graph, {}, 0);
  if (scaling && scaling->finish) scaling->finish();
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  GradModeRestore restore;
  std::vector<Edge> edges;
  TensorList grads;
  make_root_grads(outputs, grad_outputs, "autograd.grad", edges, grads);
  std::unordered_map<Node*, std::vector<Capture>> captures;
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < inputs.size(); ++i) {
    MF_CHECK(inputs[i].defined() && inputs[i].requires_grad(), Error, "autograd.grad: input ", i,
             " does not require grad");
    Edge e = gradient_edge(inputs[i]);
    captures[e.fn.get()].push_back(Capture{e.input_nr, i});
    keep_alive.push_back(e.fn);
  }
  TensorList result = execute(edges, std::move(grads), retain_graph.value_or(create_graph), create_graph,
                              captures, inputs.size());
  for (size_t i = 0; i < result.size(); ++i) {
    MF_CHECK(result[i].defined() || allow_unused, Error, "autograd.grad: input ", i,
             " appears to not have been used in the graph; set allow_unused=True if this is intended");
    if (result[i].defined() && !create_graph) result[i] = result[i].detach();
  }
  return result;
}

// Note [Split backward]
// A pipeline's zero-bubble schedules split a stage's backward in two: the
// gradients of the stage's inputs first (the previous stage waits for
// them), the gradients of its parameters later, in time the schedule would
// otherwise leave idle. backward_input runs the nodes that lead to the
// inputs, each computing only the gradients of its edges towards them
// (OpDef backward formulas honour needs_input_grad, so a matmul computes
// dX but not dW). A node of that part with an edge into the rest of the
// graph is a boundary: its incoming gradients and saved tensors are kept.
// DeferredBackward::run applies the boundary nodes again, now for their
// other edges only, and runs the rest of the graph, accumulating into the
// leaves' .grad as backward() would. Each node's work is done once; the sum
// of the two halves is backward()'s result.
struct DeferredBackward::State {
  std::shared_ptr<Node> root;
  std::vector<std::pair<std::shared_ptr<Node>, TensorList>> boundary;
  std::unordered_map<Node*, std::vector<bool>> masks;
  std::unordered_map<Node*, int> dependencies;
  bool done = false;
};

void DeferredBackward::run() {
  MF_CHECK(state_, Error, "backward_weight: there is no deferred backward to run");
  MF_CHECK(!state_->done, Error, "backward_weight: this deferred backward has already run");
  state_->done = true;
  GradModeRestore restore;
  Pass pass;
  pass.edge_masks = &state_->masks;
  auto seeds = std::move(state_->boundary);
  run_pass(std::move(seeds), true, std::move(state_->dependencies), pass);
  state_.reset();
}

bool DeferredBackward::pending() const { return state_ && !state_->done; }

std::pair<TensorList, DeferredBackward> backward_input(const TensorList& outputs, const TensorList& grad_outputs,
                                                       const TensorList& inputs) {
  GradModeRestore restore;
  std::vector<Edge> edges;
  TensorList grads;
  make_root_grads(outputs, grad_outputs, "backward_input", edges, grads);
  std::unordered_map<Node*, std::vector<Capture>> captures;
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < inputs.size(); ++i) {
    MF_CHECK(inputs[i].defined() && inputs[i].requires_grad(), Error, "backward_input: input ", i,
             " does not require grad");
    Edge e = gradient_edge(inputs[i]);
    captures[e.fn.get()].push_back(Capture{e.input_nr, i});
    keep_alive.push_back(e.fn);
  }
  auto root = std::make_shared<GraphRoot>(edges, std::move(grads));
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> order = post_order(root.get(), dependencies);
  std::unordered_set<Node*> needed = nodes_leading_to(order, captures);

  auto state = std::make_shared<DeferredBackward::State>();
  state->root = root;
  std::unordered_map<Node*, std::vector<bool>> input_masks;
  std::unordered_set<Node*> boundary;
  for (Node* n : order) {
    const auto& next = n->next_edges();
    if (needed.count(n)) {
      std::vector<bool> towards_inputs(next.size()), elsewhere(next.size());
      bool is_boundary = false;
      for (size_t i = 0; i < next.size(); ++i) {
        if (!next[i].fn) continue;
        towards_inputs[i] = needed.count(next[i].fn.get()) > 0;
        elsewhere[i] = !towards_inputs[i];
        is_boundary = is_boundary || elsewhere[i];
      }
      input_masks.emplace(n, std::move(towards_inputs));
      if (is_boundary) {
        boundary.insert(n);
        for (size_t i = 0; i < next.size(); ++i)
          if (elsewhere[i]) state->dependencies[next[i].fn.get()]++;
        state->masks.emplace(n, std::move(elsewhere));
      }
    } else {
      for (const auto& e : next)
        if (e.fn) state->dependencies[e.fn.get()]++;
    }
  }
  TensorList results(inputs.size());
  if (!needed.count(root.get())) {
    // Nothing leads to the inputs: the whole backward is deferred.
    state->boundary.emplace_back(root, TensorList{});
    state->masks.clear();
  } else {
    Pass pass;
    pass.only = &needed;
    pass.edge_masks = &input_masks;
    pass.accumulate = false;
    pass.captures = &captures;
    pass.num_results = inputs.size();
    pass.keep = &boundary;
    pass.kept = [&](const std::shared_ptr<Node>& node, const TensorList& in) {
      state->boundary.emplace_back(node, in);
    };
    std::vector<std::pair<std::shared_ptr<Node>, TensorList>> seeds;
    seeds.emplace_back(root, TensorList{});
    results = run_pass(std::move(seeds), false, std::move(dependencies), pass);
    for (auto& r : results)
      if (r.defined()) r = r.detach();
  }
  DeferredBackward deferred;
  deferred.state_ = std::move(state);
  return {std::move(results), std::move(deferred)};
}

}  // namespace mf::autograd
