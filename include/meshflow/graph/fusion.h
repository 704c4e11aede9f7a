// Elementwise fusion: chains of elementwise ops become one node that runs
// the ops' own kernels block by block.
//
// Note [Elementwise fusion]
// A node of an elementwise op (OpDef::elementwise: element i of the output
// depends only on element i of each input; ops that write inputs,
// OpDef::mutates, excluded) whose only reader is another elementwise node of
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
// rows for a softmax. A group is not formed when a node between a member
// and the group's last member writes one of the member's inputs,
// and tensors under kMinFusedElements are left alone (per-block overhead
// would outweigh the saving).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meshflow/graph/ir.h"

namespace mf::graph {

constexpr int64_t kFusedBlock = 16384;
constexpr int64_t kMinFusedElements = 16384;

struct FusedStep {
  const OpDef* op = nullptr;
  Attrs attrs;
  // k >= 0: input k of the program; k < 0: output 0 of step ~k.
  std::vector<int32_t> args;
  // Where each of the op's outputs goes: k >= 0 output k of the fused node
  // (a per-row output, such as layer_norm's mean, gets the block's rows);
  // -1 a per-thread scratch block (single-output steps only).
  std::vector<int32_t> outputs{-1};
  DType dtype = DType::Float32;  // of a scratch result
};

struct FusedProgram {
  // The last one writes its result to a node output.
  std::vector<FusedStep> steps;
  // Blocks have shape (m, trailing...): the output dims that broadcast
  // inputs span (and the normalised row); empty: flat blocks.
  Shape trailing;
  // Note [Linear epilogues]: node inputs 0, 1, 2 are the bias, a and b of
  // an addmm (beta = alpha = 1) whose kernel writes node output 0 first; the
  // steps then see that output as program input 0 and node inputs 3, 4, ...
  // as program inputs 1, 2, ...
  bool product_first = false;
  // Note [Bias gradients]: >= 0: this node output receives the sum over
  // rows (all dims but the last) of the last step's result, computed by the
  // "sum" kernel with these attributes block by block, then over the
  // blocks' partial sums in block order.
  int32_t column_sum_output = -1;
  Attrs column_sum_attrs;
};

// An op that only graph passes make, outside the registry: no eager form
// (its infer throws).
OpDef graph_only_op(std::string name, std::vector<std::string> inputs);
// The ops of fused nodes (their kernel is per node): chains of elementwise
// ops, and a matrix product with its epilogue.
const OpDef& fused_elementwise_op();
const OpDef& fused_linear_op();
const OpDef& fused_add_layer_norm_op();
// The kernel of a fused node running program.
KernelFn fused_kernel(std::shared_ptr<const FusedProgram> program);
// The scratch of fused_kernel (Note [Fused program scratch] in fusion.cpp).
ScratchFn fused_scratch(std::shared_ptr<const FusedProgram> program);
// Whether op is elementwise in the sense above (the trait, and writes no input).
bool is_elementwise(const OpDef& op);
// How value v reaches the blocks of a fused node with output shape out: 0
// for the whole shape (contiguous) or 0-d, k for a contiguous tensor
// broadcast over all but the last k dims of out (an attention mask, a
// bias), -1 if it cannot.
int64_t trailing_dims(const Value& v, const Shape& out);
// Whether value id is a whole contiguous buffer of its own.
bool is_whole_buffer(const Value& v, ValueId id);

// The pass; returns the number of nodes folded into fused nodes.
int fuse_elementwise(Graph& graph);

// Note [Linear epilogues]
// linear is addmm(bias, x, w.t()): its kernel copies the bias into the
// output and runs the GEMM with beta = 1 over it, so the bias add costs no
// pass of its own (a GEMM with beta = 0 and a separate add would write the
// output twice; OpenBLAS zero-fills it for beta = 0). An
// addmm whose first reader is a unary elementwise op (OpDef::elementwise
// with one input and the product's dtype: relu, gelu, silu, exp, abs,
// ...) of the whole product becomes one "fused_linear" node: addmm's
// kernel, then that op's kernel over the product in blocks, in place when nothing
// else reads the pre-activation, else into an output of its own (GELU's
// input is read again by gelu_backward). The kernels are the separate
// nodes' kernels on the same data, so the bits are the same. The forward
// gains little (the activation was already one pass, in place for relu);
// what this buys is the node count and a place for epilogues that need the
// product while it is in cache.
int fuse_linear_activations(Graph& graph);

// Note [GELU with its gradient]
// Recomputation (Note [Recomputation]) runs GELU again in backward, just
// before the weight gradient of the next linear reads it, and the gradient
// of the same GELU, gelu_backward(g, x), follows a little later, its g
// already written. Both become one node running "gelu_with_backward",
// which runs the two ops' loops over each block while it is in cache (each
// result with the bits of its own op): the recomputation costs no pass of
// its own over memory. Returns the number of gelu_backward nodes folded.
int fuse_gelu_with_backward(Graph& graph);

// Note [Bias gradients]
// The bias gradient of a linear is sum(g, dim 0) over the gradient g of its
// output, and g is often the result of an elementwise node (gelu_backward,
// relu's where) that has just written it. Such a sum becomes a second
// output of that node: each block of g, still in cache, is summed over its
// rows by the "sum" kernel into a partial row, and the partial rows are
// summed in block order at the end (deterministic for any thread count;
// equal to the separate sum up to float rounding). Returns the number of
// sums folded.
int fuse_bias_gradients(Graph& graph);

// Note [Residual layer norm]
// A pre-norm transformer adds a residual and normalises the sum at once:
// h = x + f(x); y = layer_norm(h). add followed by a layer_norm (over the
// last dim) that is the first reader of the sum becomes one
// "fused_add_layer_norm" node that adds and normalises block by block of
// whole rows, writing the sum (when later nodes read it: the next residual,
// layer_norm_backward), y, and the per-row mean and rstd that backward
// reads. The same kernels run on the same rows, so the bits are those of
// the separate nodes. Returns the number of nodes folded.
int fuse_add_layer_norms(Graph& graph);

// Note [Updates in the GEMM]
// SGD without momentum updates p -= lr * (g + weight_decay * p), and a
// weight's gradient g is a product (g_out^T x) that nothing else reads. The
// product then runs as one GEMM with alpha = -lr and beta = 1 - lr *
// weight_decay straight into the parameter ("matmul_sgd_update", in place,
// its lr refreshed per run like the update's): the gradient is never
// stored and the update's pass over parameter and gradient goes. Only when nothing between the product
// and the update touches the parameter. Equal to the separate update up to
// float rounding (the gradient is not rounded to float before it is
// scaled). Returns the number of updates folded.
int fuse_updates_into_gemms(Graph& graph);
const OpDef& matmul_sgd_update_op();

}  // namespace mf::graph
