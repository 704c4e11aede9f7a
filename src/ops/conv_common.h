// Shared pieces of the convolution op files (conv.cpp, conv_transpose.cpp;
// pool.cpp uses expand_param and set_spatial): the attrs of the conv ops and
// calls of those ops.
#pragma once

#include <string>

#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/tensor.h"
#include "backend/cpu/kernels/conv.h"

namespace mf::conv_detail {

// v with one entry expanded to n entries, or v when it has n (PyTorch's
// "a single integer value or a list of n values").
Shape expand_param(const Shape& v, int64_t n, const char* op, const char* name);

// dst's last v.size() entries = v: the (depth, height, width) arrays of the
// kernel parameters, whose depth entry a 2-d op leaves at its default.
inline void set_spatial(int64_t (&dst)[3], const Shape& v) {
  for (size_t i = 0; i < v.size(); ++i) dst[3 - v.size() + i] = v[i];
}

// The attrs of the "conv2d" / "conv3d" ops: stride, padding, dilation (one
// entry per spatial dim) and groups, plus padding_end where the padding
// after the input differs from padding (padding='same' with an odd total,
// Note [Transposed convolution] in conv_transpose.cpp).
Attrs conv_attrs(const Shape& stride, const Shape& padding, const Shape& padding_end, const Shape& dilation,
                 int64_t groups);
// The kernel parameters of such attrs; `spatial` entries each.
cpu::ConvParams params_of(const Attrs& attrs);

// The attrs of the convolution C whose adjoint a transposed convolution
// with attrs `a` is (Note [Transposed convolution] in conv_transpose.cpp).
Attrs adjoint_conv_attrs(const Attrs& a, const char* op);
// Checks what conv and conv_transpose share: x and w of 2 + spatial dims
// with one floating dtype, positive stride, dilation and groups, a
// non-negative padding, a positive kernel size.
void check_operands(const char* op, const Tensor& x, const Tensor& w, const cpu::ConvParams& p);
// Checks bias (undefined, or (channels) of x's dtype).
void check_bias(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, int64_t channels);

// conv(x, w) + bias by the "conv2d" or "conv3d" op (by x's rank); attrs as
// conv_attrs gives.
Tensor conv_op(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs);
// The gradients {x, weight, bias} of conv_op for grad_y, those selected by
// mask (the others undefined).
TensorList conv_backward_op(const Tensor& grad_y, const Tensor& x, const Tensor& w, const Shape& mask,
                            const Attrs& attrs);

// fn(x) for a batched x (`batched` dims); an unbatched x (one dim fewer)
// runs as a batch of one.
template <typename F>
Tensor with_batch(const Tensor& x, int64_t batched, const char* op, const F& fn) {
  MF_CHECK(x.defined() && (x.dim() == batched || x.dim() == batched - 1), ShapeError, op, ": expected a ",
           batched - 1, "-d (unbatched) or ", batched, "-d (batched) input, got ",
           x.defined() ? "shape " + shape_str(x.sizes()) : std::string("an undefined tensor"));
  if (x.dim() == batched) return fn(x);
  return squeeze(fn(unsqueeze(x, 0)), 0);
}

}  // namespace mf::conv_detail
