// CPU kernels of the fused recurrent op (Note [Fused recurrent layers] in
// src/ops/rnn.cpp): one layer in one direction over a whole sequence,
// forward and backward, on OpenBLAS GEMMs and one fused pass over the gates
// per step. float32 and float64.
#pragma once

#include "backend/common/rnn_math.h"

namespace mf::cpu {

using rnn_math::dispatch_rnn_dtype;
using rnn_math::rnn_gates;
using rnn_math::rnn_mode;
using rnn_math::rnn_steps;
using rnn_math::rnn_workspace_width;
using rnn_math::RnnMode;
using rnn_math::RnnSteps;

// --- forward --------------------------------------------------------------------------
// Inputs (x, h0, c0, w_ih, w_hh, b_ih, b_hh); outputs (y, h_n, c_n, workspace).
void rnn_forward(RnnMode mode, bool reverse, const RnnSteps& steps, const TensorList& in, TensorList& out);
// --- backward -------------------------------------------------------------------------
// Inputs (x, h0, c0, w_ih, w_hh, y, workspace, grad_y, grad_h_n, grad_c_n);
// outputs (dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh); dx is empty unless
// need_input.
void rnn_backward(RnnMode mode, bool reverse, bool need_input, const RnnSteps& steps, const TensorList& in,
                  TensorList& out);

}  // namespace mf::cpu
