// Adagrad: the fused "adagrad_update" op and torch.optim.Adagrad (PyTorch
// 1.13, _single_tensor_adagrad, dense gradients).
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/update.h"
#include "optim/update_common.h"

namespace mf::optim {

namespace {

MF_REGISTER_OP(OpDef{
    .name = "adagrad_update",
    .inputs = {"param", "grad", "sum", "step", "found_inf"},
    .infer = [](const TensorList& in, const Attrs&) {
      return detail::infer_update("adagrad_update", in, {{2, true}}, 3);
    },
    .differentiable = false,
    .inplace = true,
    .mutates = 0b1100,  // sum, step
    .sbp = sbp::elementwise(),
});

}  // namespace

void adagrad_update_(const Tensor& param, const Tensor& grad, const Tensor& sum, const Tensor& step,
                     const AdagradUpdateArgs& args) {
  static const OpDef& op = dispatch::op("adagrad_update");
  detail::apply_update(op, {param, grad, sum, step, args.found_inf},
                       {{"lr", args.lr},
                        {"lr_decay", args.lr_decay},
                        {"weight_decay", args.weight_decay},
                        {"eps", args.eps},
                        {"maximize", args.maximize}});
}

// --- the optimizer ---------------------------------------------------------------

Adagrad::Adagrad(TensorList params, const AdagradOptions& options)
    : Adagrad(single_group("Adagrad", std::move(params)), options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& o)
    : Optimizer("Adagrad", {{"lr", o.lr},
                            {"lr_decay", o.lr_decay},
                            {"weight_decay", o.weight_decay},
                            {"initial_accumulator_value", o.initial_accumulator_value},
                            {"eps", o.eps},
                            {"maximize", o.maximize}}) {
  add_initial_groups(std::move(groups));
}

void Adagrad::validate_group(const ParamGroup& group) const {
  const double lr = group.lr(), lr_decay = group.get_double("lr_decay");
  const double weight_decay = group.get_double("weight_decay");
  const double initial = group.get_double("initial_accumulator_value"), eps = group.get_double("eps");
  MF_CHECK(lr >= 0, ValueError, "Adagrad: invalid learning rate: ", lr, " (must be >= 0)");
  MF_CHECK(lr_decay >= 0, ValueError, "Adagrad: invalid lr_decay value: ", lr_decay, " (must be >= 0)");
  MF_CHECK(weight_decay >= 0, ValueError, "Adagrad: invalid weight_decay value: ", weight_decay, " (must be >= 0)");
  MF_CHECK(initial >= 0, ValueError, "Adagrad: invalid initial_accumulator_value value: ", initial,
           " (must be >= 0)");
  MF_CHECK(eps >= 0, ValueError, "Adagrad: invalid epsilon value: ", eps, " (must be >= 0)");
  group.get_bool("maximize");  // throws unless a bool
}

namespace {
void init_adagrad_state(StateValue::Dict& state, const Tensor& p, double initial_accumulator_value) {
  state["step"] = zeros({}, {.dtype = kFloat32, .device = p.device()});
  state["sum"] = detail::state_like(p, initial_accumulator_value);
}
}  // namespace

void Adagrad::init_group_state(ParamGroup& group) {
  const double initial = group.get_double("initial_accumulator_value");
  for (const Tensor& p : group.params) init_adagrad_state(state(p), p, initial);
}

void Adagrad::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : param_groups()) {
    const AdagradUpdateArgs args{.lr = group.lr(),
                                 .lr_decay = group.get_double("lr_decay"),
                                 .weight_decay = group.get_double("weight_decay"),
                                 .eps = group.get_double("eps"),
                                 .maximize = group.get_bool("maximize")};
    for (const Tensor& p : group.params) {
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      // A state dict loaded without this parameter's entry leaves it empty.
      StateValue::Dict& state = this->state(p);
      if (state.empty()) init_adagrad_state(state, p, group.get_double("initial_accumulator_value"));
      adagrad_update_(p, grad, state_tensor(p, "sum"), state_step(p), args);
    }
  }
}

}  // namespace mf::optim
