// Resampling maps (PyTorch 1.13's index arithmetic, aten/src/ATen/native/
// UpSample.h and PadNd.cpp) and the two loops of Note [Separable
// resampling].
#include "ops/kernels/cpu/resample.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
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
    const int64_t i0 = static_cast<int64_t>(real);
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

// --- loops --------------------------------------------------------------------------------

// Where the resampled dims sit: `planes` independent blocks of the leading
// dims, each an (in sizes) block of the input and an (out sizes) block of
// the output; an output block is `rows` rows (positions of the resampled
// dims but the last) of `width` elements.
struct Layout {
  int64_t planes = 1, in_plane = 1, out_plane = 1, rows = 0, width = 0;
  std::vector<int64_t> in_stride;  // of each resampled dim within an input block
};

Layout layout_of(const Shape& in_sizes, const std::vector<ResampleAxis>& axes) {
  Layout g;
  for (size_t d = 0; d < in_sizes.size() - axes.size(); ++d) g.planes *= in_sizes[d];
  g.in_stride.assign(axes.size(), 1);
  for (size_t a = axes.size(); a-- > 0;) {
    g.in_stride[a] = g.in_plane;
    g.in_plane *= axes[a].in_size;
    g.out_plane *= axes[a].out_size;
  }
  g.width = axes.back().out_size;
  g.rows = g.width > 0 ? g.out_plane / g.width : 0;
  return g;
}

// Each axis' weights in A (ones for an unweighted axis).
template <typename A>
std::vector<std::vector<A>> weights_of(const std::vector<ResampleAxis>& axes) {
  std::vector<std::vector<A>> out;
  for (const ResampleAxis& axis : axes) {
    if (axis.weight.empty()) out.emplace_back(size_t(axis.out_size * axis.taps), A(1));
    else out.emplace_back(axis.weight.begin(), axis.weight.end());
  }
  return out;
}

template <typename A>
using Taps = std::vector<std::pair<int64_t, A>>;  // (offset in an input block, weight)

// The taps output row `row` reads through the resampled dims but the last:
// the products of their taps.
template <typename A>
void outer_taps(const std::vector<ResampleAxis>& axes, const std::vector<std::vector<A>>& weights, const Layout& g,
                int64_t row, Taps<A>& taps) {
  taps.assign(1, {0, A(1)});
  for (size_t a = axes.size() - 1; a-- > 0;) {
    const ResampleAxis& axis = axes[a];
    const int64_t j = row % axis.out_size;
    row /= axis.out_size;
    const size_t n = taps.size();
    for (size_t i = 0; i < n; ++i) {
      const auto [offset, w] = taps[i];
      for (int64_t t = 0; t < axis.taps; ++t) {
        const size_t k = size_t(j * axis.taps + t);
        const std::pair<int64_t, A> tap{offset + axis.index[k] * g.in_stride[a], w * weights[a][k]};
        if (t == 0) taps[i] = tap;
        else taps.push_back(tap);
      }
    }
  }
}

// The input offset of output row `row` when every dim has one tap.
int64_t outer_offset(const std::vector<ResampleAxis>& axes, const Layout& g, int64_t row) {
  int64_t offset = 0;
  for (size_t a = axes.size() - 1; a-- > 0;) {
    offset += axes[a].index[size_t(row % axes[a].out_size)] * g.in_stride[a];
    row /= axes[a].out_size;
  }
  return offset;
}

template <typename T>
void gather(const Tensor& x_in, Tensor& y, const std::vector<ResampleAxis>& axes) {
  const Tensor x = contiguous(x_in.detach());
  const Layout g = layout_of(x.sizes(), axes);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  const int64_t* index = axes.back().index.data();
  parallel_for(0, g.planes * g.rows, std::max<int64_t>(1, kGrainSize / g.width), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* src = xp + (r / g.rows) * g.in_plane + outer_offset(axes, g, r % g.rows);
      T* dst = yp + r * g.width;
      for (int64_t j = 0; j < g.width; ++j) dst[j] = src[index[j]];
    }
  });
}

// Sums start from the first product (not from 0), so a single tap of
// weight 1 reproduces its input exactly, -0.0 included.
template <typename T>
void weighted_forward(const Tensor& x_in, Tensor& y, const std::vector<ResampleAxis>& axes) {
  using A = acc_type<T>;
  const Tensor x = contiguous(x_in.detach());
  const Layout g = layout_of(x.sizes(), axes);
  const auto weights = weights_of<A>(axes);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  const ResampleAxis& last = axes.back();
  const int64_t k = last.taps;
  parallel_for(0, g.planes * g.rows, std::max<int64_t>(1, kGrainSize / (g.width * k)), [&](int64_t lo, int64_t hi) {
    Taps<A> outer;
    for (int64_t r = lo; r < hi; ++r) {
      outer_taps(axes, weights, g, r % g.rows, outer);
      const T* plane = xp + (r / g.rows) * g.in_plane;
      T* dst = yp + r * g.width;
      for (int64_t j = 0; j < g.width; ++j) {
        const int64_t* index = last.index.data() + j * k;
        const A* w = weights.back().data() + j * k;
        A sum{};
        for (size_t o = 0; o < outer.size(); ++o) {
          const T* src = plane + outer[o].first;
          A inner = w[0] * A(src[index[0]]);
          for (int64_t t = 1; t < k; ++t) inner += w[t] * A(src[index[t]]);
          sum = o == 0 ? inner * outer[o].second : sum + inner * outer[o].second;
        }
        dst[j] = T(sum);
      }
    }
  });
}

// Blocks run in parallel; within one, gradients accumulate in A in output
// order, so the result does not depend on the thread count.
template <typename T>
void weighted_backward(const Tensor& gy_in, Tensor& gx, const std::vector<ResampleAxis>& axes) {
  using A = acc_type<T>;
  const Tensor gy = contiguous(gy_in.detach());
  const Layout g = layout_of(gx.sizes(), axes);
  const auto weights = weights_of<A>(axes);
  const T* gyp = gy.data<T>();
  T* gxp = gx.data<T>();
  const ResampleAxis& last = axes.back();
  const int64_t k = last.taps;
  const int64_t work = std::max<int64_t>({g.in_plane, g.out_plane * k, 1});
  parallel_for(0, g.planes, std::max<int64_t>(1, kGrainSize / work), [&](int64_t lo, int64_t hi) {
    std::vector<A> acc(size_t(g.in_plane));
    Taps<A> outer;
    for (int64_t p = lo; p < hi; ++p) {
      std::fill(acc.begin(), acc.end(), A(0));
      const T* src = gyp + p * g.out_plane;
      for (int64_t row = 0; row < g.rows; ++row) {
        outer_taps(axes, weights, g, row, outer);
        for (int64_t j = 0; j < g.width; ++j) {
          const A grad = A(src[row * g.width + j]);
          const int64_t* index = last.index.data() + j * k;
          const A* w = weights.back().data() + j * k;
          for (const auto& [offset, outer_w] : outer) {
            A* dst = acc.data() + offset;
            const A share = grad * outer_w;
            for (int64_t t = 0; t < k; ++t) dst[index[t]] += w[t] * share;
          }
        }
      }
      T* dst = gxp + p * g.in_plane;
      for (int64_t i = 0; i < g.in_plane; ++i) dst[i] = T(acc[size_t(i)]);
    }
  });
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

void resample_forward(const Tensor& x, Tensor& y, const std::vector<ResampleAxis>& axes) {
  if (y.numel() == 0) return;
  const bool weighted = std::any_of(axes.begin(), axes.end(), [](const auto& a) { return !a.weight.empty(); });
  if (!weighted) {
    dispatch_dtype(y.dtype(), [&]<typename T>() { gather<T>(x, y, axes); });
    return;
  }
  dispatch_floating(y.dtype(), "interpolate", [&]<typename T>() { weighted_forward<T>(x, y, axes); });
}

void resample_backward(const Tensor& grad_y, Tensor& grad_x, const std::vector<ResampleAxis>& axes) {
  if (grad_x.numel() == 0) return;
  dispatch_floating(grad_x.dtype(), "resample backward",
                    [&]<typename T>() { weighted_backward<T>(grad_y, grad_x, axes); });
}

}  // namespace mf::cpu
