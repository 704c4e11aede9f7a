// Reverse-mode autograd: graph nodes, saved tensors, grad mode and the engine.
// Autograd is a layer of dispatch (see dispatch.h): every differentiable op
// records a Node whose backward is written with ops, so gradients of
// gradients (create_graph) work unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/tensor.h"

namespace mf {

class Node;

// Where a gradient flows: input `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves only
  // Tensor hooks of a leaf (non-leaf hooks live on grad_fn, per output).
  std::vector<std::pair<int, TensorHook>> hooks;
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_hooks;
};

// What backward needs to know about a forward input or output.
struct TensorMeta {
  Shape sizes;
  DType dtype = DType::Float32;
  Device device;
};

// Note [Saved tensor hooks]
// While hooks are installed on a thread (innermost only, as PyTorch's
// torch.autograd.graph.saved_tensors_hooks), every tensor an autograd node
// saves for backward goes through pack(), and the node keeps what pack
// returns instead of the tensor; backward gets the tensor back from
// unpack(), which must return one of the saved shape and dtype. An op's own
// output reaches pack() detached (keeping it would be a reference cycle
// through the node). Activation checkpointing (meshflow.utils.checkpoint)
// is built on them: its pack keeps nothing, its unpack recomputes.
struct SavedTensorHooks {
  std::function<std::shared_ptr<void>(const Tensor&)> pack;
  std::function<Tensor(const std::shared_ptr<void>&)> unpack;
};

// A tensor kept for backward. It remembers the version of its storage when
// saved, so a later in-place write is reported instead of silently giving a
// wrong gradient. An op's own output is saved without its grad_fn (that
// would be a reference cycle) and re-linked to the node on unpack. Under
// saved tensor hooks it keeps the packed value instead, and the gradient
// edge of the tensor, so a backward with create_graph still reaches it.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output_of_node);
  Tensor unpack(const std::shared_ptr<Node>& node, const char* op_name, int index) const;
  bool defined() const { return data_.defined() || hooks_ != nullptr; }
  void reset();

 private:
  Tensor relinked(Tensor t, const std::shared_ptr<Node>& node) const;

  Tensor data_;
  uint32_t version_ = 0;
  bool is_output_ = false;
  bool requires_grad_ = false;
  uint32_t output_nr_ = 0;
  // Under hooks (Note [Saved tensor hooks]).
  std::shared_ptr<const SavedTensorHooks> hooks_;
  std::shared_ptr<void> packed_;
  TensorMeta meta_;
  Edge edge_;  // where the saved input's gradient flows (inputs that require grad)
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  // Gradients w.r.t. this node's forward outputs in, gradients w.r.t. its
  // forward inputs out (one per next edge; undefined = no gradient).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors after a backward without retain_graph.
  virtual void release_variables() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<Edge>& mutable_next_edges() { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  // Forward-output metadata, used to zero-fill missing gradients.
  std::vector<TensorMeta>& output_metas() { return output_metas_; }
  size_t num_outputs() const { return output_metas_.size(); }
  // Sets next_edges_ (an edge per input that requires grad) and each
  // input's metadata (undefined inputs: no edge, empty metadata).
  void record_input_edges(const TensorList& inputs, std::vector<TensorMeta>& metas);

  // Hooks on the gradient of forward output `output_nr`, run before apply().
  int add_tensor_hook(uint32_t output_nr, TensorHook hook);
  void remove_tensor_hook(int handle);
  // Runs the hooks of output_nr on grad; returns the (possibly replaced) grad.
  Tensor run_tensor_hooks(uint32_t output_nr, Tensor grad) const;
  bool has_tensor_hooks() const { return !tensor_hooks_.empty(); }

 protected:
  std::vector<Edge> next_edges_;
  std::vector<TensorMeta> output_metas_;

 private:
  uint64_t sequence_nr_;
  std::vector<std::tuple<int, uint32_t, TensorHook>> tensor_hooks_;
};

// Accumulates gradients into a leaf's .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> variable);
  TensorList apply(TensorList&& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& variable() const { return variable_; }

 private:
  std::shared_ptr<TensorImpl> variable_;
};

// A fresh handle for a tensor hook.
int next_hook_handle();

// The edge a gradient for t should flow into (grad_fn or the accumulator).
Edge gradient_edge(const Tensor& t);

// Records t as forward output `output_nr` of node (its grad_fn).
void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr);

// --- grad mode ----------------------------------------------------------------
class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: gradients off (no_grad) or on (enable_grad) in a scope.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

namespace autograd {

// Accumulates d(sum(outputs[i] * grad_outputs[i]))/d(leaf) into each leaf's
// .grad. An undefined grad_output is allowed for a one-element output.
void backward(const TensorList& outputs, const TensorList& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// Runs fn when the backward pass running on this thread finishes (after
// its last node), or throws; fn runs once. Outside a backward pass it
// throws Error. DistributedDataParallel waits for its reductions there.
void queue_callback(std::function<void()> fn);

// Note [Loss scaling in backward]
// Graph mode with a grad scaler (graph/trace.h) scales the loss where
// OneFlow does: while a LossScaling is installed on this thread, backward()
// multiplies each root gradient (ones for a scalar loss) by `scale`, which
// gives the gradients of loss * scale bit for bit, and calls `finish` after
// the pass (the graph unscales the gradients there). autograd::grad() is
// not scaled.
struct LossScaling {
  Tensor scale;  // a one-element float32 tensor
  std::function<void()> finish;
};
// Installs scaling (nullptr: none) for this thread; returns the previous one.
LossScaling* set_loss_scaling(LossScaling* scaling);

// Returns the gradients of outputs w.r.t. inputs without touching .grad.
// retain_graph defaults to create_graph, as in PyTorch.
TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs = {}, std::optional<bool> retain_graph = {},
                bool create_graph = false, bool allow_unused = false);

// A split backward (Note [Split backward] in src/autograd/engine.cpp), for
// pipeline schedules that compute parameter gradients later than input
// gradients. backward_input returns the gradients of `inputs` (leaves that
// require grad) without touching any .grad, and a DeferredBackward whose
// run() then accumulates every other leaf's gradient into its .grad, as
// one backward(outputs, grad_outputs) would have done.
class DeferredBackward {
 public:
  void run();
  // run() has not been called yet.
  bool pending() const;
  struct State;

 private:
  std::shared_ptr<State> state_;
  friend std::pair<TensorList, DeferredBackward> backward_input(const TensorList&, const TensorList&,
                                                                const TensorList&);
};
std::pair<TensorList, DeferredBackward> backward_input(const TensorList& outputs, const TensorList& grad_outputs,
                                                       const TensorList& inputs);

// Installs saved tensor hooks on this thread until the guard ends (Note
// [Saved tensor hooks]); nested guards stack, the innermost applies.
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(std::shared_ptr<const SavedTensorHooks> hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};
// The same as two calls, for bindings whose scopes are not C++ scopes.
void push_saved_tensor_hooks(std::shared_ptr<const SavedTensorHooks> hooks);
void pop_saved_tensor_hooks();

// While a guard lives on this thread, a forward is being recomputed for
// backward (activation checkpointing): ops that update state as a side
// effect of a training forward (batch_norm's running statistics) do not
// update it a second time.
class RecomputationGuard {
 public:
  RecomputationGuard();
  ~RecomputationGuard();
  RecomputationGuard(const RecomputationGuard&) = delete;
  RecomputationGuard& operator=(const RecomputationGuard&) = delete;

 private:
  bool prev_;
};
bool in_recomputation();

// Note [Custom functions]
// A differentiable function whose backward is a callable rather than ops'
// formulas: Python's meshflow.autograd.Function, and C++ code with a
// hand-written gradient. The forward has run already (without recording:
// its outputs have no grad_fn); link() connects its outputs to a node on
// its inputs whose apply() calls `backward`.
struct CustomFunction {
  std::string name;  // the node's name, "<Function>Backward"
  // Gradients for the inputs (one per input; undefined: none) from the
  // gradients of the outputs (zeros for unused ones while materialize_grads)
  // and the saved tensors unpacked. needs_input_grad[i]: input i wants one.
  std::function<TensorList(const TensorList& grad_outputs, const std::vector<bool>& needs_input_grad,
                           const TensorList& saved)>
      backward;
  TensorList saved;  // save_for_backward: inputs, outputs or other tensors
  std::vector<bool> non_differentiable;  // per output (absent: differentiable)
  bool materialize_grads = true;
};
// Returns the outputs as the graph sees them: floating outputs not marked
// non-differentiable require grad, with the function's node as grad_fn
// (an output that is one of the inputs comes back as a new alias of it).
// Without grad mode or an input that requires grad, the outputs unchanged.
TensorList link(CustomFunction fn, const TensorList& inputs, const TensorList& outputs);

// Note [Activation checkpointing]
// checkpoint(fn, inputs) runs fn(inputs) with saved tensor hooks that keep
// none of the tensors its ops save for backward, only their shapes and
// dtypes. The first of them that backward unpacks recomputes fn on the
// same inputs (detached, requires_grad as they were) under the state of
// the first run: the default generator's Philox seed and offset (so
// dropout draws the same masks), autocast's state, grad mode on and a
// RecomputationGuard (no second update of running statistics). The
// recomputation's saves, in the same order as the first run's, are then
// handed out one by one and dropped when used. A recomputation that saves
// other shapes or dtypes, or a different number of tensors, or inputs
// written in place since the forward, throw CheckpointError.
struct CheckpointOptions {
  bool preserve_rng_state = true;
  bool determinism_check = true;  // compare the recomputation's shapes and dtypes
};
TensorList checkpoint(std::function<TensorList(const TensorList&)> fn, const TensorList& inputs,
                      const CheckpointOptions& options = {});

// Internal (for Node implementations): while the engine applies a node,
// the edges whose gradients the running pass needs (null: every valid
// edge). OpNode passes it to the backward formula as needs_input_grad.
const std::vector<bool>* current_edge_mask();

}  // namespace autograd
}  // namespace mf
