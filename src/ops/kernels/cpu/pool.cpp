// Pooling loops.
//
// Note [Plane blocks]: an NCHW plane is too small and its windows too
// irregular to vectorise within the plane. The kernels instead take planes
// kLanes at a time, transpose them into a block laid out (H, W, kLanes) in
// the accumulation type, and run every window over whole lane vectors:
// each window element is one contiguous kLanes-wide load, whatever the
// kernel, stride, dilation or padding (the window position is the same in
// every plane). Results are transposed back to NCHW. Each block is private
// to one thread; blocks run in parallel.
#include "ops/kernels/cpu/pool.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "ops/kernels/cpu/onednn.h"

namespace mf::cpu {
namespace {

constexpr int64_t kLanes = 16;

struct Planes {
  int64_t count, h, w, oh, ow;
  int64_t in_size() const { return h * w; }
  int64_t out_size() const { return oh * ow; }
};

// in is (count, H, W), out (count, OH, OW).
Planes planes_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

// Runs fn(first_plane, lanes) for each block of kLanes planes, in parallel;
// `work` is the elements touched per plane (for the grain).
template <typename F>
void for_blocks(int64_t count, int64_t work, const F& fn) {
  const int64_t blocks = (count + kLanes - 1) / kLanes;
  parallel_for(0, blocks, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(work * kLanes, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t b = lo; b < hi; ++b) fn(b * kLanes, std::min(kLanes, count - b * kLanes));
               });
}

// dst[0, n) = src[0, n) converted; n == kLanes (all but a plane's last
// tile) is one vector move instead of a variable-length copy.
template <typename D, typename S>
inline void copy_run(D* dst, const S* src, int64_t n) {
  if (n == kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) dst[j] = D(src[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = D(src[j]);
  }
}

// block (size, kLanes) = planes [first, first + lanes) of src, each of
// `size` elements; missing lanes are zero. Transposed kLanes x kLanes tile
// by tile so both sides of the copy stay in L1.
template <typename T, typename A>
void load_block(const T* src, int64_t size, int64_t first, int64_t lanes, std::vector<A>& block) {
  block.resize(static_cast<size_t>(size * kLanes));
  A* dst = block.data();
  for (int64_t i0 = 0; i0 < size; i0 += kLanes) {
    const int64_t n = std::min(kLanes, size - i0);
    A tile[kLanes][kLanes] = {};
    for (int64_t l = 0; l < lanes; ++l) copy_run(tile[l], src + (first + l) * size + i0, n);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < kLanes; ++l) dst[(i0 + j) * kLanes + l] = tile[l][j];
  }
}

// The inverse of load_block for the first `lanes` lanes.
template <typename T, typename A>
void store_block(const std::vector<A>& block, int64_t size, int64_t first, int64_t lanes, T* dst) {
  const A* src = block.data();
  for (int64_t i0 = 0; i0 < size; i0 += kLanes) {
    const int64_t n = std::min(kLanes, size - i0);
    A tile[kLanes][kLanes];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < kLanes; ++l) tile[l][j] = src[(i0 + j) * kLanes + l];
    for (int64_t l = 0; l < lanes; ++l) copy_run(dst + (first + l) * size + i0, tile[l], n);
  }
}

// dst[l] += src[l] over the lanes (restrict: the blocks never overlap).
template <typename A>
inline void add_lanes(A* __restrict dst, const A* __restrict src) {
  for (int64_t l = 0; l < kLanes; ++l) dst[l] += src[l];
}

// The kernel offsets k in [lo, hi) whose input start + k * dilation lies
// in [0, size).
void valid_range(int64_t start, int64_t kernel, int64_t dilation, int64_t size, int64_t& lo, int64_t& hi) {
  lo = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
  hi = size - start <= 0 ? 0 : std::min(kernel, (size - start + dilation - 1) / dilation);
  hi = std::max(hi, lo);
}

// Calls fn(position) for each input position h * W + w of the window of
// output (oh, ow), in row-major order (PyTorch's order).
template <typename F>
void for_window(int64_t oh, int64_t ow, const Planes& g, const PoolParams& p, const F& fn) {
  const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t kh_lo, kh_hi, kw_lo, kw_hi;
  valid_range(h0, p.kernel[0], p.dilation[0], g.h, kh_lo, kh_hi);
  valid_range(w0, p.kernel[1], p.dilation[1], g.w, kw_lo, kw_hi);
  for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
    const int64_t row = (h0 + kh * p.dilation[0]) * g.w + w0;
    for (int64_t kw = kw_lo; kw < kw_hi; ++kw) fn(row + kw * p.dilation[1]);
  }
}

// --- max ---------------------------------------------------------------------------------

// Positions in a max block: the integer as wide as the accumulation type,
// so values and positions share one lane layout (int32 for float planes,
// which the op limits to 2^31 elements).
template <typename A>
using PositionOf = std::conditional_t<sizeof(A) == 4, int32_t, int64_t>;

// best/where (kLanes each) = the lane-wise max over a window and its
// position: for_positions(fn) calls fn(position) for each window element
// in row-major order. The max starts from the element at `first` (PyTorch's
// index for an all -inf window); a later element replaces it when larger
// or NaN.
template <typename A, typename ForPositions>
void window_max(const A* in, int64_t first, const ForPositions& for_positions, A* best, PositionOf<A>* where) {
  using Index = PositionOf<A>;
  // Explicit vector types: GCC does not vectorise the two-type blend below.
  using Values [[gnu::vector_size(sizeof(A) * kLanes)]] = A;
  using Positions [[gnu::vector_size(sizeof(A) * kLanes)]] = Index;
  Positions a = Positions{} + Index(first);
  Values b;
  std::memcpy(&b, in + first * kLanes, sizeof b);
  for_positions([&](int64_t pos) {
    Values v;
    std::memcpy(&v, in + pos * kLanes, sizeof v);
    const Positions take = (v > b) | (v != v);
    b = take ? v : b;
    a = take ? Positions{} + Index(pos) : a;
  });
  std::memcpy(best, &b, sizeof b);
  std::memcpy(where, &a, sizeof a);
}

template <typename T>
void max_forward(const Tensor& x_in, Tensor& y, Tensor& indices, const PoolParams& p) {
  using A = acc_type<T>;
  using Index = PositionOf<A>;
  Tensor x = contiguous(x_in.detach());
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  int64_t* ip = indices.data<int64_t>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> in, best;
    thread_local std::vector<Index> where;
    load_block(xp, g.in_size(), first, lanes, in);
    best.resize(static_cast<size_t>(g.out_size() * kLanes));
    where.resize(static_cast<size_t>(g.out_size() * kLanes));
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
        int64_t kh_lo, kh_hi, kw_lo, kw_hi;
        valid_range(h0, p.kernel[0], p.dilation[0], g.h, kh_lo, kh_hi);
        valid_range(w0, p.kernel[1], p.dilation[1], g.w, kw_lo, kw_hi);
        const int64_t start = (h0 + kh_lo * p.dilation[0]) * g.w + w0 + kw_lo * p.dilation[1];
        A* best_out = best.data() + (oh * g.ow + ow) * kLanes;
        Index* where_out = where.data() + (oh * g.ow + ow) * kLanes;
        if (kh_lo >= kh_hi || kw_lo >= kw_hi) {
          // A dilated window that holds only padding: -inf, and PyTorch's
          // index of its first dilated position (past the input: not read).
          std::fill(best_out, best_out + kLanes, -std::numeric_limits<A>::infinity());
          std::fill(where_out, where_out + kLanes, Index(start));
          continue;
        }
        window_max(in.data(), start, [&](const auto& fn) {
          for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
            const int64_t row = (h0 + kh * p.dilation[0]) * g.w + w0;
            for (int64_t kw = kw_lo; kw < kw_hi; ++kw) fn(row + kw * p.dilation[1]);
          }
        }, best_out, where_out);
      }
    store_block(best, g.out_size(), first, lanes, yp);
    store_block(where, g.out_size(), first, lanes, ip);
  });
}

template <typename T>
void max_scatter(const Tensor& gy_in, const Tensor& indices_in, Tensor& gx) {
  using A = acc_type<T>;
  Tensor gy = contiguous(gy_in.detach()), indices = contiguous(indices_in.detach());
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  const int64_t* ip = indices.data<int64_t>();
  T* gxp = gx.data<T>();
  parallel_for(0, g.count, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.in_size(), 1)),
               [&](int64_t lo, int64_t hi) {
                 std::vector<A> acc(static_cast<size_t>(g.in_size()));
                 for (int64_t plane = lo; plane < hi; ++plane) {
                   std::fill(acc.begin(), acc.end(), A(0));
                   const T* src = gyp + plane * g.out_size();
                   const int64_t* idx = ip + plane * g.out_size();
                   // A window of padding only (dilation) has PyTorch's index past
                   // the input and no element to receive its gradient.
                   for (int64_t i = 0; i < g.out_size(); ++i)
                     if (idx[i] >= 0 && idx[i] < g.in_size()) acc[size_t(idx[i])] += A(src[i]);
                   T* dst = gxp + plane * g.in_size();
                   for (int64_t i = 0; i < g.in_size(); ++i) dst[i] = T(acc[size_t(i)]);
                 }
               });
}

template <typename T>
void max_gather(const Tensor& t_in, const Tensor& indices_in, Tensor& out) {
  Tensor t = contiguous(t_in.detach()), indices = contiguous(indices_in.detach());
  const Planes g = planes_of(t, out);
  const T* tp = t.data<T>();
  const int64_t* ip = indices.data<int64_t>();
  T* op = out.data<T>();
  parallel_for(0, g.count * g.out_size(), kGrainSize, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      op[i] = ip[i] >= 0 && ip[i] < g.in_size() ? tp[(i / g.out_size()) * g.in_size() + ip[i]] : T(0);
  });
}

// --- average -----------------------------------------------------------------------------

// PyTorch's divisor for the average of output (oh, ow): the window clipped
// to the padded input, or to the input without count_include_pad.
int64_t avg_divisor(int64_t oh, int64_t ow, const Planes& g, const PoolParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], g.h + p.padding[0]), w1 = std::min(w0 + p.kernel[1], g.w + p.padding[1]);
  if (p.count_include_pad) return (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  return (std::min(h1, g.h) - h0) * (std::min(w1, g.w) - w0);
}

template <typename T>
void avg_forward(const Tensor& x_in, Tensor& y, const PoolParams& p) {
  using A = acc_type<T>;
  Tensor x = contiguous(x_in.detach());
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> in, out;
    load_block(xp, g.in_size(), first, lanes, in);
    out.resize(static_cast<size_t>(g.out_size() * kLanes));
    const A* in_data = in.data();
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        A* sum = out.data() + (oh * g.ow + ow) * kLanes;
        std::fill(sum, sum + kLanes, A(0));
        for_window(oh, ow, g, p, [&](int64_t pos) { add_lanes(sum, in_data + pos * kLanes); });
        const A divisor = A(avg_divisor(oh, ow, g, p));
        for (int64_t l = 0; l < kLanes; ++l) sum[l] /= divisor;
      }
    store_block(out, g.out_size(), first, lanes, yp);
  });
}

template <typename T>
void avg_backward(const Tensor& gy_in, Tensor& gx, const PoolParams& p) {
  using A = acc_type<T>;
  Tensor gy = contiguous(gy_in.detach());
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  T* gxp = gx.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> grad, acc;
    load_block(gyp, g.out_size(), first, lanes, grad);
    acc.assign(static_cast<size_t>(g.in_size() * kLanes), A(0));
    A* acc_data = acc.data();
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const A divisor = A(avg_divisor(oh, ow, g, p));
        A* share = grad.data() + (oh * g.ow + ow) * kLanes;
        for (int64_t l = 0; l < kLanes; ++l) share[l] /= divisor;
        for_window(oh, ow, g, p, [&](int64_t pos) { add_lanes(acc_data + pos * kLanes, share); });
      }
    store_block(acc, g.in_size(), first, lanes, gxp);
  });
}

// Note [oneDNN average pooling]: oneDNN's JIT kernels pool plain NCHW
// float32/bfloat16 about twice as fast as the loops above (with few
// channels it falls back to a reference loop, which is slower: the loops
// stay). It agrees with PyTorch whenever no window hangs over the padded
// input (PyTorch shrinks the divisor of such ceil_mode windows; oneDNN
// would count the overhang as padding). Those cases, float64 and float16
// keep the loops.
bool onednn_fits(const Planes& g, const PoolParams& p, DType dtype) {
  if (dtype != DType::Float32 && dtype != DType::BFloat16) return false;
  return (g.h + 2 * p.padding[0] - p.kernel[0]) / p.stride[0] + 1 == g.oh &&
         (g.w + 2 * p.padding[1] - p.kernel[1]) / p.stride[1] + 1 == g.ow;
}

struct AvgPrimitives {
  bool forward_ok = false, backward_ok = false;
  dnnl::pooling_forward::primitive_desc forward_pd;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward::primitive_desc backward_pd;
  dnnl::pooling_backward backward;
};

// x and y are the (N, C, H, W) and (N, C, OH, OW) shapes.
AvgPrimitives avg_primitives(const Shape& x, const Shape& y, DType dtype, const PoolParams& p) {
  static onednn::PrimitiveCache<AvgPrimitives> cache;
  std::vector<int64_t> key{int64_t(dtype), p.count_include_pad};
  key.insert(key.end(), x.begin(), x.end());
  key.insert(key.end(), y.begin(), y.end());
  for (int i = 0; i < 2; ++i) key.insert(key.end(), {p.kernel[i], p.stride[i], p.padding[i]});
  return cache.get(key, [&] {
    const auto algo = p.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
    const dnnl::memory::desc src = onednn::dense_desc(x, dtype), dst = onednn::dense_desc(y, dtype);
    const dnnl::memory::dims strides{p.stride[0], p.stride[1]}, kernel{p.kernel[0], p.kernel[1]},
        padding{p.padding[0], p.padding[1]};
    try {
      AvgPrimitives out;
      out.forward_pd = dnnl::pooling_forward::primitive_desc(
          {dnnl::prop_kind::forward_training, algo, src, dst, strides, kernel, padding, padding},
          onednn::default_attr(), onednn::engine());
      out.backward_pd = dnnl::pooling_backward::primitive_desc({algo, src, dst, strides, kernel, padding, padding},
                                                               onednn::default_attr(), onednn::engine(),
                                                               out.forward_pd);
      out.forward = dnnl::pooling_forward(out.forward_pd);
      out.backward = dnnl::pooling_backward(out.backward_pd);
      // Only oneDNN's JIT kernels beat the loops (its fallback is a plain
      // reference loop).
      out.forward_ok = std::string(out.forward_pd.impl_info_str()).rfind("jit", 0) == 0;
      out.backward_ok = std::string(out.backward_pd.impl_info_str()).rfind("jit", 0) == 0;
      return out;
    } catch (const dnnl::error&) {
      return AvgPrimitives{};
    }
  });
}

bool onednn_avg_forward(const Tensor& x_in, Tensor& y, const PoolParams& p) {
  if (!onednn_fits(planes_of(x_in, y), p, y.dtype())) return false;
  const AvgPrimitives prims = avg_primitives(x_in.sizes(), y.sizes(), y.dtype(), p);
  if (!prims.forward_ok) return false;
  Tensor x = contiguous(x_in.detach());
  onednn::execute(prims.forward, prims.forward_pd.scratchpad_desc(),
                  {{DNNL_ARG_SRC, onednn::memory_of(prims.forward_pd.src_desc(), x)},
                   {DNNL_ARG_DST, onednn::memory_of(prims.forward_pd.dst_desc(), y)}});
  return true;
}

bool onednn_avg_backward(const Tensor& gy_in, Tensor& gx, const PoolParams& p) {
  if (!onednn_fits(planes_of(gx, gy_in), p, gx.dtype())) return false;
  const AvgPrimitives prims = avg_primitives(gx.sizes(), gy_in.sizes(), gx.dtype(), p);
  if (!prims.backward_ok) return false;
  Tensor gy = contiguous(gy_in.detach());
  onednn::execute(prims.backward, prims.backward_pd.scratchpad_desc(),
                  {{DNNL_ARG_DIFF_DST, onednn::memory_of(prims.backward_pd.diff_dst_desc(), gy)},
                   {DNNL_ARG_DIFF_SRC, onednn::memory_of(prims.backward_pd.diff_src_desc(), gx)}});
  return true;
}

// --- adaptive average -----------------------------------------------------------------------

// Output i of n over an input of size m covers [floor(i*m/n), ceil((i+1)*m/n)).
int64_t window_start(int64_t i, int64_t n, int64_t m) { return (i * m) / n; }
int64_t window_end(int64_t i, int64_t n, int64_t m) { return ((i + 1) * m + n - 1) / n; }

// Calls fn(position, 1 / window size) for each input position of adaptive
// output (oh, ow).
template <typename A, typename F>
void for_adaptive_window(int64_t oh, int64_t ow, const Planes& g, const F& fn) {
  const int64_t h0 = window_start(oh, g.oh, g.h), h1 = window_end(oh, g.oh, g.h);
  const int64_t w0 = window_start(ow, g.ow, g.w), w1 = window_end(ow, g.ow, g.w);
  const A divisor = A((h1 - h0) * (w1 - w0));
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) fn(ih * g.w + iw, divisor);
}

template <typename T>
void adaptive_forward(const Tensor& x_in, Tensor& y) {
  using A = acc_type<T>;
  Tensor x = contiguous(x_in.detach());
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> in, out;
    load_block(xp, g.in_size(), first, lanes, in);
    out.resize(static_cast<size_t>(g.out_size() * kLanes));
    const A* in_data = in.data();
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        A* sum = out.data() + (oh * g.ow + ow) * kLanes;
        std::fill(sum, sum + kLanes, A(0));
        A divisor = 1;
        for_adaptive_window<A>(oh, ow, g, [&](int64_t pos, A d) {
          add_lanes(sum, in_data + pos * kLanes);
          divisor = d;
        });
        for (int64_t l = 0; l < kLanes; ++l) sum[l] /= divisor;
      }
    store_block(out, g.out_size(), first, lanes, yp);
  });
}

template <typename T>
void adaptive_backward(const Tensor& gy_in, Tensor& gx) {
  using A = acc_type<T>;
  Tensor gy = contiguous(gy_in.detach());
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  T* gxp = gx.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> grad, acc;
    load_block(gyp, g.out_size(), first, lanes, grad);
    acc.assign(static_cast<size_t>(g.in_size() * kLanes), A(0));
    A* acc_data = acc.data();
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const A* gv = grad.data() + (oh * g.ow + ow) * kLanes;
        for_adaptive_window<A>(oh, ow, g, [&](int64_t pos, A divisor) {
          A* dst = acc_data + pos * kLanes;
          for (int64_t l = 0; l < kLanes; ++l) dst[l] += gv[l] / divisor;
        });
      }
    store_block(acc, g.in_size(), first, lanes, gxp);
  });
}

template <typename T>
void adaptive_max_forward(const Tensor& x_in, Tensor& y, Tensor& indices) {
  using A = acc_type<T>;
  using Index = PositionOf<A>;
  Tensor x = contiguous(x_in.detach());
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  int64_t* ip = indices.data<int64_t>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> in, best;
    thread_local std::vector<Index> where;
    load_block(xp, g.in_size(), first, lanes, in);
    best.resize(static_cast<size_t>(g.out_size() * kLanes));
    where.resize(static_cast<size_t>(g.out_size() * kLanes));
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int64_t h0 = window_start(oh, g.oh, g.h), h1 = window_end(oh, g.oh, g.h);
        const int64_t w0 = window_start(ow, g.ow, g.w), w1 = window_end(ow, g.ow, g.w);
        window_max(in.data(), h0 * g.w + w0, [&](const auto& fn) {
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) fn(ih * g.w + iw);
        }, best.data() + (oh * g.ow + ow) * kLanes, where.data() + (oh * g.ow + ow) * kLanes);
      }
    store_block(best, g.out_size(), first, lanes, yp);
    store_block(where, g.out_size(), first, lanes, ip);
  });
}

}  // namespace

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolParams& p) {
  dispatch_floating(x.dtype(), "max_pool2d", [&]<typename T>() { max_forward<T>(x, y, indices, p); });
}
void max_pool2d_scatter(const Tensor& grad_y, const Tensor& indices, Tensor& grad_x) {
  dispatch_floating(grad_y.dtype(), "max_pool2d", [&]<typename T>() { max_scatter<T>(grad_y, indices, grad_x); });
}
void max_pool2d_gather(const Tensor& t, const Tensor& indices, Tensor& out) {
  dispatch_floating(t.dtype(), "max_pool2d", [&]<typename T>() { max_gather<T>(t, indices, out); });
}
void avg_pool2d_forward(const Tensor& x, Tensor& y, const PoolParams& p) {
  if (y.numel() == 0 || onednn_avg_forward(x, y, p)) return;
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<typename T>() { avg_forward<T>(x, y, p); });
}
void avg_pool2d_backward(const Tensor& grad_y, Tensor& grad_x, const PoolParams& p) {
  if (grad_x.numel() == 0 || onednn_avg_backward(grad_y, grad_x, p)) return;
  dispatch_floating(grad_y.dtype(), "avg_pool2d", [&]<typename T>() { avg_backward<T>(grad_y, grad_x, p); });
}
void adaptive_avg_pool2d_forward(const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() { adaptive_forward<T>(x, y); });
}
void adaptive_max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices) {
  dispatch_floating(x.dtype(), "adaptive_max_pool2d", [&]<typename T>() { adaptive_max_forward<T>(x, y, indices); });
}
void adaptive_avg_pool2d_backward(const Tensor& grad_y, Tensor& grad_x) {
  dispatch_floating(grad_y.dtype(), "adaptive_avg_pool2d", [&]<typename T>() { adaptive_backward<T>(grad_y, grad_x); });
}

}  // namespace mf::cpu
