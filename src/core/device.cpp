#include "meshflow/device.h"

#include <cctype>

#include "meshflow/error.h"

namespace mf {

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
  }
  return "unknown";
}

Device::Device(DeviceType type, int index) : type_(type), index_(index) {
  MF_CHECK(index >= 0, ValueError, "Device: index must be non-negative, got ", index);
  MF_CHECK(type != DeviceType::CPU || index == 0, ValueError,
           "Device: CPU device index must be zero, got ", index);
}

Device::Device(const std::string& spec) {
  auto colon = spec.find(':');
  std::string type = spec.substr(0, colon);
  if (type == "cpu") type_ = DeviceType::CPU;
  else if (type == "cuda") type_ = DeviceType::CUDA;
  else throw ValueError("Device: expected a device type 'cpu' or 'cuda', got '" + spec + "'");
  if (colon != std::string::npos) {
    std::string idx = spec.substr(colon + 1);
    bool digits = !idx.empty() && idx.size() < 9;
    for (char c : idx) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    MF_CHECK(digits, ValueError, "Device: invalid device index in '", spec, "'");
    *this = Device(type_, std::stoi(idx));
  }
}

std::string Device::str() const {
  if (type_ == DeviceType::CPU) return "cpu";
  return std::string(device_type_name(type_)) + ":" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace mf
