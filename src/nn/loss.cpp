// Loss modules over the functional losses (ops/nn.h, ops/functional.h).
#include "meshflow/error.h"
#include "meshflow/nn/layers.h"
#include "meshflow/nn/pointwise_layers.h"
#include "meshflow/ops/functional.h"
#include "meshflow/ops/nn.h"

namespace mf::nn {
namespace {
std::string checked_reduction(std::string reduction, const char* loss) {
  MF_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", ValueError, loss, ": ", reduction,
           " is not a valid value for reduction");
  return reduction;
}
}  // namespace

CrossEntropyLoss::CrossEntropyLoss(const Tensor& weight, int64_t ignore_index, std::string reduction,
                                   double label_smoothing)
    : Module("CrossEntropyLoss"),
      ignore_index(ignore_index),
      reduction(checked_reduction(std::move(reduction), "CrossEntropyLoss")),
      label_smoothing(label_smoothing) {
  MF_CHECK(label_smoothing >= 0 && label_smoothing <= 1, ValueError,
           "CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  register_buffer("weight", weight);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, buffer_at(0), ignore_index, reduction, label_smoothing);
}

NLLLoss::NLLLoss(const Tensor& weight, int64_t ignore_index, std::string reduction)
    : Module("NLLLoss"), ignore_index(ignore_index), reduction(checked_reduction(std::move(reduction), "NLLLoss")) {
  register_buffer("weight", weight);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return nll_loss(input, target, buffer_at(0), ignore_index, reduction);
}

MSELoss::MSELoss(std::string reduction)
    : Module("MSELoss"), reduction(checked_reduction(std::move(reduction), "MSELoss")) {}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) { return mse_loss(input, target, reduction); }

BCEWithLogitsLoss::BCEWithLogitsLoss(const Tensor& weight, std::string reduction, const Tensor& pos_weight)
    : Module("BCEWithLogitsLoss"), reduction(checked_reduction(std::move(reduction), "BCEWithLogitsLoss")) {
  register_buffer("weight", weight);
  register_buffer("pos_weight", pos_weight);
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, buffer_at(0), buffer_at(1), reduction);
}

L1Loss::L1Loss(std::string reduction) : Module("L1Loss"), reduction(checked_reduction(std::move(reduction), "L1Loss")) {}
Tensor L1Loss::forward(const Tensor& input, const Tensor& target) { return l1_loss(input, target, reduction); }

SmoothL1Loss::SmoothL1Loss(std::string reduction, double beta)
    : Module("SmoothL1Loss"), reduction(checked_reduction(std::move(reduction), "SmoothL1Loss")), beta(beta) {
  MF_CHECK(beta >= 0, ValueError, "SmoothL1Loss: beta must be >= 0, got ", beta);
}
Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return smooth_l1_loss(input, target, reduction, beta);
}

HuberLoss::HuberLoss(std::string reduction, double delta)
    : Module("HuberLoss"), reduction(checked_reduction(std::move(reduction), "HuberLoss")), delta(delta) {
  MF_CHECK(delta > 0, ValueError, "HuberLoss: delta must be > 0, got ", delta);
}
Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) {
  return huber_loss(input, target, reduction, delta);
}

BCELoss::BCELoss(const Tensor& weight, std::string reduction)
    : Module("BCELoss"), reduction(checked_reduction(std::move(reduction), "BCELoss")) {
  register_buffer("weight", weight);
}
Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, buffer_at(0), reduction);
}

KLDivLoss::KLDivLoss(std::string reduction, bool log_target)
    : Module("KLDivLoss"),
      reduction(reduction == "batchmean" ? reduction : checked_reduction(std::move(reduction), "KLDivLoss")),
      log_target(log_target) {}
Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  return kl_div(input, target, reduction, log_target);
}

}  // namespace mf::nn
