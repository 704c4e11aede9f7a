// Note [Fused recurrent layers]: nn.RNN, LSTM and GRU (and their cells)
// run each layer and direction as one op over the whole sequence, so a
// step costs one GEMM and one fused pass over the gates, not a dozen ops:
//
//   forward:  xw = x @ w_ih^T + b_ih for all steps at once (one GEMM), then
//             per step hw = h @ w_hh^T + b_hh (one GEMM) and the gate
//             nonlinearities, state update and output write in one loop.
//   backward: per step, in reverse order, the gate gradients from the saved
//             activations (one loop) and dh_prev = dgates @ w_hh (one GEMM);
//             then dx, dw_ih, dw_hh and the biases' gradients over all steps
//             at once (three GEMMs and two column sums).
//
// A sequence is a list of steps, step t holding the first batch_sizes[t]
// rows of the batch: a (T, B, I) input is T steps of B rows, and a packed
// sequence (nn.utils.rnn.PackedSequence) has its own non-increasing batch
// sizes. Rows that have ended keep their last state, which is what h_n
// reports; in reverse, a row starts from h0 at its own last step.
//
// The forward op saves per row what the backward needs besides the outputs
// (the "workspace"): lstm the activated gates i, f, g, o and the cell state
// c; gru the gates r, z, n and hn = h @ w_hn^T + b_hn; the plain RNN
// nothing (its derivative is a function of its output).
#include "meshflow/ops/rnn.h"

#include <cblas.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "meshflow/autocast.h"
#include "meshflow/autograd.h"
#include "meshflow/checked_size.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf {
namespace {

enum class Mode { Tanh, Relu, Lstm, Gru };

Mode mode_of(const std::string& s) {
  if (s == "rnn_tanh") return Mode::Tanh;
  if (s == "rnn_relu") return Mode::Relu;
  if (s == "lstm") return Mode::Lstm;
  if (s == "gru") return Mode::Gru;
  MF_CHECK(false, ValueError, "rnn: unknown mode '", s, "' (expected rnn_tanh, rnn_relu, lstm or gru)");
  return Mode::Tanh;
}

int64_t gate_count(Mode m) { return m == Mode::Lstm ? 4 : m == Mode::Gru ? 3 : 1; }
int64_t workspace_width(Mode m, int64_t h) { return m == Mode::Lstm ? 5 * h : m == Mode::Gru ? 4 * h : 0; }

// The steps of a sequence: row counts and first rows.
struct Steps {
  std::vector<int64_t> sizes, offsets;
  int64_t batch = 0, rows = 0;
  int64_t count() const { return int64_t(sizes.size()); }
};

Steps steps_of(const Shape& input_sizes, const Shape& batch_sizes) {
  Steps s;
  if (batch_sizes.empty()) {
    s.sizes.assign(size_t(input_sizes[0]), input_sizes[1]);
    s.batch = input_sizes[1];
  } else {
    s.sizes.assign(batch_sizes.begin(), batch_sizes.end());
    s.batch = batch_sizes[0];
  }
  for (int64_t n : s.sizes) s.offsets.push_back(s.rows), s.rows += n;
  return s;
}

// Row-major C = alpha * op(A) @ op(B) + beta * C; sizes were checked to fit
// BLAS's int by rnn_layer.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  const auto tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tra, trb, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, tra, trb, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
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

// --- forward --------------------------------------------------------------------------
// Inputs (x, h0, c0, w_ih, w_hh, b_ih, b_hh); outputs (y, h_n, c_n, workspace).

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

void forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Mode mode = mode_of(attrs.get_string("mode"));
  const Steps s = steps_of(in[0].sizes(), attrs.get_shape("batch_sizes"));
  dispatch_rnn_dtype(in[0].dtype(),
                     [&]<typename T>() { forward_impl<T>(mode, attrs.get_bool("reverse"), s, in, out); });
}

std::vector<TensorMeta> forward_infer(const TensorList& in, const Attrs& attrs) {
  const Mode mode = mode_of(attrs.get_string("mode"));
  const Tensor& x = in[0];
  const int64_t hidden = in[4].size(1), batch = in[1].size(0), width = workspace_width(mode, hidden);
  const bool packed = !attrs.get_shape("batch_sizes").empty();
  const Shape y = packed ? Shape{x.size(0), hidden} : Shape{x.size(0), x.size(1), hidden};
  const Shape ws = packed ? Shape{x.size(0), width} : Shape{x.size(0), x.size(1), width};
  return {{y, x.dtype(), x.device()},
          {{batch, hidden}, x.dtype(), x.device()},
          {{batch, mode == Mode::Lstm ? hidden : 0}, x.dtype(), x.device()},
          {ws, x.dtype(), x.device()}};
}

// --- backward -------------------------------------------------------------------------
// Inputs (x, h0, c0, w_ih, w_hh, y, workspace, grad_y, grad_h_n, grad_c_n);
// outputs (dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh); dx is empty unless
// need_input.

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

void backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Mode mode = mode_of(attrs.get_string("mode"));
  const Steps s = steps_of(in[0].sizes(), attrs.get_shape("batch_sizes"));
  dispatch_rnn_dtype(in[0].dtype(), [&]<typename T>() {
    backward_impl<T>(mode, attrs.get_bool("reverse"), attrs.get_bool("need_input"), s, in, out);
  });
}

std::vector<TensorMeta> backward_infer(const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[0];
  auto meta = [&](const Shape& shape) { return TensorMeta{shape, x.dtype(), x.device()}; };
  const int64_t g = in[3].size(0);
  return {meta(attrs.get_bool("need_input") ? x.sizes() : Shape{0}),
          meta(in[1].sizes()),
          meta({in[1].size(0), mode_of(attrs.get_string("mode")) == Mode::Lstm ? in[1].size(1) : 0}),
          meta(in[3].sizes()),
          meta(in[4].sizes()),
          meta({g}),
          meta({g})};
}

// Rows of the batch are independent: a (T, B, I) sequence split on the
// batch splits every per-row tensor, and the weights' gradients become
// partial sums. A packed sequence runs whole.
SbpRuleFn rnn_sbp(bool backward) {
  return [backward](const TensorList&, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
    if (!attrs.get_shape("batch_sizes").empty()) return std::vector<SbpSignature>{};
    const Sbp seq = Sbp::split(1), row = Sbp::split(0), b = Sbp::broadcast(), p = Sbp::partial_sum();
    if (!backward) return std::vector<SbpSignature>{{{seq, row, row, b, b, b, b}, {seq, row, row, seq}}};
    const Sbp dx = attrs.get_bool("need_input") ? seq : b;
    return std::vector<SbpSignature>{{{seq, row, row, b, b, seq, seq, seq, row, row}, {dx, row, row, p, p, p, p}}};
  };
}

MF_REGISTER_OP(OpDef{
    .name = "rnn_layer",
    .inputs = {"input", "h0", "c0", "weight_ih", "weight_hh", "bias_ih", "bias_hh"},
    .infer = forward_infer,
    .cpu_kernel = forward_kernel,
    .backward = [](const BackwardContext& ctx) {
      MF_CHECK(!GradMode::is_enabled(), Error,
               "rnn: the recurrent layers' backward is not differentiable (create_graph=True is not supported "
               "through RNN, LSTM or GRU)");
      static const OpDef& op = dispatch::op("rnn_layer_backward");
      Attrs attrs = ctx.attrs;
      attrs.set("need_input", bool(ctx.needs_input_grad[0]));
      TensorList g = dispatch::apply(op,
                                     {ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.inputs[3], ctx.inputs[4],
                                      ctx.outputs[0], ctx.outputs[3], ctx.grad_outputs[0], ctx.grad_outputs[1],
                                      ctx.grad_outputs[2]},
                                     attrs);
      const bool lstm = mode_of(ctx.attrs.get_string("mode")) == Mode::Lstm;
      return TensorList{ctx.needs_input_grad[0] ? g[0] : Tensor(), g[1], lstm ? g[2] : Tensor(), g[3], g[4],
                        ctx.input_metas[5].sizes.empty() ? Tensor() : g[5], ctx.input_metas[6].sizes.empty() ? Tensor() : g[6]};
    },
    .save_inputs = 0b0011111,
    .save_outputs = 0b1001,
    .autocast = AutocastPolicy::Fp32,
    .sbp = rnn_sbp(false),
});

MF_REGISTER_OP(OpDef{
    .name = "rnn_layer_backward",
    .inputs = {"input", "h0", "c0", "weight_ih", "weight_hh", "output", "workspace", "grad_output", "grad_h_n",
               "grad_c_n"},
    .infer = backward_infer,
    .cpu_kernel = backward_kernel,
    .differentiable = false,
    .sbp = rnn_sbp(true),
});

void check_fits_blas(int64_t v, const char* what) {
  MF_CHECK(v <= INT_MAX, ValueError, "rnn: ", what, " (", v, ") is too large (at most ", INT_MAX, ")");
}

}  // namespace

int64_t rnn_gate_count(const std::string& mode) { return gate_count(mode_of(mode)); }

RnnLayerOutput rnn_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                         const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, const std::string& mode_name,
                         bool reverse, const Shape& batch_sizes) {
  static const OpDef& op = dispatch::op("rnn_layer");
  const Mode mode = mode_of(mode_name);
  const char* name = mode_name.c_str();
  MF_CHECK(input.defined() && w_ih.defined() && w_hh.defined() && h0.defined(), ValueError, name,
           ": input, h0 and the weights must be given");
  const bool packed = !batch_sizes.empty();
  MF_CHECK(input.dim() == (packed ? 2 : 3), ShapeError, name, ": expected ",
           packed ? "packed data of shape (N, input_size)" : "an input of shape (T, B, input_size)", ", got shape ",
           shape_str(input.sizes()));
  MF_CHECK(w_hh.dim() == 2 && w_ih.dim() == 2, ShapeError, name, ": expected 2-d weights, got weight_ih ",
           shape_str(w_ih.sizes()), " and weight_hh ", shape_str(w_hh.sizes()));
  const int64_t hidden = w_hh.size(1), g = checked_mul(gate_count(mode), hidden, name, "the gates' size");
  const int64_t in_size = input.size(-1);
  MF_CHECK(w_hh.size(0) == g && w_ih.size(0) == g && w_ih.size(1) == in_size, ShapeError, name,
           ": expected weight_ih of shape ", shape_str({g, in_size}), " and weight_hh of shape ",
           shape_str({g, hidden}), ", got ", shape_str(w_ih.sizes()), " and ", shape_str(w_hh.sizes()));
  int64_t batch = packed ? batch_sizes[0] : input.size(1);
  if (packed) {
    int64_t total = 0;
    for (size_t t = 0; t < batch_sizes.size(); ++t) {
      MF_CHECK(batch_sizes[t] > 0 && (t == 0 || batch_sizes[t] <= batch_sizes[t - 1]), ValueError, name,
               ": batch_sizes must be positive and non-increasing, got ", shape_str(batch_sizes));
      total = checked_add(total, batch_sizes[t], name, "the sum of batch_sizes");
    }
    MF_CHECK(total == input.size(0), ShapeError, name, ": batch_sizes sum to ", total,
             " but the packed data has ", input.size(0), " rows");
  }
  const Shape state{batch, hidden};
  MF_CHECK(h0.sizes() == state, ShapeError, name, ": expected h0 of shape ", shape_str(state), ", got ",
           shape_str(h0.sizes()));
  if (mode == Mode::Lstm)
    MF_CHECK(c0.defined() && c0.sizes() == state, ShapeError, name, ": expected c0 of shape ", shape_str(state),
             ", got ", c0.defined() ? shape_str(c0.sizes()) : std::string("None"));
  for (const Tensor* b : {&b_ih, &b_hh})
    MF_CHECK(!b->defined() || b->sizes() == Shape{g}, ShapeError, name, ": expected biases of shape ",
             shape_str({g}), ", got ", shape_str(b->sizes()));
  // Under autocast the op's inputs run in float32 (AutocastPolicy::Fp32).
  const bool autocast_on = autocast::any_enabled();
  const DType dt = autocast_on && is_floating(input.dtype()) ? kFloat32 : input.dtype();
  for (const Tensor* t : {&h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh})
    MF_CHECK(!t->defined() || t->dtype() == input.dtype() || autocast_on, TypeError, name,
             ": expected every tensor in ", dtype_name(input.dtype()), ", got one in ", dtype_name(t->dtype()));
  MF_CHECK(dt == kFloat32 || dt == kFloat64, TypeError, name, ": expected float32 or float64 tensors, got ",
           dtype_name(dt));
  const int64_t rows = packed ? input.size(0) : checked_mul(input.size(0), batch, name, "the number of rows");
  for (int64_t v : {rows, g, in_size, hidden}) check_fits_blas(v, "a dimension");
  checked_mul(rows, std::max(g, workspace_width(mode, hidden)), name, "the workspace size");
  TensorList out = dispatch::apply(op, {input, h0, mode == Mode::Lstm ? c0 : Tensor(), w_ih, w_hh, b_ih, b_hh},
                                   {{"mode", mode_name}, {"reverse", reverse}, {"batch_sizes", batch_sizes}});
  return {out[0], out[1], mode == Mode::Lstm ? out[2] : Tensor()};
}

}  // namespace mf
