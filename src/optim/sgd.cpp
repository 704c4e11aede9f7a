// SGD: the fused "sgd_update" op and torch.optim.SGD (PyTorch 1.13,
// _single_tensor_sgd).
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/update.h"
#include "optim/update_common.h"

namespace mf::optim {

namespace {

MF_REGISTER_OP(OpDef{
    .name = "sgd_update",
    .inputs = {"param", "grad", "momentum_buffer", "found_inf"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return detail::infer_update("sgd_update", in, {{2, attrs.get_float("momentum") != 0}});
    },
    .differentiable = false,
    .inplace = true,
    .mutates = 0b100,  // momentum_buffer
    .sbp = sbp::elementwise(),
});

}  // namespace

void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SGDUpdateArgs& args) {
  static const OpDef& op = dispatch::op("sgd_update");
  MF_CHECK(!args.nesterov || (args.momentum > 0 && args.dampening == 0), ValueError,
           "sgd_update: Nesterov momentum requires a momentum and zero dampening, got momentum ", args.momentum,
           " and dampening ", args.dampening);
  detail::apply_update(op, {param, grad, momentum_buffer, args.found_inf},
                       {{"lr", args.lr},
                        {"momentum", args.momentum},
                        {"dampening", args.dampening},
                        {"weight_decay", args.weight_decay},
                        {"nesterov", args.nesterov},
                        {"maximize", args.maximize},
                        {"init_momentum_buffer", args.init_momentum_buffer}});
}

// --- the optimizer ---------------------------------------------------------------

namespace {
StateValue::Dict sgd_defaults(const SGDOptions& o) {
  StateValue::Dict d{{"momentum", o.momentum},
                     {"dampening", o.dampening},
                     {"weight_decay", o.weight_decay},
                     {"nesterov", o.nesterov},
                     {"maximize", o.maximize}};
  if (o.lr) d["lr"] = *o.lr;
  return d;
}
}  // namespace

SGD::SGD(TensorList params, const SGDOptions& options) : SGD(single_group("SGD", std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options) : Optimizer("SGD", sgd_defaults(options)) {
  add_initial_groups(std::move(groups));
}

void SGD::validate_group(const ParamGroup& group) const {
  MF_CHECK(group.options.contains("lr"), ValueError,
           "SGD: parameter group didn't specify a value of required optimization parameter lr");
  const double lr = group.lr(), momentum = group.get_double("momentum"), dampening = group.get_double("dampening");
  const double weight_decay = group.get_double("weight_decay");
  MF_CHECK(lr >= 0, ValueError, "SGD: invalid learning rate: ", lr, " (must be >= 0)");
  MF_CHECK(momentum >= 0, ValueError, "SGD: invalid momentum value: ", momentum, " (must be >= 0)");
  MF_CHECK(weight_decay >= 0, ValueError, "SGD: invalid weight_decay value: ", weight_decay, " (must be >= 0)");
  MF_CHECK(!group.get_bool("nesterov") || (momentum > 0 && dampening == 0), ValueError,
           "SGD: Nesterov momentum requires a momentum and zero dampening, got momentum ", momentum,
           " and dampening ", dampening);
  group.get_bool("maximize");  // throws unless a bool
}

// Note [Momentum buffer before the first step]
// PyTorch's first step takes d itself as the buffer. A zero buffer gives the
// same bits when dampening is 0 (momentum * 0 + 1 * d == d), so graph mode
// can trace a step that finds an existing buffer; with dampening the first
// step has no such form.
void SGD::init_param_state(const ParamGroup& group, const Tensor& p, StateValue::Dict& state) {
  const double momentum = group.get_double("momentum"), dampening = group.get_double("dampening");
  if (momentum == 0) {
    state["momentum_buffer"] = StateValue();
    return;
  }
  MF_CHECK(dampening == 0, ValueError, "SGD: a momentum buffer with dampening ", dampening,
           " cannot be created before the first step (graph mode needs it); run one eager step first");
  state["momentum_buffer"] = detail::state_like(p);
}

void SGD::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : param_groups()) {
    const SGDUpdateArgs base{.lr = group.lr(),
                             .momentum = group.get_double("momentum"),
                             .dampening = group.get_double("dampening"),
                             .weight_decay = group.get_double("weight_decay"),
                             .nesterov = group.get_bool("nesterov"),
                             .maximize = group.get_bool("maximize")};
    for (const Tensor& p : group.params) {
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      StateValue::Dict& state = this->state(p);
      SGDUpdateArgs args = base;
      Tensor buffer;
      if (args.momentum != 0) {
        auto it = state.find("momentum_buffer");
        if (it == state.end() || it->second.is_none()) {
          // A first step that a found_inf flag may skip (Note [Skipped updates]): with
          // dampening, a buffer left at zero is not one filled with the gradient, so
          // the flag is read here for this one step.
          const Tensor* skip = SkipUpdatesIf::current();
          if (skip && args.dampening != 0 && skip->item<double>() != 0) continue;
          // The update fills it with the gradient.
          buffer = detail::state_like(p);
          args.init_momentum_buffer = true;
        } else {
          buffer = state_tensor(p, "momentum_buffer");
        }
      }
      sgd_update_(p, grad, buffer, args);
      // PyTorch records the buffer for every parameter that had a gradient
      // (None without momentum; an earlier buffer is kept).
      if (buffer.defined()) state["momentum_buffer"] = buffer;
      else if (!state.contains("momentum_buffer")) state["momentum_buffer"] = StateValue();
    }
  }
}

}  // namespace mf::optim
