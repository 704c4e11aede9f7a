// CPU kernels of the fused recurrent op (Note [Fused recurrent layers] in
// src/ops/rnn.cpp): one layer in one direction over a whole sequence,
// forward and backward, on OpenBLAS GEMMs and one fused pass over the gates
// per step. float32 and float64.
#pragma once

#include <cstdint>
#include <vector>

#include "meshflow/tensor.h"

namespace mf::cpu {

enum class RnnMode { Tanh, Relu, Lstm, Gru };

inline int64_t rnn_gates(RnnMode m) { return m == RnnMode::Lstm ? 4 : m == RnnMode::Gru ? 3 : 1; }
// The per-row values the backward needs besides the outputs.
inline int64_t rnn_workspace_width(RnnMode m, int64_t h) {
  return m == RnnMode::Lstm ? 5 * h : m == RnnMode::Gru ? 4 * h : 0;
}

// The steps of a sequence: row counts and first rows.
struct RnnSteps {
  std::vector<int64_t> sizes, offsets;
  int64_t batch = 0, rows = 0;
  int64_t count() const { return int64_t(sizes.size()); }
};

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
