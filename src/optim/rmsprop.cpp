// RMSprop: the fused "rmsprop_update" op and torch.optim.RMSprop (PyTorch
// 1.13, _single_tensor_rmsprop).
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/update.h"
#include "backend/cpu/kernels/math.h"
#include "optim/update_common.h"

namespace mf::optim {

namespace {

using detail::dispatch_bool;

template <typename A>
struct RMSpropScalars {
  A sign, weight_decay, alpha, one_minus_alpha, eps, momentum, neg_lr;
};

// Inputs (param, grad, square_avg, grad_avg, momentum_buffer, step).
template <typename T, bool kDecay, bool kCentered, bool kMomentum>
void rmsprop_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict sq,
                  T* __restrict ga, T* __restrict buf, const RMSpropScalars<acc_type<T>>& s) {
  using A = acc_type<T>;
  for (int64_t i = begin; i < end; ++i) {
    const A param = A(p[i]);
    A grad = s.sign * A(g[i]);
    if constexpr (kDecay) grad = grad + s.weight_decay * param;
    const T sq_new = T(A(sq[i]) * s.alpha + s.one_minus_alpha * grad * grad);
    sq[i] = sq_new;
    A avg;
    if constexpr (kCentered) {
      const T ga_new = T(A(ga[i]) * s.alpha + s.one_minus_alpha * grad);
      ga[i] = ga_new;
      avg = cpu::math::sqrt(A(T(A(sq_new) - A(ga_new) * A(ga_new))));
    } else {
      avg = cpu::math::sqrt(A(sq_new));
    }
    avg = A(T(avg)) + s.eps;
    if constexpr (kMomentum) {
      const T b = T(A(buf[i]) * s.momentum + grad / A(T(avg)));
      buf[i] = b;
      p[i] = T(param + s.neg_lr * A(b));
    } else {
      p[i] = T(param + s.neg_lr * (grad / A(T(avg))));
    }
  }
}

void rmsprop_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const double weight_decay = attrs.get_float("weight_decay");
  const bool centered = in[3].defined(), momentum = in[4].defined();
  detail::increment_step(in[5]);
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "rmsprop_update", [&]<typename T>() {
    using A = acc_type<T>;
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sq = flat.written<T>(in[2]);
    T* ga = flat.written<T>(in[3]);
    T* buf = flat.written<T>(in[4]);
    const double alpha = attrs.get_float("alpha");
    const RMSpropScalars<A> s{A(attrs.get_bool("maximize") ? -1.0 : 1.0), A(weight_decay), A(alpha), A(1 - alpha),
                              A(attrs.get_float("eps")), A(attrs.get_float("momentum")), A(-attrs.get_float("lr"))};
    dispatch_bool(weight_decay != 0, [&](auto kDecay) {
      dispatch_bool(centered, [&](auto kCentered) {
        dispatch_bool(momentum, [&](auto kMomentum) {
          parallel_for(0, out[0].numel(), kGrainSize, [&](int64_t b, int64_t e) {
            rmsprop_loop<T, kDecay(), kCentered(), kMomentum()>(b, e, p, g, sq, ga, buf, s);
          });
        });
      });
    });
  });
  flat.write_back();
}

MF_REGISTER_OP(OpDef{
    .name = "rmsprop_update",
    .inputs = {"param", "grad", "square_avg", "grad_avg", "momentum_buffer", "step", "found_inf"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return detail::infer_update("rmsprop_update", in,
                                  {{2, true}, {3, attrs.get_bool("centered")}, {4, attrs.get_float("momentum") > 0}},
                                  5);
    },
    .cpu_kernel = detail::skip_if_found_inf(rmsprop_kernel),
    .differentiable = false,
    .inplace = true,
    .mutates = 0b111100,  // square_avg, grad_avg, momentum_buffer, step
    .sbp = sbp::elementwise(),
});

}  // namespace

void rmsprop_update_(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                     const Tensor& momentum_buffer, const Tensor& step, const RMSpropUpdateArgs& args) {
  static const OpDef& op = dispatch::op("rmsprop_update");
  detail::apply_update(op, {param, grad, square_avg, grad_avg, momentum_buffer, step, args.found_inf},
                       {{"lr", args.lr},
                        {"alpha", args.alpha},
                        {"eps", args.eps},
                        {"weight_decay", args.weight_decay},
                        {"momentum", args.momentum},
                        {"centered", args.centered},
                        {"maximize", args.maximize}});
}

// --- the optimizer ---------------------------------------------------------------

RMSprop::RMSprop(TensorList params, const RMSpropOptions& options)
    : RMSprop(single_group("RMSprop", std::move(params)), options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& o)
    : Optimizer("RMSprop", {{"lr", o.lr},
                            {"alpha", o.alpha},
                            {"eps", o.eps},
                            {"weight_decay", o.weight_decay},
                            {"momentum", o.momentum},
                            {"centered", o.centered},
                            {"maximize", o.maximize}}) {
  add_initial_groups(std::move(groups));
}

void RMSprop::validate_group(const ParamGroup& group) const {
  const double lr = group.lr(), eps = group.get_double("eps"), momentum = group.get_double("momentum");
  const double weight_decay = group.get_double("weight_decay"), alpha = group.get_double("alpha");
  MF_CHECK(lr >= 0, ValueError, "RMSprop: invalid learning rate: ", lr, " (must be >= 0)");
  MF_CHECK(eps >= 0, ValueError, "RMSprop: invalid epsilon value: ", eps, " (must be >= 0)");
  MF_CHECK(momentum >= 0, ValueError, "RMSprop: invalid momentum value: ", momentum, " (must be >= 0)");
  MF_CHECK(weight_decay >= 0, ValueError, "RMSprop: invalid weight_decay value: ", weight_decay, " (must be >= 0)");
  MF_CHECK(alpha >= 0, ValueError, "RMSprop: invalid alpha value: ", alpha, " (must be >= 0)");
  group.get_bool("centered");  // throws unless a bool
  group.get_bool("maximize");  // throws unless a bool
}

void RMSprop::init_param_state(const ParamGroup& group, const Tensor& p, StateValue::Dict& state) {
  state["step"] = zeros({}, {.dtype = kFloat32, .device = p.device()});
  state["square_avg"] = detail::state_like(p);
  if (group.get_double("momentum") > 0) state["momentum_buffer"] = detail::state_like(p);
  if (group.get_bool("centered")) state["grad_avg"] = detail::state_like(p);
}

void RMSprop::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : param_groups()) {
    const RMSpropUpdateArgs args{.lr = group.lr(),
                                 .alpha = group.get_double("alpha"),
                                 .eps = group.get_double("eps"),
                                 .weight_decay = group.get_double("weight_decay"),
                                 .momentum = group.get_double("momentum"),
                                 .centered = group.get_bool("centered"),
                                 .maximize = group.get_bool("maximize")};
    for (const Tensor& p : group.params) {
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      StateValue::Dict& state = this->state(p);
      if (state.empty()) init_param_state(group, p, state);
      rmsprop_update_(p, grad, state_tensor(p, "square_avg"),
                      args.centered ? state_tensor(p, "grad_avg") : Tensor(),
                      args.momentum > 0 ? state_tensor(p, "momentum_buffer") : Tensor(), state_step(p), args);
    }
  }
}

}  // namespace mf::optim
