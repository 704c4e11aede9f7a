// What the backends' caching allocators share (Note [CPU caching
// allocator], Note [CUDA backend]): the size classes and the statistics.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "meshflow/allocator.h"

namespace mf::backend_detail {

// Sizes are rounded up to a quarter of their power of two (at most 25%
// waste) and to at least `smallest` bytes (a multiple of 64).
inline size_t round_size(size_t n, size_t smallest) {
  if (n <= smallest) return smallest;
  if (n <= 512) return (n + 63) & ~size_t(63);
  size_t pow2 = size_t(1) << (63 - __builtin_clzll(n - 1) + 1);  // next power of two >= n
  size_t quarter = pow2 / 8;                                       // quarters of the lower octave
  return (n + quarter - 1) / quarter * quarter;
}

// "1.50 GiB", for out-of-memory messages.
inline std::string format_gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / double(size_t(1) << 30));
  return text;
}

// Takes a block from free_lists[key] (a map of block lists), or null.
template <class FreeLists, class Key>
void* take_cached(FreeLists& free_lists, const Key& key) {
  auto it = free_lists.find(key);
  if (it == free_lists.end() || it->second.empty()) return nullptr;
  void* ptr = it->second.back();
  it->second.pop_back();
  return ptr;
}

// An allocator that keeps freed blocks for reuse: the statistics and the
// lock its subclass's allocate/deallocate hold.
class CachingAllocatorBase : public Allocator {
 public:
  AllocatorStats stats() const final {
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats s = stats_;
    s.reserved_bytes = s.allocated_bytes + cached_bytes_;
    return s;
  }
  void reset_peak_stats() final {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

 protected:
  // With mutex_ held: a block of `rounded` bytes handed out (from_cache: it
  // was a cached block), or one taken back into the cache.
  void count_allocation(size_t rounded, bool from_cache) {
    stats_.num_allocations++;
    if (from_cache) {
      stats_.num_cache_hits++;
      cached_bytes_ -= int64_t(rounded);
    }
    stats_.allocated_bytes += int64_t(rounded);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  }
  void count_free(size_t rounded, bool cached) {
    stats_.allocated_bytes -= int64_t(rounded);
    if (cached) cached_bytes_ += int64_t(rounded);
  }

  mutable std::mutex mutex_;
  int64_t cached_bytes_ = 0;
  AllocatorStats stats_;
};

}  // namespace mf::backend_detail
