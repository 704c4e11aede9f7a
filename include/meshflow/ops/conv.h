// Convolution and pooling (oneDNN on the CPU where it is faster).
#pragma once

#include <optional>
#include <vector>

#include "meshflow/tensor.h"

namespace mf {

// stride, padding and dilation: one entry for every spatial dim, or one
// per spatial dim. padding_same: PyTorch's padding="same" (stride 1; half
// the dilated kernel extent before the input, the rest after it), in place
// of padding.
struct Conv2dArgs {
  Shape stride = {1, 1};
  Shape padding = {0, 0};
  Shape dilation = {1, 1};
  int64_t groups = 1;
  bool padding_same = false;
};
// x (N, C, H, W) or unbatched (C, H, W), weight (O, C/groups, kH, kW), bias
// (O) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dArgs& args = {});
// The same fields for any number of spatial dims.
struct ConvArgs {
  Shape stride = {1};
  Shape padding = {0};
  Shape dilation = {1};
  int64_t groups = 1;
  bool padding_same = false;
};
// x (N, C, D, H, W) or unbatched (C, D, H, W), weight (O, C/groups, kD, kH,
// kW), bias (O) or undefined.
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const ConvArgs& args = {});

// Transposed convolution (the gradient of a convolution with respect to its
// input): x (N, C_in, *) or unbatched (C_in, *), weight (C_in, C_out/groups,
// k...), bias (C_out) or undefined. Each output size is
// (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1;
// output_padding must be smaller than stride or dilation. Fields as
// ConvArgs's (one entry or one per spatial dim).
struct ConvTransposeArgs {
  Shape stride = {1};
  Shape padding = {0};
  Shape output_padding = {0};
  int64_t groups = 1;
  Shape dilation = {1};
};
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTransposeArgs& args = {});
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTransposeArgs& args = {});
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTransposeArgs& args = {});
struct Pool2dArgs {
  Shape kernel_size;
  Shape stride = {};  // empty: kernel_size
  Shape padding = {0, 0};
  Shape dilation = {1, 1};  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const Pool2dArgs& args);
// {values, indices}: indices (int64) are positions h * W + w in each input
// plane, as PyTorch's return_indices=True gives.
TensorList max_pool2d_with_indices(const Tensor& x, const Pool2dArgs& args);
Tensor avg_pool2d(const Tensor& x, const Pool2dArgs& args);
Tensor adaptive_avg_pool2d(const Tensor& x, const Shape& output_size);
// Adaptive max pooling of (N, C, H, W) or unbatched (C, H, W) inputs:
// {values, indices} as max_pool2d_with_indices gives them. output_size has
// 1 entry (both dims) or 2; an empty entry keeps that input dim's size.
using OptionalSizes = std::vector<std::optional<int64_t>>;
TensorList adaptive_max_pool2d_with_indices(const Tensor& x, const OptionalSizes& output_size);
Tensor adaptive_max_pool2d(const Tensor& x, const OptionalSizes& output_size);
// The same over (N, C, L) or (C, L): indices are positions along L.
TensorList adaptive_max_pool1d_with_indices(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);
// 3-d pooling of (N, C, D, H, W) or unbatched (C, D, H, W) inputs; sizes
// have one entry (every dim) or three. Indices are positions
// (d * H + h) * W + w in each input volume.
struct Pool3dArgs {
  Shape kernel_size;
  Shape stride = {};  // empty: kernel_size
  Shape padding = {0};
  Shape dilation = {1};  // max_pool3d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool3d only
};
Tensor max_pool3d(const Tensor& x, const Pool3dArgs& args);
TensorList max_pool3d_with_indices(const Tensor& x, const Pool3dArgs& args);
Tensor avg_pool3d(const Tensor& x, const Pool3dArgs& args);
// output_size: 1 or 3 entries; an empty entry keeps that input dim's size.
Tensor adaptive_avg_pool3d(const Tensor& x, const OptionalSizes& output_size);

}  // namespace mf
