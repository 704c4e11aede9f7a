// Matrix products on OpenBLAS (float32/float64) and oneDNN (bfloat16).
#pragma once

#include "meshflow/tensor.h"

namespace mf {

// torch.matmul: 1-d/2-d/batched with broadcasting of batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);     // (n, k) @ (k, m)
Tensor bmm(const Tensor& a, const Tensor& b);    // (B, n, k) @ (B, k, m)
Tensor mv(const Tensor& a, const Tensor& v);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor outer(const Tensor& a, const Tensor& b);
// beta * t + alpha * (a @ b)
Tensor addmm(const Tensor& t, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
Tensor baddbmm(const Tensor& t, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
// x @ weight^T + bias, weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace mf
