// Adam and AdamW: the fused "adam_update" / "adamw_update" ops and
// torch.optim.Adam / AdamW (PyTorch 1.13, _single_tensor_adam(w)).
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/update.h"
#include "optim/update_common.h"

namespace mf::optim {

namespace {

std::vector<TensorMeta> infer_adam(const char* name, const TensorList& in, const Attrs& attrs) {
  return detail::infer_update(name, in, {{2, true}, {3, true}, {4, attrs.get_bool("amsgrad")}}, 5);
}

MF_REGISTER_OP(OpDef{
    .name = "adam_update",
    .inputs = {"param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step", "found_inf"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_adam("adam_update", in, attrs); },
    .differentiable = false,
    .inplace = true,
    .mutates = 0b111100,  // exp_avg, exp_avg_sq, max_exp_avg_sq, step
    .sbp = sbp::elementwise(),
});

MF_REGISTER_OP(OpDef{
    .name = "adamw_update",
    .inputs = {"param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step", "found_inf"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_adam("adamw_update", in, attrs); },
    .differentiable = false,
    .inplace = true,
    .mutates = 0b111100,  // exp_avg, exp_avg_sq, max_exp_avg_sq, step
    .sbp = sbp::elementwise(),
});

void run_adam(const char* name, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const Tensor& step,
              const AdamUpdateArgs& args) {
  const OpDef& op = dispatch::op(name);
  detail::apply_update(op, {param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, args.found_inf},
                       {{"lr", args.lr},
                        {"beta1", args.beta1},
                        {"beta2", args.beta2},
                        {"eps", args.eps},
                        {"weight_decay", args.weight_decay},
                        {"amsgrad", args.amsgrad},
                        {"maximize", args.maximize}});
}

}  // namespace

void adam_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& max_exp_avg_sq, const Tensor& step, const AdamUpdateArgs& args) {
  run_adam("adam_update", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, args);
}

void adamw_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   const Tensor& max_exp_avg_sq, const Tensor& step, const AdamUpdateArgs& args) {
  run_adam("adamw_update", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, args);
}

// --- the optimizers ----------------------------------------------------------------

namespace {
StateValue::Dict adam_defaults(double lr, std::pair<double, double> betas, double eps, double weight_decay,
                               bool amsgrad, bool maximize) {
  return {{"lr", lr},
          {"betas", StateValue::List{betas.first, betas.second}},
          {"eps", eps},
          {"weight_decay", weight_decay},
          {"amsgrad", amsgrad},
          {"maximize", maximize}};
}
}  // namespace

Adam::Adam(TensorList params, const AdamOptions& options)
    : Adam(single_group("Adam", std::move(params)), options) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o)
    : Adam("Adam", adam_defaults(o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize), false) {
  add_initial_groups(std::move(groups));
}

Adam::Adam(std::string name, StateValue::Dict defaults, bool decoupled)
    : Optimizer(std::move(name), std::move(defaults)), decoupled_weight_decay_(decoupled) {}

AdamW::AdamW(TensorList params, const AdamWOptions& options)
    : AdamW(single_group("AdamW", std::move(params)), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o)
    : Adam("AdamW", adam_defaults(o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize), true) {
  add_initial_groups(std::move(groups));
}

void Adam::validate_group(const ParamGroup& group) const {
  const double lr = group.lr(), eps = group.get_double("eps"), weight_decay = group.get_double("weight_decay");
  const auto [beta1, beta2] = group.get_pair("betas");
  MF_CHECK(lr >= 0, ValueError, name_, ": invalid learning rate: ", lr, " (must be >= 0)");
  MF_CHECK(eps >= 0, ValueError, name_, ": invalid epsilon value: ", eps, " (must be >= 0)");
  MF_CHECK(beta1 >= 0 && beta1 < 1, ValueError, name_, ": invalid beta parameter at index 0: ", beta1,
           " (must be in [0, 1))");
  MF_CHECK(beta2 >= 0 && beta2 < 1, ValueError, name_, ": invalid beta parameter at index 1: ", beta2,
           " (must be in [0, 1))");
  MF_CHECK(weight_decay >= 0, ValueError, name_, ": invalid weight_decay value: ", weight_decay, " (must be >= 0)");
  group.get_bool("amsgrad");  // throws unless a bool
  group.get_bool("maximize");  // throws unless a bool
}

void Adam::init_param_state(const ParamGroup& group, const Tensor& p, StateValue::Dict& state) {
  state["step"] = zeros({}, {.dtype = kFloat32, .device = p.device()});
  state["exp_avg"] = detail::state_like(p);
  state["exp_avg_sq"] = detail::state_like(p);
  if (group.get_bool("amsgrad")) state["max_exp_avg_sq"] = detail::state_like(p);
}

void Adam::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : param_groups()) {
    const auto [beta1, beta2] = group.get_pair("betas");
    const AdamUpdateArgs args{.lr = group.lr(),
                              .beta1 = beta1,
                              .beta2 = beta2,
                              .eps = group.get_double("eps"),
                              .weight_decay = group.get_double("weight_decay"),
                              .amsgrad = group.get_bool("amsgrad"),
                              .maximize = group.get_bool("maximize")};
    for (const Tensor& p : group.params) {
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      StateValue::Dict& state = this->state(p);
      if (state.empty()) init_param_state(group, p, state);
      const Tensor max_exp_avg_sq = args.amsgrad ? state_tensor(p, "max_exp_avg_sq") : Tensor();
      (decoupled_weight_decay_ ? adamw_update_ : adam_update_)(p, grad, state_tensor(p, "exp_avg"),
                                                                state_tensor(p, "exp_avg_sq"), max_exp_avg_sq,
                                                                state_step(p), args);
    }
  }
}

}  // namespace mf::optim
