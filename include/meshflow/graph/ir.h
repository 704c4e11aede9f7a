// The graph IR of graph mode: values with metadata, nodes that are op calls
// (OpDef + Attrs + input and output values), graph inputs, variables and
// outputs. A traced train step (forward, backward, optimizer update) and a
// hand-built test graph are the same kind of object; passes (passes.h)
// rewrite it and the executor (executor.h) lowers it to a plan.
//
// Note [Values and memory]
// Every value is a tensor: its sizes, strides, element offset and dtype are
// those the tracer saw. A value either owns a buffer (a kernel output, a
// graph input, a constant, a variable) or aliases the buffer of another
// value: the outputs of view ops and of in-place nodes alias input 0.
// `root` names the value that owns the buffer. An in-place node consumes its
// input 0 and produces a new value with the same root, so the IR stays in
// SSA form: a read after the write names the new value, and two reads of a
// buffer with a write between them never look alike to CSE.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/op_def.h"

namespace mf::optim {
class Optimizer;
}

namespace mf::graph {

struct FusedProgram;  // fusion.h

// Parameter group `group` of an optimizer.
struct LrSource {
  optim::Optimizer* optimizer = nullptr;
  size_t group = 0;
};

// The layout of a global tensor whose local tensor a value is: a global
// graph input or output (Note [Tracing global ops] in trace.h).
struct GlobalLayout {
  Placement placement;
  NdSbp sbp;
  Shape shape;  // the global shape
  std::string str() const;  // "global (S(0)) of (64, 784) on placement(...)"
};

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;  // an undefined optional input

// A variable that is the state tensor `key` of a parameter in an optimizer:
// the executor rebinds it when the optimizer's entry is replaced
// (Optimizer::load_state_dict makes new tensors).
struct StateBinding {
  optim::Optimizer* optimizer = nullptr;
  Tensor param;
  std::string key;
  ValueId value = kNoValue;
};

enum class ValueKind {
  Input,         // a graph input: data copied in for every run
  Variable,      // a captured tensor (parameter, buffer, optimizer state), bound by reference
  Constant,      // a tensor computed once at compile time (constant folding)
  Intermediate,  // the output of a node
};

struct Value {
  ValueKind kind = ValueKind::Intermediate;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
  Device device;
  ValueId root = kNoValue;   // the value owning the buffer (itself for owners)
  int32_t producer = -1;     // node index for intermediates
  int32_t output_index = 0;  // which output of the producer
  int32_t input_index = -1;  // position among the graph inputs
  // The tensor of a variable or constant.
  Tensor tensor;
  // A name for printing (parameter names when the front end knows them).
  std::string name;
  // The global tensor this value is the local tensor of: a global graph
  // input's layout (checked at every run), or for printing the layout of
  // the first global result the trace wrapped around a node's output.
  std::optional<GlobalLayout> global;

  int64_t nbytes() const;  // bytes of the buffer an owner needs
};

// Where in a pipelined train step the tracer recorded a node (Note
// [Pipeline schedules in graph mode] in passes.h): before the micro-batches
// (None), in a micro-batch's forward or backward, or after them (the
// optimizers' updates, the outputs' averaging). schedule_pipeline marks the
// weight-gradient part of a split backward (zero-bubble schedules) Weight.
enum class Phase : uint8_t { None, Forward, Backward, Update, Weight };
struct PipelineTag {
  int32_t stage = -1;  // the stage whose module (or whose forward, for a backward op) recorded it; -1: none
  int32_t micro_batch = -1;
  Phase phase = Phase::None;
};

struct Node {
  const OpDef* op = nullptr;
  Attrs attrs;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  // Output 0 is input 0 written in place (Note [Values and memory]).
  bool inplace = false;
  // >= 0: output 0 is a fresh value whose kernel writes it over the buffer
  // of input k, which dies here (Note [Outputs over dead inputs] in passes.h).
  int32_t overwrites = -1;
  // A random op: this many Philox counters are reserved afresh before every
  // run and written to the "offset" attribute.
  uint64_t random_counters = 0;
  // Note [Recomputed nodes]: the nodes an activation checkpoint records
  // while backward recomputes its forward (autograd::in_recomputation()).
  // CSE never merges them with the forward's nodes (that would keep the
  // activations alive again), and a recomputed random op draws the counters
  // of the forward's op it repeats: both carry the same random_key (1 + the
  // offset they drew while tracing), and a run reserves counters once per key.
  bool recomputed = false;
  uint64_t random_key = 0;
  // Note [Random counters of a run]: a run reserves Graph::random_span
  // counters at once, and a random node draws at this position among them,
  // the offset it drew while tracing less the trace's first. So every run
  // draws what an eager step would, whatever order the plan runs the nodes
  // in (a pipeline schedule), and every rank's generator advances alike:
  // a rank traces every random op of the program, its own or another
  // stage's (the op's frontend reserves the counters on every rank), but
  // records only its own.
  uint64_t random_position = 0;
  // An optimizer update: the learning rate is read from this parameter
  // group before every run (-1: none). Indexes Graph::lr_sources.
  int32_t lr_group = -1;
  // A fused node's program (fusion.h); its op is fused_elementwise_op().
  std::shared_ptr<const FusedProgram> fused;
  PipelineTag pipeline;

  bool is_view() const { return bool(op->view); }
  // Whether the node writes input i: input 0 of an in-place node, and the
  // inputs of OpDef::mutates.
  bool writes_input(size_t i) const { return op->writes_input(i, inplace); }
  bool writes_inputs() const { return inplace || op->mutates != 0; }
};

class Graph {
 public:
  // A graph input; `global`: it is this rank's local tensor of a global
  // input laid out so (meta: the local tensor's).
  ValueId add_input(const TensorMeta& meta, std::string name = {}, std::optional<GlobalLayout> global = {});
  ValueId add_variable(const Tensor& tensor, std::string name = {});
  ValueId add_constant(const Tensor& tensor);
  // Appends a node; its output values are created from infer (or, for a
  // view op, from the view function run on metadata).
  std::vector<ValueId> add_node(const OpDef& op, std::vector<ValueId> inputs, Attrs attrs = {});
  // Appends a node writing input 0 in place; returns the new value of it.
  ValueId add_inplace_node(const OpDef& op, std::vector<ValueId> inputs, Attrs attrs = {});
  // Appends a node whose output metadata are given (the tracer knows them).
  int32_t append_node(Node node, const std::vector<Value>& outputs);
  // layouts: per output, the global tensor it is the local tensor of (none:
  // a local output); empty for all local.
  void set_outputs(std::vector<ValueId> outputs, std::vector<std::optional<GlobalLayout>> layouts = {});

  const std::vector<Value>& values() const { return values_; }
  std::vector<Value>& values() { return values_; }
  const Value& value(ValueId id) const { return values_.at(size_t(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  const std::vector<std::optional<GlobalLayout>>& output_layouts() const { return output_layouts_; }

  // The value's metadata as a metadata-only tensor (for infer and views).
  Tensor meta_tensor(ValueId id) const;
  // Whether node n writes the buffer whose root is `root` (through any of
  // its written inputs, Node::writes_input).
  bool writes_buffer(const Node& n, ValueId root) const;
  // Replaces every use of `from` (node inputs and graph outputs) by `to`;
  // values in from's buffer (views, in-place results) move to to's buffer.
  void replace_uses(ValueId from, ValueId to);
  // Removes the nodes whose flag is set; values stay (unreferenced).
  void remove_nodes(const std::vector<bool>& removed);
  // Puts the nodes in this order (a permutation of their indices).
  void reorder(const std::vector<int32_t>& order);
  // Number of uses of each value by nodes and graph outputs.
  std::vector<int32_t> use_counts() const;

  // One line per input, variable, node and output:
  //   %7 = matmul(%3, %w1)  # float32 (64, 1024)
  std::string str() const;

  // Where update nodes read their learning rate (Node::lr_group indexes
  // this); the executor refreshes their "lr" attribute before every run.
  std::vector<LrSource> lr_sources;
  std::vector<StateBinding> state_bindings;
  // Global inputs and outputs on placements without this rank (pipeline
  // stages of other ranks): (position among the graph's arguments or
  // results, layout). They have no value here; a run checks such an
  // argument's layout and returns such a result as a global tensor without
  // a local part.
  std::vector<std::pair<size_t, GlobalLayout>> absent_inputs, absent_outputs;
  std::vector<DType> absent_output_dtypes;
  // Counters a run reserves (Note [Random counters of a run]); 0 for a
  // hand-built graph: the executor then lays out one block per random_key
  // (or node) in node order.
  uint64_t random_span = 0;

 private:
  ValueId add_value(Value v);
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::vector<std::optional<GlobalLayout>> output_layouts_;
};

// Note [Buffer uses]
// The liveness and alias analysis that the graph passes share. Two values
// alias exactly when they have the same root (Value::root: a view lies in
// its base's buffer, an in-place result in its input's). For each root,
// in node order:
//   users:    the non-view nodes that read or write the buffer through any
//             value in it, each once;
//   writers:  the nodes that write it (Node::writes_input);
//   last_use: the last node that reads, writes or makes a value in it
//             (nodes.size() when a graph output lies in it, -1 when
//             nothing does);
//   outputs:  how many graph outputs lie in it.
// A pass computes it once, at its start. A pass that moves a value into
// another buffer (forwarding a clone, writing over a dying input) calls
// merge, so the later decisions of the same pass see the longer life.
struct BufferUses {
  explicit BufferUses(const Graph& graph);
  std::vector<std::vector<int32_t>> users, writers;
  std::vector<int64_t> last_use;
  std::vector<int32_t> outputs;
  // What lived in from's buffer now lives in into's.
  void merge(ValueId into, ValueId from);
  // Whether node i is the last to touch the buffer of root.
  bool dies_at(ValueId root, size_t i) const { return last_use[size_t(root)] == int64_t(i); }
};

// "%7" or "%w1" for printing.
std::string value_name(const Graph& graph, ValueId id);

}  // namespace mf::graph
