// The recurrent op's CPU kernels (rnn.h).
#include "backend/cpu/kernels/rnn.h"

#include "backend/cpu/kernels/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshflow/error.h"
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
T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <typename F>
void dispatch_rnn_dtype(DType d, F&& f) {
  if (d == kFloat32) return f.template operator()<float>();
  if (d == kFloat64) return f.template operator()<double>();
  MF_CHECK(false, TypeError, "rnn: expected float32 or float64 tensors, got ", dtype_name(d));
}

int64_t row_grain(int64_t width) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(width, 1)); }

template <typename T>
void forward_impl(Mode mode, bool reverse, const Steps& s, const TensorList& in, TensorList& out) {
  const Tensor x = contiguous(in[0].detach()), w_ih = contiguous(in[3].detach()), w_hh = contiguous(in[4].detach());
  const Tensor b_ih = in[5].defined() ? contiguous(in[5].detach()) : Tensor();
  const Tensor b_hh = in[6].defined() ? contiguous(in[6].detach()) : Tensor();
  const int64_t in_size = w_ih.size(1), hidden = w_hh.size(1), g = gate_count(mode) * hidden;
  const int64_t width = workspace_width(mode, hidden), n_rows = s.rows;
  const T *bih = data_or_null<T>(b_ih), *bhh = data_or_null<T>(b_hh);
  std::vector<T> xw(size_t(n_rows * g));
  gemm<T>(false, true, n_rows, g, in_size, static_cast<const T*>(x.data_ptr()), in_size,
          static_cast<const T*>(w_ih.data_ptr()), in_size, T(0), xw.data(), g);
  if (bih)
    parallel_for(0, n_rows, row_grain(g), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t j = 0; j < g; ++j) xw[size_t(r * g + j)] += bih[j];
    });
  T* h = static_cast<T*>(out[1].data_ptr());
  T* c = mode == Mode::Lstm ? static_cast<T*>(out[2].data_ptr()) : nullptr;
  copy_(out[1], in[1].detach());
  if (c) copy_(out[2], in[2].detach());
  T* y = static_cast<T*>(out[0].data_ptr());
  T* ws = width ? static_cast<T*>(out[3].data_ptr()) : nullptr;
  const T* whh = static_cast<const T*>(w_hh.data_ptr());
  std::vector<T> hw(size_t(s.batch * g));
  for (int64_t k = 0; k < s.count(); ++k) {
    const int64_t t = reverse ? s.count() - 1 - k : k, n = s.sizes[size_t(t)], off = s.offsets[size_t(t)];
    if (n == 0) continue;
    gemm<T>(false, true, n, g, hidden, h, hidden, whh, hidden, T(0), hw.data(), g);
    parallel_for(0, n, row_grain(g), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xg = xw.data() + (off + r) * g;
        const T* hg = hw.data() + r * g;
        T* hr = h + r * hidden;
        T* yr = y + (off + r) * hidden;
        T* wr = ws ? ws + (off + r) * width : nullptr;
        for (int64_t j = 0; j < hidden; ++j) {
          auto pre = [&](int64_t gate) {
            const int64_t q = gate * hidden + j;
            return xg[q] + hg[q] + (bhh ? bhh[q] : T(0));
          };
          T hn;
          if (mode == Mode::Tanh) {
            hn = std::tanh(pre(0));
          } else if (mode == Mode::Relu) {
            hn = std::max(pre(0), T(0));
          } else if (mode == Mode::Lstm) {
            const T i = sigmoid(pre(0)), f = sigmoid(pre(1)), gg = std::tanh(pre(2)), o = sigmoid(pre(3));
            T& cr = c[r * hidden + j];
            cr = f * cr + i * gg;
            hn = o * std::tanh(cr);
            wr[j] = i, wr[hidden + j] = f, wr[2 * hidden + j] = gg, wr[3 * hidden + j] = o, wr[4 * hidden + j] = cr;
          } else {
            const T rg = sigmoid(pre(0)), z = sigmoid(pre(1));
            const T hnl = hg[2 * hidden + j] + (bhh ? bhh[2 * hidden + j] : T(0));
            const T nn = std::tanh(xg[2 * hidden + j] + rg * hnl);
            hn = (T(1) - z) * nn + z * hr[j];
            wr[j] = rg, wr[hidden + j] = z, wr[2 * hidden + j] = nn, wr[3 * hidden + j] = hnl;
          }
          hr[j] = hn;
          yr[j] = hn;
        }
      }
    });
  }
}

template <typename T>
void backward_impl(Mode mode, bool reverse, bool need_input, const Steps& s, const TensorList& in, TensorList& out) {
  const Tensor x = contiguous(in[0].detach()), h0 = contiguous(in[1].detach());
  const Tensor c0 = mode == Mode::Lstm ? contiguous(in[2].detach()) : Tensor();
  const Tensor w_ih = contiguous(in[3].detach()), w_hh = contiguous(in[4].detach());
  const Tensor yt = contiguous(in[5].detach()), wst = contiguous(in[6].detach()), gyt = contiguous(in[7].detach());
  const int64_t in_size = w_ih.size(1), hidden = w_hh.size(1), g = gate_count(mode) * hidden;
  const int64_t width = workspace_width(mode, hidden), n_rows = s.rows, steps = s.count();
  const T *y = static_cast<const T*>(yt.data_ptr()), *ws = width ? static_cast<const T*>(wst.data_ptr()) : nullptr;
  const T *gy = static_cast<const T*>(gyt.data_ptr()), *hz = static_cast<const T*>(h0.data_ptr());
  const T* cz = c0.defined() ? static_cast<const T*>(c0.data_ptr()) : nullptr;
  T* dh = static_cast<T*>(out[1].data_ptr());
  T* dc = mode == Mode::Lstm ? static_cast<T*>(out[2].data_ptr()) : nullptr;
  copy_(out[1], in[8].detach());
  if (dc) copy_(out[2], in[9].detach());
  std::vector<T> dgx(size_t(n_rows * g)), dgh_own(mode == Mode::Gru ? size_t(n_rows * g) : 0);
  T* dgh = mode == Mode::Gru ? dgh_own.data() : dgx.data();
  std::vector<T> hprev(size_t(n_rows * hidden));
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
        std::memcpy(hprev.data() + row * hidden, hp, size_t(hidden) * sizeof(T));
        const T* wr = ws ? ws + row * width : nullptr;
        const T* yr = y + row * hidden;
        const T* gr = gy + row * hidden;
        T* dx_r = dgx.data() + row * g;
        T* dh_r = dgh + row * g;
        for (int64_t j = 0; j < hidden; ++j) {
          const T dht = dh[r * hidden + j] + gr[j];
          if (mode == Mode::Tanh) {
            dx_r[j] = dht * (T(1) - yr[j] * yr[j]);
          } else if (mode == Mode::Relu) {
            dx_r[j] = yr[j] > T(0) ? dht : T(0);
          } else if (mode == Mode::Lstm) {
            const T i = wr[j], f = wr[hidden + j], gg = wr[2 * hidden + j], o = wr[3 * hidden + j];
            const T ct = wr[4 * hidden + j];
            const T cp = pr < 0 ? cz[r * hidden + j] : ws[pr * width + 4 * hidden + j];
            const T tc = std::tanh(ct);
            const T dct = dc[r * hidden + j] + dht * o * (T(1) - tc * tc);
            dx_r[j] = dct * gg * i * (T(1) - i);
            dx_r[hidden + j] = dct * cp * f * (T(1) - f);
            dx_r[2 * hidden + j] = dct * i * (T(1) - gg * gg);
            dx_r[3 * hidden + j] = dht * tc * o * (T(1) - o);
            dc[r * hidden + j] = dct * f;
          } else {
            const T rg = wr[j], z = wr[hidden + j], nn = wr[2 * hidden + j], hnl = wr[3 * hidden + j];
            const T dn = dht * (T(1) - z) * (T(1) - nn * nn);
            const T dr = dn * hnl * rg * (T(1) - rg), dz = dht * (hp[j] - nn) * z * (T(1) - z);
            dx_r[j] = dh_r[j] = dr;
            dx_r[hidden + j] = dh_r[hidden + j] = dz;
            dx_r[2 * hidden + j] = dn;
            dh_r[2 * hidden + j] = dn * rg;
            dh[r * hidden + j] = dht * z;  // the direct path h_prev -> h; the GEMM adds the gates' part
          }
        }
      }
    });
    gemm<T>(false, false, n, hidden, g, dgh + off * g, g, whh, hidden, mode == Mode::Gru ? T(1) : T(0), dh, hidden);
  }
  if (need_input)
    gemm<T>(false, false, n_rows, in_size, g, dgx.data(), g, static_cast<const T*>(w_ih.data_ptr()), in_size, T(0),
            static_cast<T*>(out[0].data_ptr()), in_size);
  gemm<T>(true, false, g, in_size, n_rows, dgx.data(), g, static_cast<const T*>(x.data_ptr()), in_size, T(0),
          static_cast<T*>(out[3].data_ptr()), in_size);
  gemm<T>(true, false, g, hidden, n_rows, dgh, g, hprev.data(), hidden, T(0), static_cast<T*>(out[4].data_ptr()),
          hidden);
  T *dbih = static_cast<T*>(out[5].data_ptr()), *dbhh = static_cast<T*>(out[6].data_ptr());
  parallel_for(0, g, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n_rows, 1)), [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      T sx = 0, sh = 0;
      for (int64_t r = 0; r < n_rows; ++r) sx += dgx[size_t(r * g + j)], sh += dgh[r * g + j];
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

}  // namespace mf::cpu
