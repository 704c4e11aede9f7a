// Optimizers with PyTorch 1.13's semantics: SGD, Adam, AdamW, RMSprop and
// Adagrad, parameter groups, and state dicts of PyTorch's structure.
//
// Note [Optimizer updates are ops]
// Each optimizer's step runs one fused op per parameter ("sgd_update",
// "adam_update", "adamw_update", "rmsprop_update", "adagrad_update";
// functional forms in update.h) under NoGradGuard. The op writes the
// parameter (its input 0, through dispatch::apply_inplace) and the state
// buffers passed after the gradient, in one pass over memory, and bumps the
// version counter of everything it writes. Graph mode traces a step as
// these ops, like any other.
//
// Note [Skipped updates]
// Every update op takes a last, optional input found_inf: a one-element
// float32 tensor such as GradScaler's inf/NaN check. Where it is nonzero
// the kernel returns at once, so the parameter, its state and the step
// counter keep their values, as if step() had not been called (torch's
// fused optimizers take found_inf the same way). The kernel reads the flag,
// so a compiled step skips without a host sync: graph mode with a grad
// scaler (docs/amp.md) gives each update node of a scaled optimizer that
// optimizer's flag. Graph passes see found_inf as an ordinary input, so an
// update is never moved before the unscale that writes its flag. Eagerly,
// a `SkipUpdatesIf` guard gives the flag to every update made on its thread
// that has none, so GradScaler.step needs no host read of it either.
//
// Hyper-parameters live in each group's `options` dict under PyTorch's
// names ("lr", "momentum", "betas", ...), so lr schedulers and the Python
// front end read and write them the way torch.optim does.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshflow/distributed/placement.h"
#include "meshflow/optim/state.h"
#include "meshflow/tensor.h"

namespace mf::optim {

// While alive, the update ops called on this thread without a found_inf of
// their own take `found_inf` (Note [Skipped updates]). Guards nest.
class SkipUpdatesIf {
 public:
  explicit SkipUpdatesIf(Tensor found_inf);
  ~SkipUpdatesIf();
  SkipUpdatesIf(const SkipUpdatesIf&) = delete;
  SkipUpdatesIf& operator=(const SkipUpdatesIf&) = delete;
  // The innermost guard's flag, or null.
  static const Tensor* current();

 private:
  Tensor flag_;
  const Tensor* previous_;
};

struct ParamGroup {
  TensorList params;
  // Hyper-parameters; keys missing when the group is added are filled from
  // the optimizer's defaults.
  StateValue::Dict options;

  double lr() const;
  void set_lr(double lr);
  // A number, a boolean, or a pair of numbers (betas); the wrong kind or a
  // missing key throws naming the key.
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::pair<double, double> get_pair(const std::string& key) const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One optimization step over every parameter that has a gradient.
  virtual void step() = 0;
  // Re-evaluates the loss with closure (grad mode on), then steps; returns
  // the loss.
  Tensor step(const std::function<Tensor()>& closure);
  // Drops every gradient (set_to_none) or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return param_groups_; }
  const std::vector<ParamGroup>& param_groups() const { return param_groups_; }
  // Adds a group; options it leaves out come from defaults().
  void add_param_group(ParamGroup group);
  const StateValue::Dict& defaults() const { return defaults_; }
  // The optimizer's name as in PyTorch ("SGD", "Adam", ...).
  const std::string& name() const { return name_; }

  // Per-parameter state (empty dict until the parameter's first step).
  StateValue::Dict& state(const Tensor& param);
  // Whether param has any state yet.
  bool has_state(const Tensor& param) const;
  // Creates the state of every parameter that has none, as its first step
  // would, so that a traced step (graph mode) updates existing tensors in
  // place. Throws ValueError where a first step cannot start from such state.
  void init_state();

  // Note [ZeRO as layouts]: ZeRO stages 1 and 2 for global parameters, as a
  // change of layouts only. Every state tensor of a parameter with at least
  // min_size elements whose dim 0 splits over mesh axis 0 (the
  // data-parallel axis; at least one row per rank) is laid out S(0) on that
  // axis instead of broadcast, its other axes as the parameter's: each rank
  // keeps the state of its rows. The update's SBP choice then runs on those
  // rows, and the written parameter is gathered back to its own layout
  // (Note [Writing back] in src/distributed/global_interpreter.cpp).
  // Stage 1 keeps each gradient in its parameter's layout (a partial sum
  // is all-reduced); stage 2 accumulates the gradient of such a parameter
  // in the state's layout (GlobalMeta::grad_sbp: a partial sum is
  // reduce-scattered into each rank's rows). Stage 3 also stores such a
  // parameter in the state's layout, with its own as the compute layout
  // (GlobalMeta::compute_sbp): every op reading it gathers it first, in
  // forward and in backward, and its gradient accumulates in its rows;
  // graph mode re-gathers a parameter for backward instead of keeping it
  // from forward (the recompute pass). Existing state is re-laid out
  // now, state made later when the update first reads it; stage 0 turns
  // it off and lays the state (and, after stage 3, the parameters) out as
  // the parameters' own layouts again. Throws
  // ValueError (naming the parameter by its group and index) for a local
  // parameter or one that is not broadcast on mesh axis 0.
  void set_zero(int stage, int64_t min_size);
  int zero_stage() const { return zero_stage_; }

  // {"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}
  // with parameters numbered across groups in order. State tensors are
  // shared, not copied, as in PyTorch.
  StateValue state_dict() const;
  // Loads a state dict of the same structure (copying its tensors, cast to
  // each parameter's dtype). Throws ValueError for a different number of
  // groups or of parameters in a group, ShapeError for state tensors whose
  // shape is not their parameter's.
  void load_state_dict(const StateValue& state_dict);

 protected:
  Optimizer(std::string name, StateValue::Dict defaults);
  // Adds the constructor's groups (called by the most derived constructor,
  // so that validate_group and init_group_state dispatch to it); an empty
  // list throws ValueError.
  void add_initial_groups(std::vector<ParamGroup> groups);
  // The one group of a constructor given a plain parameter list; an empty
  // list throws ValueError naming the optimizer.
  static std::vector<ParamGroup> single_group(const char* optimizer, TensorList params);
  // Checks one group's hyper-parameters (kinds and ranges); throws
  // ValueError / TypeError naming the optimizer and the option.
  virtual void validate_group(const ParamGroup& group) const = 0;
  // Called for the parameters of each newly added group (Adagrad fills its
  // state eagerly, as PyTorch does).
  virtual void init_group_state(ParamGroup& group) {}
  // Fills the empty state of param before its first step (step() and
  // init_state() call it).
  virtual void init_param_state(const ParamGroup& group, const Tensor& param, StateValue::Dict& state) {}
  // The state entry `key` of param as a tensor of param's shape; a missing
  // entry or another shape throws (a loaded state dict may lack it).
  Tensor state_tensor(const Tensor& param, const char* key);
  // A 0-d float32 step counter; loaded numbers are converted.
  Tensor state_step(const Tensor& param);

  std::string name_;

 private:
  void check_new_params(const TensorList& params) const;
  // The layout of param's state tensors (Note [ZeRO as layouts]).
  NdSbp state_layout(const Tensor& param) const;
  // Moves param's state tensors to state_layout(param).
  void lay_out_state(const Tensor& param);

  int zero_stage_ = 0;
  int64_t zero_min_size_ = 0;

  std::vector<ParamGroup> param_groups_;
  StateValue::Dict defaults_;
  std::unordered_map<const TensorImpl*, StateValue::Dict> state_;
};

// --- SGD --------------------------------------------------------------------------

struct SGDOptions {
  // Required (PyTorch has no default): unset, every group must give "lr".
  std::optional<double> lr;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

// State: "momentum_buffer" (a tensor, or None without momentum).
class SGD : public Optimizer {
 public:
  SGD(TensorList params, const SGDOptions& options);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);
  void step() override;
  using Optimizer::step;

 protected:
  void validate_group(const ParamGroup& group) const override;
  void init_param_state(const ParamGroup& group, const Tensor& param, StateValue::Dict& state) override;
};

// --- Adam and AdamW -----------------------------------------------------------------

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  bool amsgrad = false;
  bool maximize = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: param *= 1 - lr * weight_decay
  bool amsgrad = false;
  bool maximize = false;
};

// State: "step" (0-d float32), "exp_avg", "exp_avg_sq", and
// "max_exp_avg_sq" with amsgrad.
class Adam : public Optimizer {
 public:
  Adam(TensorList params, const AdamOptions& options = {});
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {});
  void step() override;
  using Optimizer::step;

 protected:
  Adam(std::string name, StateValue::Dict defaults, bool decoupled);
  void validate_group(const ParamGroup& group) const override;
  void init_param_state(const ParamGroup& group, const Tensor& param, StateValue::Dict& state) override;

 private:
  bool decoupled_weight_decay_;
};

class AdamW : public Adam {
 public:
  AdamW(TensorList params, const AdamWOptions& options = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
};

// --- RMSprop -----------------------------------------------------------------------

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

// State: "step", "square_avg", "momentum_buffer" (momentum > 0) and
// "grad_avg" (centered).
class RMSprop : public Optimizer {
 public:
  RMSprop(TensorList params, const RMSpropOptions& options = {});
  RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& options = {});
  void step() override;
  using Optimizer::step;

 protected:
  void validate_group(const ParamGroup& group) const override;
  void init_param_state(const ParamGroup& group, const Tensor& param, StateValue::Dict& state) override;
};

// --- Adagrad -----------------------------------------------------------------------

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

// State: "step" and "sum", created for every parameter when its group is
// added (as PyTorch does in the constructor).
class Adagrad : public Optimizer {
 public:
  Adagrad(TensorList params, const AdagradOptions& options = {});
  Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& options = {});
  void step() override;
  using Optimizer::step;

 protected:
  void validate_group(const ParamGroup& group) const override;
  void init_group_state(ParamGroup& group) override;
};

}  // namespace mf::optim
