// Random factories and in-place fills: rand, randn, randint, the *_like
// forms, randperm, bernoulli, uniform_, normal_.
//
// Note [Counter-based random ops]: an op reserves Philox counters from the
// default generator when it is called (the functional function does it, so
// a traced graph records seed and offset as attributes) and element i of the
// output uses only the words of counter offset + i / k, where k elements
// share one counter's four 32-bit words:
//   float uniform: one word per element (k = 4)
//   double uniform, float normal (a Box-Muller pair): two words (k = 2)
//   double normal: four words (k = 1)
//   randint: one word (ranges up to 2^32, k = 4) or two (k = 2)
//   randperm: two words, a 64-bit sort key (k = 2)
//   bernoulli: a uniform of the probability's dtype (float64: k = 2, else 4)
//   _standard_gamma: one counter per element and all its substreams (k = 1,
//     Note [Gamma sampling] in backend/common/random_kernels.h)
// Values therefore never depend on the thread count, and any slice of the
// output can be produced on its own. The counts per counter are in
// random_common.h; the CPU kernels in backend/cpu/kernels/random.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/generator.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "ops/random_common.h"

namespace mf {
namespace {

using namespace random_detail;

std::vector<TensorMeta> same_as_self(const TensorList& in) { return {{in[0].sizes(), in[0].dtype(), in[0].device()}}; }

// In-place fills overwrite self: no gradient reaches its old value.
TensorList no_gradient(const BackwardContext&) { return TensorList(1); }

MF_REGISTER_OP(OpDef{
    .name = "uniform",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "normal",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "random_int",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "bernoulli_scalar",
    .inputs = {"self"},
    .infer = [](const TensorList& in, const Attrs&) { return same_as_self(in); },
    .backward = no_gradient,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "bernoulli",
    .inputs = {"p"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(is_floating(in[0].dtype()), TypeError, "bernoulli: expected a floating-point tensor of ",
               "probabilities, got ", dtype_name(in[0].dtype()));
      return same_as_self(in);
    },
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
});

// randperm sorts 0..n-1 by a random 64-bit key per element (two words,
// k = 2); equal keys fall back to the index, so the result is a permutation.
MF_REGISTER_OP(OpDef{
    .name = "randperm",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      return std::vector<TensorMeta>{{{attrs.get_int("n")}, DType::Int64, attrs.get_device("device")}};
    },
    .differentiable = false,
});

// multinomial: one double uniform (two words, k = 2) per draw. With
// replacement, draw r of row b is the first category whose cumulative
// weight exceeds u * total (u of counter element b * num_samples + r).
// Without replacement, each category c of row b gets the key
// log(u) / w_c (u of element b * categories + c): the num_samples largest
// keys are a weighted sample without replacement (exponential races), in
// the order drawn.
MF_REGISTER_OP(OpDef{
    .name = "multinomial",
    .inputs = {"probs"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      Shape out = in[0].sizes();
      out.back() = attrs.get_int("num_samples");
      return std::vector<TensorMeta>{{out, DType::Int64, in[0].device()}};
    },
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
});

void check_floating_dtype(const char* op, DType dtype) {
  MF_CHECK(is_floating(dtype), TypeError, op, ": expected a floating-point dtype, got ", dtype_name(dtype));
}

Tensor with_grad(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, Generator* generator) {
  static const OpDef& op = dispatch::op("uniform");
  check_floating_dtype("uniform_", t.dtype());
  MF_CHECK(std::isfinite(from) && std::isfinite(to), Error, "uniform_: expects from and to to be finite, got from=",
           from, ", to=", to);
  MF_CHECK(from <= to, Error, "uniform_: expects to return a [from, to) range, but found from=", from, " > to=", to);
  Attrs attrs{{"from", from}, {"to", to}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), per_counter(t.dtype(), false), gen(generator)));
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* generator) {
  static const OpDef& op = dispatch::op("normal");
  check_floating_dtype("normal_", t.dtype());
  MF_CHECK(std >= 0, Error, "normal_: expects std >= 0.0, but found std ", std);
  Attrs attrs{{"mean", mean}, {"std", std}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), per_counter(t.dtype(), true), gen(generator)));
  return t;
}

Tensor rand(const Shape& size, const TensorOptions& options, Generator* generator) {
  check_floating_dtype("rand", options.dtype);
  Tensor t = empty(size, {.dtype = options.dtype, .device = options.device});
  uniform_(t, 0.0, 1.0, generator);
  return with_grad(t, options.requires_grad);
}

Tensor randn(const Shape& size, const TensorOptions& options, Generator* generator) {
  check_floating_dtype("randn", options.dtype);
  Tensor t = empty(size, {.dtype = options.dtype, .device = options.device});
  normal_(t, 0.0, 1.0, generator);
  return with_grad(t, options.requires_grad);
}

Tensor rand_like(const Tensor& t) { return rand(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor randn_like(const Tensor& t) { return randn(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }

Tensor randint(int64_t low, int64_t high, const Shape& size, const TensorOptions& options, Generator* generator) {
  static const OpDef& op = dispatch::op("random_int");
  MF_CHECK(low < high, Error, "randint: expects 'low' to be less than 'high', but got low=", low, " >= high=", high);
  if (is_integral(options.dtype, true)) {
    const auto [min, max] = dispatch_dtype(options.dtype, []<typename T>() {
      return std::pair<int64_t, int64_t>(int64_t(std::numeric_limits<T>::lowest()),
                                         int64_t(std::min<uint64_t>(uint64_t(std::numeric_limits<T>::max()),
                                                                    uint64_t(std::numeric_limits<int64_t>::max()))));
    });
    MF_CHECK(low >= min && high - 1 <= max, Error, "randint: the range [", low, ", ", high,
             ") is out of bounds for ", dtype_name(options.dtype));
  }
  Tensor t = empty(size, {.dtype = options.dtype, .device = options.device});
  Attrs attrs{{"low", low}, {"high", high}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), randint_per_counter(uint64_t(high) - uint64_t(low)),
                                               gen(generator)));
  return with_grad(t, options.requires_grad);
}

Tensor randperm(int64_t n, Device device, Generator* generator) {
  static const OpDef& op = dispatch::op("randperm");
  MF_CHECK(n >= 0, Error, "randperm: n must be non-negative, got ", n);
  Attrs attrs{{"n", n}, {"device", device}};
  return dispatch::apply_one(op, {}, with_stream(attrs, n, 2, gen(generator)));
}

Tensor bernoulli(const Tensor& p, Generator* generator) {
  static const OpDef& op = dispatch::op("bernoulli");
  Attrs attrs;
  return dispatch::apply_one(op, {p}, with_stream(attrs, p.numel(), bernoulli_per_counter(p.dtype()), gen(generator)));
}

Tensor bernoulli(const Tensor& like, double p, Generator* generator) {
  static const OpDef& op = dispatch::op("bernoulli_scalar");
  MF_CHECK(p >= 0 && p <= 1, Error, "bernoulli: expects p to be in [0, 1], but got p=", p);
  Tensor t = empty(like.sizes(), {.dtype = like.dtype(), .device = like.device()});
  Attrs attrs{{"p", p}};
  dispatch::apply_inplace(op, {t}, with_stream(attrs, t.numel(), bernoulli_per_counter(t.dtype()), gen(generator)));
  return t;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* generator) {
  static const OpDef& op = dispatch::op("multinomial");
  MF_CHECK(probs.defined() && (probs.dim() == 1 || probs.dim() == 2), ShapeError,
           "multinomial: probs must be 1-d or 2-d, got ", probs.defined() ? probs.dim() : 0, " dims");
  MF_CHECK(is_floating(probs.dtype()), TypeError, "multinomial: probs must be a floating-point tensor, got ",
           dtype_name(probs.dtype()));
  MF_CHECK(num_samples > 0, ValueError, "multinomial: num_samples must be positive, got ", num_samples);
  const int64_t categories = probs.size(-1);
  MF_CHECK(categories > 0, ValueError, "multinomial: probs has no categories");
  MF_CHECK(replacement || num_samples <= categories, ValueError, "multinomial: cannot draw ", num_samples,
           " samples without replacement from ", categories, " categories");
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const int64_t draws = checked_mul(rows, replacement ? num_samples : categories, "multinomial", "draws");
  Attrs attrs{{"num_samples", num_samples}, {"replacement", replacement}};
  return dispatch::apply_one(op, {probs}, with_stream(attrs, draws, 2, gen(generator)));
}

}  // namespace mf
