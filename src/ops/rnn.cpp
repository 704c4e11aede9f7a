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

#include <climits>
#include <vector>

#include "meshflow/autocast.h"
#include "meshflow/autograd.h"
#include "meshflow/checked_size.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "backend/common/rnn_math.h"

namespace mf {
namespace {

using Mode = rnn_math::RnnMode;

std::vector<TensorMeta> forward_infer(const TensorList& in, const Attrs& attrs) {
  const Mode mode = rnn_math::rnn_mode(attrs.get_string("mode"));
  const Tensor& x = in[0];
  const int64_t hidden = in[4].size(1), batch = in[1].size(0), width = rnn_math::rnn_workspace_width(mode, hidden);
  const bool packed = !attrs.get_shape("batch_sizes").empty();
  const Shape y = packed ? Shape{x.size(0), hidden} : Shape{x.size(0), x.size(1), hidden};
  const Shape ws = packed ? Shape{x.size(0), width} : Shape{x.size(0), x.size(1), width};
  return {{y, x.dtype(), x.device()},
          {{batch, hidden}, x.dtype(), x.device()},
          {{batch, mode == Mode::Lstm ? hidden : 0}, x.dtype(), x.device()},
          {ws, x.dtype(), x.device()}};
}

// --- backward: inputs (x, h0, c0, w_ih, w_hh, y, workspace, grad_y, grad_h_n, grad_c_n);
// outputs (dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh), dx empty unless need_input.

std::vector<TensorMeta> backward_infer(const TensorList& in, const Attrs& attrs) {
  const Tensor& x = in[0];
  auto meta = [&](const Shape& shape) { return TensorMeta{shape, x.dtype(), x.device()}; };
  const int64_t g = in[3].size(0);
  return {meta(attrs.get_bool("need_input") ? x.sizes() : Shape{0}),
          meta(in[1].sizes()),
          meta({in[1].size(0), rnn_math::rnn_mode(attrs.get_string("mode")) == Mode::Lstm ? in[1].size(1) : 0}),
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
      const bool lstm = rnn_math::rnn_mode(ctx.attrs.get_string("mode")) == Mode::Lstm;
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
    .differentiable = false,
    .sbp = rnn_sbp(true),
});

void check_fits_blas(int64_t v, const char* what) {
  MF_CHECK(v <= INT_MAX, ValueError, "rnn: ", what, " (", v, ") is too large (at most ", INT_MAX, ")");
}

}  // namespace

int64_t rnn_gate_count(const std::string& mode) { return rnn_math::rnn_gates(rnn_math::rnn_mode(mode)); }

RnnLayerOutput rnn_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                         const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, const std::string& mode_name,
                         bool reverse, const Shape& batch_sizes) {
  static const OpDef& op = dispatch::op("rnn_layer");
  const Mode mode = rnn_math::rnn_mode(mode_name);
  const char* name = mode_name.c_str();
  MF_CHECK(input.defined() && w_ih.defined() && w_hh.defined() && h0.defined(), ValueError, name,
           ": input, h0 and the weights must be given");
  const bool packed = !batch_sizes.empty();
  MF_CHECK(input.dim() == (packed ? 2 : 3), ShapeError, name, ": expected ",
           packed ? "packed data of shape (N, input_size)" : "an input of shape (T, B, input_size)", ", got shape ",
           shape_str(input.sizes()));
  MF_CHECK(w_hh.dim() == 2 && w_ih.dim() == 2, ShapeError, name, ": expected 2-d weights, got weight_ih ",
           shape_str(w_ih.sizes()), " and weight_hh ", shape_str(w_hh.sizes()));
  const int64_t hidden = w_hh.size(1), g = checked_mul(rnn_math::rnn_gates(mode), hidden, name, "the gates' size");
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
  checked_mul(rows, std::max(g, rnn_math::rnn_workspace_width(mode, hidden)), name, "the workspace size");
  TensorList out = dispatch::apply(op, {input, h0, mode == Mode::Lstm ? c0 : Tensor(), w_ih, w_hh, b_ih, b_hh},
                                   {{"mode", mode_name}, {"reverse", reverse}, {"batch_sizes", batch_sizes}});
  return {out[0], out[1], mode == Mode::Lstm ? out[2] : Tensor()};
}

}  // namespace mf
