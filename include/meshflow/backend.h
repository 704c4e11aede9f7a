// The device-backend interface. A backend is one folder under src/backend/
// that registers an instance of this table at load time; nothing else in
// meshflow names a particular device. Kernels are registered per device type
// in each op's OpDef (OpRegistry::set_kernel).
//
// Note [Device backends]: a backend gives meshflow the verbs of one device
// type and nothing more:
//   * memory: a caching allocator per device (stream-aware where the device
//     has streams: a freed block is reused first by work on the stream it
//     was last used on), and optionally pinned host memory for copies that
//     do not wait;
//   * copies between its devices and the host (`copy`), on the current
//     stream, waiting for the copy unless asked not to;
//   * streams (ordered queues of work) and events (markers recorded on a
//     stream that other streams or the host wait for);
//   * the number of devices, asked lazily: a backend built in but without a
//     driver or a device answers 0 and loads nothing until asked.
// The CPU backend runs every piece of work when it is issued: it has one
// stream per device, events are time stamps, and waiting returns at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "meshflow/allocator.h"
#include "meshflow/device.h"

namespace mf {

// An ordered queue of work on one device. id 0 is the device's default
// stream; the backend gives out others (Backend::create_stream).
struct Stream {
  Device device;
  int64_t id = 0;
  bool operator==(const Stream& o) const { return device == o.device && id == o.id; }
};

// A marker in a stream's work: done once the work queued before its
// record() has run.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void record(const Stream& stream) = 0;
  // Work queued on `stream` after this call starts only after the event.
  virtual void block(const Stream& stream) = 0;
  virtual bool query() = 0;
  virtual void synchronize() = 0;  // the host waits for the event
  // Milliseconds between this event and a later one (both recorded).
  virtual double elapsed_ms(DeviceEvent& end) = 0;
};

// What a device is (torch.cuda.get_device_properties' fields).
struct DeviceProperties {
  std::string name;
  int64_t total_memory = 0;  // bytes
  int major = 0, minor = 0;  // compute capability (CUDA)
  int multi_processor_count = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  // Number of devices of this type on this machine (0: none usable).
  virtual int device_count() const = 0;
  // The caching allocator of device `index`.
  virtual Allocator& allocator(int index) = 0;
  // Page-locked host memory the device copies from and to without a
  // staging buffer; null when the backend has none.
  virtual Allocator* pinned_host_allocator() { return nullptr; }
  // Copies nbytes between two buffers of this backend or between this
  // backend and host memory, on the current stream of the device side.
  // Returns once the copy is done, or (non_blocking, where the backend can)
  // once it is queued: the host buffer must then stay alive and unchanged
  // until the stream has run it.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                    bool non_blocking) = 0;
  // Waits until all work queued on device `index` is done.
  virtual void synchronize(int index) {}
  // Streams: the current one of a device (the default stream unless set).
  virtual Stream current_stream(int index) { return Stream{Device(type(), index), 0}; }
  virtual void set_current_stream(const Stream& stream);
  virtual Stream create_stream(int index);
  virtual void synchronize_stream(const Stream& stream) { synchronize(stream.device.index()); }
  virtual std::unique_ptr<DeviceEvent> create_event(int index, bool enable_timing);
  // The device's name, memory and (CUDA) compute capability.
  virtual DeviceProperties properties(int index);
  // (free, total) bytes of the device's memory.
  virtual std::pair<int64_t, int64_t> memory_info(int index);
};

// Registers a backend (a static initialiser in its folder calls this) and
// returns the one it replaces, or null.
Backend* register_backend(Backend* backend);
// Puts `backend` (null: none) in the slot of `type` and returns what was
// there: a test stands in an emulated device this way and restores it.
Backend* replace_backend(DeviceType type, Backend* backend);
// The backend of a device type; throws mf::Error if none is built.
Backend& get_backend(DeviceType type);

// For tests on a machine without a GPU (Note [Emulated device] in
// src/backend/emulated/emulated.h): replaces the CUDA backend by `devices`
// devices whose memory is host memory, every CUDA kernel by the shared
// device kernels run serially on the host (or the CPU kernel where the CUDA
// one is the CUDA backend's own). Once per process; a second call must ask
// for the same number of devices.
void emulate_cuda(int devices);
bool has_backend(DeviceType type);
// Checks that `device` names a device this process can use: its backend is
// built and the index is below its device count (op names the caller).
void check_device(Device device, const char* op);

// Statistics of the allocator of `device`.
AllocatorStats memory_stats(Device device = Device());
void reset_peak_memory_stats(Device device = Device());
void empty_cache(Device device = Device());

}  // namespace mf
