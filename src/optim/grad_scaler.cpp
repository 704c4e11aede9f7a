// Gradient scaling for mixed precision: the fused unscale-and-check op, the
// scale update op and GradScaler (PyTorch 1.13's torch.cuda.amp.GradScaler).
// The ops' CPU kernels: backend/cpu/kernels/amp.cpp.
#include "meshflow/amp.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "optim/update_common.h"

namespace mf::amp {
namespace {

void check_one_element(const char* op, const char* name, const Tensor& t, DType dtype) {
  MF_CHECK(t.defined(), ValueError, op, ": ", name, " is undefined");
  MF_CHECK(t.numel() == 1 && t.dtype() == dtype, TypeError, op, ": ", name, " must be a one-element ",
           dtype_name(dtype), " tensor, got shape ", shape_str(t.sizes()), " and dtype ", dtype_name(t.dtype()));
}

// grad *= inv_scale; found_inf = 1 when grad held an inf or NaN.
MF_REGISTER_OP(OpDef{
    .name = "amp_unscale",
    .inputs = {"grad", "found_inf", "inv_scale"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].defined() && is_floating(in[0].dtype()), TypeError,
               "amp_unscale: expected a floating-point gradient, got ",
               in[0].defined() ? dtype_name(in[0].dtype()) : "an undefined tensor");
      check_one_element("amp_unscale", "found_inf", in[1], kFloat32);
      check_one_element("amp_unscale", "inv_scale", in[2], kFloat32);
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .differentiable = false,
    .inplace = true,
    .mutates = 0b10,  // found_inf
    // Every rank checks the whole gradient.
    .sbp = sbp::broadcast_only(),
});

// The scale backs off after a step with found_inf, grows after
// growth_interval steps without; growth_tracker counts them.
MF_REGISTER_OP(OpDef{
    .name = "amp_update_scale",
    .inputs = {"scale", "growth_tracker", "found_inf"},
    .infer = [](const TensorList& in, const Attrs&) {
      check_one_element("amp_update_scale", "scale", in[0], kFloat32);
      check_one_element("amp_update_scale", "growth_tracker", in[1], kInt32);
      check_one_element("amp_update_scale", "found_inf", in[2], kFloat32);
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .differentiable = false,
    .inplace = true,
    .mutates = 0b10,  // growth_tracker
    // One scale, the same on every rank.
    .sbp = sbp::broadcast_only(),
});

}  // namespace

void non_finite_check_and_unscale_(const TensorList& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  static const OpDef& op = dispatch::op("amp_unscale");
  for (const Tensor& g : grads) optim::detail::apply_update(op, {g, found_inf, inv_scale}, {});
}

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval) {
  static const OpDef& op = dispatch::op("amp_update_scale");
  optim::detail::apply_update(op, {scale, growth_tracker, found_inf},
                              {{"growth_factor", growth_factor},
                               {"backoff_factor", backoff_factor},
                               {"growth_interval", growth_interval}});
}

// --- GradScaler ---------------------------------------------------------------

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options) {
  if (!options_.enabled) return;
  MF_CHECK(options_.growth_factor > 1.0, ValueError, "GradScaler: growth_factor must be > 1.0, got ",
           options_.growth_factor);
  MF_CHECK(options_.backoff_factor < 1.0, ValueError, "GradScaler: backoff_factor must be < 1.0, got ",
           options_.backoff_factor);
}

void GradScaler::lazy_init(Device device) {
  if (scale_.defined()) return;
  scale_ = full({1}, options_.init_scale, {.dtype = kFloat32, .device = device});
  growth_tracker_ = zeros({1}, {.dtype = kInt32, .device = device});
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  lazy_init(loss.device());
  return mul(loss, scale_);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerState& state = states_[&optimizer];
  MF_CHECK(state.stage != Stage::Unscaled, Error,
           "GradScaler: unscale_() has already been called on this optimizer since the last update()");
  MF_CHECK(state.stage != Stage::Stepped, Error, "GradScaler: unscale_() is being called after step()");
  MF_CHECK(scale_.defined(), Error,
           "GradScaler: unscale_ was called before scale(); scale the loss first in this iteration");
  NoGradGuard no_grad;
  // On the scale's device, with no host read: float32(1 / double(scale)).
  const Tensor inv_scale = to(reciprocal(to(scale_, kFloat64)), kFloat32);
  state.found_inf = zeros({1}, {.dtype = kFloat32, .device = scale_.device()});
  TensorList grads;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params)
      if (p.grad().defined()) {
        MF_CHECK(p.grad().dtype() != kFloat16, ValueError, "GradScaler: attempting to unscale float16 gradients");
        grads.push_back(p.grad());
      }
  non_finite_check_and_unscale_(grads, state.found_inf, inv_scale);
  state.stage = Stage::Unscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  OptimizerState& state = states_[&optimizer];
  MF_CHECK(state.stage != Stage::Stepped, Error,
           "GradScaler: step() has already been called since the last update()");
  if (state.stage == Stage::Ready) unscale_(optimizer);
  const bool finite = states_[&optimizer].found_inf.item<float>() == 0.0f;
  if (finite) optimizer.step();
  states_[&optimizer].stage = Stage::Stepped;
  return finite;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  MF_CHECK(scale_.defined(), Error,
           "GradScaler: update() was called before scale(); scale the loss first in this iteration");
  if (new_scale) {
    fill_(scale_, *new_scale);
  } else {
    Tensor found_inf;
    for (const auto& [opt, state] : states_)
      if (state.found_inf.defined()) found_inf = found_inf.defined() ? add(found_inf, state.found_inf) : state.found_inf;
    MF_CHECK(found_inf.defined(), Error, "GradScaler: no inf checks were recorded prior to update()");
    update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor, options_.backoff_factor,
                  options_.growth_interval);
  }
  states_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

const Tensor& GradScaler::scale_tensor() {
  lazy_init();
  return scale_;
}

const Tensor& GradScaler::growth_tracker_tensor() {
  lazy_init();
  return growth_tracker_;
}

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : 0;
}

}  // namespace mf::amp
