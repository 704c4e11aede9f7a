// The fused optimizer updates as functions: each runs one registered op
// that writes the parameter and its state tensors in place, in one pass
// (Note [Optimizer updates are ops] in optimizer.h). The optimizer classes
// call these; they are public for graph mode and for custom loops.
//
// Every tensor has the parameter's shape and dtype (float16 and bfloat16
// compute in float32) except `step`, a one-element floating counter that
// the update increments before using it, as PyTorch's `step_t += 1`. No
// two of the tensors may overlap in memory (ValueError).
// The updates record no autograd history; call them under NoGradGuard when
// the parameter requires grad.
#pragma once

#include "meshflow/tensor.h"

namespace mf::optim {

// torch.optim.SGD, one parameter:
//   d = (maximize ? -grad : grad) + weight_decay * param
//   buf = init_momentum_buffer ? d : momentum * buf + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf            (when momentum != 0)
//   param -= lr * d
struct SGDUpdateArgs {
  double lr = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
  // The buffer has no history yet: it takes d (PyTorch clones d on the
  // first step) instead of decaying.
  bool init_momentum_buffer = false;
  // Skip input (Note [Skipped updates] in optimizer.h): undefined, or a
  // one-element float32 tensor; the update does nothing when it is nonzero.
  Tensor found_inf;
};
// momentum_buffer is undefined when momentum == 0.
void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                 const SGDUpdateArgs& args);

// torch.optim.Adam / AdamW, one parameter (t = step after the increment):
//   g = maximize ? -grad : grad;  Adam: g += weight_decay * param
//   AdamW: param *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   amsgrad: v_max = max(v_max, v), used in place of v below
//   param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
struct AdamUpdateArgs {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
  // Skip input (Note [Skipped updates] in optimizer.h): undefined, or a
  // one-element float32 tensor; the update does nothing when it is nonzero.
  Tensor found_inf;
};
// max_exp_avg_sq is defined exactly when amsgrad is set.
void adam_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& max_exp_avg_sq, const Tensor& step, const AdamUpdateArgs& args);
// The same with AdamW's decoupled weight decay.
void adamw_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   const Tensor& max_exp_avg_sq, const Tensor& step, const AdamUpdateArgs& args);

// torch.optim.RMSprop, one parameter:
//   g = (maximize ? -grad : grad) + weight_decay * param
//   sq = alpha * sq + (1 - alpha) * g * g
//   centered: ga = alpha * ga + (1 - alpha) * g; avg = sqrt(sq - ga * ga) + eps
//   otherwise avg = sqrt(sq) + eps
//   momentum > 0: buf = momentum * buf + g / avg; param -= lr * buf
//   otherwise param -= lr * g / avg
struct RMSpropUpdateArgs {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
  // Skip input (Note [Skipped updates] in optimizer.h): undefined, or a
  // one-element float32 tensor; the update does nothing when it is nonzero.
  Tensor found_inf;
};
// grad_avg is defined exactly when centered, momentum_buffer exactly when
// momentum > 0.
void rmsprop_update_(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                     const Tensor& momentum_buffer, const Tensor& step, const RMSpropUpdateArgs& args);

// torch.optim.Adagrad, one parameter (t = step after the increment):
//   g = (maximize ? -grad : grad) + weight_decay * param
//   sum += g * g
//   param -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps)
struct AdagradUpdateArgs {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double eps = 1e-10;
  bool maximize = false;
  // Skip input (Note [Skipped updates] in optimizer.h): undefined, or a
  // one-element float32 tensor; the update does nothing when it is nonzero.
  Tensor found_inf;
};
void adagrad_update_(const Tensor& param, const Tensor& grad, const Tensor& sum, const Tensor& step,
                     const AdagradUpdateArgs& args);

}  // namespace mf::optim
