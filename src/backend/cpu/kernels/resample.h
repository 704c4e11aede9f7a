// Resampling of a tensor's last 1-3 dims along per-dim index maps: the
// modes of interpolate (nearest, nearest-exact, linear, bicubic) and F.pad's
// reflect, replicate and circular modes. The leading dims are independent
// planes.
//
// Note [Separable resampling]: every one of these ops maps each resampled
// dim on its own. Output position j of a dim reads `taps` input positions
// of that dim with weights (one tap of weight 1 for the pads and the
// nearest modes, two for linear, four for bicubic), and an output element
// is the sum over its dims' tap combinations of the weights' product times
// the input there. So the ops share two loops, and only the maps differ
// (resample.cpp computes them with PyTorch 1.13's arithmetic):
//   * forward: a plain gather when no dim has weights (an exact copy, every
//     dtype); otherwise one pass per dim, the last dim first, each output
//     row the weighted sum of whole input rows (vectorised along the dims
//     after it). This nests the sums as PyTorch does (sum_h w_h sum_w w_w x)
//     and costs a few operations per output instead of every tap product.
//   * backward: the adjoint, one pass per dim in the other order, each the
//     transpose of that dim's map turned into a gather (input position i
//     collects the outputs that read it), so rows run in parallel and the
//     result does not depend on the thread count.
#pragma once

#include <vector>

#include "meshflow/tensor.h"

namespace mf::cpu {

struct ResampleAxis {
  int64_t in_size = 0, out_size = 0, taps = 1;
  std::vector<int64_t> index;  // (out_size, taps) input positions, each in [0, in_size)
  std::vector<double> weight;  // (out_size, taps); empty: one tap of weight 1
};

enum class PadMode { Reflect, Replicate, Circular };
// F.pad's map of one dim of in_size padded by lo before and hi after
// (negative pads crop). The caller has checked the mode's limits:
// reflect |pad| < in_size, replicate in_size > 0, circular pads within the
// cropped size (check_pad in src/ops/resample.cpp).
ResampleAxis pad_axis(PadMode mode, int64_t in_size, int64_t lo, int64_t hi);

enum class UpsampleMode { Nearest, NearestExact, Linear, Cubic };
// interpolate's map of one dim from in_size to out_size (both > 0).
// scale: the scale factor the user gave (<= 0: none, the sizes' ratio is
// used); align_corners applies to Linear and Cubic. Linear and cubic
// weights are computed in dtype's accumulation type, as PyTorch does.
ResampleAxis upsample_axis(UpsampleMode mode, int64_t in_size, int64_t out_size, bool align_corners, double scale,
                           DType dtype);

// y (..., out sizes) from x (..., in sizes): the last axes.size() dims are
// resampled. y is contiguous; x may have any strides.
void resample_forward(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes);
// grad_x (written whole) = the adjoint of resample_forward applied to grad_y.
void resample_backward(const Tensor& grad_y, Tensor& grad_x, const std::vector<ResampleAxis>& axes);

}  // namespace mf::cpu
