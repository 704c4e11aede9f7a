// Resampling (src/ops/resample.cpp): interpolate (torch.nn.functional.
// interpolate, PyTorch 1.13's arithmetic) and F.pad's reflect, replicate
// and circular modes. Errors follow torch's classes: ValueError for
// arguments torch's Python layer refuses, NotImplementedError for a mode
// and input rank that do not go together, RuntimeError-derived errors for
// sizes.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "meshflow/tensor.h"

namespace mf {

// interpolate's arguments, as torch.nn.functional.interpolate takes them.
struct InterpolateOptions {
  // Exactly one of size and scale_factor: one value for every spatial dim,
  // or a list with one per spatial dim.
  std::optional<std::variant<int64_t, Shape>> size;
  std::optional<std::variant<double, std::vector<double>>> scale_factor;
  // "nearest", "nearest-exact" (3-d to 5-d input), "linear" (3-d),
  // "bilinear", "bicubic" (4-d), "trilinear" (5-d), "area" (3-d or 4-d:
  // adaptive average pooling).
  std::string mode = "nearest";
  // Linear modes only (default false): corner pixels' centres stay aligned.
  std::optional<bool> align_corners;
  // true: the output size is floor(input size * scale_factor) and the
  // kernels take their scales from the sizes; otherwise the kernels use
  // scale_factor itself, which matters when the output size is not an
  // exact multiple.
  std::optional<bool> recompute_scale_factor;
  // Checked as torch checks it, then refused: anti-aliasing is not built.
  bool antialias = false;
};
// x is (N, C, spatial...), N may be 0. Gradients flow through every mode.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

// F.pad with a mode: "constant" (value, default 0; any dims), "reflect",
// "replicate" or "circular", which pad the last 1, 2 or 3 dims of a 2-/3-,
// 3-/4- or 4-/5-d input (circular: batched inputs only). pad = (last_lo,
// last_hi, second_last_lo, ...); negative entries crop. Reflect needs every
// pad smaller than its dim; circular pads wrap at most once around what the
// negative pads leave.
Tensor pad(const Tensor& t, const Shape& pad, const std::string& mode, std::optional<double> value);

}  // namespace mf
