// Device memory allocators. Each backend owns one caching allocator whose
// statistics (current and peak bytes) are what memory benchmarks read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meshflow/device.h"

namespace mf {

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // bytes handed out and not yet freed
  int64_t peak_allocated_bytes = 0;  // maximum of allocated_bytes since reset
  int64_t reserved_bytes = 0;        // allocated plus cached for reuse
  int64_t num_allocations = 0;       // calls to allocate()
  int64_t num_cache_hits = 0;        // allocations served from the cache
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory aligned to 64 bytes; nbytes may be 0.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak_stats() = 0;
  // Returns cached blocks to the system.
  virtual void empty_cache() = 0;
  // Page-locked host memory (Backend::pinned_host_allocator).
  virtual bool pinned() const { return false; }
};

}  // namespace mf
