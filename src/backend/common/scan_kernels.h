// cumsum, cumprod and cumprod's backward over a backend's walks L (Note
// [Device index kernels] in index_kernels.h): one thread per line along the
// scanned dim, accumulating as the CPU's kernels do. The CPU keeps its own
// blocked scans (backend/cpu/kernels/scan.cpp; src/ops/cumsum.cpp has the
// ops' schemas and backward).
#pragma once

#include "backend/common/index_kernels.h"

namespace mf::scan_kernels {

using index_kernels::Operand;
using index_kernels::operand;
using index_kernels::walk_geometry;

// Floats scan in double, 16-bit floats in float, integers in wrapping
// uint64_t (the CPU's cumsum/cumprod accumulators).
template <typename T>
using scan_acc_t = std::conditional_t<std::is_same_v<T, float>, double, reduce_ops::sum_acc_t<T>>;

// Operands: 0 the output's line, 1 the input's line (strides in elements
// along the line: so, s). One line per element of the walk.
template <typename M, typename T, bool kProduct>
struct ScanLine {
  int64_t n, s, so;
  bool reverse;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using Acc = scan_acc_t<T>;
    const T* p = reinterpret_cast<const T*>(data[1] + off[1]);
    T* q = reinterpret_cast<T*>(data[0] + off[0]);
    Acc acc = kProduct ? Acc(1) : Acc(0);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = reverse ? n - 1 - k : k;
      const Acc v = M::template to_acc<Acc>(p[i * s]);
      acc = kProduct ? Acc(acc * v) : Acc(acc + v);
      q[i * so] = reduce_ops::from_acc<T>(acc);
    }
  }
};

// The walk over every line along dim of x and out (x's shape with dim 1).
template <size_t N>
LoopGeometry<N> line_walk(const std::array<const Tensor*, N>& ts, int64_t dim, const char* op) {
  Shape sizes = ts[0]->sizes();
  sizes[size_t(dim)] = 1;
  std::array<Operand, N> ops;
  for (size_t k = 0; k < N; ++k) ops[k] = operand(*ts[k], ts[k]->strides());
  return walk_geometry<N>(sizes, ops, op);
}

template <typename L, bool kProduct>
void scan(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const char* op = kProduct ? "cumprod" : "cumsum";
  if (in[0].numel() == 0) return;
  const Tensor x = in[0].dim() == 0 ? make_view(in[0], {1}, {1}, in[0].storage_offset()) : in[0];
  Tensor o = out[0].dim() == 0 ? make_view(out[0], {1}, {1}, out[0].storage_offset()) : out[0];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), op);
  const bool reverse = !kProduct && attrs.get_bool("reverse");
  const LoopGeometry<2> g = line_walk<2>({&o, &x}, dim, op);
  const int64_t n = x.sizes()[size_t(dim)], lines = x.numel() / n;
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    L::template for_each<2>(o.device(), g, lines,
                            ScanLine<typename L::Math, T, kProduct>{n, x.strides()[size_t(dim)],
                                                                    o.strides()[size_t(dim)], reverse});
  });
}

// Note in src/ops/cumsum.cpp: out_i = (x_0 ... x_{i-1}) * S_i with
// S_i = g_i + x_{i+1} S_{i+1}. The suffixes S are stored in the output,
// then scaled by the running prefix.
template <typename M, typename T>
struct CumprodBackwardLine {
  int64_t n, sg, sx, so;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using Acc = scan_acc_t<T>;
    T* o = reinterpret_cast<T*>(data[0] + off[0]);
    const T* g = reinterpret_cast<const T*>(data[1] + off[1]);
    const T* x = reinterpret_cast<const T*>(data[2] + off[2]);
    Acc s = Acc(0);
    for (int64_t i = n - 1; i >= 0; --i) {
      s = (i == n - 1 ? Acc(0) : M::template to_acc<Acc>(x[(i + 1) * sx]) * s) + M::template to_acc<Acc>(g[i * sg]);
      o[i * so] = T(s);
    }
    Acc prefix = Acc(1);
    for (int64_t i = 0; i < n; ++i) {
      o[i * so] = T(prefix * M::template to_acc<Acc>(o[i * so]));
      prefix *= M::template to_acc<Acc>(x[i * sx]);
    }
  }
};

template <typename L>
void cumprod_backward(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &g = in[0], &x = in[1];
  Tensor& o = out[0];
  if (x.numel() == 0) return;
  const int64_t dim = x.dim() - 1, n = x.sizes()[size_t(dim)];
  const LoopGeometry<3> walk = line_walk<3>({&o, &g, &x}, dim, "cumprod_backward");
  dispatch_floating(x.dtype(), "cumprod_backward", [&]<typename T>() {
    L::template for_each<3>(o.device(), walk, x.numel() / n,
                            CumprodBackwardLine<typename L::Math, T>{n, g.strides()[size_t(dim)],
                                                                     x.strides()[size_t(dim)], o.strides()[size_t(dim)]});
  });
}

template <typename L>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("cumsum", device, scan<L, false>);
  OpRegistry::instance().set_kernel("cumprod", device, scan<L, true>);
  OpRegistry::instance().set_kernel("cumprod_backward", device, cumprod_backward<L>);
}

}  // namespace mf::scan_kernels
