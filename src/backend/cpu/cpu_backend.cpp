// The CPU backend: host memory from a caching allocator, memcpy copies.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backend/caching.h"
#include "meshflow/backend.h"
#include "meshflow/error.h"

namespace mf {
namespace {

// Note [CPU caching allocator]: freed blocks are kept in per-size free lists
// and reused by later allocations of the same rounded size, so a training
// loop that allocates the same activations every step stops calling malloc
// after the first one. Sizes are rounded up to a quarter of their power of
// two (at most 25% waste). Blocks above kMaxCachedBytes go straight back.
class CpuCachingAllocator final : public backend_detail::CachingAllocatorBase {
 public:
  ~CpuCachingAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    const size_t rounded = backend_detail::round_size(nbytes, 64);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = backend_detail::take_cached(free_, rounded);
    const bool from_cache = ptr != nullptr;
    if (!from_cache) {
      ptr = std::aligned_alloc(kAlignment, rounded);
      if (!ptr) {
        release_cached_locked();
        ptr = std::aligned_alloc(kAlignment, rounded);
      }
      if (!ptr) throw_out_of_memory(nbytes);
    }
    count_allocation(rounded, from_cache);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    const size_t rounded = backend_detail::round_size(nbytes, 64);
    std::lock_guard<std::mutex> lock(mutex_);
    const bool cache = rounded <= kMaxCachedBytes;
    if (cache) free_[rounded].push_back(ptr);
    else std::free(ptr);
    count_free(rounded, cache);
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

 private:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;

  // PyTorch's message shape: what was asked, what the machine has, what
  // meshflow holds. Called with the lock held.
  [[noreturn]] void throw_out_of_memory(size_t nbytes) const {
    const double total = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    throw OutOfMemoryError(detail::concat(
        "CPU out of memory. Tried to allocate ", backend_detail::format_gib(double(nbytes)), " (", nbytes, " bytes); the machine has ",
        backend_detail::format_gib(total), " of memory, of which meshflow holds ", backend_detail::format_gib(double(stats_.allocated_bytes)), " in tensors"));
  }
  void release_cached_locked() {
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_bytes_ = 0;
  }

  std::map<size_t, std::vector<void*>> free_;
};

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CPU; }
  Allocator& allocator(int index) override { return allocator_; }
  void copy(void* dst, Device, const void* src, Device, size_t nbytes, bool) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  int device_count() const override { return 1; }
  DeviceProperties properties(int) override {
    return DeviceProperties{.name = "cpu", .total_memory = memory_info(0).second,
                            .multi_processor_count = int(sysconf(_SC_NPROCESSORS_ONLN))};
  }
  std::pair<int64_t, int64_t> memory_info(int) override {
    const int64_t page = sysconf(_SC_PAGE_SIZE);
    return {int64_t(sysconf(_SC_AVPHYS_PAGES)) * page, int64_t(sysconf(_SC_PHYS_PAGES)) * page};
  }

 private:
  CpuCachingAllocator allocator_;
};

// Intentionally leaked: tensors held by static objects elsewhere may be freed
// after this file's statics are destroyed.
[[maybe_unused]] const bool kRegistered = [] {
  register_backend(new CpuBackend());
  return true;
}();

}  // namespace
}  // namespace mf
