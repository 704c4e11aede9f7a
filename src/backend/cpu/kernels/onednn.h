// oneDNN glue for the CPU kernels: the engine, a stream per thread, memory
// objects over tensors, user-managed scratchpads and a primitive cache.
//
// Note [oneDNN primitive cache]: creating a primitive descriptor costs tens
// of microseconds (oneDNN searches its implementation list), more than a
// small op itself. Kernels therefore keep the primitives they build in a
// PrimitiveCache keyed by everything that went into the descriptor (shapes,
// strides, dtypes, op parameters). Primitives run with a user scratchpad
// taken from the kernel's scratch on every call (Note [Kernel scratch]),
// so one cached primitive may run on several threads at once.
#pragma once

#include <dnnl.hpp>

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/common/scratch.h"
#include "meshflow/tensor.h"

namespace mf::cpu::onednn {

dnnl::engine& engine();
// This thread's stream on engine() (a stream must not be shared by threads).
dnnl::stream& stream();

// oneDNN's type for a floating dtype; TypeError for others.
dnnl::memory::data_type data_type(DType dtype);

// A plain descriptor over t's sizes and strides (0-d becomes (1)).
dnnl::memory::desc plain_desc(const Tensor& t);
// A descriptor of the given sizes in oneDNN's dense row-major order.
dnnl::memory::desc dense_desc(const Shape& sizes, DType dtype);
// oneDNN memory over t's data, described by desc.
dnnl::memory memory_of(const dnnl::memory::desc& desc, const Tensor& t);
dnnl::memory memory_of(const Tensor& t);

// Runs prim with args as given.
void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args);
// Runs prim; args gets DNNL_ARG_SCRATCHPAD, taken from ws, when scratchpad
// is non-empty. Measuring (Note [Measured kernels]), it only takes.
void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
             std::unordered_map<int, dnnl::memory> args, Workspace& ws);

// Attributes every cached primitive is built with (user scratchpad).
dnnl::primitive_attr default_attr();

// Appends desc (its bytes: dims, type, layout) to a cache key.
void append_key(std::vector<int64_t>& key, const dnnl::memory::desc& desc);

// Memory of desc over a piece of ws (without data while measuring).
dnnl::memory scratch_memory(const dnnl::memory::desc& desc, Workspace& ws);
// Copies src into dst (two layouts of one logical tensor) with a cached
// reorder primitive.
void reorder(const dnnl::memory& src, const dnnl::memory& dst, Workspace& ws);
// src itself when it is laid out as desc, else a copy of it in that layout
// in a piece of ws.
dnnl::memory in_layout(const dnnl::memory& src, const dnnl::memory::desc& desc, Workspace& ws);

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : key) h = (h ^ uint64_t(v)) * 1099511628211ull;
    return size_t(h);
  }
};

// Note [oneDNN headroom]: oneDNN's primitive creation (JIT code generation)
// does not survive an allocation failure: near an address-space limit it
// crashes instead of reporting it. So a primitive is only created while the
// process can still allocate a generous margin (probed with one mapping,
// released at once); otherwise OutOfMemoryError.
void ensure_headroom();

// A thread-safe map from key to Value with least-recently-used eviction.
// See Note [oneDNN primitive cache].
template <typename Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t capacity = 512) : capacity_(capacity) {}

  // The cached value for key, or create() stored under key. create runs
  // outside the lock (two threads may build the same entry; one wins).
  template <typename Create>
  Value get(const std::vector<int64_t>& key, const Create& create) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
    }
    ensure_headroom();
    Value value = create();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    order_.emplace_front(key, value);
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return value;
  }

 private:
  using Entry = std::pair<std::vector<int64_t>, Value>;
  size_t capacity_;
  std::mutex mutex_;
  std::list<Entry> order_;
  std::unordered_map<std::vector<int64_t>, typename std::list<Entry>::iterator, KeyHash> index_;
};

}  // namespace mf::cpu::onednn
