// Automatic mixed precision: autocast (autocast.h) and gradient scaling.
//
// GradScaler follows torch.cuda.amp.GradScaler (PyTorch 1.13): the loss is
// multiplied by `scale` before backward; before the optimizer steps, the
// gradients are unscaled and checked for inf/NaN by one fused op per
// gradient; a step with a non-finite gradient is skipped and the scale
// shrinks by backoff_factor, and after growth_interval finite steps in a
// row it grows by growth_factor.
#pragma once

#include <map>
#include <optional>

#include "meshflow/autocast.h"
#include "meshflow/optim/optimizer.h"

namespace mf::amp {

// torch._amp_foreach_non_finite_check_and_unscale_: each grad *= inv_scale
// (in its own dtype, computed in float32 or wider); found_inf (one float32
// element) is set to 1 when any grad held an inf or NaN. inv_scale is one
// float32 element.
void non_finite_check_and_unscale_(const TensorList& grads, const Tensor& found_inf, const Tensor& inv_scale);

// torch._amp_update_scale_: with found_inf nonzero, scale *= backoff_factor
// and growth_tracker = 0; otherwise growth_tracker += 1, and when it
// reaches growth_interval, scale *= growth_factor (kept only if finite) and
// growth_tracker = 0. scale and found_inf are one float32 element,
// growth_tracker one int32 element.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval);

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});
  // loss * scale (loss itself when disabled).
  Tensor scale(const Tensor& loss);
  // Unscales optimizer's gradients in place and records whether any is
  // non-finite; at most once per optimizer between update() calls.
  void unscale_(optim::Optimizer& optimizer);
  // Unscales (unless done) and steps the optimizer unless a gradient was
  // non-finite; returns whether it stepped.
  bool step(optim::Optimizer& optimizer);
  // Adjusts the scale from this iteration's inf checks, or sets new_scale.
  void update(std::optional<double> new_scale = std::nullopt);
  double get_scale() const;
  int64_t growth_tracker() const;
  // The scale (float32 (1,)) and growth tracker (int32 (1,)) tensors, made
  // on first use. Graph mode (graph::Tracer::set_grad_scaler) reads and
  // updates these in place, so eager and graph steps share them.
  const Tensor& scale_tensor();
  const Tensor& growth_tracker_tensor();
  const GradScalerOptions& options() const { return options_; }
  bool is_enabled() const { return options_.enabled; }

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    Tensor found_inf;
  };
  // The scale and growth tracker, made on `device` (the first scaled loss's).
  void lazy_init(Device device = Device());

  GradScalerOptions options_;
  Tensor scale_;           // float32 (1,)
  Tensor growth_tracker_;  // int32 (1,)
  std::map<const optim::Optimizer*, OptimizerState> states_;
};

}  // namespace mf::amp
