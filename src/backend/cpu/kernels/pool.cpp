// Pooling loops.
//
// Note [Plane blocks]: an NCHW plane is too small and its windows too
// irregular to vectorise within the plane. The kernels instead take planes
// kLanes at a time, transpose them into a block laid out ([D,] H, W, kLanes) in
// the accumulation type, and run every window over whole lane vectors:
// each window element is one contiguous kLanes-wide load, whatever the
// kernel, stride, dilation or padding (the window position is the same in
// every plane). Results are transposed back to NCHW. Each block is private
// to one thread; blocks run in parallel.
#include "backend/cpu/kernels/pool.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/onednn.h"
#include "ops/conv_common.h"

namespace mf::cpu {
namespace {

constexpr int64_t kLanes = 16;

// Spatial entries are (depth, height, width); a 2-d pool has depth 1.
struct Planes {
  int64_t count;
  int64_t in[3], out[3];
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

// in is (N, C, [D,] H, W), out (N, C, [OD,] OH, OW).
Planes planes_of(const Shape& in, const Shape& out) {
  Planes g{in[0] * in[1], {1, 1, 1}, {1, 1, 1}};
  const int64_t first = 5 - int64_t(in.size());
  for (int64_t d = first; d < 3; ++d) {
    g.in[d] = in[size_t(2 + d - first)];
    g.out[d] = out[size_t(2 + d - first)];
  }
  return g;
}
Planes planes_of(const Tensor& in, const Tensor& out) { return planes_of(in.sizes(), out.sizes()); }

// Calls fn(o, index) for each output position o = (z, y, x) in order;
// index is its offset in the output plane.
template <typename F>
void for_outputs(const Planes& g, const F& fn) {
  int64_t index = 0;
  for (int64_t z = 0; z < g.out[0]; ++z)
    for (int64_t y = 0; y < g.out[1]; ++y)
      for (int64_t x = 0; x < g.out[2]; ++x) fn(std::array<int64_t, 3>{z, y, x}, index++);
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

// The window of one output: per spatial dim its first input position
// (negative in the padding) and the kernel offsets [lo, hi) that land in
// the input.
struct Window {
  int64_t start[3], lo[3], hi[3];
  bool empty() const { return lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]; }
  // The position (z * H + y) * W + x of the first element inside the input.
  int64_t first(const Planes& g, const PoolParams& p) const {
    int64_t pos = 0;
    for (int d = 0; d < 3; ++d) pos = pos * g.in[d] + start[d] + lo[d] * p.dilation[d];
    return pos;
  }
};

Window window_of(const std::array<int64_t, 3>& o, const Planes& g, const PoolParams& p) {
  Window w;
  for (int d = 0; d < 3; ++d) {
    w.start[d] = o[size_t(d)] * p.stride[d] - p.padding[d];
    valid_range(w.start[d], p.kernel[d], p.dilation[d], g.in[d], w.lo[d], w.hi[d]);
  }
  return w;
}

// Calls fn(position) for each input position (z * H + y) * W + x of the
// window, in row-major order (PyTorch's order).
template <typename F>
void for_window(const Window& w, const Planes& g, const PoolParams& p, const F& fn) {
  for (int64_t a = w.lo[0]; a < w.hi[0]; ++a) {
    const int64_t plane = (w.start[0] + a * p.dilation[0]) * g.in[1];
    for (int64_t b = w.lo[1]; b < w.hi[1]; ++b) {
      const int64_t row = (plane + w.start[1] + b * p.dilation[1]) * g.in[2] + w.start[2];
      for (int64_t c = w.lo[2]; c < w.hi[2]; ++c) fn(row + c * p.dilation[2]);
    }
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

// The max pools: window_for(o) gives output o's window, whose dilation is
// p's.
template <typename T, typename WindowFor>
void max_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolParams& p, const WindowFor& window_for) {
  using A = acc_type<T>;
  using Index = PositionOf<A>;
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
    for_outputs(g, [&](const std::array<int64_t, 3>& o, int64_t index) {
      const Window w = window_for(o, g);
      const int64_t start = w.first(g, p);
      A* best_out = best.data() + index * kLanes;
      Index* where_out = where.data() + index * kLanes;
      if (w.empty()) {
        // A dilated window that holds only padding: -inf, and PyTorch's
        // index of its first dilated position (past the input: not read).
        std::fill(best_out, best_out + kLanes, -std::numeric_limits<A>::infinity());
        std::fill(where_out, where_out + kLanes, Index(start));
        return;
      }
      window_max(in.data(), start, [&](const auto& fn) { for_window(w, g, p, fn); }, best_out, where_out);
    });
    store_block(best, g.out_size(), first, lanes, yp);
    store_block(where, g.out_size(), first, lanes, ip);
  });
}

template <typename T>
void max_scatter(const Tensor& gy, const Tensor& indices, Tensor& gx) {
  using A = acc_type<T>;
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
void max_gather(const Tensor& t, const Tensor& indices, Tensor& out) {
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

// PyTorch's divisor for the average over window w: the window clipped to
// the padded input, or to the input without count_include_pad.
int64_t avg_divisor(const Window& w, const Planes& g, const PoolParams& p) {
  int64_t divisor = 1;
  for (int d = 0; d < 3; ++d) {
    int64_t lo = w.start[d], hi = std::min(lo + p.kernel[d], g.in[d] + p.padding[d]);
    if (!p.count_include_pad) {
      lo = std::max<int64_t>(lo, 0);
      hi = std::min(hi, g.in[d]);
    }
    divisor *= hi - lo;
  }
  return divisor;
}

template <typename T>
void avg_forward(const Tensor& x, Tensor& y, const PoolParams& p) {
  using A = acc_type<T>;
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> in, out;
    load_block(xp, g.in_size(), first, lanes, in);
    out.resize(static_cast<size_t>(g.out_size() * kLanes));
    const A* in_data = in.data();
    for_outputs(g, [&](const std::array<int64_t, 3>& o, int64_t index) {
      const Window w = window_of(o, g, p);
      A* sum = out.data() + index * kLanes;
      std::fill(sum, sum + kLanes, A(0));
      for_window(w, g, p, [&](int64_t pos) { add_lanes(sum, in_data + pos * kLanes); });
      const A divisor = A(avg_divisor(w, g, p));
      for (int64_t l = 0; l < kLanes; ++l) sum[l] /= divisor;
    });
    store_block(out, g.out_size(), first, lanes, yp);
  });
}

template <typename T>
void avg_backward(const Tensor& gy, Tensor& gx, const PoolParams& p) {
  using A = acc_type<T>;
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  T* gxp = gx.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> grad, acc;
    load_block(gyp, g.out_size(), first, lanes, grad);
    acc.assign(static_cast<size_t>(g.in_size() * kLanes), A(0));
    A* acc_data = acc.data();
    for_outputs(g, [&](const std::array<int64_t, 3>& o, int64_t index) {
      const Window w = window_of(o, g, p);
      const A divisor = A(avg_divisor(w, g, p));
      A* share = grad.data() + index * kLanes;
      for (int64_t l = 0; l < kLanes; ++l) share[l] /= divisor;
      for_window(w, g, p, [&](int64_t pos) { add_lanes(acc_data + pos * kLanes, share); });
    });
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
  for (int d = 0; d < 3; ++d)
    if ((g.in[d] + 2 * p.padding[d] - p.kernel[d]) / p.stride[d] + 1 != g.out[d]) return false;
  return true;
}

struct AvgPrimitives {
  bool forward_ok = false, backward_ok = false;
  dnnl::pooling_forward::primitive_desc forward_pd;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward::primitive_desc backward_pd;
  dnnl::pooling_backward backward;
};

// x and y are the (N, C, [D,] H, W) and (N, C, [OD,] OH, OW) shapes.
AvgPrimitives avg_primitives(const Shape& x, const Shape& y, DType dtype, const PoolParams& p) {
  static onednn::PrimitiveCache<AvgPrimitives> cache;
  std::vector<int64_t> key{int64_t(dtype), p.count_include_pad};
  key.insert(key.end(), x.begin(), x.end());
  key.insert(key.end(), y.begin(), y.end());
  for (int i = 0; i < 3; ++i) key.insert(key.end(), {p.kernel[i], p.stride[i], p.padding[i]});
  return cache.get(key, [&] {
    const auto algo = p.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
    const dnnl::memory::desc src = onednn::dense_desc(x, dtype), dst = onednn::dense_desc(y, dtype);
    dnnl::memory::dims strides, kernel, padding;
    for (size_t d = 5 - x.size(); d < 3; ++d) {
      strides.push_back(p.stride[d]);
      kernel.push_back(p.kernel[d]);
      padding.push_back(p.padding[d]);
    }
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

// The bytes of the oneDNN scratchpad an average pool between the
// (N, C, [D,] H, W) shapes x and y takes from the kernel's scratch (0 when
// the loops run instead).
int64_t onednn_avg_scratch(const Shape& x, const Shape& y, DType dtype, const PoolParams& p, bool backward) {
  if (!onednn_fits(planes_of(x, y), p, dtype)) return 0;
  const AvgPrimitives prims = avg_primitives(x, y, dtype, p);
  if (backward) return prims.backward_ok ? int64_t(prims.backward_pd.scratchpad_desc().get_size()) : 0;
  return prims.forward_ok ? int64_t(prims.forward_pd.scratchpad_desc().get_size()) : 0;
}

// Runs prim with args and its scratchpad taken from the kernel's scratch.
void onednn_run(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
                std::unordered_map<int, dnnl::memory> args, Scratch& taken) {
  const dnnl::memory::desc scratchpad = pd.scratchpad_desc();
  if (scratchpad.get_size() > 0) {
    Tensor buffer = taken.take({int64_t(scratchpad.get_size())}, DType::UInt8);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, onednn::engine(), buffer.data_ptr()));
  }
  onednn::execute(prim, args);
}

bool onednn_avg_forward(const Tensor& x, Tensor& y, const PoolParams& p, Scratch& taken) {
  if (!onednn_fits(planes_of(x, y), p, y.dtype())) return false;
  const AvgPrimitives prims = avg_primitives(x.sizes(), y.sizes(), y.dtype(), p);
  if (!prims.forward_ok) return false;
  onednn_run(prims.forward, prims.forward_pd,
             {{DNNL_ARG_SRC, onednn::memory_of(prims.forward_pd.src_desc(), x)},
              {DNNL_ARG_DST, onednn::memory_of(prims.forward_pd.dst_desc(), y)}},
             taken);
  return true;
}

bool onednn_avg_backward(const Tensor& gy, Tensor& gx, const PoolParams& p, Scratch& taken) {
  if (!onednn_fits(planes_of(gx, gy), p, gx.dtype())) return false;
  const AvgPrimitives prims = avg_primitives(gx.sizes(), gy.sizes(), gx.dtype(), p);
  if (!prims.backward_ok) return false;
  onednn_run(prims.backward, prims.backward_pd,
             {{DNNL_ARG_DIFF_DST, onednn::memory_of(prims.backward_pd.diff_dst_desc(), gy)},
              {DNNL_ARG_DIFF_SRC, onednn::memory_of(prims.backward_pd.diff_src_desc(), gx)}},
             taken);
  return true;
}

// --- adaptive average -----------------------------------------------------------------------

// Output i of n over an input of size m covers [floor(i*m/n), ceil((i+1)*m/n)).
int64_t window_start(int64_t i, int64_t n, int64_t m) { return (i * m) / n; }
int64_t window_end(int64_t i, int64_t n, int64_t m) { return ((i + 1) * m + n - 1) / n; }

// The adaptive window of output o: per dim [lo, hi) of the input.
Window adaptive_window(const std::array<int64_t, 3>& o, const Planes& g) {
  Window w;
  for (int d = 0; d < 3; ++d) {
    w.start[d] = window_start(o[size_t(d)], g.out[d], g.in[d]);
    w.lo[d] = 0;
    w.hi[d] = window_end(o[size_t(d)], g.out[d], g.in[d]) - w.start[d];
  }
  return w;
}

// Dilation 1 everywhere: adaptive windows are dense.
constexpr PoolParams kDense{};

int64_t window_size(const Window& w) { return (w.hi[0] - w.lo[0]) * (w.hi[1] - w.lo[1]) * (w.hi[2] - w.lo[2]); }

template <typename T>
void adaptive_forward(const Tensor& x, Tensor& y) {
  using A = acc_type<T>;
  const Planes g = planes_of(x, y);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> in, out;
    load_block(xp, g.in_size(), first, lanes, in);
    out.resize(static_cast<size_t>(g.out_size() * kLanes));
    const A* in_data = in.data();
    for_outputs(g, [&](const std::array<int64_t, 3>& o, int64_t index) {
      const Window w = adaptive_window(o, g);
      A* sum = out.data() + index * kLanes;
      std::fill(sum, sum + kLanes, A(0));
      for_window(w, g, kDense, [&](int64_t pos) { add_lanes(sum, in_data + pos * kLanes); });
      const A divisor = A(window_size(w));
      for (int64_t l = 0; l < kLanes; ++l) sum[l] /= divisor;
    });
    store_block(out, g.out_size(), first, lanes, yp);
  });
}

template <typename T>
void adaptive_backward(const Tensor& gy, Tensor& gx) {
  using A = acc_type<T>;
  const Planes g = planes_of(gx, gy);
  const T* gyp = gy.data<T>();
  T* gxp = gx.data<T>();
  for_blocks(g.count, g.in_size(), [&](int64_t first, int64_t lanes) {
    thread_local std::vector<A> grad, acc;
    load_block(gyp, g.out_size(), first, lanes, grad);
    acc.assign(static_cast<size_t>(g.in_size() * kLanes), A(0));
    A* acc_data = acc.data();
    for_outputs(g, [&](const std::array<int64_t, 3>& o, int64_t index) {
      const Window w = adaptive_window(o, g);
      const A* gv = grad.data() + index * kLanes;
      const A divisor = A(window_size(w));
      for_window(w, g, kDense, [&](int64_t pos) {
        A* dst = acc_data + pos * kLanes;
        for (int64_t l = 0; l < kLanes; ++l) dst[l] += gv[l] / divisor;
      });
    });
    store_block(acc, g.in_size(), first, lanes, gxp);
  });
}

}  // namespace

void max_pool_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolParams& p) {
  auto window_for = [&](const std::array<int64_t, 3>& o, const Planes& g) { return window_of(o, g, p); };
  dispatch_floating(x.dtype(), "max_pool", [&]<typename T>() { max_forward<T>(x, y, indices, p, window_for); });
}
void max_pool_scatter(const Tensor& grad_y, const Tensor& indices, Tensor& grad_x) {
  dispatch_floating(grad_y.dtype(), "max_pool", [&]<typename T>() { max_scatter<T>(grad_y, indices, grad_x); });
}
void max_pool_gather(const Tensor& t, const Tensor& indices, Tensor& out) {
  dispatch_floating(t.dtype(), "max_pool", [&]<typename T>() { max_gather<T>(t, indices, out); });
}
void avg_pool_forward(const Tensor& x, Tensor& y, const PoolParams& p, Scratch& taken) {
  if (y.numel() == 0 || onednn_avg_forward(x, y, p, taken)) return;
  dispatch_floating(x.dtype(), "avg_pool", [&]<typename T>() { avg_forward<T>(x, y, p); });
}
void avg_pool_backward(const Tensor& grad_y, Tensor& grad_x, const PoolParams& p, Scratch& taken) {
  if (grad_x.numel() == 0 || onednn_avg_backward(grad_y, grad_x, p, taken)) return;
  dispatch_floating(grad_y.dtype(), "avg_pool", [&]<typename T>() { avg_backward<T>(grad_y, grad_x, p); });
}
void adaptive_avg_pool_forward(const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "adaptive_avg_pool", [&]<typename T>() { adaptive_forward<T>(x, y); });
}
void adaptive_avg_pool_backward(const Tensor& grad_y, Tensor& grad_x) {
  dispatch_floating(grad_y.dtype(), "adaptive_avg_pool", [&]<typename T>() { adaptive_backward<T>(grad_y, grad_x); });
}
void adaptive_max_pool_forward(const Tensor& x, Tensor& y, Tensor& indices) {
  dispatch_floating(x.dtype(), "adaptive_max_pool",
                    [&]<typename T>() { max_forward<T>(x, y, indices, kDense, adaptive_window); });
}

namespace {

// The pooling ops' attrs (src/ops/pool.cpp) as kernel parameters.
PoolParams params_of(const Attrs& a) {
  PoolParams out;
  conv_detail::set_spatial(out.kernel, a.get_shape("kernel_size"));
  conv_detail::set_spatial(out.stride, a.get_shape("stride"));
  conv_detail::set_spatial(out.padding, a.get_shape("padding"));
  conv_detail::set_spatial(out.dilation, a.get_shape("dilation"));
  out.count_include_pad = a.get_bool("count_include_pad");
  return out;
}

// The ops of both ranks (max_pool2d and max_pool3d, ...) share their
// kernels. Each reads its inputs contiguous: a copy of each other one is a
// piece of the scratch, in the order of the inputs; the average pools then
// take oneDNN's scratchpad (Note [Kernel scratch]).
[[maybe_unused]] const bool kRegistered = [] {
  OpRegistry& r = OpRegistry::instance();
  constexpr DeviceType kCpu = DeviceType::CPU;
  for (const std::string spatial : {"2d", "3d"}) {
    const std::string max = "max_pool" + spatial, avg = "avg_pool" + spatial, avg_backward = avg + "_backward";
    const std::string adaptive = "adaptive_avg_pool" + spatial, adaptive_backward = adaptive + "_backward";
    r.set_kernel(
        max, kCpu,
        [](const TensorList& in, TensorList& out, const Attrs& attrs) {
          Scratch taken(out);
          max_pool_forward(dense(in[0], taken), out[0], out[1], params_of(attrs));
        },
        dense_inputs_scratch("max_pool", {0}));
    r.set_kernel(
        avg, kCpu,
        [](const TensorList& in, TensorList& out, const Attrs& attrs) {
          if (out[0].numel() == 0) return;
          Scratch taken(out);
          avg_pool_forward(dense(in[0], taken), out[0], params_of(attrs), taken);
        },
        [](const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) -> int64_t {
          if (shape_numel(out[0].sizes) == 0) return 0;
          ScratchLayout layout("avg_pool");
          add_dense(layout, in[0]);
          layout.add_bytes(onednn_avg_scratch(in[0].sizes(), out[0].sizes, out[0].dtype, params_of(attrs), false));
          return layout.bytes();
        });
    r.set_kernel(
        avg_backward, kCpu,
        [](const TensorList& in, TensorList& out, const Attrs& attrs) {
          if (out[0].numel() == 0) return;
          Scratch taken(out);
          avg_pool_backward(dense(in[0], taken), out[0], params_of(attrs), taken);
        },
        [](const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) -> int64_t {
          if (shape_numel(out[0].sizes) == 0) return 0;
          ScratchLayout layout("avg_pool_backward");
          add_dense(layout, in[0]);
          layout.add_bytes(onednn_avg_scratch(out[0].sizes, in[0].sizes(), out[0].dtype, params_of(attrs), true));
          return layout.bytes();
        });
    r.set_kernel(
        adaptive, kCpu,
        [](const TensorList& in, TensorList& out, const Attrs&) {
          Scratch taken(out);
          adaptive_avg_pool_forward(dense(in[0], taken), out[0]);
        },
        dense_inputs_scratch("adaptive_avg_pool", {0}));
    r.set_kernel(
        adaptive_backward, kCpu,
        [](const TensorList& in, TensorList& out, const Attrs&) {
          Scratch taken(out);
          adaptive_avg_pool_backward(dense(in[0], taken), out[0]);
        },
        dense_inputs_scratch("adaptive_avg_pool_backward", {0}));
  }
  r.set_kernel(
      "adaptive_max_pool2d", kCpu,
      [](const TensorList& in, TensorList& out, const Attrs&) {
        Scratch taken(out);
        adaptive_max_pool_forward(dense(in[0], taken), out[0], out[1]);
      },
      dense_inputs_scratch("adaptive_max_pool2d", {0}));
  // The max pools' gradient scatter and its adjoint, for any rank.
  r.set_kernel(
      "max_pool2d_scatter", kCpu,
      [](const TensorList& in, TensorList& out, const Attrs&) {
        Scratch taken(out);
        const Tensor grad_y = dense(in[0], taken), indices = dense(in[1], taken);
        max_pool_scatter(grad_y, indices, out[0]);
      },
      dense_inputs_scratch("max_pool2d_scatter", {0, 1}));
  r.set_kernel(
      "max_pool2d_gather", kCpu,
      [](const TensorList& in, TensorList& out, const Attrs&) {
        Scratch taken(out);
        const Tensor t = dense(in[0], taken), indices = dense(in[1], taken);
        max_pool_gather(t, indices, out[0]);
      },
      dense_inputs_scratch("max_pool2d_gather", {0, 1}));
  return true;
}();

}  // namespace
}  // namespace mf::cpu
