// Elementwise fusion: chains of elementwise ops become one node that runs
// the ops' own kernels block by block.
//
// Note [Elementwise fusion]
// A node of an elementwise op (element i of the output depends only on
// element i of each input) whose only reader is another elementwise node of
// the same output shape joins that reader's group; so does the input chain
// of a softmax over the last dim, which ends its group (scaled and masked
// softmax: softmax(scores * scale + mask)). A group of two or more becomes
// one "fused_elementwise" node at the position of its last member. The
// fused kernel walks the output in blocks of about kFusedBlock elements
// and runs every member's own kernel on each block, the intermediate
// results in small per-thread buffers that stay in cache, so the
// intermediates never exist at full size (no memory, no round trip through
// DRAM) and the results are the bits the separate kernels give. Inputs
// from outside the group are contiguous with the output's shape, 0-d, or
// contiguous and broadcast over leading dims only (a (L, S) mask of
// (N, H, L, S) scores); blocks then hold whole (L, S) matrices, and whole
// rows for a softmax. A group is not formed when an in-place node between
// a member and the group's last member writes one of the member's inputs,
// and tensors under kMinFusedElements are left alone (per-block overhead
// would outweigh the saving).
#pragma once

#include <memory>
#include <vector>

#include "meshflow/graph/ir.h"

namespace mf::graph {

constexpr int64_t kFusedBlock = 16384;
constexpr int64_t kMinFusedElements = 16384;

struct FusedStep {
  const OpDef* op = nullptr;
  Attrs attrs;
  // k >= 0: input k of the fused node; k < 0: the result of step ~k.
  std::vector<int32_t> args;
  DType dtype = DType::Float32;  // of this step's result
};

struct FusedProgram {
  std::vector<FusedStep> steps;  // the last one writes the node's output
  // Blocks have shape (m, trailing...): the output dims that broadcast
  // inputs span (and the softmax row); empty: flat blocks.
  Shape trailing;
};

// The op of fused nodes (not in the registry: its kernel is per node).
const OpDef& fused_elementwise_op();
// The kernel of a fused node running program.
KernelFn fused_kernel(std::shared_ptr<const FusedProgram> program);
// Whether op is elementwise in the sense above.
bool is_elementwise(const OpDef& op);

// The pass; returns the number of nodes folded into fused nodes.
int fuse_elementwise(Graph& graph);

}  // namespace mf::graph
