// The resampling maps (PyTorch 1.13's index arithmetic, aten/src/ATen/native/
// UpSample.h and PadNd.cpp).
#include "backend/common/resample_plan.h"

#include <algorithm>
#include <cmath>

namespace mf::resample_plan {
namespace {

// --- maps ---------------------------------------------------------------------------------

// PyTorch's compute_scales_value: the inverse of the user's scale factor,
// else the ratio of the sizes, in A.
template <typename A>
A scale_value(double scale, int64_t in, int64_t out) {
  return scale > 0 ? static_cast<A>(1.0 / scale) : static_cast<A>(in) / static_cast<A>(out);
}

// PyTorch's area_pixel_compute_scale: with align_corners the corner pixels'
// centres stay fixed, and the user's scale factor is not used.
template <typename A>
A area_scale(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0);
  return scale_value<A>(scale, in, out);
}

// PyTorch's area_pixel_compute_source_index. Without align_corners the
// product is formed in double and rounded to A, as PyTorch's expression
// `scale * (dst_index + 0.5) - 0.5` does; linear modes clamp at 0.
template <typename A>
A source_index(A scale, int64_t j, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<A>(j);
  const A src = static_cast<A>(double(scale) * (double(j) + 0.5) - 0.5);
  return !cubic && src < 0 ? A(0) : src;
}

// PyTorch's compute_source_index_and_lambda: two taps, and a plain copy
// when the sizes are equal (whatever the scale factor).
template <typename A>
void linear_taps(ResampleAxis& axis, bool align_corners, double scale) {
  const int64_t in = axis.in_size;
  const A s = area_scale<A>(in, axis.out_size, align_corners, scale);
  for (int64_t j = 0; j < axis.out_size; ++j) {
    if (axis.out_size == in) {
      axis.index.insert(axis.index.end(), {j, j});
      axis.weight.insert(axis.weight.end(), {1.0, 0.0});
      continue;
    }
    const A real = source_index<A>(s, j, align_corners, false);
    // Below in_size in exact arithmetic; the clamp keeps float rounding on
    // huge sizes inside the input.
    const int64_t i0 = std::min(static_cast<int64_t>(real), in - 1);
    const A lambda1 = std::min(std::max(real - static_cast<A>(i0), A(0)), A(1));
    axis.index.insert(axis.index.end(), {i0, i0 + (i0 < in - 1 ? 1 : 0)});
    axis.weight.insert(axis.weight.end(), {double(A(1) - lambda1), double(lambda1)});
  }
}

// Keys' cubic convolution with a = -0.75 (PyTorch's
// get_cubic_upsample_coefficients); taps at i - 1 .. i + 2, clamped.
template <typename A>
void cubic_taps(ResampleAxis& axis, bool align_corners, double scale) {
  constexpr A a = A(-0.75);
  auto near = [](A x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
  auto far = [](A x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
  const int64_t in = axis.in_size;
  const A s = area_scale<A>(in, axis.out_size, align_corners, scale);
  for (int64_t j = 0; j < axis.out_size; ++j) {
    const A real = source_index<A>(s, j, align_corners, true);
    // floorf, as PyTorch: the index goes through float even for double.
    const int64_t i = static_cast<int64_t>(std::floor(static_cast<float>(real)));
    const A t = real - static_cast<A>(i), rest = static_cast<A>(1.0 - t);
    const A w[4] = {far(static_cast<A>(t + 1.0)), near(t), near(rest), far(static_cast<A>(rest + 1.0))};
    for (int64_t k = 0; k < 4; ++k) {
      axis.index.push_back(std::clamp<int64_t>(i - 1 + k, 0, in - 1));
      axis.weight.push_back(double(w[k]));
    }
  }
}

}  // namespace

ResampleAxis pad_axis(PadMode mode, int64_t in_size, int64_t lo, int64_t hi) {
  ResampleAxis axis{.in_size = in_size, .out_size = in_size + lo + hi};
  axis.index.resize(size_t(axis.out_size));
  // Circular pads wrap around what the negative pads leave (PyTorch's
  // _pad_circular crops first); reflect and replicate pad the whole input
  // and then crop.
  const int64_t kept = in_size + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0);
  const int64_t first = std::max<int64_t>(-lo, 0), wrap_start = std::max<int64_t>(lo, 0);
  for (int64_t j = 0; j < axis.out_size; ++j) {
    int64_t i = j - lo;
    switch (mode) {
      case PadMode::Reflect: i = i < 0 ? -i : i >= in_size ? 2 * (in_size - 1) - i : i; break;
      case PadMode::Replicate: i = std::clamp<int64_t>(i, 0, in_size - 1); break;
      case PadMode::Circular: i = first + (((j - wrap_start) % kept) + kept) % kept; break;
    }
    axis.index[size_t(j)] = i;
  }
  return axis;
}

ResampleAxis upsample_axis(UpsampleMode mode, int64_t in_size, int64_t out_size, bool align_corners, double scale,
                           DType dtype) {
  ResampleAxis axis{.in_size = in_size, .out_size = out_size};
  switch (mode) {
    case UpsampleMode::Nearest:
    case UpsampleMode::NearestExact: {
      // PyTorch computes nearest indices in float for every dtype, and
      // without special cases for equal or doubled sizes (1.13).
      const float s = scale_value<float>(scale, in_size, out_size);
      axis.index.resize(size_t(out_size));
      for (int64_t j = 0; j < out_size; ++j) {
        const float src = mode == UpsampleMode::Nearest ? static_cast<float>(j) * s
                                                        : static_cast<float>((double(j) + 0.5) * double(s));
        axis.index[size_t(j)] = std::min(static_cast<int64_t>(std::floor(src)), in_size - 1);
      }
      return axis;
    }
    case UpsampleMode::Linear: axis.taps = 2; break;
    case UpsampleMode::Cubic: axis.taps = 4; break;
  }
  axis.index.reserve(size_t(out_size * axis.taps));
  axis.weight.reserve(size_t(out_size * axis.taps));
  const bool wide = dtype == DType::Float64;
  if (mode == UpsampleMode::Linear) {
    if (wide) linear_taps<double>(axis, align_corners, scale);
    else linear_taps<float>(axis, align_corners, scale);
  } else {
    if (wide) cubic_taps<double>(axis, align_corners, scale);
    else cubic_taps<float>(axis, align_corners, scale);
  }
  return axis;
}

}  // namespace mf::resample_plan
