// Attrs and the op registry.
#include <algorithm>
#include <mutex>
#include <sstream>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/op_def.h"

namespace mf {

// --- AttrValue / Attrs ---------------------------------------------------------

std::string AttrValue::str() const {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) os << (v ? "true" : "false");
        else if constexpr (std::is_same_v<V, Shape>) os << shape_str(v);
        else if constexpr (std::is_same_v<V, DType>) os << dtype_name(v);
        else if constexpr (std::is_same_v<V, std::string>) os << '"' << v << '"';
        else if constexpr (std::is_same_v<V, Scalar>) os << v.str();
        else if constexpr (std::is_same_v<V, Device>) os << v.str();
        else os << v;
      },
      v_);
  return os.str();
}

Attrs& Attrs::set(std::string key, AttrValue value) {
  for (auto& [k, v] : items_)
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  items_.emplace_back(std::move(key), std::move(value));
  return *this;
}

const AttrValue* Attrs::find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

const AttrValue& Attrs::at(std::string_view key) const {
  const AttrValue* v = find(key);
  MF_CHECK(v != nullptr, Error, "op attribute '", key, "' is missing (have: ", str(), ")");
  return *v;
}

namespace {
template <typename T>
const T& get_as(const AttrValue& v, std::string_view key, const char* want) {
  const T* p = std::get_if<T>(&v.value());
  MF_CHECK(p != nullptr, TypeError, "op attribute '", key, "' should be ", want, ", got ", v.str());
  return *p;
}
}  // namespace

int64_t Attrs::get_int(std::string_view key) const {
  const auto& v = at(key);
  if (const bool* b = std::get_if<bool>(&v.value())) return *b;
  return get_as<int64_t>(v, key, "an integer");
}
double Attrs::get_float(std::string_view key) const {
  const auto& v = at(key);
  if (const int64_t* i = std::get_if<int64_t>(&v.value())) return double(*i);
  return get_as<double>(v, key, "a float");
}
bool Attrs::get_bool(std::string_view key) const { return get_as<bool>(at(key), key, "a bool"); }
const Shape& Attrs::get_shape(std::string_view key) const { return get_as<Shape>(at(key), key, "a list of ints"); }
DType Attrs::get_dtype(std::string_view key) const { return get_as<DType>(at(key), key, "a dtype"); }
const std::string& Attrs::get_string(std::string_view key) const {
  return get_as<std::string>(at(key), key, "a string");
}
Device Attrs::get_device(std::string_view key) const { return get_as<Device>(at(key), key, "a device"); }
Scalar Attrs::get_scalar(std::string_view key) const {
  const auto& v = at(key);
  if (const int64_t* i = std::get_if<int64_t>(&v.value())) return Scalar(*i);
  if (const double* d = std::get_if<double>(&v.value())) return Scalar(*d);
  if (const bool* b = std::get_if<bool>(&v.value())) return Scalar(*b);
  return get_as<Scalar>(v, key, "a number");
}

std::string Attrs::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < items_.size(); ++i) os << (i ? ", " : "") << items_[i].first << "=" << items_[i].second.str();
  return os.str();
}

// --- OpRegistry ------------------------------------------------------------------

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

OpRegistry& OpRegistry::instance() {
  static OpRegistry* registry = new OpRegistry();  // leaked: used by static destructors
  return *registry;
}

void OpRegistry::add(OpDef op) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& existing : ops_)
    MF_CHECK(existing->name != op.name, Error, "OpRegistry: op '", op.name, "' is registered twice");
  if (op.elementwise && !op.sbp) op.sbp = sbp::elementwise();
  // Kernels a backend folder registered before the op (static initialisers
  // of different files run in any order).
  for (auto it = pending_.begin(); it != pending_.end();)
    if (it->op == op.name) {
      op.kernels[size_t(it->device)] = std::move(it->kernel);
      op.scratch[size_t(it->device)] = std::move(it->scratch);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  ops_.push_back(std::make_unique<OpDef>(std::move(op)));
}

void OpRegistry::set_kernel(std::string_view name, DeviceType device, KernelFn kernel, ScratchFn scratch) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (auto& op : ops_)
    if (op->name == name) {
      op->kernels[size_t(device)] = std::move(kernel);
      op->scratch[size_t(device)] = std::move(scratch);
      return;
    }
  pending_.push_back({std::string(name), device, std::move(kernel), std::move(scratch)});
}

const OpDef* OpRegistry::find(std::string_view name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& op : ops_)
    if (op->name == name) return op.get();
  return nullptr;
}

const OpDef& OpRegistry::get(std::string_view name) {
  static const bool validated = (validate(), true);
  (void)validated;
  if (const OpDef* op = find(name)) return *op;
  std::ostringstream os;
  os << "OpRegistry: no op named '" << name << "'";
  throw Error(os.str());
}

std::vector<const OpDef*> OpRegistry::all() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<const OpDef*> out;
  for (const auto& op : ops_) out.push_back(op.get());
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

std::array<std::vector<std::string>, kNumDeviceTypes> OpRegistry::validate() const {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::array<std::vector<std::string>, kNumDeviceTypes> missing;
  MF_CHECK(pending_.empty(), Error, "OpRegistry: a ", device_type_name(pending_.empty() ? DeviceType::CPU
                                                                                    : pending_[0].device),
           " kernel was registered for unknown op '", pending_.empty() ? "" : pending_[0].op, "'");
  for (const auto& op : ops_) {
    for (int type = 0; type < kNumDeviceTypes; ++type)
      if (!op->view && !op->kernels[size_t(type)]) missing[size_t(type)].push_back(op->name);
    MF_CHECK(bool(op->infer), Error, "OpRegistry: op '", op->name, "' has no infer function");
    bool has_kernel = bool(op->kernels[size_t(DeviceType::CPU)]);
    MF_CHECK(bool(op->view) != has_kernel, Error, "OpRegistry: op '", op->name,
             "' must have exactly one of a view function and a CPU kernel");
    MF_CHECK(!op->differentiable || bool(op->backward), Error, "OpRegistry: op '", op->name,
             "' is differentiable but has no backward (declare differentiable = false if it has none)");
    MF_CHECK(!op->inplace || has_kernel, Error, "OpRegistry: op '", op->name,
             "' is marked in-place but has no kernel");
    MF_CHECK(bool(op->sbp) || op->collective || (op->inputs.empty() && !op->variadic), Error, "OpRegistry: op '", op->name,
             "' has inputs but no SBP rule (declare sbp = sbp::broadcast_only() if it runs only broadcast)");
    MF_CHECK(op->variadic || op->inputs.size() >= 32 || (op->mutates >> op->inputs.size()) == 0, Error,
             "OpRegistry: op '", op->name, "' declares a written input past its ", op->inputs.size(), " inputs");
    MF_CHECK(!op->elementwise || !op->view, Error, "OpRegistry: op '", op->name, "' is a view and cannot be elementwise");
  }
  for (auto& names : missing) std::sort(names.begin(), names.end());
  return missing;
}

}  // namespace mf
