// Statistical reductions: var, std, norm, logsumexp. var and logsumexp run
// two passes over the input (a per-output centre, then the reduction around
// it), which keeps them accurate without Welford's serial dependency.
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "ops/reduce_common.h"

namespace mf {

using namespace reduce_detail;

namespace {

// sum((x - centre[out])^2)
template <typename T>
struct SquaredDeviationOp {
  using Acc = acc_type<T>;
  const Acc* centre;
  Acc identity() const { return Acc(0); }
  Acc map(T x, int64_t out) const {
    const Acc d = cpu::to_acc<Acc>(x) - centre[out];
    return d * d;
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
};

// sum(exp(x - shift[out]))
template <typename T>
struct SumExpOp {
  using Acc = acc_type<T>;
  const Acc* shift;
  Acc identity() const { return Acc(0); }
  Acc map(T x, int64_t out) const { return std::exp(cpu::to_acc<Acc>(x) - shift[out]); }
  Acc combine(Acc a, Acc b) const { return a + b; }
};

// Norm kinds by p, each a sum (or extremum) of a function of |x|.
enum class NormKind { Zero, One, Two, Inf, NegInf, General };

NormKind norm_kind(double p) {
  if (p == 0) return NormKind::Zero;
  if (p == 1) return NormKind::One;
  if (p == 2) return NormKind::Two;
  if (std::isinf(p)) return p > 0 ? NormKind::Inf : NormKind::NegInf;
  return NormKind::General;
}

template <typename T, NormKind kKind>
struct NormSumOp {
  using Acc = acc_type<T>;
  Acc p;
  Acc identity() const { return Acc(0); }
  Acc map(T x, int64_t) const {
    const Acc v = cpu::to_acc<Acc>(x);
    if constexpr (kKind == NormKind::Zero) return v != Acc(0) ? Acc(1) : Acc(0);
    else if constexpr (kKind == NormKind::One) return std::abs(v);
    else if constexpr (kKind == NormKind::Two) return v * v;
    else return std::pow(std::abs(v), p);
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
};

template <typename T, bool kMax>
struct AbsExtremumOp {
  using Acc = acc_type<T>;
  ExtremumOp<T, kMax> base;
  Acc identity() const { return base.identity(); }
  Acc map(T x, int64_t) const { return std::abs(cpu::to_acc<Acc>(x)); }
  Acc combine(Acc a, Acc b) const { return base.combine(a, b); }
};

void check_floating(const char* op, DType dtype, const char* what) {
  MF_CHECK(is_floating(dtype), TypeError, op, ": ", what, ", got ", dtype_name(dtype));
}

// --- var / std ------------------------------------------------------------------------

template <bool kStd>
void var_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const char* name = kStd ? "std" : "var";
  const Shape dims = normalize_dims(attrs.get_shape("dims"), in[0].dim(), name);
  const int64_t n = reduced_count(in[0].sizes(), dims);
  const int64_t denom = std::max<int64_t>(0, n - attrs.get_int("correction"));
  dispatch_floating(in[0].dtype(), name, [&]<typename T>() {
    using Acc = acc_type<T>;
    std::vector<Acc> mean(size_t(out[0].numel()));
    cpu::reduce<T>(in[0], dims, SumOp<T, Acc>{}, [&](int64_t o, Acc a) { mean[size_t(o)] = a / Acc(n); });
    T* o = static_cast<T*>(out[0].data_ptr());
    cpu::reduce<T>(in[0], dims, SquaredDeviationOp<T>{mean.data()}, [&](int64_t i, Acc a) {
      const Acc v = a / Acc(denom);
      o[i] = T(kStd ? std::sqrt(v) : v);
    });
  });
}

// d var / d x_i = 2 (x_i - mean) / (n - correction).
Tensor var_backward(const Tensor& grad, const Tensor& x, const Attrs& attrs, const char* name) {
  const Shape dims = normalize_dims(attrs.get_shape("dims"), x.dim(), name);
  const bool keepdim = attrs.get_bool("keepdim");
  const int64_t denom = std::max<int64_t>(0, reduced_count(x.sizes(), dims) - attrs.get_int("correction"));
  Tensor centred = sub(x, mean(x, dims, true));
  return mul(mul(unsqueeze_reduced(grad, dims, keepdim), centred), Scalar(2.0 / double(denom)));
}

std::vector<TensorMeta> infer_var(const char* name, const TensorList& in, const Attrs& attrs) {
  check_floating(name, in[0].dtype(), "std and var only support floating point dtypes");
  return infer_reduction(name, in[0], attrs, in[0].dtype());
}

MF_REGISTER_OP(OpDef{
    .name = "var",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_var("var", in, attrs); },
    .cpu_kernel = var_kernel<false>,
    .backward = [](const BackwardContext& ctx) {
      return TensorList{var_backward(ctx.grad_outputs[0], ctx.inputs[0], ctx.attrs, "var")};
    },
    .save_inputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

MF_REGISTER_OP(OpDef{
    .name = "std",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_var("std", in, attrs); },
    .cpu_kernel = var_kernel<true>,
    // std = sqrt(var): d std = d var / (2 std).
    .backward = [](const BackwardContext& ctx) {
      return TensorList{
          var_backward(div(ctx.grad_outputs[0], mul(ctx.outputs[0], 2.0)), ctx.inputs[0], ctx.attrs, "std")};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

// --- norm -----------------------------------------------------------------------------

void norm_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Shape dims = normalize_dims(attrs.get_shape("dims"), in[0].dim(), "norm");
  const double p = attrs.get_float("p");
  dispatch_floating(in[0].dtype(), "norm", [&]<typename T>() {
    using Acc = acc_type<T>;
    T* o = static_cast<T*>(out[0].data_ptr());
    // The norm of nothing is 0 for every p, as torch.norm gives (even where
    // the reduction itself has no identity: p = -inf or p < 0).
    if (reduced_count(in[0].sizes(), dims) == 0) {
      std::fill(o, o + out[0].numel(), T(0.0f));
      return;
    }
    auto store = [o](auto finish) { return [o, finish](int64_t i, Acc a) { o[i] = T(finish(a)); }; };
    auto same = [](Acc a) { return a; };
    switch (norm_kind(p)) {
      case NormKind::Zero: cpu::reduce<T>(in[0], dims, NormSumOp<T, NormKind::Zero>{}, store(same)); break;
      case NormKind::One: cpu::reduce<T>(in[0], dims, NormSumOp<T, NormKind::One>{}, store(same)); break;
      case NormKind::Two:
        cpu::reduce<T>(in[0], dims, NormSumOp<T, NormKind::Two>{}, store([](Acc a) { return std::sqrt(a); }));
        break;
      case NormKind::Inf: cpu::reduce<T>(in[0], dims, AbsExtremumOp<T, true>{}, store(same)); break;
      case NormKind::NegInf: cpu::reduce<T>(in[0], dims, AbsExtremumOp<T, false>{}, store(same)); break;
      case NormKind::General: {
        const Acc inv = Acc(1.0 / p);
        cpu::reduce<T>(in[0], dims, NormSumOp<T, NormKind::General>{Acc(p)},
                       store([inv](Acc a) { return std::pow(a, inv); }));
        break;
      }
    }
  });
}

// PyTorch's norm_backward: where the norm is 0 the gradient is 0 (p >= 1),
// infinity norms split the gradient among the elements of largest (or
// smallest) magnitude.
Tensor norm_backward(const Tensor& grad, const Tensor& x, const Tensor& result, const Attrs& attrs) {
  const double p = attrs.get_float("p");
  const Shape dims = normalize_dims(attrs.get_shape("dims"), x.dim(), "norm");
  const bool keepdim = attrs.get_bool("keepdim");
  Tensor g = unsqueeze_reduced(grad, dims, keepdim);
  Tensor norm = unsqueeze_reduced(result, dims, keepdim);
  switch (norm_kind(p)) {
    case NormKind::Zero: return zeros_like(x);
    case NormKind::One: return mul(sign(x), g);
    case NormKind::Two: return mul(g, masked_fill(div(x, norm), eq(norm, 0), 0.0));
    case NormKind::Inf:
    case NormKind::NegInf: {
      Tensor magnitude = abs(x);
      Tensor selected = logical_or(eq(magnitude, norm), isnan(magnitude));
      return mul(sign(x), where(selected, div(g, sum(selected, dims, true)), Scalar(0.0)));
    }
    case NormKind::General: break;
  }
  if (p < 1.0) {
    Tensor scaled = masked_fill(mul(sign(x), pow(abs(x), p - 1)), eq(x, 0), 0.0);
    return mul(mul(scaled, g), pow(norm, 1 - p));
  }
  Tensor scaled = p < 2.0 ? mul(sign(x), pow(abs(x), p - 1)) : mul(x, pow(abs(x), p - 2));
  return mul(scaled, masked_fill(div(g, pow(norm, p - 1)), eq(norm, 0), 0.0));
}

MF_REGISTER_OP(OpDef{
    .name = "norm",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_floating("norm", in[0].dtype(), "input dtype should be floating point");
      return infer_reduction("norm", in[0], attrs, in[0].dtype());
    },
    .cpu_kernel = norm_kernel,
    .backward = [](const BackwardContext& ctx) {
      return TensorList{norm_backward(ctx.grad_outputs[0], ctx.inputs[0], ctx.outputs[0], ctx.attrs)};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

// --- logsumexp ------------------------------------------------------------------------

void logsumexp_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Shape dims = normalize_dims(attrs.get_shape("dims"), in[0].dim(), "logsumexp");
  dispatch_floating(in[0].dtype(), "logsumexp", [&]<typename T>() {
    using Acc = acc_type<T>;
    // Shift by the maximum so exp cannot overflow; an infinite maximum
    // (all -inf, or a +inf present) shifts by 0 instead, giving -inf / inf.
    std::vector<Acc> shift(size_t(out[0].numel()));
    cpu::reduce<T>(in[0], dims, ExtremumOp<T, true>{},
                   [&](int64_t o, Acc m) { shift[size_t(o)] = std::isinf(m) ? Acc(0) : m; });
    T* o = static_cast<T*>(out[0].data_ptr());
    cpu::reduce<T>(in[0], dims, SumExpOp<T>{shift.data()},
                   [&](int64_t i, Acc s) { o[i] = T(std::log(s) + shift[size_t(i)]); });
  });
}

MF_REGISTER_OP(OpDef{
    .name = "logsumexp",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      check_floating("logsumexp", in[0].dtype(), "expected a floating-point input");
      return infer_reduction("logsumexp", in[0], attrs, in[0].dtype());
    },
    .cpu_kernel = logsumexp_kernel,
    // d logsumexp / d x_i = softmax(x)_i = exp(x_i - logsumexp(x)).
    .backward = [](const BackwardContext& ctx) {
      const Tensor& x = ctx.inputs[0];
      const Shape dims = normalize_dims(ctx.attrs.get_shape("dims"), x.dim(), "logsumexp");
      const bool keepdim = ctx.attrs.get_bool("keepdim");
      Tensor softmax = exp(sub(x, unsqueeze_reduced(ctx.outputs[0], dims, keepdim)));
      return TensorList{mul(unsqueeze_reduced(ctx.grad_outputs[0], dims, keepdim), softmax)};
    },
    .save_inputs = 0b1,
    .save_outputs = 0b1,
    .sbp = sbp::reduce(false, false),
});

}  // namespace

Tensor var(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  static const OpDef& op = dispatch::op("var");
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"correction", correction}, {"keepdim", keepdim}});
}

Tensor std(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  static const OpDef& op = dispatch::op("std");
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"correction", correction}, {"keepdim", keepdim}});
}

Tensor norm(const Tensor& t, double p, const Shape& dims, bool keepdim) {
  static const OpDef& op = dispatch::op("norm");
  return dispatch::apply_one(op, {t}, {{"p", p}, {"dims", dims}, {"keepdim", keepdim}});
}

Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim) {
  static const OpDef& op = dispatch::op("logsumexp");
  // Integers and bool compute in the default dtype, as in PyTorch.
  Tensor x = is_floating(t.dtype()) ? t : to(t, default_dtype());
  return dispatch::apply_one(op, {x}, {{"dims", dims}, {"keepdim", keepdim}});
}

}  // namespace mf
