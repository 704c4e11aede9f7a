// Recurrent layers as fused ops: one call runs one layer in one direction
// over a whole sequence (Note [Fused recurrent layers] in src/ops/rnn.cpp).
#pragma once

#include <string>

#include "meshflow/tensor.h"

namespace mf {

struct RnnLayerOutput {
  Tensor output;  // (T, B, H), or (N, H) for a packed input
  Tensor h_n;     // (B, H)
  Tensor c_n;     // (B, H) for "lstm"; undefined otherwise
};

// One recurrent layer over a sequence. mode is "rnn_tanh", "rnn_relu",
// "lstm" or "gru"; the gates are laid out as in PyTorch (lstm: i, f, g, o;
// gru: r, z, n). input is (T, B, I), or, when batch_sizes is not empty, a
// packed sequence (N, I) whose step t holds the first batch_sizes[t] rows
// of the batch (batch_sizes non-increasing, summing to N). h0 and c0 are
// (B, H) (c0 only for lstm); w_ih is (G*H, I), w_hh (G*H, H), the biases
// (G*H) or undefined. reverse runs from the last step to the first.
RnnLayerOutput rnn_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                         const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, const std::string& mode,
                         bool reverse = false, const Shape& batch_sizes = {});

// Number of gates of a mode (1, 4 or 3); throws ValueError for an unknown mode.
int64_t rnn_gate_count(const std::string& mode);

}  // namespace mf
