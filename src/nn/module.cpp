#include "meshflow/nn/module.h"

#include <algorithm>
#include <atomic>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "meshflow/autograd.h"
#include "meshflow/distributed/global.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"

namespace mf::nn {
namespace {

int next_hook_handle() {
  static std::atomic<int> next{0};
  return ++next;
}

template <typename Entries, typename Name>
auto find_entry(Entries& entries, const std::string& name, Name entry_name) {
  return std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return entry_name(e) == name; });
}
const std::string& pair_name(const std::pair<std::string, Tensor>& e) { return e.first; }
const std::string& buffer_name(const Module::Buffer& e) { return e.name; }
const std::string& child_name(const Module::Child& e) { return e.name; }

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "\"" : ", \"") + k + "\"";
  return out;
}

std::string indent_lines(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::operator()(const Tensor& input) {
  Tensor x = input;
  for (const auto& [handle, hook] : pre_hooks_) {
    if (auto* h = dynamic_cast<ForwardPreHook*>(hook.get())) {
      Tensor replaced = h->fn(*this, x);
      if (replaced.defined()) x = replaced;
    }
  }
  Tensor out;
  try {
    out = forward(x);
  } catch (...) {
    for (const auto& [handle, hook] : std::vector(hooks_))
      if (auto* h = dynamic_cast<ForwardHook*>(hook.get()); h && h->always_call) h->fn(*this, x, Tensor());
    throw;
  }
  for (const auto& [handle, hook] : hooks_) {
    if (auto* h = dynamic_cast<ForwardHook*>(hook.get())) {
      Tensor replaced = h->fn(*this, x, out);
      if (replaced.defined()) out = replaced;
    }
  }
  return out;
}

Tensor Module::forward(const Tensor&) {
  throw TypeError(type_name_ + ".forward: this module does not take a single tensor");
}

// --- registration -------------------------------------------------------------

// allowed: 0 = the name must be unused; 1/2/3 = it may already be a
// parameter / buffer / child (then it is replaced).
void Module::check_new_name(const std::string& name, const char* what, int allowed) const {
  MF_CHECK(!name.empty(), ValueError, type_name_, ": ", what, " name can't be empty string \"\"");
  MF_CHECK(name.find('.') == std::string::npos, ValueError, type_name_, ": ", what,
           " name can't contain \".\", got \"", name, "\"");
  MF_CHECK(allowed == 1 || !has_parameter(name), ValueError, type_name_, ": attribute \"", name,
           "\" is already a parameter; it can't also be a ", what);
  MF_CHECK(allowed == 2 || !has_buffer(name), ValueError, type_name_, ": attribute \"", name,
           "\" is already a buffer; it can't also be a ", what);
  MF_CHECK(allowed == 3 || !has_child(name), ValueError, type_name_, ": attribute \"", name,
           "\" is already a submodule; it can't also be a ", what);
}

void Module::register_parameter(const std::string& name, const Tensor& param, bool requires_grad) {
  check_new_name(name, "parameter", 1);
  if (param.defined()) {
    MF_CHECK(param.is_leaf(), ValueError, type_name_, ".register_parameter(\"", name,
             "\"): a parameter must be a leaf tensor (got the output of ", param.grad_fn()->name(),
             "); register its .detach()");
    param.impl()->set_is_parameter(true);
    if (requires_grad && !param.requires_grad()) const_cast<Tensor&>(param).requires_grad_(true);
  }
  auto it = find_entry(params_, name, pair_name);
  if (it != params_.end()) {
    it->second = param;
  } else {
    params_.emplace_back(name, param);
  }
}

Tensor Module::swap_parameter(const std::string& name, Tensor t) {
  auto it = find_entry(params_, name, pair_name);
  MF_CHECK(it != params_.end(), ValueError, type_name_, ".swap_parameter: no parameter \"", name, "\"");
  std::swap(it->second, t);
  return t;
}

void Module::register_buffer(const std::string& name, const Tensor& buffer, bool persistent) {
  check_new_name(name, "buffer", 2);
  auto it = find_entry(buffers_, name, buffer_name);
  if (it != buffers_.end()) {
    it->tensor = buffer;
    it->persistent = persistent;
  } else {
    buffers_.push_back(Buffer{name, buffer, persistent});
  }
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module, std::shared_ptr<void> owner) {
  check_new_name(name, "module", 3);
  MF_CHECK(module.get() != this, ValueError, type_name_, ": a module can't be its own child (\"", name, "\")");
  auto it = find_entry(children_, name, child_name);
  if (it != children_.end()) {
    it->module = std::move(module);
    it->owner = std::move(owner);
  } else {
    children_.push_back(Child{name, std::move(module), std::move(owner)});
  }
}

bool Module::unregister(const std::string& name) {
  if (auto it = find_entry(params_, name, pair_name); it != params_.end()) {
    it->second = Tensor();
    return true;
  }
  if (auto it = find_entry(buffers_, name, buffer_name); it != buffers_.end()) {
    it->tensor = Tensor();
    return true;
  }
  if (auto it = find_entry(children_, name, child_name); it != children_.end()) {
    children_.erase(it);
    return true;
  }
  return false;
}

// --- lookup ---------------------------------------------------------------------

bool Module::has_parameter(const std::string& name) const {
  return find_entry(params_, name, pair_name) != params_.end();
}
bool Module::has_buffer(const std::string& name) const {
  return find_entry(buffers_, name, buffer_name) != buffers_.end();
}
bool Module::has_child(const std::string& name) const {
  return find_entry(children_, name, child_name) != children_.end();
}

const Tensor& Module::parameter(const std::string& name) const {
  auto it = find_entry(params_, name, pair_name);
  MF_CHECK(it != params_.end(), ValueError, type_name_, " has no parameter \"", name, "\"");
  return it->second;
}
const Tensor& Module::buffer(const std::string& name) const {
  auto it = find_entry(buffers_, name, buffer_name);
  MF_CHECK(it != buffers_.end(), ValueError, type_name_, " has no buffer \"", name, "\"");
  return it->tensor;
}
const Module::Child& Module::child_entry(const std::string& name) const {
  auto it = find_entry(children_, name, child_name);
  MF_CHECK(it != children_.end(), ValueError, type_name_, " has no submodule \"", name, "\"");
  return *it;
}
std::shared_ptr<Module> Module::child(const std::string& name) const { return child_entry(name).module; }

std::shared_ptr<Module> Module::submodule(const std::string& path) {
  std::shared_ptr<Module> m = shared_from_this();
  std::string walked = type_name_;
  size_t start = 0;
  while (start < path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    MF_CHECK(m && m->has_child(part), ValueError, walked, " has no attribute `", part, "` (looking up \"", path,
             "\")");
    m = m->child(part);
    walked += "." + part;
    start = dot == std::string::npos ? path.size() : dot + 1;
  }
  return m;
}

size_t Module::param_slot(const std::string& name) const {
  return size_t(find_entry(params_, name, pair_name) - params_.begin());
}
size_t Module::buffer_slot(const std::string& name) const {
  return size_t(find_entry(buffers_, name, buffer_name) - buffers_.begin());
}

// --- traversal --------------------------------------------------------------------

NamedTensors Module::named_parameters(bool recurse, const std::string& prefix) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  auto visit = [&](auto&& self, const Module& m, const std::string& pre) -> void {
    for (const auto& [name, t] : m.params_) {
      if (t.defined() && seen.insert(t.impl()).second) out.emplace_back(pre + name, t);
    }
    if (!recurse) return;
    for (const auto& c : m.children_) {
      if (c.module) self(self, *c.module, pre + c.name + ".");
    }
  };
  visit(visit, *this, prefix.empty() ? "" : prefix + ".");
  return out;
}

TensorList Module::parameters(bool recurse) const {
  TensorList out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse, const std::string& prefix) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  auto visit = [&](auto&& self, const Module& m, const std::string& pre) -> void {
    for (const auto& b : m.buffers_) {
      if (b.tensor.defined() && seen.insert(b.tensor.impl()).second) out.emplace_back(pre + b.name, b.tensor);
    }
    if (!recurse) return;
    for (const auto& c : m.children_) {
      if (c.module) self(self, *c.module, pre + c.name + ".");
    }
  };
  visit(visit, *this, prefix.empty() ? "" : prefix + ".");
  return out;
}

TensorList Module::buffers(bool recurse) const {
  TensorList out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::unordered_set<const Module*> seen;
  for (const auto& c : children_) {
    if (c.module && seen.insert(c.module.get()).second) out.emplace_back(c.name, c.module);
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, m] : named_children()) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::unordered_set<const Module*> seen;
  auto visit = [&](auto&& self, const std::shared_ptr<Module>& m, const std::string& name) -> void {
    if (!seen.insert(m.get()).second) return;
    out.emplace_back(name, m);
    for (const auto& c : m->children_) {
      if (c.module) self(self, c.module, name.empty() ? c.name : name + "." + c.name);
    }
  };
  visit(visit, shared_from_this(), prefix);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

// --- state ------------------------------------------------------------------------

void Module::collect_state(NamedTensors& out, const std::string& prefix) const {
  for (const auto& [name, t] : params_) {
    if (t.defined()) out.emplace_back(prefix + name, t.detach());
  }
  for (const auto& b : buffers_) {
    if (b.tensor.defined() && b.persistent) out.emplace_back(prefix + b.name, b.tensor.detach());
  }
  for (const auto& c : children_) {
    if (c.module) c.module->collect_state(out, prefix + c.name + ".");
  }
}

NamedTensors Module::state_dict(const std::string& prefix) const {
  NamedTensors out;
  collect_state(out, prefix.empty() ? "" : prefix + ".");
  return out;
}

LoadResult Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  return load_state_dict(NamedTensors(state.begin(), state.end()), strict);
}

LoadResult Module::load_state_dict(const NamedTensors& state_entries, bool strict) {
  // Every destination, by key, as state_dict() names them (own tensors, not
  // detached copies, so the copy below writes the module), and the prefix of
  // every module in named_modules() order.
  std::vector<std::pair<std::string, Tensor>> targets;
  std::unordered_map<std::string, size_t> module_order;
  auto visit = [&](auto&& self, const Module& m, const std::string& pre) -> void {
    module_order.emplace(pre, module_order.size());
    for (const auto& [name, t] : m.params_) {
      if (t.defined()) targets.emplace_back(pre + name, t);
    }
    for (const auto& b : m.buffers_) {
      if (b.tensor.defined() && b.persistent) targets.emplace_back(pre + b.name, b.tensor);
    }
    for (const auto& c : m.children_) {
      if (c.module) self(self, *c.module, pre + c.name + ".");
    }
  };
  visit(visit, *this, "");
  std::unordered_map<std::string, Tensor> state;  // a later entry replaces an earlier one, as in a dict
  for (const auto& [key, value] : state_entries) state[key] = value;

  LoadResult result;
  std::vector<std::string> mismatches;
  std::unordered_set<std::string> known;
  for (const auto& [key, target] : targets) {
    known.insert(key);
    auto it = state.find(key);
    if (it == state.end()) {
      result.missing_keys.push_back(key);
      continue;
    }
    MF_CHECK(it->second.defined(), ValueError, "load_state_dict: entry \"", key, "\" is None");
    if (it->second.shape() != target.shape()) {
      mismatches.push_back("size mismatch for " + key + ": copying a param with shape " +
                           shape_str(it->second.shape()) + " from checkpoint, the shape in current model is " +
                           shape_str(target.shape()) + ".");
    }
  }
  // An unexpected key belongs to the deepest module its dotted path names.
  std::vector<std::pair<size_t, std::string>> unexpected;
  for (const auto& [key, value] : state_entries) {
    if (known.count(key) || !state.count(key)) continue;
    state.erase(key);  // list a repeated key once
    std::string owner;
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
      if (!module_order.count(key.substr(0, dot + 1))) break;
      owner = key.substr(0, dot + 1);
    }
    unexpected.emplace_back(module_order.at(owner), key);
  }
  std::stable_sort(unexpected.begin(), unexpected.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, key] : unexpected) result.unexpected_keys.push_back(std::move(key));
  std::vector<std::string> errors = mismatches;
  if (strict) {
    if (!result.unexpected_keys.empty())
      errors.insert(errors.begin(), "Unexpected key(s) in state_dict: " + join_keys(result.unexpected_keys) + ".");
    if (!result.missing_keys.empty())
      errors.insert(errors.begin(), "Missing key(s) in state_dict: " + join_keys(result.missing_keys) + ".");
  }
  if (!errors.empty()) {
    std::string text = "Error(s) in loading state_dict for " + type_name_ + ":";
    for (const auto& e : errors) text += "\n\t" + e;
    if (mismatches.empty()) throw Error(text);
    throw ShapeError(text);
  }
  NoGradGuard no_grad;
  for (auto& [key, target] : targets) {
    auto it = state.find(key);
    if (it == state.end()) continue;
    copy_(target, it->second);
  }
  return result;
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& c : children_) {
    if (c.module) c.module->train(on);
  }
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& t : parameters()) {
    Tensor g = t.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      t.set_grad(Tensor());
    } else {
      zero_(g);
    }
  }
}

void Module::requires_grad_(bool requires_grad) {
  for (auto& t : parameters()) t.requires_grad_(requires_grad);
}

void Module::to(DType dtype) {
  MF_CHECK(is_floating(dtype), TypeError, type_name_, ".to: nn.Module.to only accepts floating point dtypes, but got ",
           dtype_name(dtype));
  NoGradGuard no_grad;
  auto convert = [&](const Tensor& t) {
    if (!t.defined() || !t.is_floating_point() || t.dtype() == dtype) return;
    t.set_data(cast(t, dtype));
    Tensor g = t.grad();
    if (g.defined()) g.set_data(cast(g, dtype));
  };
  for (auto& t : parameters()) convert(t);
  for (auto& t : buffers()) convert(t);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  auto move = [&](const Tensor& t) {
    if (!t.defined() || t.device() == device) return;
    MF_CHECK(!t.is_global(), Error, type_name_, ".to: a global parameter or buffer moves to ", device,
             " with to_global(placement=...) on a placement of that device type");
    t.set_data(mf::to(t, device));
    Tensor g = t.grad();
    if (g.defined()) g.set_data(mf::to(g, device));
  };
  for (auto& t : parameters()) move(t);
  for (auto& t : buffers()) move(t);
}

void Module::to_global(const Placement& placement, const NdSbp& sbp) {
  NoGradGuard no_grad;
  const Placement source(placement.type(), {placement.ranks()[0]});
  auto convert = [&](const Tensor& t) {
    if (!t.defined()) return;
    Tensor g = t.is_global() ? t : local_to_global(t, source, {Sbp::broadcast()});
    t.set_data(global_to_global(g, placement, sbp));
  };
  for (auto& t : parameters()) convert(t);
  for (auto& t : buffers()) convert(t);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& c : children_) {
    if (c.module) c.module->apply(fn);
  }
  fn(*this);
}

// --- hooks --------------------------------------------------------------------------

int Module::register_forward_hook(std::shared_ptr<Hook> hook) {
  int handle = next_hook_handle();
  hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

int Module::register_forward_pre_hook(std::shared_ptr<Hook> hook) {
  int handle = next_hook_handle();
  pre_hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

void Module::remove_hook(int handle) {
  auto drop = [&](auto& hooks) {
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](const auto& h) { return h.first == handle; }),
                hooks.end());
  };
  drop(hooks_);
  drop(pre_hooks_);
}

int register_forward_hook(Module& m, std::function<Tensor(Module&, const Tensor&, const Tensor&)> fn) {
  auto hook = std::make_shared<ForwardHook>();
  hook->fn = std::move(fn);
  return m.register_forward_hook(std::move(hook));
}

int register_forward_pre_hook(Module& m, std::function<Tensor(Module&, const Tensor&)> fn) {
  auto hook = std::make_shared<ForwardPreHook>();
  hook->fn = std::move(fn);
  return m.register_forward_pre_hook(std::move(hook));
}

// --- text -----------------------------------------------------------------------------

std::string Module::repr() const {
  std::string extra = extra_repr();
  std::vector<std::string> lines;
  if (!extra.empty()) {
    std::istringstream in(extra);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  for (const auto& c : children_) {
    lines.push_back("(" + c.name + "): " + indent_lines(c.module ? c.module->repr() : "None"));
  }
  std::string out = type_name_ + "(";
  if (lines.size() == 1 && children_.empty()) return out + lines[0] + ")";
  if (!lines.empty()) {
    for (const auto& line : lines) out += "\n  " + line;
    out += "\n";
  }
  return out + ")";
}

}  // namespace mf::nn
