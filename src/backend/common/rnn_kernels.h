// rnn_layer and rnn_layer_backward over a backend's walks L (Note [Device
// index kernels] in index_kernels.h). The CPU keeps its own kernels
// (src/backend/cpu/kernels/rnn.cpp, on OpenBLAS); src/ops/rnn.cpp has the
// ops' schemas and Note [Fused recurrent layers], whose steps these follow.
//
// Note [Device recurrent layers]: the same passes as the CPU's, each a walk
// with one thread per element written:
//   - the products (x @ w_ih^T for all steps, h @ w_hh^T per step, and in
//     backward dh_prev, dx, dw_ih and dw_hh) are one dot product per output
//     element over strided rows (RowProduct), accumulated in the dtype as
//     BLAS does;
//   - the gates of a step are one walk over (rows, hidden) that applies the
//     nonlinearities and updates h, c, the output and the workspace
//     (forward), or turns the incoming gradients into the gates' (backward);
//   - the biases' gradients are column sums over the rows.
// Correct and deterministic, but without a tensor-core GEMM (the products
// are the reference path, as the device convolutions are). float32 and
// float64, as on the CPU.
#pragma once

#include "backend/common/index_kernels.h"
#include "backend/common/rnn_math.h"

namespace mf::rnn_kernels {

using rnn_math::RnnMode;
using rnn_math::RnnSteps;
using index_kernels::operand;
using index_kernels::walk_geometry;

// One element of out (rows, cols), contiguous: out[i, j] = beta * out[i, j]
// + sum_p a[i * a_row + p * a_col] * b[p * b_row + j * b_col] + bias[j].
template <typename T>
struct RowProduct {
  const T* a;
  const T* b;
  const T* bias;  // null: none
  int64_t cols, depth, a_row, a_col, b_row, b_col;
  T beta;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t e = off[0] / int64_t(sizeof(T)), i = e / cols, j = e % cols;
    T acc = T(0);
    for (int64_t p = 0; p < depth; ++p) acc += a[i * a_row + p * a_col] * b[p * b_row + j * b_col];
    if (bias) acc += bias[j];
    T* out = reinterpret_cast<T*>(data[0] + off[0]);
    *out = beta == T(0) ? acc : beta * *out + acc;
  }
};

// out (rows, cols) = beta * out + op(a) @ op(b) (+ bias per column), out
// contiguous; (row, col) element strides of the operands as stored.
template <typename L, typename T>
void product(T* out, const Device& device, int64_t rows, int64_t cols, int64_t depth, const T* a, int64_t a_row,
             int64_t a_col, const T* b, int64_t b_row, int64_t b_col, const T* bias, T beta, const char* op) {
  if (rows == 0 || cols == 0) return;
  const LoopGeometry<1> g = walk_geometry<1>({rows * cols}, {index_kernels::Operand{out, {1}, int64_t(sizeof(T))}}, op);
  L::template for_each<1>(device, g, rows * cols,
                          RowProduct<T>{a, b, bias, cols, depth, a_row, a_col, b_row, b_col, beta});
}

// The gates of one forward step: rows [0, n) of h (and c), the step's rows
// off + r of xw, y and the workspace; hw = h @ w_hh^T of the step.
template <typename M, typename T>
struct ForwardGates {
  RnnMode mode;
  int64_t hidden, g, width, off;
  const T *xw, *hw, *bhh;
  T *h, *c, *y, *ws;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const*, const int64_t* offset) const {
    const int64_t e = offset[0], r = e / hidden, j = e % hidden;
    T* wr = ws ? ws + (off + r) * width : nullptr;
    const T hn = rnn_math::forward_unit<M, T>(mode, hidden, j, xw + (off + r) * g, hw + r * g, bhh, h[r * hidden + j],
                                              c ? c + r * hidden + j : nullptr, wr);
    h[r * hidden + j] = hn;
    y[(off + r) * hidden + j] = hn;
  }
};

// The gates' gradients of one backward step (the CPU's loop body): dgx
// (and dgh for gru) rows off + r, the carried dh and dc, and the previous
// state's row kept for dw_hh.
template <typename M, typename T>
struct BackwardGates {
  RnnMode mode;
  int64_t hidden, g, width, off, prev_off;  // prev_off < 0: the step starts from h0 / c0 (per row below)
  int64_t prev_rows;                        // rows of the previous step (reverse: rows beyond start from h0)
  const T *y, *ws, *gy, *hz, *cz;
  T *dh, *dc, *dgx, *dgh, *hprev;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const*, const int64_t* offset) const {
    const int64_t e = offset[0], r = e / hidden, j = e % hidden, row = off + r;
    const int64_t pr = prev_off < 0 || r >= prev_rows ? -1 : prev_off + r;
    const T hp = pr < 0 ? hz[r * hidden + j] : y[pr * hidden + j];
    hprev[row * hidden + j] = hp;
    const T cp = mode != RnnMode::Lstm ? T(0) : pr < 0 ? cz[r * hidden + j] : ws[pr * width + 4 * hidden + j];
    rnn_math::backward_unit<M, T>(mode, hidden, j, dh[r * hidden + j] + gy[row * hidden + j], y[row * hidden + j],
                                  ws ? ws + row * width : nullptr, hp, cp, dc ? dc + r * hidden + j : nullptr,
                                  dgx + row * g, dgh + row * g, dh + r * hidden + j);
  }
};

// out[j] = sum over rows of a[r * cols + j].
template <typename T>
struct ColumnSum {
  const T* a;
  int64_t rows, cols;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t j = off[0] / int64_t(sizeof(T));
    T s = T(0);
    for (int64_t r = 0; r < rows; ++r) s += a[r * cols + j];
    *reinterpret_cast<T*>(data[0] + off[0]) = s;
  }
};

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

// A walk of `count` elements whose functor reads offset[0] as the element
// index (the operand is never dereferenced).
template <typename L, typename F>
void for_index(const Device& device, int64_t count, const F& f, const char* op) {
  if (count == 0) return;
  static char anchor;
  const LoopGeometry<1> g = walk_geometry<1>({count}, {index_kernels::Operand{&anchor, {1}, 1}}, op);
  L::template for_each<1>(device, g, count, f);
}

template <typename L, typename T>
void forward(RnnMode mode, bool reverse, const RnnSteps& s, const TensorList& in, TensorList& out) {
  const Device device = in[0].device();
  // The pieces in forward_scratch's order.
  Scratch taken(out);
  using elementwise_kernels::dense;
  const Tensor x = dense<L>(in[0], taken), w_ih = dense<L>(in[3], taken), w_hh = dense<L>(in[4], taken);
  const Tensor b_ih = dense<L>(in[5], taken), b_hh = dense<L>(in[6], taken);
  const int64_t in_size = w_ih.size(1), hidden = w_hh.size(1), g = rnn_math::rnn_gates(mode) * hidden;
  const int64_t width = rnn_math::rnn_workspace_width(mode, hidden);
  Tensor xw = taken.take({s.rows, g}, dtype_of<T>());
  Tensor hw = taken.take({s.batch, g}, dtype_of<T>());
  product<L, T>(xw.data<T>(), device, s.rows, g, in_size, x.data<T>(), in_size, 1, w_ih.data<T>(), 1, in_size,
                ptr_or_null<T>(b_ih), T(0), "rnn_layer");
  elementwise_kernels::copy_cast<L>(out[1], in[1]);
  if (mode == RnnMode::Lstm) elementwise_kernels::copy_cast<L>(out[2], in[2]);
  T* h = out[1].data<T>();
  for (int64_t k = 0; k < s.count(); ++k) {
    const int64_t t = reverse ? s.count() - 1 - k : k, n = s.sizes[size_t(t)], off = s.offsets[size_t(t)];
    if (n == 0) continue;
    product<L, T>(hw.data<T>(), device, n, g, hidden, h, hidden, 1, w_hh.data<T>(), 1, hidden, nullptr, T(0),
                  "rnn_layer");
    for_index<L>(device, n * hidden,
                 ForwardGates<typename L::Math, T>{mode, hidden, g, width, off, xw.data<T>(), hw.data<T>(),
                                                   ptr_or_null<T>(b_hh), h,
                                                   mode == RnnMode::Lstm ? out[2].data<T>() : nullptr,
                                                   out[0].data<T>(), width ? out[3].data<T>() : nullptr},
                 "rnn_layer");
  }
}

template <typename L, typename T>
void backward(RnnMode mode, bool reverse, bool need_input, const RnnSteps& s, const TensorList& in, TensorList& out) {
  const Device device = in[0].device();
  // The pieces in backward_scratch's order.
  Scratch taken(out);
  using elementwise_kernels::dense;
  const Tensor x = dense<L>(in[0], taken), h0 = dense<L>(in[1], taken);
  const Tensor c0 = mode == RnnMode::Lstm ? dense<L>(in[2], taken) : Tensor();
  const Tensor w_ih = dense<L>(in[3], taken), w_hh = dense<L>(in[4], taken);
  const Tensor y = dense<L>(in[5], taken), ws = dense<L>(in[6], taken), gy = dense<L>(in[7], taken);
  const int64_t in_size = w_ih.size(1), hidden = w_hh.size(1), g = rnn_math::rnn_gates(mode) * hidden;
  const int64_t width = rnn_math::rnn_workspace_width(mode, hidden), steps = s.count();
  elementwise_kernels::copy_cast<L>(out[1], in[8]);
  if (mode == RnnMode::Lstm) elementwise_kernels::copy_cast<L>(out[2], in[9]);
  T* dh = out[1].data<T>();
  T* dc = mode == RnnMode::Lstm ? out[2].data<T>() : nullptr;
  Tensor dgx = taken.take({s.rows, g}, dtype_of<T>());
  Tensor dgh_own = mode == RnnMode::Gru ? taken.take({s.rows, g}, dtype_of<T>()) : Tensor();
  T* dgh = mode == RnnMode::Gru ? dgh_own.data<T>() : dgx.data<T>();
  Tensor hprev = taken.take({s.rows, hidden}, dtype_of<T>());
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? k : steps - 1 - k, n = s.sizes[size_t(t)], off = s.offsets[size_t(t)];
    if (n == 0) continue;
    // The previous step in time order, as the CPU's prev_row.
    int64_t prev_off = -1, prev_rows = 0;
    if (!reverse && t > 0) prev_off = s.offsets[size_t(t - 1)], prev_rows = s.sizes[size_t(t - 1)];
    if (reverse && t < steps - 1) prev_off = s.offsets[size_t(t + 1)], prev_rows = s.sizes[size_t(t + 1)];
    for_index<L>(device, n * hidden,
                 BackwardGates<typename L::Math, T>{mode, hidden, g, width, off, prev_off, prev_rows, y.data<T>(),
                                                    width ? ws.data<T>() : nullptr, gy.data<T>(), h0.data<T>(),
                                                    c0.defined() ? c0.data<T>() : nullptr, dh, dc, dgx.data<T>(),
                                                    dgh, hprev.data<T>()},
                 "rnn_layer_backward");
    // dh = dgates @ w_hh (gru: added to the direct path).
    product<L, T>(dh, device, n, hidden, g, dgh + off * g, g, 1, w_hh.data<T>(), hidden, 1, nullptr,
                  mode == RnnMode::Gru ? T(1) : T(0), "rnn_layer_backward");
  }
  if (need_input)
    product<L, T>(out[0].data<T>(), device, s.rows, in_size, g, dgx.data<T>(), g, 1, w_ih.data<T>(), in_size, 1,
                  nullptr, T(0), "rnn_layer_backward");
  // dw_ih = dgx^T @ x, dw_hh = dgh^T @ hprev.
  product<L, T>(out[3].data<T>(), device, g, in_size, s.rows, dgx.data<T>(), 1, g, x.data<T>(), in_size, 1, nullptr,
                T(0), "rnn_layer_backward");
  product<L, T>(out[4].data<T>(), device, g, hidden, s.rows, dgh, 1, g, hprev.data<T>(), hidden, 1, nullptr, T(0),
                "rnn_layer_backward");
  for (auto [grad, dst] : {std::pair<const T*, Tensor*>{dgx.data<T>(), &out[5]}, {dgh, &out[6]}}) {
    const LoopGeometry<1> geom = walk_geometry<1>({g}, {operand(*dst, {1})}, "rnn_layer_backward");
    L::template for_each<1>(device, geom, g, ColumnSum<T>{grad, s.rows, g});
  }
}

template <typename L>
void forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const RnnMode mode = rnn_math::rnn_mode(attrs.get_string("mode"));
  const RnnSteps steps = rnn_math::rnn_steps(in[0].sizes(), attrs.get_shape("batch_sizes"));
  rnn_math::dispatch_rnn_dtype(in[0].dtype(),
                               [&]<typename T>() { forward<L, T>(mode, attrs.get_bool("reverse"), steps, in, out); });
}

template <typename L>
void backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const RnnMode mode = rnn_math::rnn_mode(attrs.get_string("mode"));
  const RnnSteps steps = rnn_math::rnn_steps(in[0].sizes(), attrs.get_shape("batch_sizes"));
  rnn_math::dispatch_rnn_dtype(in[0].dtype(), [&]<typename T>() {
    backward<L, T>(mode, attrs.get_bool("reverse"), attrs.get_bool("need_input"), steps, in, out);
  });
}

// The kernels' scratch (Note [Kernel scratch]): dense copies of strided
// operands, then the gate products and the step buffers.
inline int64_t forward_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const RnnMode mode = rnn_math::rnn_mode(attrs.get_string("mode"));
  const RnnSteps s = rnn_math::rnn_steps(in[0].sizes(), attrs.get_shape("batch_sizes"));
  const int64_t g = rnn_math::rnn_gates(mode) * in[4].size(1);
  ScratchLayout layout("rnn_layer");
  for (const size_t k : {0, 3, 4, 5, 6}) add_dense(layout, in[k]);
  return layout.add({s.rows, g}, in[0].dtype()).add({s.batch, g}, in[0].dtype()).bytes();
}
inline int64_t backward_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const RnnMode mode = rnn_math::rnn_mode(attrs.get_string("mode"));
  const RnnSteps s = rnn_math::rnn_steps(in[0].sizes(), attrs.get_shape("batch_sizes"));
  const int64_t hidden = in[4].size(1), g = rnn_math::rnn_gates(mode) * hidden;
  ScratchLayout layout("rnn_layer_backward");
  for (const size_t k : {0, 1, 2, 3, 4, 5, 6, 7})
    if (k != 2 || mode == RnnMode::Lstm) add_dense(layout, in[k]);
  layout.add({s.rows, g}, in[0].dtype());
  if (mode == RnnMode::Gru) layout.add({s.rows, g}, in[0].dtype());
  return layout.add({s.rows, hidden}, in[0].dtype()).bytes();
}

template <typename L>
void register_all(DeviceType device) {
  OpRegistry::instance().set_kernel("rnn_layer", device, forward_kernel<L>, forward_scratch);
  OpRegistry::instance().set_kernel("rnn_layer_backward", device, backward_kernel<L>, backward_scratch);
}

}  // namespace mf::rnn_kernels
