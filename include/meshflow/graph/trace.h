// The tracer: lazy mode for one thread. While a Tracer lives, every call of
// dispatch::apply / apply_inplace on this thread is recorded as a node of a
// graph IR (ir.h) and returns metadata-only tensors; no kernel runs.
//
// Note [Tracing a train step]
// Graph inputs become stand-ins without data. A tensor with data that a
// traced op reads (a parameter, a buffer, optimizer state, a tensor made in
// build()) becomes a variable, captured by identity and later bound by
// reference, so a run updates the model's own tensors. Autograd runs
// unchanged: its nodes are recorded on the metadata tensors, the engine's
// backward formulas go through dispatch and are traced too, and
// AccumulateGrad leaves metadata gradients in the parameters' .grad, where
// the optimizer's step finds them and records its in-place update nodes.
// Every .grad the trace touches is cleared before and restored after, and
// the default generator's state is restored, so tracing leaves the eager
// model as it was. Optimizer state must exist before the trace
// (add_optimizer creates it): an optimizer that creates it inside step()
// would store metadata tensors in its state.
//
// Note [Tracing global ops]
// An op with a global input is interpreted by the global interpreter also
// while tracing (dispatch.h): it chooses the SBP signature from the inputs'
// metadata exactly as eagerly, boxes the inputs, and applies the local op
// to the local tensors, which are traced stand-ins (or variables: the
// shards of global parameters). Boxing's collectives are ops (Note
// [Communication ops] in src/distributed/comm_ops.h), so what reaches the
// tracer are local ops only: the communication nodes, the slices, copies
// and zero fills of boxing, and the local op with its shard attrs; the
// results are global tensors whose local tensors are traced values. So
// one rank's graph is that rank's part of the program, and every rank's
// graph issues the same collectives in the same order (the passes keep it
// so: OpDef::collective). A global graph input becomes a graph input of
// its local shape that the run fills with the argument's local tensor; a
// global graph output is returned as a global tensor around the local
// result. A global op on a placement without this rank records nothing
// here (its results are global tensors without a local part, as eagerly),
// and a global input or output on such a placement has no value in this
// rank's graph (Graph::absent_inputs, absent_outputs): each rank traces
// the whole program and keeps its part, which is how pipeline stages on
// disjoint placements compile (Note [Pipeline schedules in graph mode] in
// passes.h).
//
// Note [Graph grad scaling]
// With a grad scaling set (OneFlow's set_grad_scaler), a traced train step
// is torch's GradScaler recipe with no host sync:
//   1. backward() seeds the loss gradient with the scale (Note [Loss scaling
//      in backward] in autograd.h): the gradients are those of loss * scale;
//   2. when backward() ends, each optimizer's found_inf (a float32 (1,)
//      variable the graph owns) is zeroed and its parameters' gradients are
//      multiplied by reciprocal(scale) and checked (amp_unscale), so what
//      build() does after backward() (gradient clipping) sees true values;
//   3. every update node of that optimizer's parameters takes its found_inf
//      as the skip input (Note [Skipped updates] in optim/optimizer.h);
//   4. finish() appends amp_update_scale of the scale and growth tracker
//      with the sum of the optimizers' flags.
// The scale and growth tracker are the scaler's own tensors, bound as
// variables, so eager and graph steps can alternate on one scaler.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshflow/autograd.h"
#include "meshflow/graph/ir.h"

namespace mf::amp {
class GradScaler;
}
namespace mf::autograd {
class BackwardObserver;
}

namespace mf::graph {

// A grad scaler's state and factors (Note [Graph grad scaling]).
struct GradScaling {
  Tensor scale;           // float32 (1,)
  Tensor growth_tracker;  // int32 (1,)
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class Tracer {
 public:
  // Enters lazy mode on this thread; throws if a trace is already active.
  Tracer();
  // Leaves lazy mode (if finish() was not called) and restores the state
  // the trace touched.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Placeholders (metadata-only tensors) for graph inputs shaped like these
  // (global for a global example: its local tensor is the graph input).
  TensorList add_inputs(const TensorList& examples);
  // Creates the optimizer's state (optim::Optimizer::init_state), clears
  // its parameters' gradients for the trace, and makes the learning rate
  // of their update nodes follow the parameter groups at run time.
  void add_optimizer(optim::Optimizer& optimizer);
  // Scales the traced step's loss and makes the updates of the optimizers
  // added so far conditional (Note [Graph grad scaling]). Call after
  // add_optimizer and before build()'s backward().
  void set_grad_scaling(GradScaling scaling);
  void set_grad_scaler(amp::GradScaler& scaler);
  // Gradient accumulation under a grad scaler: the backward()s of build()
  // leave the gradients scaled, and unscale_accumulated() (once, after the
  // last micro-batch) unscales and checks them.
  void defer_unscaling();
  void unscale_accumulated();
  // A name for the variable made from t (state-dict keys, for printing).
  void name_variable(const Tensor& t, std::string name);
  // Pipeline tags (Note [Pipeline schedules in graph mode] in passes.h).
  // Nodes recorded from now on belong to this micro-batch (-1: none) and
  // phase; while the autograd engine runs, the phase is Backward and the
  // stage that of the forward that made the running autograd node.
  void set_pipeline_phase(Phase phase, int32_t micro_batch);
  // The forward of pipeline stage `stage` starts or ends (scopes do not nest).
  void enter_stage(int32_t stage);
  void exit_stage();
  // How many optimizer updates of add_optimizer's parameters were traced.
  int64_t num_updates() const;
  // Ends the trace with these graph outputs and returns the graph.
  Graph finish(const TensorList& outputs);
  // Abandons the trace (as the destructor does): leaves lazy mode and
  // restores the state the trace touched.
  void close();

  // The lazy layer of dispatch (dispatch.h) calls these.
  TensorList record(const OpDef& op, const TensorList& inputs, const Attrs& attrs);
  void record_inplace(const OpDef& op, const TensorList& inputs, const Attrs& attrs);
  // Before the global interpreter runs op on these inputs (Note [Tracing
  // global ops]): checks that this rank takes part and keeps the .grad of
  // global leaves out of the trace. The update of a global parameter is
  // recorded as the in-place op on its boxed shard: that node is the
  // parameter's update (learning rate, grad scaler skip).
  void enter_global(const OpDef& op, const TensorList& inputs);
  // After it: notes the layouts of the global results on the values of
  // their local tensors (for printing).
  void leave_global(const TensorList& outputs);
  // Whether autograd's backward pass is running (its ops are being traced).
  bool in_backward() const { return in_backward_; }

 private:
  ValueId value_of(const Tensor& t, const OpDef* op);
  // The newest value with t's storage and layout (kNoValue if none).
  ValueId alias_of(const Tensor& t) const;
  void bind(const Tensor& t, ValueId id);
  void shield_grad(const Tensor& t);
  // The end of a scaled backward(): zero the flags, unscale and check.
  void unscale_gradients();
  void agree_on_found_inf(optim::Optimizer& optimizer, Tensor& found_inf);
  // The found_inf value an update node of optimizer's parameter skips on.
  ValueId skip_input(const OpDef& op, const optim::Optimizer* optimizer);
  PipelineTag pipeline_tag() const;
  class Observer;
  friend class Observer;

  struct Scaling {
    GradScaling state;
    std::vector<std::pair<optim::Optimizer*, Tensor>> found_infs;  // per optimizer
    autograd::LossScaling hook;
    autograd::LossScaling* previous_hook = nullptr;
    bool unscaled = false;
    bool deferred = false;  // defer_unscaling()
  };

  Graph graph_;
  std::unordered_map<const TensorImpl*, ValueId> ids_;
  // Values by storage, oldest first: other handles of a tensor (detach())
  // find theirs by layout.
  std::unordered_map<const StorageImpl*, std::vector<ValueId>> by_storage_;
  // Every tensor seen, kept alive so that no TensorImpl address is reused
  // during the trace.
  TensorList seen_;
  std::unordered_map<const TensorImpl*, std::string> names_;
  std::unordered_map<const TensorImpl*, int32_t> lr_group_of_;
  // While the global interpreter runs the update of a global parameter:
  // the op and the parameter's group.
  const OpDef* global_update_op_ = nullptr;
  int32_t global_update_group_ = -1;
  std::vector<optim::Optimizer*> optimizers_;
  std::unique_ptr<Scaling> scaling_;
  // Optimizer state tensors by memory: (the tensor, which parameter's entry
  // it is).
  std::unordered_map<const StorageImpl*, std::pair<Tensor, StateBinding>> state_of_;
  std::vector<std::pair<Tensor, Tensor>> saved_grads_;  // (tensor, its .grad before the trace)
  uint64_t generator_seed_ = 0, generator_offset_ = 0;
  bool active_ = false;
  // Pipeline tags: the stage scopes' autograd sequence numbers [begin, end)
  // and stages, in order; the context of the nodes recorded now.
  struct StageScope {
    uint64_t begin, end;
    int32_t stage;
  };
  std::vector<StageScope> stage_scopes_;
  int32_t current_stage_ = -1, backward_stage_ = -1, micro_batch_ = -1;
  Phase phase_ = Phase::None;
  bool in_backward_ = false;
  std::unique_ptr<autograd::BackwardObserver> observer_;
  autograd::BackwardObserver* previous_observer_ = nullptr;
};

// The tracer of this thread, or null outside a trace.
Tracer* current_tracer();

// Leaves lazy mode on this thread while it lives: ops run eagerly (on
// metadata that must be exchanged while tracing, such as the local shapes
// to_global gathers, or on state created before the trace).
class SuspendTracing {
 public:
  SuspendTracing();
  ~SuspendTracing();
  SuspendTracing(const SuspendTracing&) = delete;
  SuspendTracing& operator=(const SuspendTracing&) = delete;

 private:
  Tracer* suspended_;
};
inline bool is_tracing() { return current_tracer() != nullptr; }

// Throws mf::Error "<what> is not traceable in graph mode: ..." when a
// trace is active and t has no data: the values of a traced tensor exist
// only when the compiled graph runs. Call where host code reads values.
void check_traceable(const Tensor& t, const char* what);

}  // namespace mf::graph
