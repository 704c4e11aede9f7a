// Gamma samples with a reparameterised gradient, as torch._standard_gamma
// and torch._standard_gamma_grad: _standard_gamma draws Gamma(a, 1) for
// each element a of its input, and its backward multiplies by
// _standard_gamma_grad(a, sample) = d sample / d a (Note [Gamma sample
// gradient] in backend/common/special_math.h). The Gamma, Beta, Dirichlet and Chi2
// distributions sample through them.
//
// Sampling follows Note [Gamma sampling] in backend/common/random_kernels.h,
// whose sampler the CPU kernel (backend/cpu/kernels/random.cpp) and the
// device kernels share.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "ops/elementwise_common.h"
#include "ops/random_common.h"

namespace mf {
namespace {

using namespace elementwise_detail;
using namespace random_detail;

void check_gamma_dtype(const char* op, DType dtype) {
  MF_CHECK(dtype == DType::Float32 || dtype == DType::Float64, TypeError, op,
           ": expected a float32 or float64 tensor, got ", dtype_name(dtype));
}

Tensor standard_gamma_grad_of(const Tensor& concentration, const Tensor& sample);

MF_REGISTER_OP(OpDef{
    .name = "standard_gamma",
    .inputs = {"concentration"},
    .infer = [](const TensorList& in, const Attrs&) {
      check_gamma_dtype("_standard_gamma", in[0].dtype());
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{mul(ctx.grad_outputs[0], standard_gamma_grad_of(ctx.inputs[0], ctx.outputs[0]))};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "standard_gamma_grad",
    .inputs = {"concentration", "sample"},
    .infer = [](const TensorList& in, const Attrs&) {
      check_gamma_dtype("_standard_gamma_grad", in[0].dtype());
      return infer_broadcast("_standard_gamma_grad", in);
    },
    .backward = [](const BackwardContext&) -> TensorList {
      throw Error("the derivative for '_standard_gamma_grad' is not implemented.");
    },
    .elementwise = true,
});

Tensor standard_gamma_grad_of(const Tensor& concentration, const Tensor& sample) {
  static const OpDef& op = dispatch::op("standard_gamma_grad");
  return dispatch::apply_one(op, {concentration, sample});
}

}  // namespace

Tensor standard_gamma(const Tensor& concentration, Generator* generator) {
  static const OpDef& op = dispatch::op("standard_gamma");
  check_gamma_dtype("_standard_gamma", concentration.dtype());
  Attrs attrs;
  return dispatch::apply_one(op, {concentration}, with_stream(attrs, concentration.numel(), 1, gen(generator)));
}

Tensor standard_gamma_grad(const Tensor& concentration, const Tensor& sample) {
  const DType dtype = floating_result(result_type(concentration, sample));
  return standard_gamma_grad_of(to(concentration, dtype), to(sample, dtype));
}

}  // namespace mf
