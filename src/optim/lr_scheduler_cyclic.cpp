// CosineAnnealingWarmRestarts, CyclicLR, ReduceLROnPlateau and
// ChainedScheduler (PyTorch 1.13, torch/optim/lr_scheduler.py).
#include <cmath>
#include <limits>
#include <numbers>

#include "meshflow/optim/lr_scheduler.h"
#include "optim/lr_scheduler_common.h"

namespace mf::optim {

using detail::to_list;

namespace {

// One value per group: a single value is repeated (PyTorch's _format_param).
std::vector<double> per_group(const char* where, const char* name, const std::vector<double>& values, size_t groups) {
  MF_CHECK(values.size() == 1 || values.size() == groups, ValueError, where, ": expected ", groups, " values for ",
           name, ", got ", values.size());
  return values.size() == 1 ? std::vector<double>(groups, values[0]) : values;
}

Optimizer& check_restarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult) {
  MF_CHECK(T_0 > 0, ValueError, "CosineAnnealingWarmRestarts: expected positive integer T_0, but got ", T_0);
  MF_CHECK(T_mult >= 1, ValueError, "CosineAnnealingWarmRestarts: expected integer T_mult >= 1, but got ", T_mult);
  return optimizer;
}

}  // namespace

// --- CosineAnnealingWarmRestarts -------------------------------------------------------

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult,
                                                         double eta_min, int64_t last_epoch)
    : LRScheduler(check_restarts(optimizer, T_0, T_mult), last_epoch, "CosineAnnealingWarmRestarts"),
      T_0_(T_0),
      T_mult_(T_mult),
      T_i_(double(T_0)),
      T_cur_(double(last_epoch)),
      eta_min_(eta_min) {
  initial_step();
}

std::vector<double> CosineAnnealingWarmRestarts::get_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(std::numbers::pi * T_cur_ / T_i_)) / 2);
  return lrs;
}

// PyTorch's step() does not count steps for this scheduler (_step_count stays 0).
void CosineAnnealingWarmRestarts::step() {
  if (last_epoch_ < 0) {
    step_to(0);
    return;
  }
  T_cur_ += 1;
  if (T_cur_ >= T_i_) {
    T_cur_ -= T_i_;
    T_i_ *= double(T_mult_);
  }
  last_epoch_ += 1;
  apply_lrs(get_lr());
}

void CosineAnnealingWarmRestarts::step_to(double epoch) {
  MF_CHECK(epoch >= 0, ValueError, "CosineAnnealingWarmRestarts: expected non-negative epoch, but got ", epoch);
  const double T_0 = double(T_0_);
  if (epoch >= T_0) {
    if (T_mult_ == 1) {
      T_cur_ = std::fmod(epoch, T_0);
    } else {
      const double m = double(T_mult_);
      const double n = std::floor(std::log(epoch / T_0 * (m - 1) + 1) / std::log(m));
      T_cur_ = epoch - T_0 * (std::pow(m, n) - 1) / (m - 1);
      T_i_ = T_0 * std::pow(m, n);
    }
  } else {
    T_i_ = T_0;
    T_cur_ = epoch;
  }
  last_epoch_ = int64_t(std::floor(epoch));
  apply_lrs(get_lr());
}

StateValue CosineAnnealingWarmRestarts::state_dict() const {
  StateValue d = LRScheduler::state_dict();
  d["T_0"] = T_0_;
  d["T_i"] = T_i_;
  d["T_mult"] = T_mult_;
  d["eta_min"] = eta_min_;
  d["T_cur"] = T_cur_;
  return d;
}

void CosineAnnealingWarmRestarts::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  int64_t T_0 = T_0_, T_mult = T_mult_;
  double T_i = T_i_, T_cur = T_cur_, eta_min = eta_min_;
  r.read_int("T_0", T_0);
  r.read_int("T_mult", T_mult);
  r.read_double("T_i", T_i);
  r.read_double("T_cur", T_cur);
  r.read_double("eta_min", eta_min);
  check_restarts(optimizer_, T_0, T_mult);
  LRScheduler::load_state_dict(state_dict);
  T_0_ = T_0, T_mult_ = T_mult, T_i_ = T_i, T_cur_ = T_cur, eta_min_ = eta_min;
}

// --- CyclicLR ----------------------------------------------------------------------------

namespace {

// Checks the options, then sets the groups' lr (and momentum) to the
// cycle's start before the base constructor records them, as PyTorch does.
Optimizer& prepare_cyclic(Optimizer& optimizer, const CyclicLROptions& o) {
  auto& groups = optimizer.param_groups();
  const std::vector<double> base_lrs = per_group("CyclicLR", "base_lr", o.base_lr, groups.size());
  per_group("CyclicLR", "max_lr", o.max_lr, groups.size());
  MF_CHECK(o.step_size_up > 0 && (!o.step_size_down || *o.step_size_down >= 0), ValueError,
           "CyclicLR: step_size_up must be positive and step_size_down non-negative");
  MF_CHECK(o.scale_fn || o.mode == "triangular" || o.mode == "triangular2" || o.mode == "exp_range", ValueError,
           "CyclicLR: mode is invalid and scale_fn is None (mode '", o.mode, "')");
  MF_CHECK(!o.scale_fn || o.scale_mode == "cycle" || o.scale_mode == "iterations", ValueError,
           "CyclicLR: scale_mode must be 'cycle' or 'iterations', got '", o.scale_mode, "'");
  std::vector<double> base_momenta;
  if (o.cycle_momentum) {
    MF_CHECK(optimizer.defaults().contains("momentum"), ValueError, "CyclicLR: optimizer ", optimizer.name(),
             " must support momentum with `cycle_momentum` option enabled");
    base_momenta = per_group("CyclicLR", "base_momentum", o.base_momentum, groups.size());
    per_group("CyclicLR", "max_momentum", o.max_momentum, groups.size());
  }
  if (o.last_epoch == -1) {
    for (size_t i = 0; i < groups.size(); ++i) {
      groups[i].set_lr(base_lrs[i]);
      if (o.cycle_momentum) groups[i].options["momentum"] = base_momenta[i];
    }
  }
  return optimizer;
}

}  // namespace

CyclicLR::CyclicLR(Optimizer& optimizer, const CyclicLROptions& o)
    : LRScheduler(prepare_cyclic(optimizer, o), o.last_epoch, "CyclicLR"),
      max_lrs_(per_group("CyclicLR", "max_lr", o.max_lr, optimizer.param_groups().size())),
      total_size_(o.step_size_up + o.step_size_down.value_or(o.step_size_up)),
      step_ratio_(o.step_size_up / total_size_),
      gamma_(o.gamma),
      mode_(o.mode),
      scale_mode_(o.scale_fn ? o.scale_mode : (o.mode == "exp_range" ? "iterations" : "cycle")),
      scale_fn_(o.scale_fn),
      cycle_momentum_(o.cycle_momentum) {
  base_lrs_ = per_group("CyclicLR", "base_lr", o.base_lr, optimizer.param_groups().size());
  if (cycle_momentum_) {
    for (const auto& group : optimizer.param_groups()) base_momentums_.push_back(group.get_double("momentum"));
    max_momentums_ = per_group("CyclicLR", "max_momentum", o.max_momentum, optimizer.param_groups().size());
  }
  initial_step();
}

double CyclicLR::scale(double x) const {
  if (scale_fn_) return scale_fn_(x);
  if (mode_ == "triangular") return 1.0;
  if (mode_ == "triangular2") return 1.0 / std::pow(2.0, x - 1);
  return std::pow(gamma_, x);  // exp_range
}

std::vector<double> CyclicLR::get_lr() {
  const double epoch = double(last_epoch_);
  const double cycle = std::floor(1 + epoch / total_size_);
  const double x = 1.0 + epoch / total_size_ - cycle;
  const double scale_factor = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  const double s = scale(scale_mode_ == "cycle" ? cycle : epoch);
  std::vector<double> lrs;
  for (size_t i = 0; i < base_lrs_.size(); ++i) lrs.push_back(base_lrs_[i] + (max_lrs_[i] - base_lrs_[i]) * scale_factor * s);
  if (cycle_momentum_) {
    auto& groups = optimizer_.param_groups();
    for (size_t i = 0; i < groups.size() && i < base_momentums_.size(); ++i)
      groups[i].options["momentum"] = max_momentums_[i] - (max_momentums_[i] - base_momentums_[i]) * scale_factor * s;
  }
  return lrs;
}

StateValue CyclicLR::state_dict() const {
  StateValue d = LRScheduler::state_dict();
  d["max_lrs"] = to_list(max_lrs_);
  d["total_size"] = total_size_;
  d["step_ratio"] = step_ratio_;
  d["mode"] = mode_;
  d["gamma"] = gamma_;
  d["scale_mode"] = scale_mode_;
  d["cycle_momentum"] = cycle_momentum_;
  if (cycle_momentum_) {
    d["base_momentums"] = to_list(base_momentums_);
    d["max_momentums"] = to_list(max_momentums_);
  }
  return d;
}

void CyclicLR::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  std::vector<double> max_lrs = max_lrs_, base_m = base_momentums_, max_m = max_momentums_;
  double total = total_size_, ratio = step_ratio_, gamma = gamma_;
  std::string mode = mode_, scale_mode = scale_mode_;
  r.read_doubles("max_lrs", max_lrs);
  r.read_double("total_size", total);
  r.read_double("step_ratio", ratio);
  r.read_double("gamma", gamma);
  r.read_string("mode", mode);
  r.read_string("scale_mode", scale_mode);
  r.read_doubles("base_momentums", base_m);
  r.read_doubles("max_momentums", max_m);
  MF_CHECK(total > 0 && ratio > 0 && ratio <= 1, ValueError, "CyclicLR.load_state_dict: total_size ", total,
           " and step_ratio ", ratio, " do not describe a cycle");
  LRScheduler::load_state_dict(state_dict);
  max_lrs_ = std::move(max_lrs), base_momentums_ = std::move(base_m), max_momentums_ = std::move(max_m);
  total_size_ = total, step_ratio_ = ratio, gamma_ = gamma, mode_ = std::move(mode), scale_mode_ = std::move(scale_mode);
}

// --- ReduceLROnPlateau --------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const Options& options)
    : optimizer_(optimizer), o_(options) {
  MF_CHECK(o_.factor < 1.0, ValueError, "ReduceLROnPlateau: factor should be < 1.0, got ", o_.factor);
  MF_CHECK(o_.mode == "min" || o_.mode == "max", ValueError, "ReduceLROnPlateau: mode ", o_.mode, " is unknown!");
  MF_CHECK(o_.threshold_mode == "rel" || o_.threshold_mode == "abs", ValueError,
           "ReduceLROnPlateau: threshold mode ", o_.threshold_mode, " is unknown!");
  min_lrs_ = per_group("ReduceLROnPlateau", "min_lr", o_.min_lr, optimizer.param_groups().size());
  mode_worse_ = o_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  best_ = mode_worse_;
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  if (o_.mode == "min") return o_.threshold_mode == "rel" ? a < best * (1.0 - o_.threshold) : a < best - o_.threshold;
  return o_.threshold_mode == "rel" ? a > best * (o_.threshold + 1.0) : a > best + o_.threshold;
}

void ReduceLROnPlateau::step(double metric, std::optional<int64_t> epoch) {
  last_epoch_ = epoch.value_or(last_epoch_ + 1);
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (in_cooldown()) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > o_.patience) {
    auto& groups = optimizer_.param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].lr(), new_lr = std::max(old_lr * o_.factor, min_lrs_[i]);
      if (old_lr - new_lr > o_.eps) groups[i].set_lr(new_lr);
    }
    cooldown_counter_ = o_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const auto& group : optimizer_.param_groups()) last_lr_.push_back(group.lr());
}

StateValue ReduceLROnPlateau::state_dict() const {
  return StateValue::Dict{{"factor", o_.factor},
                          {"min_lrs", to_list(min_lrs_)},
                          {"patience", o_.patience},
                          {"verbose", false},
                          {"cooldown", o_.cooldown},
                          {"cooldown_counter", cooldown_counter_},
                          {"mode", o_.mode},
                          {"threshold", o_.threshold},
                          {"threshold_mode", o_.threshold_mode},
                          {"best", best_},
                          {"num_bad_epochs", num_bad_epochs_},
                          {"mode_worse", mode_worse_},
                          {"eps", o_.eps},
                          {"last_epoch", last_epoch_},
                          {"_last_lr", to_list(last_lr_)}};
}

void ReduceLROnPlateau::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r("ReduceLROnPlateau", state_dict);
  Options o = o_;
  std::vector<double> min_lrs = min_lrs_, last_lr = last_lr_;
  double best = best_;
  int64_t bad = num_bad_epochs_, cooldown_counter = cooldown_counter_, last_epoch = last_epoch_;
  r.read_double("factor", o.factor);
  r.read_doubles("min_lrs", min_lrs);
  r.read_int("patience", o.patience);
  r.read_int("cooldown", o.cooldown);
  r.read_int("cooldown_counter", cooldown_counter);
  r.read_string("mode", o.mode);
  r.read_double("threshold", o.threshold);
  r.read_string("threshold_mode", o.threshold_mode);
  r.read_double("best", best);
  r.read_int("num_bad_epochs", bad);
  r.read_double("eps", o.eps);
  r.read_int("last_epoch", last_epoch);
  r.read_doubles("_last_lr", last_lr);
  ReduceLROnPlateau checked(optimizer_, Options{o.mode, o.factor, o.patience, o.threshold, o.threshold_mode,
                                                o.cooldown, min_lrs, o.eps});  // validates, as PyTorch's _init_is_better
  o_ = o;
  min_lrs_ = checked.min_lrs_;
  mode_worse_ = checked.mode_worse_;
  best_ = best, num_bad_epochs_ = bad, cooldown_counter_ = cooldown_counter, last_epoch_ = last_epoch;
  last_lr_ = std::move(last_lr);
}

// --- ChainedScheduler ---------------------------------------------------------------------

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : schedulers_(std::move(schedulers)) {
  MF_CHECK(!schedulers_.empty(), ValueError, "ChainedScheduler: expected at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    MF_CHECK(schedulers_[i] != nullptr, TypeError, "ChainedScheduler: scheduler ", i, " is None");
    MF_CHECK(&schedulers_[i]->optimizer() == &schedulers_[0]->optimizer(), ValueError,
             "ChainedScheduler expects all schedulers to belong to the same optimizer, but got schedulers at index 0 "
             "and ", i, " to be different");
  }
  for (const auto& group : optimizer().param_groups()) last_lr_.push_back(group.lr());
}

void ChainedScheduler::step() {
  for (const auto& s : schedulers_) s->step();
  last_lr_.clear();
  for (const auto& group : optimizer().param_groups()) last_lr_.push_back(group.lr());
}

StateValue ChainedScheduler::state_dict() const {
  StateValue::List states;
  for (const auto& s : schedulers_) states.push_back(s->state_dict());
  return StateValue::Dict{{"_last_lr", to_list(last_lr_)}, {"_schedulers", StateValue(std::move(states))}};
}

void ChainedScheduler::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r("ChainedScheduler", state_dict);
  const StateValue* states = r.find("_schedulers");
  if (states != nullptr) {
    MF_CHECK(states->is_list() && states->to_list().size() == schedulers_.size(), ValueError,
             "ChainedScheduler.load_state_dict: expected a list of ", schedulers_.size(), " scheduler states");
    for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(states->to_list()[i]);
  }
  r.read_doubles("_last_lr", last_lr_);
}

}  // namespace mf::optim
