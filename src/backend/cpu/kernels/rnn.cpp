// The recurrent op's CPU kernels (rnn.h).
#include "backend/cpu/kernels/rnn.h"

#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "meshflow/error.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

using Mode = RnnMode;
using Steps = RnnSteps;

int64_t gate_count(Mode m) { return rnn_gates(m); }
int64_t workspace_width(Mode m, int64_t h) { return rnn_workspace_width(m, h); }

// Row-major C = op(A) @ op(B) + beta * C; sizes were checked to fit BLAS's
// int by rnn_layer.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc) {
  gemm_rows<T>(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

int64_t row_grain(int64_t width) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(width, 1)); }

// The inputs each pass reads as dense arrays (dense() copies the others
// into the scratch), in the order the passes take them.
constexpr size_t kForwardDense[] = {0, 3, 4, 5, 6};
constexpr size_t kBackwardDense[] = {0, 1, 2, 3, 4, 5, 6, 7};

// The pieces after the dense copies: forward (x w_ih^T per row, h w_hh^T
// per batch row); backward (the gates' gradients, GRU's own hidden-side
// ones, each row's previous state).
ScratchLayout& add_buffers(ScratchLayout& layout, bool backward, Mode mode, const Steps& s, int64_t hidden,
                           DType dtype) {
  const int64_t g = gate_count(mode) * hidden;
  if (!backward) return layout.add({s.rows, g}, dtype).add({s.batch, g}, dtype);
  layout.add({s.rows, g}, dtype);
  if (mode == Mode::Gru) layout.add({s.rows, g}, dtype);
  return layout.add({s.rows, hidden}, dtype);
}

template <typename T>
T* data_of(Tensor t) {
  return static_cast<T*>(t.data_ptr());
}

template <typename T>
void forward_impl(Mode mode, bool reverse, const Steps& s, const TensorList& in, TensorList& out) {
  Scratch taken(out);
  const Tensor x = dense(in[0], taken), w_ih = dense(in[3], taken), w_hh = dense(in[4], taken);
  const Tensor b_ih = dense(in[5], taken), b_hh = dense(in[6], taken);
  const int64_t in_size = w_ih.size(1), hidden = w_hh.size(1), g = gate_count(mode) * hidden;
  const int64_t width = workspace_width(mode, hidden), n_rows = s.rows;
  const T *bih = data_or_null<T>(b_ih), *bhh = data_or_null<T>(b_hh);
  T* xw = data_of<T>(taken.take({n_rows, g}, in[0].dtype()));
  T* hw = data_of<T>(taken.take({s.batch, g}, in[0].dtype()));
  gemm<T>(false, true, n_rows, g, in_size, static_cast<const T*>(x.data_ptr()), in_size,
          static_cast<const T*>(w_ih.data_ptr()), in_size, T(0), xw, g);
  if (bih)
    parallel_for(0, n_rows, row_grain(g), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t j = 0; j < g; ++j) xw[r * g + j] += bih[j];
    });
  T* h = static_cast<T*>(out[1].data_ptr());
  T* c = mode == Mode::Lstm ? static_cast<T*>(out[2].data_ptr()) : nullptr;
  copy_cast(out[1], in[1]);
  if (c) copy_cast(out[2], in[2]);
  T* y = static_cast<T*>(out[0].data_ptr());
  T* ws = width ? static_cast<T*>(out[3].data_ptr()) : nullptr;
  const T* whh = static_cast<const T*>(w_hh.data_ptr());
  for (int64_t k = 0; k < s.count(); ++k) {
    const int64_t t = reverse ? s.count() - 1 - k : k, n = s.sizes[size_t(t)], off = s.offsets[size_t(t)];
    if (n == 0) continue;
    gemm<T>(false, true, n, g, hidden, h, hidden, whh, hidden, T(0), hw, g);
    parallel_for(0, n, row_grain(g), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xg = xw + (off + r) * g;
        const T* hg = hw + r * g;
        T* hr = h + r * hidden;
        T* yr = y + (off + r) * hidden;
        T* wr = ws ? ws + (off + r) * width : nullptr;
        for (int64_t j = 0; j < hidden; ++j) {
          const T hn = rnn_math::forward_unit<HostMath, T>(mode, hidden, j, xg, hg, bhh, hr[j],
                                                            c ? c + r * hidden + j : nullptr, wr);
          hr[j] = hn;
          yr[j] = hn;
        }
      }
    });
  }
}

template <typename T>
void backward_impl(Mode mode, bool reverse, bool need_input, const Steps& s, const TensorList& in, TensorList& out) {
  Scratch taken(out);
  const Tensor x = dense(in[0], taken), h0 = dense(in[1], taken);
  const Tensor c0 = mode == Mode::Lstm ? dense(in[2], taken) : Tensor();
  const Tensor w_ih = dense(in[3], taken), w_hh = dense(in[4], taken);
  const Tensor yt = dense(in[5], taken), wst = dense(in[6], taken), gyt = dense(in[7], taken);
  const int64_t in_size = w_ih.size(1), hidden = w_hh.size(1), g = gate_count(mode) * hidden;
  const int64_t width = workspace_width(mode, hidden), n_rows = s.rows, steps = s.count();
  const T *y = static_cast<const T*>(yt.data_ptr()), *ws = width ? static_cast<const T*>(wst.data_ptr()) : nullptr;
  const T *gy = static_cast<const T*>(gyt.data_ptr()), *hz = static_cast<const T*>(h0.data_ptr());
  const T* cz = c0.defined() ? static_cast<const T*>(c0.data_ptr()) : nullptr;
  T* dh = static_cast<T*>(out[1].data_ptr());
  T* dc = mode == Mode::Lstm ? static_cast<T*>(out[2].data_ptr()) : nullptr;
  copy_cast(out[1], in[8]);
  if (dc) copy_cast(out[2], in[9]);
  T* dgx = data_of<T>(taken.take({n_rows, g}, in[0].dtype()));
  T* dgh = mode == Mode::Gru ? data_of<T>(taken.take({n_rows, g}, in[0].dtype())) : dgx;
  T* hprev = data_of<T>(taken.take({n_rows, hidden}, in[0].dtype()));
  // The row of step t's previous state (h or, at column offset 4H of the
  // workspace, c), or of h0 / c0 where the row starts at step t.
  auto prev_row = [&](int64_t t, int64_t r) -> int64_t {
    if (!reverse) return t == 0 ? -1 : s.offsets[size_t(t - 1)] + r;
    return t == steps - 1 || r >= s.sizes[size_t(t + 1)] ? -1 : s.offsets[size_t(t + 1)] + r;
  };
  const T* whh = static_cast<const T*>(w_hh.data_ptr());
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? k : steps - 1 - k, n = s.sizes[size_t(t)], off = s.offsets[size_t(t)];
    if (n == 0) continue;
    parallel_for(0, n, row_grain(g), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t row = off + r, pr = prev_row(t, r);
        const T* hp = pr < 0 ? hz + r * hidden : y + pr * hidden;
        std::memcpy(hprev + row * hidden, hp, size_t(hidden) * sizeof(T));
        const T* wr = ws ? ws + row * width : nullptr;
        const T* yr = y + row * hidden;
        const T* gr = gy + row * hidden;
        T* dx_r = dgx + row * g;
        T* dh_r = dgh + row * g;
        for (int64_t j = 0; j < hidden; ++j) {
          const T cp = mode != Mode::Lstm ? T(0) : pr < 0 ? cz[r * hidden + j] : ws[pr * width + 4 * hidden + j];
          rnn_math::backward_unit<HostMath, T>(mode, hidden, j, dh[r * hidden + j] + gr[j], yr[j], wr, hp[j], cp,
                                               dc ? dc + r * hidden + j : nullptr, dx_r, dh_r, dh + r * hidden + j);
        }
      }
    });
    gemm<T>(false, false, n, hidden, g, dgh + off * g, g, whh, hidden, mode == Mode::Gru ? T(1) : T(0), dh, hidden);
  }
  if (need_input)
    gemm<T>(false, false, n_rows, in_size, g, dgx, g, static_cast<const T*>(w_ih.data_ptr()), in_size, T(0),
            static_cast<T*>(out[0].data_ptr()), in_size);
  gemm<T>(true, false, g, in_size, n_rows, dgx, g, static_cast<const T*>(x.data_ptr()), in_size, T(0),
          static_cast<T*>(out[3].data_ptr()), in_size);
  gemm<T>(true, false, g, hidden, n_rows, dgh, g, hprev, hidden, T(0), static_cast<T*>(out[4].data_ptr()),
          hidden);
  T *dbih = static_cast<T*>(out[5].data_ptr()), *dbhh = static_cast<T*>(out[6].data_ptr());
  parallel_for(0, g, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n_rows, 1)), [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      T sx = 0, sh = 0;
      for (int64_t r = 0; r < n_rows; ++r) sx += dgx[r * g + j], sh += dgh[r * g + j];
      dbih[j] = sx, dbhh[j] = sh;
    }
  });
}

}  // namespace

void rnn_forward(RnnMode mode, bool reverse, const RnnSteps& steps, const TensorList& in, TensorList& out) {
  dispatch_rnn_dtype(in[0].dtype(), [&]<typename T>() { forward_impl<T>(mode, reverse, steps, in, out); });
}

void rnn_backward(RnnMode mode, bool reverse, bool need_input, const RnnSteps& steps, const TensorList& in,
                  TensorList& out) {
  dispatch_rnn_dtype(in[0].dtype(), [&]<typename T>() { backward_impl<T>(mode, reverse, need_input, steps, in, out); });
}

namespace {

// The ops of src/ops/rnn.cpp: rnn_layer (inputs (x, h0, c0, w_ih, w_hh,
// b_ih, b_hh); outputs (y, h_n, c_n, workspace)) and rnn_layer_backward.
void forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  rnn_forward(rnn_mode(attrs.get_string("mode")), attrs.get_bool("reverse"),
              rnn_steps(in[0].sizes(), attrs.get_shape("batch_sizes")), in, out);
}

void backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  rnn_backward(rnn_mode(attrs.get_string("mode")), attrs.get_bool("reverse"), attrs.get_bool("need_input"),
               rnn_steps(in[0].sizes(), attrs.get_shape("batch_sizes")), in, out);
}

template <bool Backward>
int64_t rnn_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  ScratchLayout layout(Backward ? "rnn_layer_backward" : "rnn_layer");
  for (size_t i : Backward ? std::span<const size_t>(kBackwardDense) : std::span<const size_t>(kForwardDense))
    if (i < in.size() && (i != 2 || rnn_mode(attrs.get_string("mode")) == Mode::Lstm)) add_dense(layout, in[i]);
  return add_buffers(layout, Backward, rnn_mode(attrs.get_string("mode")),
                     rnn_steps(in[0].sizes(), attrs.get_shape("batch_sizes")), in[4].size(1), in[0].dtype())
      .bytes();
}

}  // namespace

MF_REGISTER_KERNEL("rnn_layer", DeviceType::CPU, forward_kernel, rnn_scratch<false>);
MF_REGISTER_KERNEL("rnn_layer_backward", DeviceType::CPU, backward_kernel, rnn_scratch<true>);

}  // namespace mf::cpu
