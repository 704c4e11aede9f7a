// Where a tensor lives: a device type and an index.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace mf {

enum class DeviceType : uint8_t { CPU, CUDA };
inline constexpr int kNumDeviceTypes = 2;

const char* device_type_name(DeviceType type);

class Device {
 public:
  Device() = default;
  // "cpu", "cuda", "cuda:1".
  Device(const std::string& spec);  // NOLINT: implicit, like torch.device("cpu")
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT
  Device(DeviceType type, int index = 0);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  std::string str() const;
  bool operator==(const Device& o) const { return type_ == o.type_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace mf
