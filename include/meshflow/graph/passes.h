// Graph passes: each rewrites a Graph in place and returns how many nodes it
// removed or replaced. optimize() runs the default list.
//
// Note [Collectives in passes]
// Every rank runs its own graph, and their collectives (OpDef::collective)
// must meet: the same collectives in the same order on every rank. So no
// pass removes a collective (DCE keeps it even when nothing reads its
// result: another rank's copy may be live), merges two (CSE) or runs one at
// compile time (constant folding). Two passes change the collectives, by
// rules that read only the graph's structure, which is the same on every
// rank (every rank traces the same program), so they change every rank's
// graph alike: recomputation runs a parameter's all-gather again for
// backward (ZeRO-3), and prefetch_gathers issues such gathers earlier
// (Note [Prefetching gathers]). The other passes that move nodes move only
// in-place updates (which stay after every node touching their buffers)
// and single-use elementwise chains, never a collective.
#pragma once

#include <string>

#include "meshflow/distributed/pipelining.h"
#include "meshflow/graph/ir.h"

namespace mf::graph {

// Removes nodes whose outputs nothing reads. In-place nodes stay: they
// write memory that outlives them (a variable, or a buffer a later node
// reads through another value); so do collectives.
int eliminate_dead_code(Graph& graph);

// Merges nodes that run the same op with the same attributes on the same
// values, when no in-place write reached those values (or the first node's
// outputs) in between. Random and in-place nodes are never merged.
int eliminate_common_subexpressions(Graph& graph);

// Runs nodes whose inputs are all constants (factories such as arange or
// full, and ops on their results) once at compile time; their outputs
// become constants. Random and in-place nodes are not folded.
int fold_constants(Graph& graph);

// Note [Clone forwarding]
// clone(x) is replaced by x when x lies in a kernel output's buffer that
// nothing reads or writes after the clone, and x already has the clone's
// layout (contiguous from offset 0). AccumulateGrad clones every gradient
// it stores, which a traced step does not need.
int forward_clones(Graph& graph);

// Note [Slice gradients]
// The gradient of a tensor split into slices (q, k, v = chunk(qkv, 3)) is
// a sum of slice_backward results, each a zero tensor with one slice
// filled. When those slices tile the dimension exactly once, the sum is
// the concatenation of the slice gradients: one cat replaces the zero
// fills, copies and adds (and their buffers).
int merge_slice_gradients(Graph& graph);

// Note [Recomputation]
// A cheap result (elementwise ops, clone, layer_norm) that a step keeps from
// the forward to its backward (GELU's output, read again by the weight
// gradient of the next linear) is computed a second time just before its
// late readers when its own inputs are still alive there, or within a few
// nodes of it (GELU's input is: gelu_backward reads it later), so the
// result's buffer dies after its forward readers. The gap between the two
// uses must be at least a thirty-second of the step's nodes, which the last
// block's GELU output (live at the start of backward, where a GPT's memory
// peaks) also spans. The same kernel on the same inputs gives the same
// bits; the cost is one more pass over memory.
int recompute_elementwise(Graph& graph);

// Note [In place where safe]
// A node of an op with an in-place form whose input 0 is a kernel output's
// whole buffer, read by nothing after this node, with the output's shape
// and dtype, writes its result over that input instead of into a buffer of
// its own; one buffer fewer is live at that point.
//
// Note [Outputs over dead inputs]
// The same holds for kernels without an in-place form whose output element
// i depends on input element i only (elementwise ops, fused elementwise
// chains; gelu_backward over the incoming gradient) or that read each
// element before writing it (cross_entropy_backward over the logits, row
// by row): the output stays a value of its own (Node::overwrites names
// the input) but is placed in the dying input's buffer, whole and in
// order. At the start of a GPT's backward the logits' gradient so takes
// the logits' buffer.
int run_in_place(Graph& graph);

// Note [Early updates]
// An in-place node (an optimizer update, a buffer's counter, the sum of a
// micro-batch's gradient into the accumulated one) moves up to just after
// the last earlier node that reads or writes any buffer it reads: a
// parameter is updated as soon as backward no longer needs its old value,
// and a micro-batch's gradient is added in as soon as it is made, so the
// gradient dies there instead of living to the end of the step (or of the
// micro-batch's backward). What every node computes is unchanged.
// An update that reads a collective's result (the all-reduced gradient of
// a data-parallel parameter) stays where the trace put it, after backward:
// moved up, it would wait for its collective at once, and the collective
// could not overlap the rest of backward (Note [Overlapping communication]
// in executor.h).
int schedule_updates_early(Graph& graph);

// Note [Prefetching gathers]
// Each all-gather of a variable (a ZeRO-3 parameter's rows) is issued one
// gather ahead: right after the node where the previous such gather was
// traced, or after the last node between the two that writes the
// variable or makes the view of it the gather reads. With overlapped communication the gather then runs on the
// communication thread while the previous layer computes, and its reader
// waits for it as before. Only the order changes (the same on every rank,
// so the collectives still match); the gathered buffer lives one layer
// longer.
int prefetch_gathers(Graph& graph);

// Note [Pipeline schedules in graph mode]
// A pipelined Graph (GraphModule.set_stage, docs/pipeline.md) is traced as
// any other: every rank runs build() once per micro-batch, recording only
// the ops of placements it is in (Note [Tracing global ops] in trace.h),
// so its graph holds its stages' forwards and backwards for every
// micro-batch, the comm_send / comm_recv of to_global between stages, and
// after the last micro-batch the optimizers' updates. The tracer tags each
// node (PipelineTag): a forward op with the stage whose module was running,
// a backward op with the stage whose forward made the autograd node that
// recorded it (found by its sequence number), both with the micro-batch.
// schedule_pipeline then makes the trace this rank's part of a schedule
// (distributed/pipelining.h, the same action lists eager mode runs):
//   1. a tagged node goes to its action: F or B of (stage, micro-batch);
//   2. an untagged one (the loss after the last stage, boxing between
//      stages) joins the stage of its latest tagged producer, else of its
//      earliest tagged consumer, in its own phase;
//   3. for the zero-bubble kinds, a backward's nodes from which a node of
//      another stage or a send is reached are its I action, the others
//      (weight gradients, their sums over micro-batches) its W action;
//   4. nodes are sorted by action, in trace order within one; receives go
//      one action early, so their messages arrive while the rank computes;
//   5. the order is checked to keep every dependency (and every read of a
//      value before an in-place write of it), else an error names the
//      nodes (a value passed between stages without to_global);
//   6. sends and receives get one tag per message: the k-th send to a rank
//      in trace order (the same program on every rank) meets the k-th
//      receive from it there.
// The plan is one program whose steps run in the schedule's order; its
// actions are the per-stage programs. Sends never block and receives wait
// where their data is read (Note [Overlapping communication],
// executor.h), which is how the simulator runs the lists that it proved
// free of deadlock. The passes of optimize() run afterwards and move no
// collective; the memory plan then sees the schedule's lifetimes (1F1B
// holds fewer micro-batches' activations than GPipe).
constexpr int64_t kPipelineTagBase = 8192;
constexpr int64_t kPipelineTags = 16384;
// Returns a one-line summary; actions: this rank's list (communication
// actions are ignored: the graph's own sends and receives take their place).
std::string schedule_pipeline(Graph& graph, const std::vector<distributed::pipelining::Action>& actions);

// The default pipeline: constant folding, CSE, clone forwarding, DCE,
// slice-gradient merging, recomputation, the fusions of fusion.h (linear
// epilogues, residual layer norms, GELU with its gradient, elementwise
// chains, bias gradients, updates in GEMMs), in
// place where safe, early updates. exact: only the rewrites that keep the
// bits eager mode gives (bias-gradient fusion, which sums in blocks, and
// SGD updates folded into GEMMs are left out).
// Returns a one-line summary ("fold_constants 2, cse 5, ...").
std::string optimize(Graph& graph, bool exact = false);

}  // namespace mf::graph
