// Closeness and equality of whole tensors, as torch.isclose / allclose /
// equal (composed of the elementwise comparison ops, so they work on global
// tensors too).
#pragma once

#include "meshflow/tensor.h"

namespace mf {

// |a - b| <= atol + rtol * |b| elementwise (b broadcast against a), or a == b;
// with equal_nan two NaNs are close. a and b must have the same dtype;
// rtol and atol must be >= 0. Bool tensors compare exactly.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Whether every element of isclose(a, b, ...) is true.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Same shape and every element equal (NaN equals nothing).
bool equal(const Tensor& a, const Tensor& b);

}  // namespace mf
