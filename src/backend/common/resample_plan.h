// The per-dim maps of the resampling ops (Note [Separable resampling] in
// backend/cpu/kernels/resample.h): output position j of a resampled dim
// reads `taps` input positions with weights. Computed on the host with
// PyTorch 1.13's index arithmetic (aten/src/ATen/native/UpSample.h and
// PadNd.cpp); every backend's resampling loops read them.
#pragma once

#include <string>
#include <vector>

#include "meshflow/op_def.h"
#include "meshflow/tensor.h"

namespace mf::resample_plan {

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

// The maps of resampling op `op` (upsample_*, *_pad, or their _backward)
// for its input and output, from its attrs (defined with the ops, in
// src/ops/resample.cpp).
std::vector<ResampleAxis> op_axes(const std::string& op, const TensorList& in, const TensorList& out, const Attrs& a);

}  // namespace mf::resample_plan
