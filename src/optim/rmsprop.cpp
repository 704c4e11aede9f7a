// RMSprop: the fused "rmsprop_update" op and torch.optim.RMSprop (PyTorch
// 1.13, _single_tensor_rmsprop).
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/update.h"
#include "optim/update_common.h"

namespace mf::optim {

namespace {

MF_REGISTER_OP(OpDef{
    .name = "rmsprop_update",
    .inputs = {"param", "grad", "square_avg", "grad_avg", "momentum_buffer", "step", "found_inf"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return detail::infer_update("rmsprop_update", in,
                                  {{2, true}, {3, attrs.get_bool("centered")}, {4, attrs.get_float("momentum") > 0}},
                                  5);
    },
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
