#include "ops/kernels/cpu/onednn.h"

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

void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
             std::unordered_map<int, dnnl::memory> args) {
  Tensor buffer;
  if (scratchpad.get_size() > 0) {
    buffer = make_empty({int64_t(scratchpad.get_size())}, DType::UInt8);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, engine(), buffer.data_ptr()));
  }
  prim.execute(stream(), args);
  stream().wait();
}

}  // namespace mf::cpu::onednn
