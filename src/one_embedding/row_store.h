// Where a TableSet's rows live: all in memory, or an LRU cache in memory
// over a file (Note [Cached rows]).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace mf::one_embedding {

struct Key {
  uint64_t id;
  uint64_t table;
  bool operator==(const Key&) const = default;
};

uint64_t splitmix64(uint64_t x);

struct KeyHash {
  size_t operator()(const Key& k) const { return size_t(splitmix64(k.id ^ splitmix64(k.table))); }
};

// Rows of `stride()` bytes keyed by (id, table). A pointer a call returns
// stays valid until the next find or insert (the cached store may evict).
class RowStore {
 public:
  virtual ~RowStore() = default;
  // The row of key (read in from the file if needed), or nullptr.
  virtual char* find(const Key& key) = 0;
  // A new row for key (absent before); its bytes are the caller's to fill.
  virtual char* insert(const Key& key) = 0;
  virtual int64_t size() const = 0;
  virtual int64_t stride() const = 0;
  // How many distinct rows one batch may touch (the cache's rows; no limit
  // in memory).
  virtual int64_t batch_limit() const = 0;
  // Calls fn with every row.
  virtual void for_each(const std::function<void(const Key&, const char*)>& fn) = 0;
  virtual void clear() = 0;
  // Rows become new_stride bytes: the old bytes first, then fill(row_tail).
  virtual void restride(int64_t new_stride, const std::function<void(char*)>& fill) = 0;
};

std::unique_ptr<RowStore> memory_row_store(int64_t stride);
// Note [Cached rows]: an LRU cache of cache_bytes in memory over the file
// `path` (made anew); rows evicted from the cache are written to their slot
// in the file when they changed, and read back when looked up again. The
// file is read and written a row at a time (pread/pwrite), never loaded
// whole.
std::unique_ptr<RowStore> cached_row_store(int64_t stride, int64_t cache_bytes, const std::string& path);

}  // namespace mf::one_embedding
