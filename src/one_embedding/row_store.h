// Where a TableSet's rows live: all in memory, or an LRU cache in memory
// over a file (Note [Cached rows]).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <algorithm>
#include <unordered_map>
#include <utility>
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

// An open-addressing (linear probing) map from Key to int64_t: one flat
// array, no allocation per entry; at most half full.
class KeyIndex {
 public:
  // The value of key, or -1.
  int64_t find(const Key& key) const {
    if (keys_.empty()) return -1;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (values_[i] < 0) return -1;
      if (keys_[i] == key) return values_[i];
    }
  }
  // Inserts key -> value unless key is present; returns (its value, inserted).
  std::pair<int64_t, bool> emplace(const Key& key, int64_t value) {
    if (2 * (size_ + 1) > keys_.size()) grow();
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (values_[i] < 0) {
        keys_[i] = key;
        values_[i] = value;
        ++size_;
        return {value, true};
      }
      if (keys_[i] == key) return {values_[i], false};
    }
  }
  size_t size() const { return size_; }
  // Empties the map, keeping its capacity.
  void clear() {
    std::fill(values_.begin(), values_.end(), int64_t(-1));
    size_ = 0;
  }
  template <typename F>
  void for_each(F&& fn) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (values_[i] >= 0) fn(keys_[i], values_[i]);
  }

 private:
  size_t slot(const Key& key) const { return size_t(splitmix64(key.id ^ splitmix64(key.table))) & mask_; }
  void grow() {
    std::vector<Key> old_keys = std::move(keys_);
    std::vector<int64_t> old_values = std::move(values_);
    const size_t capacity = std::max<size_t>(16, old_keys.size() * 2);
    keys_.assign(capacity, Key{});
    values_.assign(capacity, -1);
    mask_ = capacity - 1;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_values[i] >= 0) emplace(old_keys[i], old_values[i]);
  }
  std::vector<Key> keys_;
  std::vector<int64_t> values_;  // -1: empty
  size_t size_ = 0, mask_ = 0;
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
