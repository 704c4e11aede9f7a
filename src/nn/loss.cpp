// Loss modules over the functional losses (ops/nn.h).
#include "meshflow/error.h"
#include "meshflow/nn/layers.h"
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

}  // namespace mf::nn
