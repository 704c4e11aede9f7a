// Automatic parallelism: a cost model of a traced train step and a search
// over the SBP signatures of its ops and the layouts of its parameters.
//
// Note [Auto parallel]: graph mode with enable_auto_parallel traces the
// step twice. The first trace runs with every free parameter broadcast on
// the graph's placement under a CallLog: the global interpreter records
// each op call (its inputs and outputs as value ids, its shapes and its
// candidate signatures per mesh axis), and AccumulateGrad records where a
// gradient is boxed into its parameter's layout. search() then picks one
// signature per call (a tuple of candidate indices, one per mesh axis) and
// one layout per parameter (its optimizer state and gradient follow it) to
// minimise the predicted step time (CostModel) under a memory limit:
//
//   time = sum over calls of compute(call, signature)
//        + sum over every read of a value of boxing(producer's layout ->
//          the layout the reader's signature needs)
//
// a pairwise cost over a graph whose nodes are the calls and parameters.
// Nodes with one or two neighbours are eliminated exactly (a leaf folds
// into its neighbour, a node between two becomes an edge between them:
// dynamic programming over chains and series-parallel parts); what remains
// is solved by greedy starts and coordinate descent; the eliminated nodes
// are then read back in reverse order. A memory limit adds lambda x the
// bytes each choice keeps per rank, lambda found by bisection. The second
// trace follows the plan (FollowPlan): the interpreter forces call k's
// signature, so the program is the one the search costed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshflow/distributed/placement.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/tensor.h"

namespace mf {
struct GlobalMeta;
}

namespace mf::distributed::auto_parallel {

// Measured (or described) rates of a machine and its network, in seconds,
// bytes and FLOPs. A collective's time is piecewise alpha + beta * bytes
// through measured (bytes, seconds) points, bytes being the whole
// (logical) tensor: all_reduce of the tensor, all_gather of its result,
// reduce_scatter of its input, all_to_all of either. Past the last point
// the last segment's line goes on; before the first, the first's.
struct CollectiveFit {
  std::vector<std::pair<double, double>> points;  // (bytes, seconds), bytes increasing
  double operator()(double bytes) const;
};
struct CostModel {
  double gemm_flops = 50e9;      // FLOP/s of float32 GEMM-like ops (OpDef::flops)
  double gemm_flops_f64 = 25e9;  // float64
  double gemm_flops_16 = 50e9;   // bfloat16 / float16
  // The arithmetic intensity (FLOPs per byte read and written) at which a
  // GEMM-like op runs at half those rates: a call of intensity I runs at
  // rate * I / (I + this) (skinny products stream their weights). 0: at
  // the full rates.
  double gemm_half_intensity = 0;
  // The fraction of its dtype's GEMM rate that a convolution and an
  // attention call (OpDef::flops_kind) sustain.
  double conv_efficiency = 1;
  double attention_efficiency = 1;
  double memory_bandwidth = 10e9;  // bytes/s of elementwise ops (reads + writes)
  // bytes/s (reads + writes) of a memory-bound op reading an operand
  // transposed against its output (Note [Transposed operands in the cost
  // model]); 0: memory_bandwidth.
  double transpose_bandwidth = 0;
  double op_overhead = 5e-6;     // s per op call
  // bytes/s (reads + writes) of memory-bound ops measured on this machine,
  // by CallRecord::rate_key (Note [Measured op rates]); a call whose key is
  // not here moves its bytes at memory_bandwidth (transpose_bandwidth when
  // it reads a transposed operand).
  std::unordered_map<std::string, double> op_bandwidth;
  // Seconds each collective of a step adds to its time alone (Note [Sync
  // latency]): inside a step the ranks reach a collective at different
  // times, and ranks that share cores take turns. 0 for a described
  // machine unless given.
  double sync_latency = 0;
  // Fits per collective kind and group size; a size without a fit scales
  // the nearest fitted one by the ring algorithm's steps and bytes per rank.
  std::unordered_map<std::string, std::unordered_map<int64_t, CollectiveFit>> collectives;
  // The time of one collective ("all_reduce", "all_gather", "reduce_scatter",
  // "all_to_all") of `bytes` over a group of `ranks`.
  double collective(const std::string& kind, int64_t ranks, double bytes) const;
  double transposed_bandwidth() const { return transpose_bandwidth > 0 ? transpose_bandwidth : memory_bandwidth; }
};

enum class ValueKind : uint8_t { Output, Source, Fixed };

// A value of the traced program: an op call's output, a parameter (or a
// tensor tied to one: its optimizer state, its accumulated gradient), or a
// tensor the search does not lay out (graph inputs, buffers, constants).
struct ValueRecord {
  Shape shape;
  DType dtype = kFloat32;
  ValueKind kind = ValueKind::Fixed;
  int64_t node = -1;   // Output: the call; Source: the source
  int64_t index = 0;   // Output: which output
  NdSbp fixed;         // Fixed: its layout
  bool step_input = false;  // Fixed: an input of the step, held for the whole step
  int64_t gradient = -1;    // Source: a gradient laid out as its parameter, the value before
};

struct CallRecord {
  const OpDef* op = nullptr;
  bool inplace = false;
  bool backward = false;  // made by autograd's backward pass (traced in graph mode)
  std::vector<int64_t> inputs;   // value ids, -1 for an undefined input
  std::vector<int64_t> outputs;  // value ids
  std::vector<std::vector<SbpSignature>> candidates;  // per mesh axis (sbp_candidates)
  double flops = 0;  // OpDef::flops of the whole call; 0: memory-bound
  double bytes = 0;  // inputs + outputs, whole tensors
  // A memory-bound call (no flops, not a view) reading an operand whose last
  // two dims are transposed in memory (Note [Transposed operands in the
  // cost model]).
  bool transposed = false;
  // A view whose output's last two dims run in the other order in memory
  // than its input's (a transpose): a boxed input reaches it contiguous, so
  // its readers then read it transposed (Note [Transposed operands in the
  // cost model]).
  bool transposes = false;
  // A view whose output does not share its input's memory: the global
  // interpreter copied a shard that the view could not alias (a permuted
  // shard viewed to another shape). Priced as a memory-bound call.
  bool copies = false;
  // The strides of each input's memory as the kernel read it (empty for an
  // undefined input), and the key of its measured rate: the op's name, with
  // ":transposed" or ":strided" when it reads such an operand (Note
  // [Measured op rates]).
  std::vector<Shape> input_strides;
  std::string rate_key;
  // A contiguous clone of an intermediate buffer that no later call reads:
  // graph mode forwards it (the clone reads its source's buffer), so it
  // moves no data (Note [Forwarded clones in the cost model] in log.cpp).
  bool forwarded = false;
  // What the candidates came from, to derive them for another mesh (remesh).
  TensorList metas;
  std::vector<Shape> out_shapes;
  Attrs attrs;
};

// A parameter: one layout for it, its optimizer state and its gradient.
struct SourceRecord {
  std::string name;
  Shape shape;
  DType dtype = kFloat32;
  int64_t copies = 1;            // tensors of its size kept between steps (itself, optimizer state)
  std::optional<NdSbp> pinned;   // a layout the search must keep
};

struct CallLog {
  std::optional<Placement> placement;  // of the first call
  std::vector<CallRecord> calls;
  std::vector<ValueRecord> values;
  std::vector<SourceRecord> sources;
  // A parameter's gradient boxed into its layout: (value read, source).
  std::vector<std::pair<int64_t, int64_t>> accumulations;
  // Keeps every keyed GlobalMeta alive so that no address is reused.
  std::unordered_map<const GlobalMeta*, int64_t> ids;
  std::vector<std::shared_ptr<const GlobalMeta>> keep;
  // The buffer each view's output aliases (a value not here is its own),
  // and the forwarded clone reading each buffer, until a later call reads it.
  std::unordered_map<int64_t, int64_t> view_roots;
  std::unordered_map<int64_t, size_t> clone_readers;

  // The value id of t (registering it as a fixed value if unseen).
  int64_t value_of(const Tensor& t);
  // Registers t (a global tensor) as a parameter; tensors tied to it later
  // (tie) share its layout.
  int64_t add_source(const Tensor& t, std::string name, bool pinned);
  void tie(const Tensor& t, int64_t source);
  // Registers t (a global tensor) as an input of the step: its buffer is
  // held for the whole step (the graph copies its inputs into its arena).
  void add_input(const Tensor& t);
};

// While alive, the global interpreter on this thread records into log.
class LogCalls {
 public:
  explicit LogCalls(CallLog& log);
  ~LogCalls();
  LogCalls(const LogCalls&) = delete;
  LogCalls& operator=(const LogCalls&) = delete;
  static CallLog* active();

 private:
  CallLog* prev_;
};

// Called by the global interpreter and AccumulateGrad while logging.
void log_call(const OpDef& op, bool inplace, const TensorList& inputs, const TensorList& metas,
              const std::vector<Shape>& out_shapes, const Attrs& attrs, const TensorList& outputs);
// A parameter's gradient `before` boxed into the parameter's layout as `after`.
void log_accumulation(const Tensor& variable, const Tensor& before, const Tensor& after);

// One choice per call (a candidate index per mesh axis) and per source.
struct Plan {
  std::vector<std::vector<size_t>> calls;
  std::vector<NdSbp> sources;
  std::vector<const OpDef*> ops;  // the op of each call, to check the second trace
  // Predictions (per rank).
  double step_time = 0;
  double compute_time = 0;
  double communication_time = 0;
  double communication_bytes = 0;
  double memory = 0;          // bytes: parameters, optimizer state and the peak of live values (gradients too)
  double parameter_memory = 0;
  // The log's values held where the step's live bytes peak (op outputs and
  // the step's inputs; boxing's copies are not values).
  std::vector<int64_t> peak_values;
  double search_seconds = 0;
  int64_t core_nodes = 0;     // nodes left after the exact eliminations
  bool memory_limit_met = true;
};

struct SearchOptions {
  double memory_limit = 0;  // bytes per rank; 0: none
};

Plan search(const CallLog& log, const CostModel& model, const SearchOptions& options);

// The log as if traced on `mesh` (the simulator: a mesh larger than the
// machine): every call's candidates derived again for mesh's axes; a fixed
// value's or pinned parameter's layout given on one mesh axis is taken on
// every axis.
CallLog remesh(const CallLog& log, const Placement& mesh);

// Measures, into model.op_bandwidth, the rate of each memory-bound call key
// of the log that it has none for (Note [Measured op rates]), running the
// key's largest call for about `seconds` on the shapes a rank runs under
// `plan` (null: the logged shapes). Returns the number of keys measured.
int64_t measure_op_rates(const CallLog& log, CostModel& model, double seconds, const Plan* plan);

// The predictions of a given plan: per call the candidate index per mesh
// axis, per source its layout (a hand-written plan, or one to check a
// search against). Throws ValueError for a choice the search would not
// consider (a layout or signature that leaves a rank an empty part).
Plan predict(const CallLog& log, const CostModel& model, const std::vector<std::vector<size_t>>& calls,
             const std::vector<NdSbp>& sources);

// The cost of each call and of its inputs' boxing under a plan, for reports.
struct CallCost {
  std::vector<NdSbp> inputs, outputs;  // the signature
  double compute = 0;
  double boxing = 0;
  double boxing_bytes = 0;
  std::vector<std::string> collectives;  // "all_reduce 4.0 MiB", one per boxing of an input
};
std::vector<CallCost> call_costs(const CallLog& log, const CostModel& model, const Plan& plan);

// The part of a training step each call belongs to, as a pipeline stage
// runs it (Note [Pipeline parts of calls] in log.cpp).
enum class CallPart : uint8_t { Forward, BackwardInput, BackwardWeight, Update };
std::vector<CallPart> call_parts(const CallLog& log, const std::vector<int64_t>& input_sources);

// While alive, the global interpreter on this thread runs call k with the
// plan's signature for call k; a call of another op than the plan's throws.
class FollowPlan {
 public:
  explicit FollowPlan(const Plan& plan);
  ~FollowPlan();
  FollowPlan(const FollowPlan&) = delete;
  FollowPlan& operator=(const FollowPlan&) = delete;
  // The per-axis candidate indices of this call of op, or none.
  static std::optional<std::vector<size_t>> take(const OpDef& op);
  size_t followed() const { return next_; }

 private:
  const Plan* plan_;
  size_t next_ = 0;
  FollowPlan* prev_;
};

}  // namespace mf::distributed::auto_parallel
