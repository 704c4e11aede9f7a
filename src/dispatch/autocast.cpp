// The autocast layer of dispatch: state, cast cache and the input casts.
// See Note [Autocast] in autocast.h.
#include "meshflow/autocast.h"

#include <unordered_map>

#include "meshflow/ops/elementwise.h"

namespace mf::autocast {

thread_local bool detail::any_enabled = false;

namespace {

struct CacheEntry {
  std::weak_ptr<TensorImpl> source;
  uint32_t version;
  Tensor cast;
};

struct State {
  std::array<bool, kNumDeviceTypes> enabled{};
  std::array<DType, kNumDeviceTypes> dtype{kBFloat16, kFloat16};
  bool cache_enabled = true;
  int nesting = 0;
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
};

thread_local State state;

void refresh_any_enabled() {
  bool any = false;
  for (bool e : state.enabled) any = any || e;
  detail::any_enabled = any;
}

void check_low_precision(DType dtype) {
  MF_CHECK(dtype == kBFloat16 || dtype == kFloat16, TypeError,
           "autocast: dtype must be bfloat16 or float16, got ", dtype_name(dtype));
}

// The dtype op runs an input of dtype `from` on `device` in, under policy.
DType target_dtype(AutocastPolicy policy, DType from, DeviceType device) {
  if (!is_floating(from) || from == DType::Float64 || !state.enabled[size_t(device)]) return from;
  switch (policy) {
    case AutocastPolicy::LowPrecision:
      return state.dtype[size_t(device)];
    case AutocastPolicy::Fp32:
      return kFloat32;
    case AutocastPolicy::Follow:
      break;
  }
  return from;
}

// A float32 parameter cast to the region's dtype, from the cache when the
// parameter is unchanged since it was cast.
Tensor cached_cast(const Tensor& t, DType dtype) {
  auto it = state.cache.find(t.impl());
  if (it != state.cache.end() && !it->second.source.expired() && it->second.version == t.version() &&
      it->second.cast.dtype() == dtype)
    return it->second.cast;
  Tensor c = cast(t, dtype);
  state.cache[t.impl()] = CacheEntry{t.impl_ptr(), t.version(), c};
  return c;
}

Tensor cast_input(AutocastPolicy policy, const Tensor& t) {
  if (!t.defined()) return t;
  const DType to = target_dtype(policy, t.dtype(), t.device().type());
  if (to == t.dtype()) return t;
  const bool cacheable = policy == AutocastPolicy::LowPrecision && state.cache_enabled && t.dtype() == kFloat32 &&
                         GradMode::is_enabled() && t.is_leaf() && t.requires_grad() && !t.impl()->is_view();
  return cacheable ? cached_cast(t, to) : cast(t, to);
}

}  // namespace

bool is_enabled(DeviceType device) { return state.enabled[size_t(device)]; }

void set_enabled(DeviceType device, bool enabled) {
  state.enabled[size_t(device)] = enabled;
  refresh_any_enabled();
}

DType get_dtype(DeviceType device) { return state.dtype[size_t(device)]; }

void set_dtype(DeviceType device, DType dtype) {
  check_low_precision(dtype);
  state.dtype[size_t(device)] = dtype;
}

bool is_cache_enabled() { return state.cache_enabled; }
void set_cache_enabled(bool enabled) { state.cache_enabled = enabled; }
int increment_nesting() { return ++state.nesting; }
int decrement_nesting() { return --state.nesting; }
void clear_cache() { state.cache.clear(); }
size_t cache_size() { return state.cache.size(); }

DeviceType parse_device_type(std::string_view name) {
  if (name == "cpu") return DeviceType::CPU;
  if (name == "cuda") return DeviceType::CUDA;
  throw ValueError(::mf::detail::concat("autocast: device_type must be 'cpu' or 'cuda', got '", name, "'"));
}

DType default_dtype(DeviceType device) { return device == DeviceType::CPU ? kBFloat16 : kFloat16; }

TensorList cast_inputs(const OpDef& op, const TensorList& inputs) {
  TensorList out;
  out.reserve(inputs.size());
  for (const auto& t : inputs) out.push_back(cast_input(op.autocast, t));
  return out;
}

Tensor cast_for(const OpDef& op, const Tensor& input) {
  return detail::any_enabled ? cast_input(op.autocast, input) : input;
}

}  // namespace mf::autocast

namespace mf {

AutocastGuard::AutocastGuard(DeviceType device, std::optional<DType> dtype, bool enabled, bool cache_enabled)
    : device_(device),
      prev_enabled_(autocast::is_enabled(device)),
      prev_dtype_(autocast::get_dtype(device)),
      prev_cache_enabled_(autocast::is_cache_enabled()) {
  if (dtype) autocast::set_dtype(device, *dtype);
  autocast::set_enabled(device, enabled);
  autocast::set_cache_enabled(cache_enabled);
  autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (autocast::decrement_nesting() == 0) autocast::clear_cache();
  autocast::set_enabled(device_, prev_enabled_);
  autocast::set_dtype(device_, prev_dtype_);
  autocast::set_cache_enabled(prev_cache_enabled_);
}

}  // namespace mf
