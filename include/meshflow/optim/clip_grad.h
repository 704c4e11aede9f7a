// Gradient clipping (torch.nn.utils.clip_grad_norm_, PyTorch 1.13).
#pragma once

#include <limits>

#include "meshflow/tensor.h"

namespace mf::nn::utils {

// Scales the gradients of params in place so that their joint norm (the
// norm_type-norm of all gradients taken as one vector; norm_type may be
// infinity) is at most max_norm, with PyTorch's factor
// min(1, max_norm / (total_norm + 1e-6)). Parameters without a gradient are
// skipped. Returns the total norm before clipping as a 0-d tensor (0 when
// no parameter has a gradient). error_if_nonfinite: a NaN or infinite total
// norm throws instead of scaling.
Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace mf::nn::utils
