// The row stores of one_embedding; see row_store.h.
#include "one_embedding/row_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "meshflow/error.h"

namespace mf::one_embedding {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

class MemoryRowStore final : public RowStore {
 public:
  explicit MemoryRowStore(int64_t stride) : stride_(stride) {}
  char* find(const Key& key) override {
    const int64_t row = index_.find(key);
    return row < 0 ? nullptr : bytes_.data() + row * stride_;
  }
  char* insert(const Key& key) override {
    const int64_t row = int64_t(index_.size());
    index_.emplace(key, row);
    if (bytes_.size() < size_t((row + 1) * stride_)) bytes_.resize(std::max(bytes_.size() * 2, size_t((row + 1) * stride_)));
    return bytes_.data() + row * stride_;
  }
  int64_t size() const override { return int64_t(index_.size()); }
  int64_t stride() const override { return stride_; }
  int64_t batch_limit() const override { return INT64_MAX; }
  void for_each(const std::function<void(const Key&, const char*)>& fn) override {
    index_.for_each([&](const Key& key, int64_t row) { fn(key, bytes_.data() + row * stride_); });
  }
  void clear() override {
    index_.clear();
    bytes_.clear();
  }
  void restride(int64_t new_stride, const std::function<void(char*)>& fill) override {
    std::vector<char> wider(static_cast<size_t>(size() * new_stride));
    for (int64_t row = 0; row < size(); ++row) {
      char* dst = wider.data() + row * new_stride;
      std::memcpy(dst, bytes_.data() + row * stride_, size_t(stride_));
      fill(dst + stride_);
    }
    bytes_ = std::move(wider);
    stride_ = new_stride;
  }

 private:
  int64_t stride_;
  KeyIndex index_;
  std::vector<char> bytes_;  // grown geometrically: rows beyond size() are spare
};

class CachedRowStore final : public RowStore {
 public:
  CachedRowStore(int64_t stride, int64_t cache_bytes, std::string path)
      : stride_(stride), cache_bytes_(cache_bytes), path_(std::move(path)) {
    open_file();
    reset_cache();
  }
  ~CachedRowStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  char* find(const Key& key) override {
    if (auto it = cached_.find(key); it != cached_.end()) {
      touch(it->second);
      dirty_[size_t(it->second)] = 1;  // the caller may write it
      return slot_data(it->second);
    }
    auto it = filed_.find(key);
    if (it == filed_.end()) return nullptr;
    const int32_t slot = take_slot(key);
    read_row(it->second, slot_data(slot));
    dirty_[size_t(slot)] = 1;
    return slot_data(slot);
  }

  char* insert(const Key& key) override {
    const int32_t slot = take_slot(key);
    dirty_[size_t(slot)] = 1;
    ++size_;
    return slot_data(slot);
  }

  int64_t size() const override { return size_; }
  int64_t stride() const override { return stride_; }
  int64_t batch_limit() const override { return capacity_; }

  void for_each(const std::function<void(const Key&, const char*)>& fn) override {
    for (const auto& [key, slot] : cached_) fn(key, slot_data(slot));
    std::vector<char> row(static_cast<size_t>(stride_));
    for (const auto& [key, file_slot] : filed_) {
      if (cached_.count(key)) continue;
      read_row(file_slot, row.data());
      fn(key, row.data());
    }
  }

  void clear() override {
    filed_.clear();
    next_file_slot_ = 0;
    size_ = 0;
    MF_CHECK(::ftruncate(fd_, 0) == 0, Error, "MultiTableEmbedding: cannot truncate ", path_, ": ",
             std::strerror(errno));
    reset_cache();
  }

  void restride(int64_t new_stride, const std::function<void(char*)>& fill) override {
    // Every row, cached or filed, rewritten at the new stride into a new file.
    std::vector<std::pair<Key, std::vector<char>>> rows;
    rows.reserve(size_t(size_));
    for_each([&](const Key& key, const char* row) {
      std::vector<char> wide(static_cast<size_t>(new_stride));
      std::memcpy(wide.data(), row, size_t(stride_));
      fill(wide.data() + stride_);
      rows.emplace_back(key, std::move(wide));
    });
    stride_ = new_stride;
    clear();
    for (auto& [key, row] : rows) std::memcpy(insert(key), row.data(), size_t(stride_));
  }

 private:
  void open_file() {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    MF_CHECK(fd_ >= 0, ValueError, "MultiTableEmbedding: cannot open the store file ", path_, ": ",
             std::strerror(errno));
  }

  void reset_cache() {
    capacity_ = cache_bytes_ / stride_;
    MF_CHECK(capacity_ >= 1, ValueError, "MultiTableEmbedding: a cache of ", cache_bytes_,
             " bytes holds no row of ", stride_, " bytes");
    MF_CHECK(capacity_ < INT32_MAX, ValueError, "MultiTableEmbedding: a cache of ", capacity_, " rows is too large");
    bytes_.assign(size_t(capacity_ * stride_), 0);
    keys_.assign(size_t(capacity_), Key{});
    dirty_.assign(size_t(capacity_), 0);
    prev_.assign(size_t(capacity_), -1);
    next_.assign(size_t(capacity_), -1);
    cached_.clear();
    head_ = tail_ = -1;
    used_ = 0;
  }

  char* slot_data(int32_t slot) { return bytes_.data() + int64_t(slot) * stride_; }

  void unlink(int32_t s) {
    if (prev_[size_t(s)] >= 0) next_[size_t(prev_[size_t(s)])] = next_[size_t(s)];
    else head_ = next_[size_t(s)];
    if (next_[size_t(s)] >= 0) prev_[size_t(next_[size_t(s)])] = prev_[size_t(s)];
    else tail_ = prev_[size_t(s)];
  }
  void push_front(int32_t s) {
    prev_[size_t(s)] = -1;
    next_[size_t(s)] = head_;
    if (head_ >= 0) prev_[size_t(head_)] = s;
    head_ = s;
    if (tail_ < 0) tail_ = s;
  }
  void touch(int32_t s) {
    if (head_ == s) return;
    unlink(s);
    push_front(s);
  }

  // A cache slot for key: a free one, else the least recently used row's
  // (written to the file first if it changed).
  int32_t take_slot(const Key& key) {
    int32_t slot;
    if (used_ < capacity_) {
      slot = int32_t(used_++);
    } else {
      slot = tail_;
      unlink(slot);
      const Key old = keys_[size_t(slot)];
      cached_.erase(old);
      if (dirty_[size_t(slot)]) {
        auto [it, added] = filed_.try_emplace(old, next_file_slot_);
        if (added) ++next_file_slot_;
        write_row(it->second, slot_data(slot));
      }
    }
    keys_[size_t(slot)] = key;
    dirty_[size_t(slot)] = 0;
    cached_[key] = slot;
    push_front(slot);
    return slot;
  }

  void read_row(int64_t file_slot, char* dst) {
    const ssize_t got = ::pread(fd_, dst, size_t(stride_), off_t(file_slot * stride_));
    MF_CHECK(got == ssize_t(stride_), Error, "MultiTableEmbedding: reading row ", file_slot, " of ", path_,
             " failed: ", got < 0 ? std::strerror(errno) : "the file is short");
  }
  void write_row(int64_t file_slot, const char* src) {
    const ssize_t put = ::pwrite(fd_, src, size_t(stride_), off_t(file_slot * stride_));
    MF_CHECK(put == ssize_t(stride_), Error, "MultiTableEmbedding: writing row ", file_slot, " of ", path_,
             " failed: ", put < 0 ? std::strerror(errno) : "short write (disk full?)");
  }

  int64_t stride_;
  int64_t cache_bytes_;
  std::string path_;
  int fd_ = -1;
  int64_t capacity_ = 0, used_ = 0, size_ = 0, next_file_slot_ = 0;
  std::vector<char> bytes_;
  std::vector<Key> keys_;
  std::vector<uint8_t> dirty_;
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  std::unordered_map<Key, int32_t, KeyHash> cached_;
  std::unordered_map<Key, int64_t, KeyHash> filed_;
};

}  // namespace

std::unique_ptr<RowStore> memory_row_store(int64_t stride) { return std::make_unique<MemoryRowStore>(stride); }

std::unique_ptr<RowStore> cached_row_store(int64_t stride, int64_t cache_bytes, const std::string& path) {
  return std::make_unique<CachedRowStore>(stride, cache_bytes, path);
}

}  // namespace mf::one_embedding
