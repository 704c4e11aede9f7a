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
// (backend/common/resample_plan.cpp computes them with PyTorch 1.13's
// arithmetic; the CUDA backend runs them with its own passes,
// backend/common/resample_kernels.h):
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

#include "backend/common/resample_plan.h"
#include "backend/common/scratch.h"
#include "meshflow/tensor.h"

namespace mf::cpu {

using resample_plan::PadMode;
using resample_plan::ResampleAxis;
using resample_plan::UpsampleMode;

// y (..., out sizes) from x (..., in sizes): the last axes.size() dims are
// resampled. y and x are contiguous. taken: the kernel's scratch, whose next
// two pieces are the passes' buffers (see the kernels' ScratchFn in
// resample.cpp).
void resample_forward(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes, Scratch& taken);
// grad_x (written whole) = the adjoint of resample_forward applied to grad_y.
void resample_backward(const Tensor& grad_y, Tensor& grad_x, const std::vector<ResampleAxis>& axes,
                       Scratch& taken);

}  // namespace mf::cpu
