// Schedules made of phases: SequentialLR (one scheduler per phase) and
// OneCycleLR (warm-up and annealing phases, with momentum cycled against
// the lr). PyTorch 1.13, torch/optim/lr_scheduler.py.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "meshflow/optim/lr_scheduler.h"
#include "optim/lr_scheduler_common.h"

namespace mf::optim {

using detail::to_list;

// --- SequentialLR --------------------------------------------------------------------

namespace {
Optimizer& check_sequential(Optimizer& optimizer, const std::vector<std::shared_ptr<LRScheduler>>& schedulers,
                            const std::vector<int64_t>& milestones) {
  MF_CHECK(!schedulers.empty(), ValueError, "SequentialLR: expects at least one scheduler");
  for (size_t i = 0; i < schedulers.size(); ++i) {
    MF_CHECK(schedulers[i] != nullptr, ValueError, "SequentialLR: scheduler ", i, " is null");
    MF_CHECK(&schedulers[i]->optimizer() == &optimizer, ValueError,
             "SequentialLR: expects all schedulers to belong to the same optimizer, but got scheduler ", i,
             " with a different optimizer than the one passed in");
  }
  MF_CHECK(milestones.size() + 1 == schedulers.size(), ValueError,
           "SequentialLR: expects number of schedulers provided to be one more than the number of milestone "
           "points, but got number of schedulers ",
           schedulers.size(), " and the number of milestones to be equal to ", milestones.size());
  MF_CHECK(std::is_sorted(milestones.begin(), milestones.end()), ValueError,
           "SequentialLR: milestones must be in increasing order");
  return optimizer;
}
}  // namespace

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones, int64_t last_epoch)
    : LRScheduler(check_sequential(optimizer, schedulers, milestones), last_epoch, "SequentialLR"),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  last_epoch_ = last_epoch + 1;
  // Each scheduler stepped once when it was built: put the lrs back and
  // undo those steps, then start the first scheduler only.
  for (auto& group : optimizer.param_groups()) group.set_lr(group.get_double("initial_lr"));
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

size_t SequentialLR::current() const {
  return size_t(std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin());
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = current();
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) s.step(0);  // the scheduler taking over starts at epoch 0
  else s.step();
  last_lr_ = s.get_last_lr();
}

void SequentialLR::step(int64_t epoch) {
  throw ValueError(::mf::detail::concat("SequentialLR: step(epoch) is not supported (got epoch ", epoch,
                                        "); call step() once per epoch"));
}

// SequentialLR steps through its schedulers (step() above), so its own
// chainable form is simply the lrs of the scheduler in charge.
std::vector<double> SequentialLR::get_lr() { return schedulers_[current()]->get_last_lr(); }

StateValue SequentialLR::state_dict() const {
  StateValue::List schedulers;
  for (const auto& s : schedulers_) schedulers.push_back(s->state_dict());
  StateValue::List milestones;
  for (int64_t m : milestones_) milestones.emplace_back(m);
  return StateValue::Dict{{"_milestones", std::move(milestones)},
                          {"last_epoch", last_epoch_},
                          {"_last_lr", to_list(last_lr_)},
                          {"_schedulers", std::move(schedulers)}};
}

void SequentialLR::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  std::vector<int64_t> milestones = milestones_;
  int64_t last_epoch = last_epoch_;
  std::vector<double> last_lr = last_lr_;
  r.read_ints("_milestones", milestones);
  r.read_int("last_epoch", last_epoch);
  r.read_doubles("_last_lr", last_lr);
  MF_CHECK(milestones.size() + 1 == schedulers_.size() && std::is_sorted(milestones.begin(), milestones.end()),
           ValueError, "SequentialLR.load_state_dict: expected ", schedulers_.size() - 1,
           " milestones in increasing order, got ", milestones.size());
  if (const StateValue* saved = r.find("_schedulers")) {
    MF_CHECK(saved->is_list() && saved->to_list().size() == schedulers_.size(), ValueError,
             "SequentialLR.load_state_dict: '_schedulers' must be a list of ", schedulers_.size(),
             " state dicts, got ", saved->str());
    for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(saved->to_list()[i]);
  }
  milestones_ = std::move(milestones);
  last_epoch_ = last_epoch;
  last_lr_ = std::move(last_lr);
}

// --- OneCycleLR ----------------------------------------------------------------------

namespace {

int64_t one_cycle_total_steps(const OneCycleLROptions& o) {
  if (o.total_steps) {
    MF_CHECK(*o.total_steps > 0, ValueError, "OneCycleLR: expected positive integer total_steps, but got ",
             *o.total_steps);
    return *o.total_steps;
  }
  MF_CHECK(o.epochs && o.steps_per_epoch, ValueError,
           "OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)");
  MF_CHECK(*o.epochs > 0, ValueError, "OneCycleLR: expected positive integer epochs, but got ", *o.epochs);
  MF_CHECK(*o.steps_per_epoch > 0, ValueError, "OneCycleLR: expected positive integer steps_per_epoch, but got ",
           *o.steps_per_epoch);
  return *o.epochs * *o.steps_per_epoch;
}

// One value per group: a single value is repeated (PyTorch's _format_param).
std::vector<double> per_group(const char* name, const std::vector<double>& values, size_t groups) {
  MF_CHECK(values.size() == 1 || values.size() == groups, ValueError, "OneCycleLR: expected 1 or ", groups,
           " values for ", name, " (one per param group), got ", values.size());
  return values.size() == 1 ? std::vector<double>(groups, values[0]) : values;
}

// Checks the options, then records the schedule's lrs (and momenta) in the
// optimizer's groups as PyTorch does before the base constructor runs.
Optimizer& prepare_one_cycle(Optimizer& optimizer, const OneCycleLROptions& o) {
  one_cycle_total_steps(o);
  MF_CHECK(o.pct_start >= 0 && o.pct_start <= 1, ValueError,
           "OneCycleLR: expected float between 0 and 1 pct_start, but got ", o.pct_start);
  MF_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear", ValueError,
           "OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got '", o.anneal_strategy, "'");
  auto& groups = optimizer.param_groups();
  const std::vector<double> max_lrs = per_group("max_lr", o.max_lr, groups.size());
  std::vector<double> max_momenta, base_momenta;
  const bool use_beta1 = optimizer.defaults().contains("betas");
  if (o.cycle_momentum) {
    MF_CHECK(use_beta1 || optimizer.defaults().contains("momentum"), ValueError, "OneCycleLR: optimizer ",
             optimizer.name(), " must support momentum with the cycle_momentum option enabled");
    max_momenta = per_group("max_momentum", o.max_momentum, groups.size());
    base_momenta = per_group("base_momentum", o.base_momentum, groups.size());
    if (use_beta1 && o.last_epoch == -1)  // every group's betas must be readable before any group changes
      for (auto& group : groups) group.get_pair("betas");
  }
  if (o.last_epoch != -1) return optimizer;
  for (size_t i = 0; i < groups.size(); ++i) {
    StateValue::Dict& options = groups[i].options;
    options["initial_lr"] = max_lrs[i] / o.div_factor;
    options["max_lr"] = max_lrs[i];
    options["min_lr"] = max_lrs[i] / o.div_factor / o.final_div_factor;
    if (!o.cycle_momentum) continue;
    if (use_beta1) options["betas"] = StateValue::List{max_momenta[i], groups[i].get_pair("betas").second};
    else options["momentum"] = max_momenta[i];
    options["max_momentum"] = max_momenta[i];
    options["base_momentum"] = base_momenta[i];
  }
  return optimizer;
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& o)
    : LRScheduler(prepare_one_cycle(optimizer, o), o.last_epoch, "OneCycleLR"),
      total_steps_(one_cycle_total_steps(o)),
      anneal_strategy_(o.anneal_strategy),
      cycle_momentum_(o.cycle_momentum),
      use_beta1_(o.cycle_momentum && optimizer.defaults().contains("betas")) {
  const double total = double(total_steps_), warm_up = o.pct_start * total;
  if (o.three_phase) {
    phases_ = {{warm_up - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {2 * warm_up - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
               {total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  } else {
    phases_ = {{warm_up - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (anneal_strategy_ == "linear") return (end - start) * pct + start;
  const double cos_out = std::cos(std::numbers::pi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step_num = last_epoch_;
  MF_CHECK(step_num <= total_steps_, ValueError, "OneCycleLR: tried to step ", step_num + 1,
           " times. The specified number of total steps is ", total_steps_);
  std::vector<double> lrs;
  for (auto& group : optimizer_.param_groups()) {
    double start_step = 0, lr = 0, momentum = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (double(step_num) <= phase.end_step || i + 1 == phases_.size()) {
        MF_CHECK(phase.end_step != start_step, ValueError, "OneCycleLR: phase ", i, " of the schedule spans no steps (",
                 "it ends at step ", phase.end_step, "); change pct_start or total_steps");
        const double pct = (double(step_num) - start_step) / (phase.end_step - start_step);
        lr = anneal(group.get_double(phase.start_lr), group.get_double(phase.end_lr), pct);
        if (cycle_momentum_)
          momentum = anneal(group.get_double(phase.start_momentum), group.get_double(phase.end_momentum), pct);
        break;
      }
      start_step = phase.end_step;
    }
    lrs.push_back(lr);
    if (!cycle_momentum_) continue;
    if (use_beta1_) group.options["betas"] = StateValue::List{momentum, group.get_pair("betas").second};
    else group.options["momentum"] = momentum;
  }
  return lrs;
}

StateValue OneCycleLR::state_dict() const {
  StateValue::List phases;
  for (const Phase& p : phases_)
    phases.emplace_back(StateValue::Dict{{"end_step", p.end_step},
                                         {"start_lr", p.start_lr},
                                         {"end_lr", p.end_lr},
                                         {"start_momentum", p.start_momentum},
                                         {"end_momentum", p.end_momentum}});
  StateValue d = LRScheduler::state_dict();
  d["total_steps"] = total_steps_;
  d["_schedule_phases"] = std::move(phases);
  d["anneal_strategy"] = anneal_strategy_;
  d["cycle_momentum"] = cycle_momentum_;
  d["use_beta1"] = use_beta1_;
  return d;
}

void OneCycleLR::load_state_dict(const StateValue& state_dict) {
  detail::StateReader r(name_, state_dict);
  int64_t total_steps = total_steps_;
  std::string anneal_strategy = anneal_strategy_;
  bool cycle_momentum = cycle_momentum_, use_beta1 = use_beta1_;
  r.read_int("total_steps", total_steps);
  r.read_string("anneal_strategy", anneal_strategy);
  r.read_bool("cycle_momentum", cycle_momentum);
  r.read_bool("use_beta1", use_beta1);
  MF_CHECK(total_steps > 0, ValueError, "OneCycleLR.load_state_dict: total_steps must be positive, got ",
           total_steps);
  MF_CHECK(anneal_strategy == "cos" || anneal_strategy == "linear", ValueError,
           "OneCycleLR.load_state_dict: anneal_strategy must be 'cos' or 'linear', got '", anneal_strategy, "'");
  std::vector<Phase> phases = phases_;
  if (const StateValue* saved = r.find("_schedule_phases")) {
    MF_CHECK(saved->is_list() && !saved->to_list().empty(), TypeError,
             "OneCycleLR.load_state_dict: '_schedule_phases' must be a non-empty list, got ", saved->str());
    phases.clear();
    for (const StateValue& p : saved->to_list()) {
      detail::StateReader pr("OneCycleLR (phase)", p);
      Phase phase{0, "", "", "", ""};
      MF_CHECK(pr.find("end_step") && pr.find("start_lr") && pr.find("end_lr") && pr.find("start_momentum") &&
                   pr.find("end_momentum"),
               ValueError, "OneCycleLR.load_state_dict: a phase needs end_step, start_lr, end_lr, start_momentum "
               "and end_momentum, got ", p.str());
      pr.read_double("end_step", phase.end_step);
      pr.read_string("start_lr", phase.start_lr);
      pr.read_string("end_lr", phase.end_lr);
      pr.read_string("start_momentum", phase.start_momentum);
      pr.read_string("end_momentum", phase.end_momentum);
      phases.push_back(std::move(phase));
    }
  }
  LRScheduler::load_state_dict(state_dict);
  total_steps_ = total_steps;
  anneal_strategy_ = std::move(anneal_strategy);
  cycle_momentum_ = cycle_momentum;
  use_beta1_ = use_beta1;
  phases_ = std::move(phases);
}

}  // namespace mf::optim
