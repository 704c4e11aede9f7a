// The fused attention kernels on the CPU (Note [Fused attention] in
// attention.cpp): softmax(q k^T * scale + mask) v in blocks with an online
// softmax, never materialising the (L, S) weights.
#pragma once

#include <cstdint>

#include "meshflow/tensor.h"

namespace mf::cpu {

struct AttentionArgs {
  double scale = 1.0;
  bool causal = false;    // query i attends keys j <= i
  double dropout_p = 0.0;  // on the weights; the keep mask is Philox(seed, offset + ...)
  uint64_t seed = 0, offset = 0;
};

// q (B..., L, E), k (B..., S, E), v (B..., S, Ev): one batch shape, any
// strides. mask: undefined, or of >= 2 dims broadcasting to (B..., L, S)
// (bool: true attends; floating: added to the scores). Writes out
// (B..., L, Ev) and lse (B..., L), the log of each row's softmax sum
// (float32, float64 for float64 inputs), both contiguous.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionArgs& args, Tensor& out, Tensor& lse);

// The gradients of q, k and v (contiguous, their shapes) from grad_out and
// the forward's out and lse; the weights are recomputed block by block.
void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionArgs& args,
                        Tensor& grad_q, Tensor& grad_k, Tensor& grad_v);

// Philox counters the dropout mask of (B, L, S) weights uses.
uint64_t attention_dropout_counters(int64_t batch, int64_t queries, int64_t keys);

}  // namespace mf::cpu
