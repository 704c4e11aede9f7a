// The device-backend interface. A backend is one folder under src/backend/
// that registers an instance of this table at load time; nothing else in
// meshflow names a particular device. Kernels are registered per device type
// in each op's OpDef.
#pragma once

#include <cstddef>

#include "meshflow/allocator.h"
#include "meshflow/device.h"

namespace mf {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  // The caching allocator of device `index`.
  virtual Allocator& allocator(int index) = 0;
  // Copies nbytes between two buffers of this backend or between this
  // backend and host memory. Completes before returning (for now).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t nbytes) = 0;
  // Waits until all work queued on the device is done. (optional: CPU is synchronous)
  virtual void synchronize(int index) {}
  // Number of devices of this type on this machine.
  virtual int device_count() const = 0;
};

// Registers a backend; called from a static initialiser in its folder.
void register_backend(Backend* backend);
// The backend of a device type; throws mf::Error if none is built.
Backend& get_backend(DeviceType type);
bool has_backend(DeviceType type);

// Statistics of the allocator of `device`.
AllocatorStats memory_stats(Device device = Device());
void reset_peak_memory_stats(Device device = Device());
void empty_cache(Device device = Device());

}  // namespace mf
