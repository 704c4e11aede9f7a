// nn::init: in-place initialisers with PyTorch's formulas (torch.nn.init).
// Each runs without recording autograd, draws from the default generator
// (mf::manual_seed makes it reproducible) and returns its argument.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "meshflow/tensor.h"

namespace mf::nn::init {

// (fan_in, fan_out): for a weight (out, in, *kernel), in * prod(kernel) and
// out * prod(kernel). Throws ValueError for fewer than 2 dimensions.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
// The recommended gain of a nonlinearity ("linear", "conv{1,2,3}d",
// "conv_transpose{1,2,3}d", "sigmoid",
// "tanh", "relu", "leaky_relu" (param = negative slope, default 0.01),
// "selu"); ValueError for others.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = {});

const Tensor& uniform_(const Tensor& t, double a = 0.0, double b = 1.0);
const Tensor& normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
const Tensor& constant_(const Tensor& t, double value);
const Tensor& ones_(const Tensor& t);
const Tensor& zeros_(const Tensor& t);
// Normal(mean, std) restricted to [a, b] (inverse-CDF sampling).
const Tensor& trunc_normal_(const Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1.0);
const Tensor& xavier_normal_(const Tensor& t, double gain = 1.0);
// mode "fan_in" or "fan_out"; a is the negative slope for leaky_relu.
const Tensor& kaiming_uniform_(const Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                               const std::string& nonlinearity = "leaky_relu");
const Tensor& kaiming_normal_(const Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                              const std::string& nonlinearity = "leaky_relu");
// A (semi-)orthogonal matrix times gain, t viewed as (t.size(0), the rest):
// Q of the QR decomposition of a standard normal matrix (transposed when it
// is wide), its columns' signs fixed by R's diagonal so that Q is uniform
// over the orthogonal matrices (PyTorch's method). ValueError for fewer
// than 2 dims; a 0-size tensor is left as it is. float16 and bfloat16
// tensors get a float32 Q rounded.
const Tensor& orthogonal_(const Tensor& t, double gain = 1.0);

}  // namespace mf::nn::init
