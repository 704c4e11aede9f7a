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

// SGDR: eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2,
// where T_cur restarts at 0 after T_i epochs and T_i grows by T_mult at
// each restart. step(epoch) takes fractional epochs (epoch + batch / batches).
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1, double eta_min = 0.0,
                              int64_t last_epoch = -1);
  void step() override;
  void step(int64_t epoch) override { step_to(double(epoch)); }
  void step_to(double epoch);
  // Adds "T_0", "T_i", "T_mult", "eta_min" and "T_cur".
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t T_0_, T_mult_;
  double T_i_, T_cur_, eta_min_;
};

struct CyclicLROptions {
  std::vector<double> base_lr;  // one value for every group, or one per group
  std::vector<double> max_lr;
  double step_size_up = 2000;
  std::optional<double> step_size_down;  // step_size_up when unset
  std::string mode = "triangular";       // "triangular", "triangular2" or "exp_range"
  double gamma = 1.0;
  // A custom amplitude scale (replaces mode), of the cycle number
  // (scale_mode "cycle") or of the iteration ("iterations").
  std::function<double(double)> scale_fn;
  std::string scale_mode = "cycle";
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.8};
  std::vector<double> max_momentum = {0.9};
  int64_t last_epoch = -1;
};

// The cyclical learning rate policy: the lr goes from base_lr up to max_lr
// in step_size_up iterations and back in step_size_down, the amplitude
// scaled per cycle (triangular2: halved each cycle) or per iteration
// (exp_range: gamma^iteration); momentum cycles the other way.
class CyclicLR : public LRScheduler {
 public:
  CyclicLR(Optimizer& optimizer, const CyclicLROptions& options);
  // Adds "max_lrs", "total_size", "step_ratio", "mode", "gamma",
  // "scale_mode", "cycle_momentum" and the momenta (not a custom scale_fn).
  StateValue state_dict() const override;
  void load_state_dict(const StateValue& state_dict) override;

 protected:
  std::vector<double> get_lr() override;

 private:
  double scale(double x) const;

  std::vector<double> max_lrs_, base_momentums_, max_momentums_;
  double total_size_, step_ratio_, gamma_;
  std::string mode_, scale_mode_;
  std::function<double(double)> scale_fn_;
  bool cycle_momentum_;
};

// Multiplies each group's lr by factor (not below its min_lr) once the
// metric passed to step() has not improved for more than patience epochs,
// then waits cooldown epochs. Not an LRScheduler: it steps on a metric.
class ReduceLROnPlateau {
 public:
  struct Options {
    std::string mode = "min";  // "min" or "max"
    double factor = 0.1;
    int64_t patience = 10;
    double threshold = 1e-4;
    std::string threshold_mode = "rel";  // "rel" or "abs"
    int64_t cooldown = 0;
    std::vector<double> min_lr = {0.0};  // one value for every group, or one per group
    double eps = 1e-8;
  };
  ReduceLROnPlateau(Optimizer& optimizer, const Options& options);
  void step(double metric, std::optional<int64_t> epoch = std::nullopt);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  Optimizer& optimizer() const { return optimizer_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }
  bool is_better(double a, double best) const;
  // PyTorch's __dict__ without the optimizer: "factor", "min_lrs",
  // "patience", "cooldown", "cooldown_counter", "mode", "threshold",
  // "threshold_mode", "best", "num_bad_epochs", "mode_worse", "eps",
  // "last_epoch", "_last_lr" (and "verbose": false).
  StateValue state_dict() const;
  void load_state_dict(const StateValue& state_dict);

 private:
  Optimizer& optimizer_;
  Options o_;
  std::vector<double> min_lrs_, last_lr_;
  double best_, mode_worse_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

// Steps every scheduler at each step() (their factors compose); all must
// drive the same optimizer.
class ChainedScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers);
  void step();
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  Optimizer& optimizer() const { return schedulers_.front()->optimizer(); }
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }
  // "_last_lr" and "_schedulers" (their state dicts).
  StateValue state_dict() const;
  void load_state_dict(const StateValue& state_dict);

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<double> last_lr_;
};

}  // namespace mf::optim
