// The Optimizer base: parameter groups, zero_grad and state dicts with
// PyTorch 1.13's structure (torch/optim/optimizer.py).
#include "meshflow/optim/optimizer.h"

#include <unordered_set>

#include "meshflow/autograd.h"
#include "meshflow/distributed/global.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf::optim {

// --- ParamGroup ----------------------------------------------------------------------

namespace {
const StateValue& option(const ParamGroup& group, const std::string& key) {
  auto it = group.options.find(key);
  MF_CHECK(it != group.options.end(), ValueError, "param group: missing option '", key, "'");
  return it->second;
}
}  // namespace

double ParamGroup::lr() const { return get_double("lr"); }

void ParamGroup::set_lr(double lr) { options["lr"] = lr; }

double ParamGroup::get_double(const std::string& key) const {
  const StateValue& v = option(*this, key);
  MF_CHECK(v.is_number(), TypeError, "param group: option '", key, "' must be a number, got ", kind_name(v.kind()));
  return v.to_double();
}

bool ParamGroup::get_bool(const std::string& key) const {
  const StateValue& v = option(*this, key);
  MF_CHECK(v.is_bool(), TypeError, "param group: option '", key, "' must be a bool, got ", kind_name(v.kind()));
  return v.to_bool();
}

std::pair<double, double> ParamGroup::get_pair(const std::string& key) const {
  const StateValue& v = option(*this, key);
  MF_CHECK(v.is_list() && v.to_list().size() == 2 && v.to_list()[0].is_number() && v.to_list()[1].is_number(),
           TypeError, "param group: option '", key, "' must be a pair of numbers, got ", v.str());
  return {v.to_list()[0].to_double(), v.to_list()[1].to_double()};
}

// --- Optimizer -----------------------------------------------------------------------

Optimizer::Optimizer(std::string name, StateValue::Dict defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::add_initial_groups(std::vector<ParamGroup> groups) {
  MF_CHECK(!groups.empty(), ValueError, name_, ": optimizer got an empty parameter list");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

std::vector<ParamGroup> Optimizer::single_group(const char* optimizer, TensorList params) {
  MF_CHECK(!params.empty(), ValueError, optimizer, ": optimizer got an empty parameter list");
  return {{std::move(params), {}}};
}

void Optimizer::check_new_params(const TensorList& params) const {
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& group : param_groups_)
    for (const Tensor& p : group.params) seen.insert(p.impl());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    MF_CHECK(p.defined(), TypeError, name_, ": parameter ", i, " of the group is an undefined tensor");
    MF_CHECK(p.is_leaf() || p.retains_grad(), ValueError, name_, ": can't optimize a non-leaf Tensor (parameter ", i,
             " of the group)");
    MF_CHECK(is_floating(p.dtype()), TypeError, name_, ": can only optimize floating-point tensors, parameter ", i,
             " of the group has dtype ", dtype_name(p.dtype()));
    MF_CHECK(seen.insert(p.impl()).second, ValueError, name_, ": parameter ", i,
             " of the group appears more than once among the optimizer's parameters");
  }
}

void Optimizer::add_param_group(ParamGroup group) {
  check_new_params(group.params);
  for (const auto& [key, value] : defaults_)
    if (!group.options.contains(key)) group.options.emplace(key, value);
  validate_group(group);
  param_groups_.push_back(std::move(group));
  init_group_state(param_groups_.back());
}

Tensor Optimizer::step(const std::function<Tensor()>& closure) {
  Tensor loss;
  {
    EnableGradGuard grad;
    loss = closure();
  }
  step();
  return loss;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const auto& group : param_groups_) {
    for (const Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
        continue;
      }
      if (grad.grad_fn()) {  // a gradient with history (create_graph): keep only its values
        grad = grad.detach();
        p.set_grad(grad);
      }
      zero_(grad);
    }
  }
}

StateValue::Dict& Optimizer::state(const Tensor& param) { return state_[param.impl()]; }

void Optimizer::init_state() {
  NoGradGuard no_grad;
  for (const ParamGroup& group : param_groups_)
    for (const Tensor& p : group.params) {
      StateValue::Dict& entry = state(p);
      if (entry.empty()) {
        init_param_state(group, p, entry);
        lay_out_state(p);
      }
    }
}

bool Optimizer::has_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it != state_.end() && !it->second.empty();
}

// The layout a parameter is computed in: its own, or under ZeRO-3 the one
// it is gathered to at each use.
const NdSbp& compute_layout(const Tensor& p) {
  const auto& compute = p.impl()->global()->compute_sbp;
  return compute ? *compute : sbp_of(p);
}

NdSbp Optimizer::state_layout(const Tensor& p) const {
  NdSbp layout = compute_layout(p);
  if (zero_stage_ == 0 || p.dim() == 0 || p.numel() < zero_min_size_) return layout;
  const Placement& placement = placement_of(p);
  // Rows per rank of dim 0 once every axis splitting it has.
  int64_t parts = placement.hierarchy()[0];
  for (size_t a = 1; a < layout.size(); ++a)
    if (layout[a] == Sbp::split(0)) parts *= placement.hierarchy()[a];
  if (p.size(0) >= parts) layout[0] = Sbp::split(0);
  return layout;
}

void Optimizer::set_zero(int stage, int64_t min_size) {
  MF_CHECK(stage >= 0 && stage <= 3, ValueError, name_, ": ZeRO stage must be 0 (off), 1, 2 or 3, got ", stage);
  MF_CHECK(min_size >= 0, ValueError, name_, ": ZeRO's shard_min_size must be >= 0, got ", min_size);
  if (stage > 0)
    for (size_t g = 0; g < param_groups_.size(); ++g)
      for (size_t i = 0; i < param_groups_[g].params.size(); ++i) {
        const Tensor& p = param_groups_[g].params[i];
        MF_CHECK(p.is_global(), ValueError, name_, ": ZeRO shards the state of global parameters; parameter ", i,
                 " of group ", g, " (shape ", shape_str(p.sizes()), ") is a local tensor (lay the model out with "
                 "to_global first)");
        MF_CHECK(compute_layout(p)[0].is_broadcast(), ValueError, name_, ": ZeRO shards over the data-parallel "
                 "mesh axis 0, where parameters must be broadcast; parameter ", i, " of group ", g, " (shape ",
                 shape_str(p.sizes()), ") is ", nd_sbp_str(sbp_of(p)), " on ", placement_of(p).str());
      }
  zero_stage_ = stage;
  zero_min_size_ = min_size;
  for (const ParamGroup& group : param_groups_)
    for (const Tensor& p : group.params) {
      if (!p.is_global()) continue;
      // Stage 3 stores the parameter itself in the state's layout and
      // gathers it to its own at each use; the others store it whole.
      const NdSbp compute = compute_layout(p);
      const NdSbp layout = state_layout(p);
      if (stage == 3) set_storage_layout(p, layout, compute);
      else set_storage_layout(p, compute, std::nullopt);
      if (has_state(p)) lay_out_state(p);
      set_grad_layout(p, stage == 2 ? std::optional<NdSbp>(layout) : std::nullopt);
    }
}

void Optimizer::lay_out_state(const Tensor& p) {
  if (!p.is_global()) return;
  NoGradGuard no_grad;
  for (auto& [key, entry] : state(p)) {
    const auto* name = std::get_if<std::string>(&key);
    if (!name || !entry.is_tensor()) continue;
    const Tensor& t = entry.to_tensor();
    if (t.defined() && t.is_global() && t.sizes() == p.sizes()) state_tensor(p, name->c_str());  // re-lays it out
  }
}

Tensor Optimizer::state_tensor(const Tensor& param, const char* key) {
  StateValue::Dict& s = state(param);
  auto it = s.find(key);
  MF_CHECK(it != s.end() && it->second.is_tensor() && it->second.to_tensor().defined(), ValueError, name_,
           ": the state of a parameter of shape ", shape_str(param.sizes()), " has no tensor '", key,
           "' (was a state dict of another optimizer or other options loaded?)");
  const Tensor& t = it->second.to_tensor();
  MF_CHECK(t.sizes() == param.sizes(), ShapeError, name_, ": state '", key, "' has shape ", shape_str(t.sizes()),
           " but its parameter has shape ", shape_str(param.sizes()));
  if (t.is_global() && param.is_global()) {
    const NdSbp layout = state_layout(param);
    if (sbp_of(t) != layout) {
      Tensor moved = global_to_global(t, placement_of(param), layout);
      // Rows taken from a broadcast tensor are a view of it: copied, so
      // that the whole tensor is freed.
      const Tensor local = global_to_local(moved);
      if (local.defined() && local.storage()->nbytes() > size_t(local.numel()) * itemsize(local.dtype())) {
        NoGradGuard no_grad;
        moved = make_global(clone(local), moved.sizes(), moved.dtype(), placement_of(param), layout);
      }
      it->second = moved;
      return moved;
    }
  }
  return t;
}

Tensor Optimizer::state_step(const Tensor& param) {
  StateValue::Dict& s = state(param);
  auto it = s.find("step");
  MF_CHECK(it != s.end(), ValueError, name_, ": the state of a parameter of shape ", shape_str(param.sizes()),
           " has no 'step'");
  if (it->second.is_number())  // older PyTorch state dicts hold a number
    it->second = full({}, it->second.to_double(), {.dtype = kFloat32, .device = param.device()});
  MF_CHECK(it->second.is_tensor() && it->second.to_tensor().defined() && it->second.to_tensor().numel() == 1,
           TypeError, name_, ": state 'step' must be a one-element tensor or a number, got ", it->second.str());
  return it->second.to_tensor();
}

// --- state dicts ----------------------------------------------------------------------

StateValue Optimizer::state_dict() const {
  StateValue::Dict packed_state;
  StateValue::List groups;
  int64_t index = 0;
  for (const auto& group : param_groups_) {
    StateValue::Dict packed = group.options;
    StateValue::List ids;
    for (const Tensor& p : group.params) {
      auto it = state_.find(p.impl());
      if (it != state_.end() && !it->second.empty()) packed_state.emplace(index, it->second);
      ids.emplace_back(index++);
    }
    packed["params"] = std::move(ids);
    groups.emplace_back(std::move(packed));
  }
  return StateValue::Dict{{"state", std::move(packed_state)}, {"param_groups", std::move(groups)}};
}

namespace {
// A loaded state tensor on its parameter's device and (floating parameters,
// except for the step counter) dtype, as PyTorch's load_state_dict casts.
StateValue cast_state(const StateValue& value, const Tensor& param, const std::string& key) {
  if (value.is_tensor()) {
    const Tensor& t = value.to_tensor();
    if (!t.defined()) return clone(t);
    // The update kernels read the whole state, the step counter too, on the parameter's device.
    const bool local = !t.is_global() && !param.is_global();
    const Tensor placed = local && t.device() != param.device() ? to(t.detach(), param.device()) : t.detach();
    if (key == "step") return clone(placed);
    return clone(to(placed, param.dtype()));
  }
  return value.deep_copy();
}
}  // namespace

void Optimizer::load_state_dict(const StateValue& state_dict) {
  MF_CHECK(state_dict.is_dict(), TypeError, name_, ".load_state_dict: expected a dict, got ",
           kind_name(state_dict.kind()));
  MF_CHECK(state_dict.contains("state") && state_dict.contains("param_groups"), ValueError, name_,
           ".load_state_dict: the state dict must have the keys 'state' and 'param_groups'");
  const StateValue& saved_state = state_dict.at("state");
  const StateValue& saved_groups_value = state_dict.at("param_groups");
  MF_CHECK(saved_state.is_dict(), TypeError, name_, ".load_state_dict: 'state' must be a dict, got ",
           kind_name(saved_state.kind()));
  MF_CHECK(saved_groups_value.is_list(), TypeError, name_, ".load_state_dict: 'param_groups' must be a list, got ",
           kind_name(saved_groups_value.kind()));
  const StateValue::List& saved_groups = saved_groups_value.to_list();
  MF_CHECK(saved_groups.size() == param_groups_.size(), ValueError, name_,
           ".load_state_dict: loaded state dict has a different number of parameter groups (", saved_groups.size(),
           ") than the optimizer (", param_groups_.size(), ")");

  // Saved parameter index -> parameter, group by group.
  std::map<int64_t, Tensor> id_map;
  for (size_t g = 0; g < saved_groups.size(); ++g) {
    const StateValue& sg = saved_groups[g];
    MF_CHECK(sg.is_dict() && sg.contains("params") && sg.at("params").is_list(), ValueError, name_,
             ".load_state_dict: param_groups[", g, "] must be a dict with a 'params' list");
    const StateValue::List& ids = sg.at("params").to_list();
    const TensorList& params = param_groups_[g].params;
    MF_CHECK(ids.size() == params.size(), ValueError, name_,
             ".load_state_dict: loaded state dict contains a parameter group that doesn't match the size of "
             "optimizer's group: param_groups[", g, "] has ", ids.size(), " parameters, the optimizer's has ",
             params.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      MF_CHECK(ids[i].is_int(), TypeError, name_, ".load_state_dict: param_groups[", g, "]['params'][", i,
               "] must be an int, got ", kind_name(ids[i].kind()));
      id_map[ids[i].to_int()] = params[i];
    }
  }

  // Build everything first, so that a bad state dict leaves the optimizer as it was.
  std::unordered_map<const TensorImpl*, StateValue::Dict> new_state;
  for (const auto& [key, value] : saved_state.to_dict()) {
    MF_CHECK(std::holds_alternative<int64_t>(key), ValueError, name_, ".load_state_dict: state key ", key_str(key),
             " is not a parameter index");
    auto it = id_map.find(std::get<int64_t>(key));
    MF_CHECK(it != id_map.end(), ValueError, name_, ".load_state_dict: state for parameter ", key_str(key),
             " which is in no parameter group");
    const Tensor& param = it->second;
    MF_CHECK(value.is_dict(), TypeError, name_, ".load_state_dict: state of parameter ", key_str(key),
             " must be a dict, got ", kind_name(value.kind()));
    StateValue::Dict entry;
    for (const auto& [name, v] : value.to_dict()) {
      const std::string name_str = std::holds_alternative<std::string>(name) ? std::get<std::string>(name) : "";
      if (v.is_tensor() && v.to_tensor().defined() && name_str != "step") {
        const Tensor& t = v.to_tensor();
        MF_CHECK(t.sizes() == param.sizes(), ShapeError, name_, ".load_state_dict: state ", key_str(name),
                 " of parameter ", key_str(key), " has shape ", shape_str(t.sizes()),
                 " but the parameter has shape ", shape_str(param.sizes()));
      }
      entry.emplace(name, cast_state(v, param, name_str));
    }
    new_state[param.impl()] = std::move(entry);
  }

  std::vector<ParamGroup> new_groups;
  for (size_t g = 0; g < saved_groups.size(); ++g) {
    ParamGroup group{param_groups_[g].params, {}};
    for (const auto& [k, v] : saved_groups[g].to_dict())
      if (k != StateValue::Key("params")) group.options.emplace(k, v.deep_copy());
    for (const auto& [k, v] : defaults_)  // options added since the dict was saved
      if (!group.options.contains(k)) group.options.emplace(k, v);
    validate_group(group);
    new_groups.push_back(std::move(group));
  }
  param_groups_ = std::move(new_groups);
  state_ = std::move(new_state);
}

}  // namespace mf::optim
