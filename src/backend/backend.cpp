#include "meshflow/backend.h"

#include <array>
#include <atomic>
#include <chrono>

#include "meshflow/error.h"

namespace mf {

namespace {
std::array<Backend*, kNumDeviceTypes>& backends() {
  static std::array<Backend*, kNumDeviceTypes> table{};
  return table;
}

// The event of a backend whose work is done when issued: a time stamp.
class HostEvent final : public DeviceEvent {
 public:
  explicit HostEvent(bool timing) : timing_(timing) {}
  void record(const Stream&) override {
    time_ = std::chrono::steady_clock::now();
    recorded_ = true;
  }
  void block(const Stream&) override {}
  bool query() override { return true; }
  void synchronize() override {}
  double elapsed_ms(DeviceEvent& end) override {
    auto* other = dynamic_cast<HostEvent*>(&end);
    MF_CHECK(other != nullptr, Error, "Event.elapsed_time: both events must be of one device type");
    MF_CHECK(timing_ && other->timing_, Error,
             "Event.elapsed_time: both events must be created with enable_timing=True");
    MF_CHECK(recorded_ && other->recorded_, Error, "Event.elapsed_time: both events must be recorded first");
    return std::chrono::duration<double, std::milli>(other->time_ - time_).count();
  }

 private:
  bool timing_;
  bool recorded_ = false;
  std::chrono::steady_clock::time_point time_{};
};
}  // namespace

void Backend::set_current_stream(const Stream& stream) {
  MF_CHECK(stream.device.type() == type(), Error, "set_stream: a ", stream.device,
           " stream given to the ", device_type_name(type()), " backend");
  // Work is done when issued: every stream of this device is the same queue.
}

Stream Backend::create_stream(int index) {
  static std::atomic<int64_t> next{1};
  return Stream{Device(type(), index), next.fetch_add(1)};
}

std::unique_ptr<DeviceEvent> Backend::create_event(int, bool enable_timing) {
  return std::make_unique<HostEvent>(enable_timing);
}

DeviceProperties Backend::properties(int) { return DeviceProperties{.name = device_type_name(type())}; }

std::pair<int64_t, int64_t> Backend::memory_info(int) { return {0, 0}; }

Backend* replace_backend(DeviceType type, Backend* backend) {
  MF_CHECK(backend == nullptr || backend->type() == type, Error, "replace_backend: a ",
           device_type_name(backend->type()), " backend given for ", device_type_name(type));
  Backend*& slot = backends()[size_t(type)];
  Backend* previous = slot;
  slot = backend;
  return previous;
}

Backend* register_backend(Backend* backend) { return replace_backend(backend->type(), backend); }

bool has_backend(DeviceType type) { return backends()[size_t(type)] != nullptr; }

Backend& get_backend(DeviceType type) {
  Backend* b = backends()[size_t(type)];
  MF_CHECK(b != nullptr, Error, "device: meshflow was built without the ", device_type_name(type),
           " backend");
  return *b;
}

void check_device(Device device, const char* op) {
  MF_CHECK(has_backend(device.type()), Error, op, ": meshflow was built without the ", device_type_name(device.type()),
           " backend (", device, " is not available)");
  Backend& backend = get_backend(device.type());
  const int count = backend.device_count();
  MF_CHECK(count > 0, Error, op, ": no ", device_type_name(device.type()),
           " device is available (meshflow's ", device_type_name(device.type()),
           " backend is built, but found no device or driver)");
  MF_CHECK(device.index() >= 0 && device.index() < count, Error, op, ": device ", device, " does not exist (",
           count, " ", device_type_name(device.type()), " device", count == 1 ? "" : "s", ")");
}

AllocatorStats memory_stats(Device device) {
  return get_backend(device.type()).allocator(device.index()).stats();
}
void reset_peak_memory_stats(Device device) {
  get_backend(device.type()).allocator(device.index()).reset_peak_stats();
}
void empty_cache(Device device) { get_backend(device.type()).allocator(device.index()).empty_cache(); }

}  // namespace mf
