// Gamma samples with a reparameterised gradient, as torch._standard_gamma
// and torch._standard_gamma_grad: _standard_gamma draws Gamma(a, 1) for
// each element a of its input, and its backward multiplies by
// _standard_gamma_grad(a, sample) = d sample / d a (Note [Gamma sample
// gradient] in backend/common/special_math.h). The Gamma, Beta, Dirichlet and Chi2
// distributions sample through them.
//
// Sampling follows Note [Gamma sampling] in backend/common/random_kernels.h,
// whose sampler the CPU kernel here and the device kernels share.
#include <cmath>
#include <limits>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "ops/elementwise_common.h"
#include "backend/common/random_kernels.h"
#include "ops/random_common.h"

namespace mf {
namespace {

using namespace elementwise_detail;
using namespace random_detail;

void check_gamma_dtype(const char* op, DType dtype) {
  MF_CHECK(dtype == DType::Float32 || dtype == DType::Float64, TypeError, op,
           ": expected a float32 or float64 tensor, got ", dtype_name(dtype));
}

// A sample costs about 0.1 microseconds: chunks of this many elements are
// worth a thread.
constexpr int64_t kSampleGrain = 2048;

Tensor standard_gamma_grad_of(const Tensor& concentration, const Tensor& sample);

MF_REGISTER_OP(OpDef{
    .name = "standard_gamma",
    .inputs = {"concentration"},
    .infer = [](const TensorList& in, const Attrs&) {
      check_gamma_dtype("_standard_gamma", in[0].dtype());
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const Tensor a = contiguous(in[0]);
      const Stream s = stream_of(attrs);
      dispatch_floating(a.dtype(), "_standard_gamma", [&]<typename T>() {
        const T* alpha = static_cast<const T*>(a.data_ptr());
        T* o = static_cast<T*>(out[0].data_ptr());
        parallel_for(0, a.numel(), kSampleGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const double ai = double(alpha[i]);
            MF_CHECK(!(ai < 0), ValueError, "_standard_gamma: concentration must be >= 0, got ", ai, " at element ",
                     i);
            random_kernels::ElementStream stream(s.seed, s.offset + uint64_t(i));
            const T sample = T(random_kernels::sample_standard_gamma(ai, stream));
            o[i] = std::isnan(sample) ? sample : std::max(sample, std::numeric_limits<T>::min());
          }
        });
      });
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
