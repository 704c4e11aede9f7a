// Note [Host-staged kernels] in host_staged.h.
#include "backend/common/host_staged.h"

#include "meshflow/autograd.h"
#include "meshflow/backend.h"
#include "meshflow/ops/elementwise.h"

namespace mf::host_staged {
namespace {

// t's contents in host memory (t itself when it is there).
Tensor on_host(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t;
  return to(t, Device());
}

// host's bytes into the device tensor t (contiguous, as kernel outputs are).
void copy_back(const Tensor& t, const Tensor& host, const char* op) {
  if (!t.defined() || t.device().is_cpu() || t.numel() == 0) return;
  MF_CHECK(t.is_contiguous() && host.is_contiguous(), Error, op,
           ": a host-staged kernel writes contiguous device tensors only, got strides ", shape_str(t.strides()));
  get_backend(t.device().type())
      .copy(t.data_ptr(), t.device(), host.data_ptr(), Device(), size_t(t.numel()) * t.element_size(), false);
}

}  // namespace

KernelFn kernel(const std::string& name) {
  return [name](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const OpDef& op = OpRegistry::instance().get(name);
    const KernelFn& host_kernel = op.kernels[size_t(DeviceType::CPU)];
    MF_CHECK(bool(host_kernel), Error, name, ": no CPU kernel to stage on the host");
    NoGradGuard no_grad;
    TensorList host_in, host_out;
    host_in.reserve(in.size());
    for (const Tensor& t : in) host_in.push_back(on_host(t));
    host_out.reserve(out.size());
    for (const Tensor& t : out) {
      Tensor h;
      for (size_t i = 0; i < in.size() && !h.defined(); ++i)  // an in-place call: the input's host copy
        if (in[i].defined() && t.defined() && in[i].data_ptr() == t.data_ptr() && t.numel() > 0) h = host_in[i];
      host_out.push_back(h.defined() ? h : make_empty(t.sizes(), t.dtype(), Device()));
    }
    // The CPU kernel's scratch (Note [Kernel scratch]), on the host.
    if (const ScratchFn& host_scratch = op.scratch[size_t(DeviceType::CPU)]) {
      std::vector<TensorMeta> metas;
      for (const Tensor& t : host_out) metas.push_back({t.sizes(), t.dtype(), Device()});
      host_out.push_back(make_empty({host_scratch(host_in, metas, attrs)}, DType::UInt8, Device()));
    }
    host_kernel(host_in, host_out, attrs);
    host_out.resize(out.size());
    for (size_t k = 0; k < out.size(); ++k) copy_back(out[k], host_out[k], name.c_str());
    for (size_t i = 0; i < in.size(); ++i)
      if (op.writes_input(i, false)) copy_back(in[i], host_in[i], name.c_str());
  };
}

void register_all(DeviceType device) {
  for (const char* name : {"all_reduce_sum", "comm_all_gather", "comm_all_reduce", "comm_all_to_all", "comm_recv",
                           "comm_reduce_scatter", "comm_send", "one_embedding_accumulate", "one_embedding_apply",
                           "one_embedding_lookup", "one_embedding_sharded_accumulate",
                           "one_embedding_sharded_lookup", "one_embedding_unscale"})
    OpRegistry::instance().set_kernel(name, device, kernel(name));
}

}  // namespace mf::host_staged
