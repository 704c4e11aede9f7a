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
// result. Every rank must be in the placement of every global tensor of
// the trace (a rank outside one would trace another program).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "meshflow/graph/ir.h"

namespace mf::graph {

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
  // A name for the variable made from t (state-dict keys, for printing).
  void name_variable(const Tensor& t, std::string name);
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
  // global leaves out of the trace.
  void enter_global(const OpDef& op, const TensorList& inputs);
  // After it: notes the layouts of the global results on the values of
  // their local tensors (for printing).
  void leave_global(const TensorList& outputs);

 private:
  ValueId value_of(const Tensor& t, const OpDef* op);
  // The newest value with t's storage and layout (kNoValue if none).
  ValueId alias_of(const Tensor& t) const;
  void bind(const Tensor& t, ValueId id);
  void shield_grad(const Tensor& t);

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
  // Optimizer state tensors by memory: (the tensor, which parameter's entry
  // it is).
  std::unordered_map<const StorageImpl*, std::pair<Tensor, StateBinding>> state_of_;
  std::vector<std::pair<Tensor, Tensor>> saved_grads_;  // (tensor, its .grad before the trace)
  uint64_t generator_seed_ = 0, generator_offset_ = 0;
  bool active_ = false;
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
