// The CUDA backend's device verbs (Note [Device backends] in
// meshflow/backend.h): stream-aware caching allocators, pinned host memory,
// copies, streams and events, on the CUDA runtime.
//
// Note [CUDA backend]: the runtime is linked statically and loads the
// driver on the first call, so importing meshflow works on a machine with
// no driver; device_count() is 0 there and every use of a CUDA device is a
// clear error (check_device). Each device's default stream is the legacy
// stream 0; create_stream() gives non-blocking streams, and the current
// stream is per thread and device. A block of device memory belongs to the
// stream it was allocated on: freed, it is reused only by allocations on
// that stream, so work queued on one stream never sees its memory handed to
// another while it runs. A pinned host block that a non-blocking copy reads
// or writes is reused only after the copy's event has completed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/caching.h"
#include "backend/cuda/cuda_runtime.h"
#include "meshflow/backend.h"
#include "meshflow/error.h"

namespace mf {
namespace {

using cuda::check_cuda;
using cuda::DeviceGuard;

using backend_detail::format_gib;
size_t round_size(size_t n) { return backend_detail::round_size(n, 512); }

class CudaBackend;

// Device memory of one device (Note [CUDA backend]).
class CudaCachingAllocator final : public backend_detail::CachingAllocatorBase {
 public:
  CudaCachingAllocator(CudaBackend& backend, int device) : backend_(backend), device_(device) {}
  ~CudaCachingAllocator() override = default;  // the driver frees device memory at exit

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

 private:
  void release_cached_locked() {
    DeviceGuard guard(device_);
    for (auto& [key, blocks] : free_)
      for (void* p : blocks) (void)cudaFree(p);
    free_.clear();
    cached_bytes_ = 0;
  }

  CudaBackend& backend_;
  int device_;
  // (stream id, rounded size) -> free blocks
  std::map<std::pair<int64_t, size_t>, std::vector<void*>> free_;
  std::unordered_map<void*, int64_t> stream_of_;  // live block -> its stream
};

// Page-locked host memory; blocks wait for the copies that use them.
class PinnedHostAllocator final : public backend_detail::CachingAllocatorBase {
 public:
  void* allocate(size_t nbytes) override {
    const size_t rounded = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    reclaim_locked();
    void* ptr = backend_detail::take_cached(free_, rounded);
    const bool from_cache = ptr != nullptr;
    if (!from_cache) {
      check_cuda(cudaHostAlloc(&ptr, rounded, cudaHostAllocDefault), "cudaHostAlloc");
    }
    blocks_[reinterpret_cast<uintptr_t>(ptr)] = rounded;
    count_allocation(rounded, from_cache);
    return ptr;
  }
  // A block that pending copies still use is cached only once they are
  // done (reclaim_locked); until then it counts as neither.
  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t rounded = round_size(nbytes);
    auto uses = uses_.find(ptr);
    const bool in_use = uses != uses_.end();
    if (in_use) {
      pending_.push_back({ptr, rounded, std::move(uses->second)});
      uses_.erase(uses);
    } else {
      free_[rounded].push_back(ptr);
    }
    count_free(rounded, !in_use);
    blocks_.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    reclaim_locked();
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) (void)cudaFreeHost(p);
    free_.clear();
    cached_bytes_ = 0;
  }
  bool pinned() const override { return true; }

  // Whether ptr lies in a live pinned block.
  bool owns(const void* ptr) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return block_of_locked(ptr) != nullptr;
  }
  // A non-blocking copy queued on `stream` reads or writes the block of ptr.
  void record_use(const void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    void* base = block_of_locked(ptr);
    if (!base) return;
    cudaEvent_t event;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(event, stream), "cudaEventRecord");
    uses_[base].push_back(event);
  }

 private:
  struct Pending {
    void* ptr;
    size_t rounded;
    std::vector<cudaEvent_t> events;
  };
  void* block_of_locked(const void* ptr) const {
    auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return nullptr;
    --it;
    return p < it->first + it->second ? reinterpret_cast<void*>(it->first) : nullptr;
  }
  // Blocks whose copies are done go back to the free lists.
  void reclaim_locked() {
    for (size_t i = 0; i < pending_.size();) {
      bool done = true;
      for (cudaEvent_t e : pending_[i].events) done = done && cudaEventQuery(e) == cudaSuccess;
      if (!done) {
        ++i;
        continue;
      }
      for (cudaEvent_t e : pending_[i].events) (void)cudaEventDestroy(e);
      free_[pending_[i].rounded].push_back(pending_[i].ptr);
      cached_bytes_ += int64_t(pending_[i].rounded);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    }
  }

  std::map<size_t, std::vector<void*>> free_;
  std::map<uintptr_t, size_t> blocks_;  // live blocks: base -> rounded size
  std::unordered_map<void*, std::vector<cudaEvent_t>> uses_;
  std::vector<Pending> pending_;
};

class CudaEvent final : public DeviceEvent {
 public:
  CudaEvent(CudaBackend& backend, int device, bool timing);
  ~CudaEvent() override { (void)cudaEventDestroy(event_); }
  void record(const Stream& stream) override;
  void block(const Stream& stream) override;
  bool query() override {
    cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check_cuda(status, "cudaEventQuery");
    return true;
  }
  void synchronize() override { check_cuda(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  double elapsed_ms(DeviceEvent& end) override {
    auto* other = dynamic_cast<CudaEvent*>(&end);
    MF_CHECK(other != nullptr, Error, "Event.elapsed_time: both events must be CUDA events");
    MF_CHECK(timing_ && other->timing_, Error,
             "Event.elapsed_time: both events must be created with enable_timing=True");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, event_, other->event_), "cudaEventElapsedTime");
    return double(ms);
  }

 private:
  CudaBackend& backend_;
  int device_;
  bool timing_;
  cudaEvent_t event_{};
};

class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CUDA; }

  int device_count() const override {
    std::call_once(count_once_, [this] {
      int count = 0;
      if (cudaGetDeviceCount(&count) != cudaSuccess) {  // no driver or no device
        (void)cudaGetLastError();
        count = 0;
      }
      count_ = count;
    });
    return count_;
  }

  Allocator& allocator(int index) override {
    check_device(Device(DeviceType::CUDA, index), "cuda allocator");
    std::lock_guard<std::mutex> lock(mutex_);
    if (allocators_.size() < size_t(count_)) allocators_.resize(size_t(count_));
    auto& slot = allocators_[size_t(index)];
    if (!slot) slot = std::make_unique<CudaCachingAllocator>(*this, index);
    return *slot;
  }

  Allocator* pinned_host_allocator() override { return device_count() > 0 ? &pinned_ : nullptr; }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
            bool non_blocking) override {
    if (nbytes == 0) return;
    const Device side = dst_device.is_cpu() ? src_device : dst_device;
    DeviceGuard guard(side.index());
    cudaStream_t stream = cuda_stream(current_stream(side.index()));
    check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
    const void* host = dst_device.is_cpu() ? dst : (src_device.is_cpu() ? src : nullptr);
    const bool host_pinned = host != nullptr && pinned_.owns(host);
    // A copy between devices, or from or to pinned memory, may stay queued;
    // one from or to pageable memory is done when cudaMemcpyAsync returns
    // to a host that then reuses the buffer, so it waits.
    if (non_blocking && (host == nullptr || host_pinned)) {
      if (host_pinned) pinned_.record_use(host, stream);
      return;
    }
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

  void synchronize(int index) override {
    check_device(Device(DeviceType::CUDA, index), "cuda.synchronize");
    DeviceGuard guard(index);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  Stream current_stream(int index) override {
    auto& current = current_streams();
    auto it = current.find(index);
    return Stream{Device(DeviceType::CUDA, index), it == current.end() ? 0 : it->second};
  }
  void set_current_stream(const Stream& stream) override {
    MF_CHECK(stream.device.type() == DeviceType::CUDA, Error, "cuda.set_stream: a ", stream.device,
             " stream given to the CUDA backend");
    cuda_stream(stream);  // checks the stream exists
    current_streams()[stream.device.index()] = stream.id;
  }
  Stream create_stream(int index) override {
    check_device(Device(DeviceType::CUDA, index), "cuda.Stream");
    DeviceGuard guard(index);
    cudaStream_t s;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.push_back({index, s});
    return Stream{Device(DeviceType::CUDA, index), int64_t(streams_.size())};
  }
  void synchronize_stream(const Stream& stream) override {
    check_cuda(cudaStreamSynchronize(cuda_stream(stream)), "cudaStreamSynchronize");
  }
  std::unique_ptr<DeviceEvent> create_event(int index, bool enable_timing) override {
    check_device(Device(DeviceType::CUDA, index), "cuda.Event");
    return std::make_unique<CudaEvent>(*this, index, enable_timing);
  }

  DeviceProperties properties(int index) override {
    check_device(Device(DeviceType::CUDA, index), "cuda.get_device_properties");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    return DeviceProperties{.name = prop.name, .total_memory = int64_t(prop.totalGlobalMem), .major = prop.major,
                            .minor = prop.minor, .multi_processor_count = prop.multiProcessorCount};
  }
  std::pair<int64_t, int64_t> memory_info(int index) override {
    check_device(Device(DeviceType::CUDA, index), "cuda.mem_get_info");
    DeviceGuard guard(index);
    size_t free_bytes = 0, total = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
    return {int64_t(free_bytes), int64_t(total)};
  }

  // The runtime's handle of a stream (id 0: the legacy default stream).
  cudaStream_t cuda_stream(const Stream& stream) {
    if (stream.id == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    MF_CHECK(stream.id > 0 && size_t(stream.id) <= streams_.size() &&
                 streams_[size_t(stream.id - 1)].first == stream.device.index(),
             Error, "cuda: stream ", stream.id, " of ", stream.device, " does not exist");
    return streams_[size_t(stream.id - 1)].second;
  }

 private:
  static std::unordered_map<int, int64_t>& current_streams() {
    thread_local std::unordered_map<int, int64_t> table;
    return table;
  }

  mutable std::once_flag count_once_;
  mutable int count_ = 0;
  std::mutex mutex_;
  std::vector<std::unique_ptr<CudaCachingAllocator>> allocators_;
  std::vector<std::pair<int, cudaStream_t>> streams_;  // id - 1 -> (device, stream)
  PinnedHostAllocator pinned_;
};

void* CudaCachingAllocator::allocate(size_t nbytes) {
  const size_t rounded = round_size(nbytes);
  const int64_t stream = backend_.current_stream(device_).id;
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = backend_detail::take_cached(free_, std::make_pair(stream, rounded));
  const bool from_cache = ptr != nullptr;
  if (!from_cache) {
    DeviceGuard guard(device_);
    cudaError_t status = cudaMalloc(&ptr, rounded);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      // Blocks cached for any stream go back: wait for their work first.
      (void)cudaDeviceSynchronize();
      release_cached_locked();
      status = cudaMalloc(&ptr, rounded);
    }
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total = 0;
      (void)cudaMemGetInfo(&free_bytes, &total);
      throw OutOfMemoryError(detail::concat("CUDA out of memory. Tried to allocate ", format_gib(double(nbytes)),
                                            " (", nbytes, " bytes) on cuda:", device_, "; the device has ",
                                            format_gib(double(total)), ", of which ", format_gib(double(free_bytes)),
                                            " is free and meshflow holds ",
                                            format_gib(double(stats_.allocated_bytes)), " in tensors"));
    }
    check_cuda(status, "cudaMalloc");
  }
  stream_of_[ptr] = stream;
  count_allocation(rounded, from_cache);
  return ptr;
}

void CudaCachingAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t rounded = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = stream_of_.find(ptr);
  const int64_t stream = it == stream_of_.end() ? 0 : it->second;
  if (it != stream_of_.end()) stream_of_.erase(it);
  free_[{stream, rounded}].push_back(ptr);
  count_free(rounded, true);
}

CudaEvent::CudaEvent(CudaBackend& backend, int device, bool timing)
    : backend_(backend), device_(device), timing_(timing) {
  DeviceGuard guard(device);
  check_cuda(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
             "cudaEventCreate");
}

void CudaEvent::record(const Stream& stream) {
  MF_CHECK(stream.device == Device(DeviceType::CUDA, device_), Error, "Event.record: the event is of cuda:", device_,
           ", the stream of ", stream.device);
  DeviceGuard guard(device_);
  check_cuda(cudaEventRecord(event_, backend_.cuda_stream(stream)), "cudaEventRecord");
}

void CudaEvent::block(const Stream& stream) {
  DeviceGuard guard(stream.device.index());
  check_cuda(cudaStreamWaitEvent(backend_.cuda_stream(stream), event_, 0), "cudaStreamWaitEvent");
}

// Intentionally leaked, as the CPU backend (tensors may outlive statics).
CudaBackend* const kBackend = [] {
  auto* backend = new CudaBackend();
  register_backend(backend);
  return backend;
}();

}  // namespace

cudaStream_t cuda::current_stream(int device) { return kBackend->cuda_stream(kBackend->current_stream(device)); }
}  // namespace mf
