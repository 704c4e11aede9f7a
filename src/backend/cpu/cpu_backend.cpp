// The CPU backend: host memory from a caching allocator, memcpy copies.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "meshflow/backend.h"
#include "meshflow/error.h"

namespace mf {
namespace {

// Note [CPU caching allocator]: freed blocks are kept in per-size free lists
// and reused by later allocations of the same rounded size, so a training
// loop that allocates the same activations every step stops calling malloc
// after the first one. Sizes are rounded up to a quarter of their power of
// two (at most 25% waste). Blocks above kMaxCachedBytes go straight back.
class CpuCachingAllocator final : public Allocator {
 public:
  ~CpuCachingAllocator() override { release_cached(); }

  void* allocate(size_t nbytes) override {
    size_t rounded = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.num_allocations++;
    void* ptr = nullptr;
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= int64_t(rounded);
      stats_.num_cache_hits++;
    } else {
      ptr = std::aligned_alloc(kAlignment, rounded);
      if (!ptr) {
        release_cached_locked();
        ptr = std::aligned_alloc(kAlignment, rounded);
      }
      if (!ptr) throw_out_of_memory(nbytes);
    }
    stats_.allocated_bytes += int64_t(rounded);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    size_t rounded = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes -= int64_t(rounded);
    if (rounded <= kMaxCachedBytes) {
      free_[rounded].push_back(ptr);
      cached_bytes_ += int64_t(rounded);
    } else {
      std::free(ptr);
    }
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats s = stats_;
    s.reserved_bytes = s.allocated_bytes + cached_bytes_;
    return s;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
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
        "CPU out of memory. Tried to allocate ", gib(double(nbytes)), " (", nbytes, " bytes); the machine has ",
        gib(total), " of memory, of which meshflow holds ", gib(double(stats_.allocated_bytes)), " in tensors"));
  }
  static std::string gib(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / double(size_t(1) << 30));
    return text;
  }

  static size_t round_size(size_t n) {
    if (n <= 512) return std::max<size_t>(64, (n + 63) & ~size_t(63));
    size_t pow2 = size_t(1) << (63 - __builtin_clzll(n - 1) + 1);  // next power of two >= n
    size_t quarter = pow2 / 8;                                       // quarters of the lower octave
    return (n + quarter - 1) / quarter * quarter;
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }
  void release_cached_locked() {
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_bytes_ = 0;
  }

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  int64_t cached_bytes_ = 0;
  AllocatorStats stats_;
};

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CPU; }
  Allocator& allocator(int index) override { return allocator_; }
  void copy(void* dst, Device, const void* src, Device, size_t nbytes, bool) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  int device_count() const override { return 1; }

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
