// The scheduler base and the closed-form schedules: StepLR, MultiStepLR,
// ExponentialLR, CosineAnnealingLR, LambdaLR and LinearLR (PyTorch 1.13,
// torch/optim/lr_scheduler.py). Note [Chainable and closed-form schedules]
// in lr_scheduler.h.
#include "meshflow/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "optim/lr_scheduler_common.h"

namespace mf::optim {

using detail::to_list;

// --- StateReader ---------------------------------------------------------------------

namespace detail {

StateReader::StateReader(const std::string& scheduler, const StateValue& state_dict)
    : scheduler_(scheduler), dict_(state_dict) {
  MF_CHECK(state_dict.is_dict(), TypeError, scheduler, ".load_state_dict: expected a dict, got ",
           kind_name(state_dict.kind()));
}

const StateValue* StateReader::find(const std::string& key) const {
  const auto& d = dict_.to_dict();
  auto it = d.find(key);
  return it == d.end() ? nullptr : &it->second;
}

void StateReader::fail(const std::string& key, const char* expected, const StateValue& got) const {
  throw TypeError(::mf::detail::concat(scheduler_, ".load_state_dict: '", key, "' must be ", expected, ", got ", got.str()));
}

void StateReader::read_int(const std::string& key, int64_t& out) const {
  const StateValue* v = find(key);
  if (!v) return;
  if (!v->is_int()) fail(key, "an int", *v);
  out = v->to_int();
}

void StateReader::read_double(const std::string& key, double& out) const {
  const StateValue* v = find(key);
  if (!v) return;
  if (!v->is_number()) fail(key, "a number", *v);
  out = v->to_double();
}

void StateReader::read_bool(const std::string& key, bool& out) const {
  const StateValue* v = find(key);
  if (!v) return;
  if (!v->is_bool()) fail(key, "a bool", *v);
  out = v->to_bool();
}

void StateReader::read_string(const std::string& key, std::string& out) const {
  const StateValue* v = find(key);
  if (!v) return;
  if (!v->is_string()) fail(key, "a str", *v);
  out = v->to_string();
}

void StateReader::read_doubles(const std::string& key, std::vector<double>& out) const {
  const StateValue* v = find(key);
  if (!v) return;
  if (!v->is_list()) fail(key, "a list of numbers", *v);
  std::vector<double> values;
  for (const StateValue& x : v->to_list()) {
    if (!x.is_number()) fail(key, "a list of numbers", *v);
    values.push_back(x.to_double());
  }
  out = std::move(values);
}

void StateReader::read_ints(const std::string& key, std::vector<int64_t>& out) const {
  const StateValue* v = find(key);
  if (!v) return;
  if (!v->is_list()) fail(key, "a list of ints", *v);
  std::vector<int64_t> values;
  for (const StateValue& x : v->to_list()) {
    if (!x.is_int()) fail(key, "a list of ints", *v);
    values.push_back(x.to_int());
  }
  out = std::move(values);
}

}  // namespace detail

// --- LRScheduler ---------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer, int64_t last_epoch, std::string name)
    : optimizer_(optimizer), name_(std::move(name)), last_epoch_(last_epoch) {
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    StateValue::Dict& options = groups[i].options;
    if (last_epoch == -1) {
      if (!options.contains("initial_lr")) options["initial_lr"] = groups[i].lr();
    } else {
      MF_CHECK(options.contains("initial_lr"), ValueError, name_, ": param 'initial_lr' is not specified in param_groups[",
               i, "] when resuming an optimizer (last_epoch = ", last_epoch, ")");
    }
    base_lrs_.push_back(groups[i].get_double("initial_lr"));
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (const auto& group : optimizer_.param_groups()) lrs.push_back(group.lr());
  return lrs;
}

void LRScheduler::apply_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < std::min(groups.size(), lrs.size()); ++i) groups[i].set_lr(lrs[i]);
  last_lr_ = group_lrs();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply_lrs(get_lr());
}

void LRScheduler::step(int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  std::optional<std::vector<double>> closed = closed_form_lr();
  apply_lrs(closed ? *closed : get_lr());
}

StateValue LRScheduler::state_dict() const {
  return StateValue::Dict{{"base_lrs", to_list(base_lrs_)},
                          {"last_epoch", last_epoch_},
                          {"_step_count", step_count_},
                          {"_last_lr", to_list(last_lr_)}};
}

void LRScheduler::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  std::vector<double> base_lrs = base_lrs_, last_lr = last_lr_;
  int64_t last_epoch = last_epoch_, step_count = step_count_;
  r.read_doubles("base_lrs", base_lrs);
  r.read_int("last_epoch", last_epoch);
  r.read_int("_step_count", step_count);
  r.read_doubles("_last_lr", last_lr);
  base_lrs_ = std::move(base_lrs);
  last_lr_ = std::move(last_lr);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
}

// --- StepLR --------------------------------------------------------------------------

// Constructor arguments are checked before the base constructor records
// "initial_lr" in the optimizer's groups, so a bad argument changes nothing.
namespace {
Optimizer& check_positive(Optimizer& optimizer, const char* where, const char* name, int64_t value) {
  MF_CHECK(value > 0, ValueError, where, ": ", name, " must be positive, got ", value);
  return optimizer;
}
}  // namespace

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(check_positive(optimizer, "StepLR", "step_size", step_size), last_epoch, "StepLR"),
      step_size_(step_size),
      gamma_(gamma) {
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * std::pow(gamma_, double(detail::floor_div(last_epoch_, step_size_))));
  return lrs;
}

StateValue StepLR::state_dict() const {
  StateValue d = LRScheduler::state_dict();
  d["step_size"] = step_size_;
  d["gamma"] = gamma_;
  return d;
}

void StepLR::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  int64_t step_size = step_size_;
  double gamma = gamma_;
  r.read_int("step_size", step_size);
  r.read_double("gamma", gamma);
  check_positive(optimizer_, "StepLR.load_state_dict", "step_size", step_size);
  LRScheduler::load_state_dict(state_dict);
  step_size_ = step_size;
  gamma_ = gamma;
}

// --- MultiStepLR ---------------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, double(count));
  return lrs;
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, double(passed)));
  return lrs;
}

StateValue MultiStepLR::state_dict() const {
  // PyTorch keeps a Counter: milestone -> how often it is listed.
  StateValue::Dict counts;
  for (int64_t m : milestones_) {
    StateValue& c = counts[m];
    c = c.is_none() ? int64_t(1) : c.to_int() + 1;
  }
  StateValue d = LRScheduler::state_dict();
  d["milestones"] = std::move(counts);
  d["gamma"] = gamma_;
  return d;
}

void MultiStepLR::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  double gamma = gamma_;
  r.read_double("gamma", gamma);
  std::vector<int64_t> milestones = milestones_;
  if (const StateValue* counts = r.find("milestones")) {
    MF_CHECK(counts->is_dict(), TypeError, "MultiStepLR.load_state_dict: 'milestones' must be a dict, got ",
             kind_name(counts->kind()));
    milestones.clear();
    for (const auto& [k, v] : counts->to_dict()) {
      MF_CHECK(std::holds_alternative<int64_t>(k) && v.is_int() && v.to_int() >= 0, TypeError,
               "MultiStepLR.load_state_dict: 'milestones' must map int epochs to counts, got ", key_str(k), ": ",
               v.str());
      milestones.insert(milestones.end(), size_t(v.to_int()), std::get<int64_t>(k));
    }
  }
  LRScheduler::load_state_dict(state_dict);
  gamma_ = gamma;
  milestones_ = std::move(milestones);
}

// --- ExponentialLR -------------------------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "ExponentialLR"), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::optional<std::vector<double>> ExponentialLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, double(last_epoch_)));
  return lrs;
}

StateValue ExponentialLR::state_dict() const {
  StateValue d = LRScheduler::state_dict();
  d["gamma"] = gamma_;
  return d;
}

void ExponentialLR::load_state_dict(const StateValue& state_dict) {
  double gamma = gamma_;
  detail::StateReader(name_, state_dict).read_double("gamma", gamma);
  LRScheduler::load_state_dict(state_dict);
  gamma_ = gamma;
}

// --- CosineAnnealingLR ---------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min, int64_t last_epoch)
    : LRScheduler(check_positive(optimizer, "CosineAnnealingLR", "T_max", T_max), last_epoch, "CosineAnnealingLR"),
      T_max_(T_max),
      eta_min_(eta_min) {
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs = group_lrs();
  const double t = double(last_epoch_), T = double(T_max_);
  if (last_epoch_ == 0) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {  // resumed: restart from the closed form
    for (size_t i = 0; i < lrs.size() && i < base_lrs_.size(); ++i)
      lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(t * pi / T)) / 2;
    return lrs;
  }
  if (detail::python_mod(last_epoch_ - 1 - T_max_, 2 * T_max_) == 0) {  // the bottom of a cycle: turn up
    for (size_t i = 0; i < lrs.size() && i < base_lrs_.size(); ++i)
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(pi / T)) / 2;
    return lrs;
  }
  for (double& lr : lrs)
    lr = (1 + std::cos(pi * t / T)) / (1 + std::cos(pi * (t - 1) / T)) * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(pi * double(last_epoch_) / double(T_max_))) / 2);
  return lrs;
}

StateValue CosineAnnealingLR::state_dict() const {
  StateValue d = LRScheduler::state_dict();
  d["T_max"] = T_max_;
  d["eta_min"] = eta_min_;
  return d;
}

void CosineAnnealingLR::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  int64_t T_max = T_max_;
  double eta_min = eta_min_;
  r.read_int("T_max", T_max);
  r.read_double("eta_min", eta_min);
  check_positive(optimizer_, "CosineAnnealingLR.load_state_dict", "T_max", T_max);
  LRScheduler::load_state_dict(state_dict);
  T_max_ = T_max;
  eta_min_ = eta_min;
}

// --- LambdaLR ------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, LambdaFn lr_lambda, int64_t last_epoch)
    : LambdaLR(optimizer, std::vector<LambdaFn>(optimizer.param_groups().size(), lr_lambda), last_epoch) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<LambdaFn> lr_lambdas, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "LambdaLR"), lr_lambdas_(std::move(lr_lambdas)) {
  MF_CHECK(lr_lambdas_.size() == optimizer.param_groups().size(), ValueError, "LambdaLR: expected ",
           optimizer.param_groups().size(), " lr_lambdas (one per param group), but got ", lr_lambdas_.size());
  for (size_t i = 0; i < lr_lambdas_.size(); ++i)
    MF_CHECK(bool(lr_lambdas_[i]), ValueError, "LambdaLR: lr_lambdas[", i, "] is empty");
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> lrs;
  for (size_t i = 0; i < lr_lambdas_.size() && i < base_lrs_.size(); ++i)
    lrs.push_back(base_lrs_[i] * lr_lambdas_[i](last_epoch_));
  return lrs;
}

StateValue LambdaLR::state_dict() const {
  StateValue d = LRScheduler::state_dict();
  d["lr_lambdas"] = StateValue::List(lr_lambdas_.size());
  return d;
}

// --- LinearLR ------------------------------------------------------------------------

namespace {
Optimizer& check_linear_factors(Optimizer& optimizer, const char* where, double start_factor, double end_factor,
                                int64_t total_iters) {
  MF_CHECK(start_factor > 0 && start_factor <= 1, ValueError, where,
           ": starting multiplicative factor expected to be greater than 0 and less or equal to 1, got ",
           start_factor);
  MF_CHECK(end_factor >= 0 && end_factor <= 1, ValueError, where,
           ": ending multiplicative factor expected to be between 0 and 1, got ", end_factor);
  return check_positive(optimizer, where, "total_iters", total_iters);
}
}  // namespace

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters,
                   int64_t last_epoch)
    : LRScheduler(check_linear_factors(optimizer, "LinearLR", start_factor, end_factor, total_iters), last_epoch,
                  "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double delta = end_factor_ - start_factor_;
  for (double& lr : lrs)
    lr *= 1.0 + delta / (double(total_iters_) * start_factor_ + double(last_epoch_ - 1) * delta);
  return lrs;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  std::vector<double> lrs;
  const double progress = double(std::min(total_iters_, last_epoch_)) / double(total_iters_);
  for (double base : base_lrs_) lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * progress));
  return lrs;
}

StateValue LinearLR::state_dict() const {
  StateValue d = LRScheduler::state_dict();
  d["start_factor"] = start_factor_;
  d["end_factor"] = end_factor_;
  d["total_iters"] = total_iters_;
  return d;
}

void LinearLR::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  double start_factor = start_factor_, end_factor = end_factor_;
  int64_t total_iters = total_iters_;
  r.read_double("start_factor", start_factor);
  r.read_double("end_factor", end_factor);
  r.read_int("total_iters", total_iters);
  check_linear_factors(optimizer_, "LinearLR.load_state_dict", start_factor, end_factor, total_iters);
  LRScheduler::load_state_dict(state_dict);
  start_factor_ = start_factor;
  end_factor_ = end_factor;
  total_iters_ = total_iters;
}

}  // namespace mf::optim
