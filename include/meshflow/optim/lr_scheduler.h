// Learning-rate schedulers with PyTorch 1.13's semantics
// (torch.optim.lr_scheduler).
//
// Note [Chainable and closed-form schedules]
// step() uses each scheduler's chainable form: the new lr is computed from
// the group's current lr, so schedulers applied to the same optimizer
// compose (their factors multiply). step(epoch) jumps to an epoch and uses
// the closed form (a function of the base lr and the epoch) where PyTorch
// has one, the chainable form otherwise. A scheduler steps once when it is
// constructed (last_epoch becomes 0), as in PyTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/optim/optimizer.h"

namespace mf::optim {

// A scheduler keeps a reference to its optimizer, which must outlive it.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual void step();
  virtual void step(int64_t epoch);
  // The lrs the last step set, one per param group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  // PyTorch's scheduler __dict__ without the optimizer: "base_lrs",
  // "last_epoch", "_step_count", "_last_lr" and the scheduler's own
  // hyper-parameters under their PyTorch names.
  virtual StateValue state_dict() const;
  // Restores the keys state_dict() writes; keys it does not know are
  // ignored, values of the wrong kind throw TypeError.
  virtual void load_state_dict(const StateValue& state_dict);

 protected:
  // Records "initial_lr" in each group (last_epoch == -1) or requires it
  // (resuming); the most derived constructor then calls initial_step().
  LRScheduler(Optimizer& optimizer, int64_t last_epoch, std::string name);
  void initial_step();
  // The chainable form at last_epoch_.
  virtual std::vector<double> get_lr() = 0;
  // The closed form at last_epoch_, where one exists.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  // Current lr of each group.
  std::vector<double> group_lrs() const;
  void apply_lrs(const std::vector<double>& lrs);

  // SequentialLR rewinds and restarts the schedulers it runs.
  friend class SequentialLR;

  Optimizer& optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;
};

// lr * gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr * gamma at each milestone (a milestone listed twice applies twice).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1, int64_t last_epoch = -1);
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted, with repeats
  double gamma_;
};

// lr * gamma every epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch = -1);
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 in its
// chainable (SGDR) form, which keeps cycling past T_max.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0, int64_t last_epoch = -1);
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// base_lr * lr_lambda(epoch), one function for all groups or one per group.
// The functions are not part of the state dict ("lr_lambdas" holds None for
// each, as PyTorch does for plain functions).
class LambdaLR : public LRScheduler {
 public:
  using LambdaFn = std::function<double(int64_t epoch)>;
  LambdaLR(Optimizer& optimizer, LambdaFn lr_lambda, int64_t last_epoch = -1);
  LambdaLR(Optimizer& optimizer, std::vector<LambdaFn> lr_lambdas, int64_t last_epoch = -1);
  StateValue state_dict() const override;

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<LambdaFn> lr_lambdas_;
};

// The factor goes linearly from start_factor to end_factor over total_iters
// epochs, then stays.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5,
           int64_t last_epoch = -1);
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// Runs schedulers[i] from milestones[i - 1] on; a scheduler that takes over
// restarts at epoch 0. Every scheduler must drive `optimizer`.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones, int64_t last_epoch = -1);
  void step() override;
  // SequentialLR has no epoch form (as in PyTorch); throws ValueError.
  void step(int64_t epoch) override;
  // "_milestones", "last_epoch", "_last_lr" and "_schedulers" (the state
  // dicts of the schedulers).
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }

 protected:
  std::vector<double> get_lr() override;

 private:
  // Index of the scheduler in charge at last_epoch_.
  size_t current() const;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct OneCycleLROptions {
  // One value for every group, or one per group.
  std::vector<double> max_lr;
  // total_steps, or epochs and steps_per_epoch.
  std::optional<int64_t> total_steps;
  std::optional<int64_t> epochs;
  std::optional<int64_t> steps_per_epoch;
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  // Cycles the momentum of SGD-like optimizers ("momentum") or Adam's
  // beta1 ("betas") inversely to the lr.
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85};
  std::vector<double> max_momentum = {0.95};
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  int64_t last_epoch = -1;
};

// The 1cycle policy: lr rises from max_lr / div_factor to max_lr over
// pct_start of the steps, then anneals to initial_lr / final_div_factor
// (three_phase: back to the initial lr first, then down).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    std::string start_lr, end_lr, start_momentum, end_momentum;  // param group keys
  };
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  std::vector<Phase> phases_;
  std::string anneal_strategy_;
  bool cycle_momentum_;
  bool use_beta1_ = false;
};

}  // namespace mf::optim
