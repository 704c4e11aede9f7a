// Helpers shared by the layer files: argument checks and PyTorch's default
// affine initialisation (Python's text of values: nn/repr.h).
#pragma once

#include <cmath>
#include <string>

#include "meshflow/error.h"
#include "meshflow/nn/init.h"
#include "meshflow/ops/creation.h"
#include "nn/repr.h"  // py_tuple

namespace mf::nn {

inline void check_positive(int64_t v, const char* layer, const char* arg) {
  MF_CHECK(v > 0, ValueError, layer, ": ", arg, " must be positive, got ", v);
}

// Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias, which is
// what PyTorch's kaiming_uniform_(a=sqrt(5)) plus its bias rule give.
inline void reset_affine(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

// An uninitialised parameter of the default dtype.
inline Tensor new_param(const Shape& shape) { return empty(shape, TensorOptions{.dtype = default_dtype()}); }

}  // namespace mf::nn
