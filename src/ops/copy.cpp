// Copies and casts: cast (to), copy_ and clone/contiguous, and copies
// between devices (to_device, pin_memory).
#include "meshflow/backend.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

MF_REGISTER_OP(OpDef{
    .name = "cast",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{{in[0].sizes(), attrs.get_dtype("dtype"), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{to(ctx.grad_outputs[0], ctx.input_metas[0].dtype)};
    },
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "clone",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{ctx.grad_outputs[0]}; },
    .elementwise = true,
    .sbp = sbp::elementwise(sbp::Partial::All),
});

// copy_(self, src): src broadcast to self's shape and cast to self's dtype.
MF_REGISTER_OP(OpDef{
    .name = "copy",
    .inputs = {"self", "src"},
    .infer = [](const TensorList& in, const Attrs&) {
      broadcast_shapes(in[1].sizes(), in[0].sizes(), "copy_");
      MF_CHECK(broadcast_shapes(in[1].sizes(), in[0].sizes(), "copy_") == in[0].sizes(), ShapeError,
               "copy_: src of shape ", shape_str(in[1].sizes()), " cannot be broadcast to self of shape ",
               shape_str(in[0].sizes()));
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      TensorList grads(2);
      if (ctx.needs_input_grad[1])
        grads[1] = to(sum_to(ctx.grad_outputs[0], ctx.input_metas[1].sizes), ctx.input_metas[1].dtype);
      return grads;  // self is overwritten: no gradient reaches its old value
    },
    .inplace = true,
    .elementwise = true,
});

// Note [Copies between devices]: to_device copies a contiguous tensor to
// another device through the backend's copy verb (Note [Device backends]).
// It is the one op whose kernel is the same for every device type, so it is
// registered here for each, the CPU included: it names no device's memory
// itself. Its gradient is the copy back.
void device_copy_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& src = in[0];
  Tensor& dst = out[0];
  const Device from = src.device(), into = dst.device();
  if (dst.numel() == 0) return;
  Backend& backend = get_backend(from.is_cpu() ? into.type() : from.type());
  MF_CHECK(from.is_cpu() || into.is_cpu() || from.type() == into.type(), Error, "to_device: copying from ", from,
           " to ", into, " needs a stop on the CPU");
  backend.copy(dst.data_ptr(), into, src.data_ptr(), from, size_t(dst.numel()) * dst.element_size(),
               attrs.get_bool("non_blocking"));
}

MF_REGISTER_OP(OpDef{
    .name = "to_device",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in[0].is_contiguous(), Error, "to_device: the input must be contiguous");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), attrs.get_device("device")}};
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{to(ctx.grad_outputs[0], ctx.input_metas[0].device, false)};
    },
    .sbp = sbp::elementwise(),
});

[[maybe_unused]] const bool kDeviceCopyEverywhere = [] {
  for (int type = 0; type < kNumDeviceTypes; ++type)
    OpRegistry::instance().set_kernel("to_device", DeviceType(type), device_copy_kernel);
  return true;
}();

}  // namespace

Tensor to(const Tensor& t, Device device, bool non_blocking) {
  if (t.device() == device) return t;
  MF_CHECK(!t.is_global(), Error, "Tensor.to: a global tensor moves to ", device,
           " with to_global(placement=...) on a placement of that device type");
  if (!device.is_cpu()) check_device(device, "Tensor.to");
  static const OpDef& op = dispatch::op("to_device");
  return dispatch::apply_one(op, {contiguous(t)}, {{"device", device}, {"non_blocking", non_blocking}});
}

Tensor pin_memory(const Tensor& t) {
  MF_CHECK(t.device().is_cpu(), Error, "Tensor.pin_memory: only CPU tensors can be pinned, got one on ", t.device());
  Allocator* pinned = nullptr;
  for (int type = 0; type < kNumDeviceTypes && !pinned; ++type)
    if (DeviceType(type) != DeviceType::CPU && has_backend(DeviceType(type)) &&
        get_backend(DeviceType(type)).device_count() > 0)
      pinned = get_backend(DeviceType(type)).pinned_host_allocator();
  MF_CHECK(pinned != nullptr, Error,
           "Tensor.pin_memory: pinned memory needs an accelerator device, and none is available "
           "(meshflow.cuda.is_available() is False)");
  if (t.is_pinned()) return t;
  const size_t nbytes = size_t(checked_nbytes(t.sizes(), t.dtype(), "pin_memory"));
  auto storage = std::make_shared<StorageImpl>(nbytes, Device(), pinned);
  Tensor out(std::make_shared<TensorImpl>(std::move(storage), t.sizes(), contiguous_strides(t.sizes()), 0, t.dtype()));
  return copy_(out, t);
}

Tensor cast(const Tensor& t, DType dtype) {
  static const OpDef& op = dispatch::op("cast");
  return dispatch::apply_one(op, {t}, {{"dtype", dtype}});
}

Tensor to(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : cast(t, dtype); }

Tensor clone(const Tensor& t) {
  static const OpDef& op = dispatch::op("clone");
  return dispatch::apply_one(op, {t});
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

Tensor& copy_(Tensor& t, const Tensor& src) {
  static const OpDef& op = dispatch::op("copy");
  // As PyTorch's copy_, across devices too: the source comes to t's device
  // first (the copy op itself takes one device).
  const bool across = t.defined() && src.defined() && !t.is_global() && !src.is_global() &&
                      t.device() != src.device();
  dispatch::apply_inplace(op, {t, across ? to(src, t.device()) : src});
  return t;
}

}  // namespace mf
