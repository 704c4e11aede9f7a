#include "backend/cpu/kernels/onednn.h"

#include <cstdlib>
#include <cstring>

#include "meshflow/error.h"

namespace mf::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type data_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return dnnl::memory::data_type::f32;
    case DType::BFloat16: return dnnl::memory::data_type::bf16;
    case DType::Float16: return dnnl::memory::data_type::f16;
    default: break;
  }
  throw TypeError(detail::concat("oneDNN: no data type for ", dtype_name(dtype)));
}

dnnl::memory::desc plain_desc(const Tensor& t) {
  if (t.dim() == 0) return dnnl::memory::desc({1}, data_type(t.dtype()), dnnl::memory::dims{1});
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  // oneDNN rejects zero strides; a size-1 dim may carry any stride.
  for (int64_t d = t.dim() - 1; d >= 0; --d)
    if (t.sizes()[size_t(d)] == 1)
      strides[size_t(d)] = d + 1 < t.dim() ? strides[size_t(d) + 1] * std::max<int64_t>(t.sizes()[size_t(d) + 1], 1) : 1;
  return dnnl::memory::desc(dnnl::memory::dims(t.sizes().begin(), t.sizes().end()), data_type(t.dtype()), strides);
}

dnnl::memory::desc dense_desc(const Shape& sizes, DType dtype) {
  Shape strides = contiguous_strides(sizes);
  return dnnl::memory::desc(dnnl::memory::dims(sizes.begin(), sizes.end()), data_type(dtype),
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory memory_of(const dnnl::memory::desc& desc, const Tensor& t) {
  return dnnl::memory(desc, engine(), t.data_ptr());
}

dnnl::memory memory_of(const Tensor& t) { return memory_of(plain_desc(t), t); }

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args) {
  prim.execute(stream(), args);
  stream().wait();
}

void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
             std::unordered_map<int, dnnl::memory> args, Workspace& ws) {
  if (scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, scratch_memory(scratchpad, ws));
  if (!ws.measuring()) execute(prim, args);
}

void append_key(std::vector<int64_t>& key, const dnnl::memory::desc& desc) {
  const size_t n = (sizeof(desc.data) + sizeof(int64_t) - 1) / sizeof(int64_t);
  const size_t at = key.size();
  key.resize(at + n, 0);
  std::memcpy(key.data() + at, &desc.data, sizeof(desc.data));
}

dnnl::memory scratch_memory(const dnnl::memory::desc& desc, Workspace& ws) {
  return dnnl::memory(desc, engine(), ws.take({int64_t(desc.get_size())}, DType::UInt8).data_ptr());
}

void ensure_headroom() {
  constexpr size_t kHeadroom = size_t(256) << 20;
  void* probe = std::malloc(kHeadroom);  // above glibc's mmap threshold: a mapping, unmapped by free
  MF_CHECK(probe != nullptr, OutOfMemoryError, "CPU out of memory: fewer than ", kHeadroom >> 20,
           " MiB of address space are left to build a oneDNN kernel");
  std::free(probe);
}

namespace {
struct Reorder {
  std::shared_ptr<dnnl::reorder> primitive;
  dnnl::memory::desc scratchpad;
};
}  // namespace

void reorder(const dnnl::memory& src, const dnnl::memory& dst, Workspace& ws) {
  static PrimitiveCache<Reorder> cache;
  std::vector<int64_t> key;
  append_key(key, src.get_desc());
  append_key(key, dst.get_desc());
  Reorder r = cache.get(key, [&] {
    dnnl::reorder::primitive_desc pd(engine(), src.get_desc(), engine(), dst.get_desc(), default_attr());
    return Reorder{std::make_shared<dnnl::reorder>(pd), pd.scratchpad_desc()};
  });
  execute(*r.primitive, r.scratchpad, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}, ws);
}

dnnl::memory in_layout(const dnnl::memory& src, const dnnl::memory::desc& desc, Workspace& ws) {
  if (src.get_desc() == desc) return src;
  dnnl::memory out = scratch_memory(desc, ws);
  reorder(src, out, ws);
  return out;
}

}  // namespace mf::cpu::onednn
