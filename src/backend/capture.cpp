// The registry of Note [Captured steps].
#include "backend/capture.h"

#include <array>
#include <mutex>

namespace mf {
namespace {

std::mutex& capture_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::array<CaptureFn, kNumDeviceTypes>& captures() {
  static std::array<CaptureFn, kNumDeviceTypes> fns;
  return fns;
}

}  // namespace

void register_capture(DeviceType type, CaptureFn fn) {
  std::lock_guard<std::mutex> lock(capture_mutex());
  captures()[size_t(type)] = std::move(fn);
}

std::unique_ptr<CapturedWork> capture(const Device& device, const std::function<void()>& work) {
  CaptureFn fn;
  {
    std::lock_guard<std::mutex> lock(capture_mutex());
    fn = captures()[size_t(device.type())];
  }
  return fn ? fn(device.index(), work) : nullptr;
}

}  // namespace mf
