// Builders of the SBP rules that ops declare in their OpDef (OpDef::sbp).
//
// Note [SBP signatures]: a rule lists, for one mesh axis of `parts` ranks,
// the ways an op can run on shards: the Sbp each input must have and the
// Sbp its outputs then have (elementwise ops pass a split through, matmul
// turns a split contraction into a partial sum, ...). A rule sees metadata
// stand-ins of the global inputs (global shapes) and the global output
// shapes. The framework always adds the all-broadcast signature (every rank
// computes the whole result), expands a rule to n-D meshes one mesh axis at
// a time, and picks per axis the signature whose boxing moves the fewest
// bytes for the inputs as they are (src/distributed/global_interpreter.cpp).
// A signature must give the same result as the op on whole tensors: that
// is what the per-signature tests check (tests/python/dist_scripts/
// sbp_matrix.py).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "meshflow/op_def.h"

namespace mf::sbp {

// Partial-sum signatures of an elementwise op.
enum class Partial {
  None,  // none (nonlinear ops)
  All,   // every input partial -> partial (add, sub, neg, clone)
  One,   // one input partial, the others broadcast -> partial (mul; div's numerator)
};

// Elementwise with broadcasting: output dim d split <- each input split on
// its aligned dim (broadcast where it has size 1 there or lacks the dim).
// With Partial::One, `partial_input` >= 0 restricts the partial to that input.
SbpRuleFn elementwise(Partial partial = Partial::None, int partial_input = -1);

// a (..., n, k) @ b (..., k, m); with_bias: addmm's leading input, added to
// the product (broadcast to the output).
SbpRuleFn matmul(bool with_bias);

// Reductions over attr "dims" (empty: all) with attr "keepdim": a kept dim's
// split passes through. split_reduced_to_partial: a split reduced dim gives
// a partial sum (sum); partial_passes: a partial input gives a partial
// output (linear reductions: sum, mean).
SbpRuleFn reduce(bool split_reduced_to_partial, bool partial_passes);

// Ops that work independently along every dim of output 0 except the ones
// `coupled` returns (negative dims count from the end): such a dim d may be
// split in every input of output 0's rank and size at d, and in every
// output. Softmax along dim, sort, cumsum, pooling (batch and channel
// only), ...
using CoupledDims = std::function<std::vector<int64_t>(const TensorList& inputs, const Attrs& attrs)>;
SbpRuleFn independent(CoupledDims coupled);
// independent() where attr `name` holds the one coupled dim (int) or dims (shape).
SbpRuleFn independent_of_attr(const char* name);
// independent() where only the first `n` dims are free (the rest coupled).
SbpRuleFn leading_dims(int64_t n);

// Ops on batches of matrices (torch.linalg): input i is (batch..., core)
// with input_core[i] trailing core dims, output j (batch..., core) with
// output_core[j]; the batch dims of the inputs broadcast to the outputs'.
// A batch dim splits in every output and in every input that has it
// unbroadcast (the others broadcast); core dims never split.
SbpRuleFn batched(std::vector<int64_t> input_core, std::vector<int64_t> output_core);

// Declares that the op runs only with every input and output broadcast
// (random ops, data-dependent shapes, attrs holding global positions).
SbpRuleFn broadcast_only();

}  // namespace mf::sbp

namespace mf::distributed {

// The signatures op may run with on one mesh axis of `parts` ranks for these
// (global or metadata) inputs: its rule's, then the all-broadcast one.
std::vector<SbpSignature> sbp_candidates(const OpDef& op, const TensorList& inputs, const Attrs& attrs, int64_t parts);
std::vector<SbpSignature> sbp_candidates(const OpDef& op, const TensorList& metas, const std::vector<Shape>& out_shapes,
                                         const Attrs& attrs, int64_t parts);

// While alive, the next global call of `op` on this thread runs with
// candidate per_axis[a] of sbp_candidates() on mesh axis a instead of the
// cheapest one (the per-signature tests use it).
class ForceSignature {
 public:
  ForceSignature(const OpDef& op, std::vector<size_t> per_axis);
  ~ForceSignature();
  ForceSignature(const ForceSignature&) = delete;
  ForceSignature& operator=(const ForceSignature&) = delete;
  // The forced indices for this call of op (once per guard), or none.
  static std::optional<std::vector<size_t>> take(const OpDef& op);

 private:
  const OpDef* op_;
  std::vector<size_t> per_axis_;
  ForceSignature* prev_;
};

}  // namespace mf::distributed
