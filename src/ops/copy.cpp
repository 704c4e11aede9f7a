// Copies and casts: cast (to), copy_ and clone/contiguous.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "ops/kernels/cpu/loops.h"

namespace mf {
namespace {

void copy_kernel(const TensorList& in, TensorList& out, const Attrs&) { cpu::copy_cast(out[0], in.back()); }

MF_REGISTER_OP(OpDef{
    .name = "cast",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return std::vector<TensorMeta>{{in[0].sizes(), attrs.get_dtype("dtype"), in[0].device()}};
    },
    .cpu_kernel = copy_kernel,
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
    .cpu_kernel = copy_kernel,
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
    .cpu_kernel = copy_kernel,
    .backward = [](const BackwardContext& ctx) {
      TensorList grads(2);
      if (ctx.needs_input_grad[1])
        grads[1] = to(sum_to(ctx.grad_outputs[0], ctx.input_metas[1].sizes), ctx.input_metas[1].dtype);
      return grads;  // self is overwritten: no gradient reaches its old value
    },
    .inplace = true,
    .elementwise = true,
});

}  // namespace

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
  dispatch::apply_inplace(op, {t, src});
  return t;
}

}  // namespace mf
