// The backward engine: runs the graph below the given outputs in reverse
// topological order, summing gradients that meet at a node.
#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "meshflow/autocast.h"
#include "meshflow/autograd.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf::autograd {
namespace {

// The synthetic node whose edges are the roots of one backward call.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> edges, TensorList grads) : grads_(std::move(grads)) {
    next_edges_ = std::move(edges);
  }
  TensorList apply(TensorList&&) override { return std::move(grads_); }
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

// Runs the graph. With captures (autograd::grad), the gradients arriving at
// the captured (node, input) pairs are returned and leaves are not touched.
TensorList execute(const std::vector<Edge>& root_edges, TensorList root_grads, bool retain_graph,
                   bool create_graph, const std::unordered_map<Node*, std::vector<Capture>>& captures,
                   size_t num_results) {
  // Backward ops run in the dtypes their forward ops ran in, not autocast's
  // (Note [Autocast] in autocast.h).
  std::optional<AutocastGuard> no_autocast_cpu, no_autocast_cuda;
  if (autocast::any_enabled()) {
    no_autocast_cpu.emplace(DeviceType::CPU, std::nullopt, false);
    no_autocast_cuda.emplace(DeviceType::CUDA, std::nullopt, false);
  }
  const bool capture_mode = num_results > 0 || !captures.empty();
  CallbackScope callbacks;
  auto root = std::make_shared<GraphRoot>(root_edges, std::move(root_grads));
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> order = post_order(root.get(), dependencies);

  std::unordered_set<Node*> needed;
  if (capture_mode) {
    for (Node* n : order) {
      bool need = captures.count(n) > 0;
      for (const auto& e : n->next_edges()) need = need || (e.fn && needed.count(e.fn.get()));
      if (need) needed.insert(n);
    }
  }

  TensorList results(num_results);
  std::unordered_map<Node*, TensorList> buffers;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, CompareSeq> ready;
  ready.push(root);
  GradMode::set_enabled(create_graph);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    TensorList inputs;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      inputs = std::move(it->second);
      buffers.erase(it);
    }
    inputs.resize(node->num_outputs());
    bool any_defined = node.get() == root.get();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (node->has_tensor_hooks()) inputs[i] = node->run_tensor_hooks(uint32_t(i), inputs[i]);
      any_defined = any_defined || inputs[i].defined();
    }
    if (auto it = captures.find(node.get()); it != captures.end())
      for (const Capture& c : it->second) results[c.result_index] = inputs[c.input_nr];

    TensorList outputs;
    bool run = any_defined && (!capture_mode || needed.count(node.get()));
    if (capture_mode && dynamic_cast<AccumulateGrad*>(node.get())) run = false;
    if (run) {
      outputs = node->apply(std::move(inputs));
      if (!retain_graph) node->release_variables();
    }
    outputs.resize(node->next_edges().size());

    for (size_t i = 0; i < node->next_edges().size(); ++i) {
      const Edge& edge = node->next_edges()[i];
      if (!edge.fn) continue;
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
  return results;
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

void queue_callback(std::function<void()> fn) {
  MF_CHECK(!callback_stack.empty(), Error, "queue_callback: no backward pass is running on this thread");
  callback_stack.back().push_back(std::move(fn));
}

LossScaling* set_loss_scaling(LossScaling* scaling) { return std::exchange(tls_loss_scaling, scaling); }

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

}  // namespace mf::autograd
