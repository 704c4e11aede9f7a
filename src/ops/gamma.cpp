// Gamma samples with a reparameterised gradient, as torch._standard_gamma
// and torch._standard_gamma_grad: _standard_gamma draws Gamma(a, 1) for
// each element a of its input, and its backward multiplies by
// _standard_gamma_grad(a, sample) = d sample / d a (Note [Gamma sample
// gradient] in kernels/special_math.h). The Gamma, Beta, Dirichlet and Chi2
// distributions sample through them.
//
// Note [Gamma sampling]: Marsaglia and Tsang, "A simple method for
// generating gamma variables" (ACM TOMS 26(3), 2000), the method torch
// uses. For a >= 1 let d = a - 1/3 and c = 1 / sqrt(9 d); draw a standard
// normal z until v = (1 + c z)^3 > 0, and a uniform u in (0, 1]; accept d v
// when u < 1 - 0.0331 z^4 (the squeeze) or log u < z^2 / 2 + d (1 - v + log v),
// else draw again. For a < 1 the sample is one of shape a + 1 times
// u^(1 / a) for another uniform u (the boost).
//
// Rejection needs an unbounded number of draws per element, so element i
// owns one Philox counter, offset + i (the op reserves one counter per
// element), and reads the words of philox(seed, offset + i, k) for the
// substreams k = 0, 1, 2, ... in turn: each counter gives two double
// uniforms (two words each), and two uniforms give two normals by
// Box-Muller (the sine half is kept for the element's next normal). No
// other op uses a substream other than 0, so the streams never overlap
// another op's counters, and element i depends only on (seed, offset, i)
// and its own shape: never on the thread count or on the other elements.
//
// Every dtype computes in double; the sample is rounded to the dtype and
// raised to its smallest normal number, as torch does, so that log of a
// sample stays finite for tiny shapes (where u^(1 / a) underflows).
// a = 0 gives that smallest number too, a = inf gives inf, NaN gives NaN
// (torch gives the smallest number), and a < 0 is an error (torch returns
// the smallest number).
#include <cmath>
#include <limits>
#include <numbers>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "ops/elementwise_common.h"
#include "backend/common/special_math.h"
#include "ops/random_common.h"

namespace mf {
namespace {

using namespace elementwise_detail;
using namespace random_detail;

// The random numbers of one element: the words of its counter's
// substreams, in order (Note [Gamma sampling]).
class ElementStream {
 public:
  ElementStream(uint64_t seed, uint64_t counter) : seed_(seed), counter_(counter) {}

  // Uniform in [0, 1) with 53 random bits.
  double uniform() {
    if (next_word_ == 4) {
      words_ = philox(seed_, counter_, substream_++);
      next_word_ = 0;
    }
    const double u = uniform_double(words_[size_t(next_word_)], words_[size_t(next_word_ + 1)]);
    next_word_ += 2;
    return u;
  }

  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2 * std::log(1 - uniform()));  // 1 - u in (0, 1]
    const double angle = 2 * std::numbers::pi * uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  uint64_t seed_, counter_, substream_ = 0;
  std::array<uint32_t, 4> words_{};
  int next_word_ = 4;
  double spare_ = 0;
  bool has_spare_ = false;
};

// A Gamma(a, 1) sample for a >= 0 (Note [Gamma sampling]).
double sample_standard_gamma(double a, ElementStream& stream) {
  if (!(a > 0) || std::isinf(a)) return a;  // 0, inf and NaN
  double scale = 1;
  if (a < 1) {
    scale = std::pow(1 - stream.uniform(), 1 / a);
    a += 1;
  }
  const double d = a - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    double z, v;
    do {
      z = stream.normal();
      v = 1 + c * z;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1 - stream.uniform();
    const double zz = z * z;
    if (u < 1 - 0.0331 * zz * zz || std::log(u) < 0.5 * zz + d * (1 - v + std::log(v))) return scale * d * v;
  }
}

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
            ElementStream stream(s.seed, s.offset + uint64_t(i));
            const T sample = T(sample_standard_gamma(ai, stream));
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
    .cpu_kernel = floating_binary_kernel("_standard_gamma_grad", [](auto a, auto x) {
      return decltype(a)(special_math::standard_gamma_grad(double(a), double(x)));
    }),
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
