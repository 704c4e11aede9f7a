#include "meshflow/backend.h"

#include <array>

#include "meshflow/error.h"

namespace mf {

namespace {
std::array<Backend*, kNumDeviceTypes>& backends() {
  static std::array<Backend*, kNumDeviceTypes> table{};
  return table;
}
}  // namespace

void register_backend(Backend* backend) { backends()[size_t(backend->type())] = backend; }

bool has_backend(DeviceType type) { return backends()[size_t(type)] != nullptr; }

Backend& get_backend(DeviceType type) {
  Backend* b = backends()[size_t(type)];
  MF_CHECK(b != nullptr, Error, "device: meshflow was built without the ", device_type_name(type),
           " backend");
  return *b;
}

AllocatorStats memory_stats(Device device) {
  return get_backend(device.type()).allocator(device.index()).stats();
}
void reset_peak_memory_stats(Device device) {
  get_backend(device.type()).allocator(device.index()).reset_peak_stats();
}
void empty_cache(Device device) { get_backend(device.type()).allocator(device.index()).empty_cache(); }

}  // namespace mf
