// A reference-counted buffer. Views share one Storage; its version counter
// is bumped by every in-place write so autograd can detect stale saves.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "meshflow/allocator.h"
#include "meshflow/device.h"

namespace mf {

class StorageImpl {
 public:
  // Memory from a device allocator, returned to it on destruction.
  StorageImpl(size_t nbytes, Device device, Allocator* allocator);
  // Memory owned elsewhere (a numpy array, a DLPack capsule): deleter(ctx) is
  // called when the last reference goes.
  StorageImpl(void* data, size_t nbytes, Device device, void (*deleter)(void* ctx), void* ctx);
  // Storage with no memory: the tensors of a traced graph carry only metadata.
  StorageImpl(size_t nbytes, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool has_data() const { return data_ != nullptr || nbytes_ == 0; }
  // Host memory from a backend's pinned allocator (Tensor.pin_memory()).
  bool pinned() const { return allocator_ != nullptr && allocator_->pinned(); }

  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  void (*deleter_)(void*) = nullptr;
  void* deleter_ctx_ = nullptr;
  std::atomic<uint32_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace mf
