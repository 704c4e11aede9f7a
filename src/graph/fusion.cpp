// Elementwise fusion; see Note [Elementwise fusion] in fusion.h.
#include "meshflow/graph/fusion.h"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "meshflow/dispatch.h"
#include "meshflow/parallel.h"
#include "backend/common/scratch.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/loops.h"

namespace mf::graph {

bool is_elementwise(const OpDef& op) { return op.elementwise && op.mutates == 0; }

OpDef graph_only_op(std::string name, std::vector<std::string> inputs) {
  std::string what = name + ": made by the graph passes only; it has no eager form";
  return OpDef{
      .name = std::move(name),
      .inputs = std::move(inputs),
      .infer = [what = std::move(what)](const TensorList&, const Attrs&) -> std::vector<TensorMeta> {
        throw Error(what);
      },
      .differentiable = false,
  };
}

const OpDef& fused_elementwise_op() {
  static const OpDef op = [] {
    OpDef def = graph_only_op("fused_elementwise", {"inputs"});
    def.variadic = true;
    return def;
  }();
  return op;
}

const OpDef& fused_add_layer_norm_op() {
  static const OpDef op = graph_only_op("fused_add_layer_norm", {"input", "other", "weight", "bias"});
  return op;
}

const OpDef& fused_linear_op() {
  static const OpDef op = graph_only_op("fused_linear", {"bias", "a", "b"});
  return op;
}

namespace {

// The bytes op's CPU kernel asks for (Note [Kernel scratch]) on these
// operands (0 without a ScratchFn).
int64_t kernel_scratch(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs) {
  const ScratchFn& scratch = op.scratch[size_t(DeviceType::CPU)];
  if (!scratch) return 0;
  std::vector<TensorMeta> metas;
  for (const Tensor& t : outputs) metas.push_back({t.sizes(), t.dtype(), t.device()});
  return scratch(inputs, metas, attrs);
}

// Runs op's CPU kernel inside a fused program, its scratch the start of
// `room` (a UInt8 buffer at least kernel_scratch bytes long).
void run_cpu_kernel(const OpDef& op, const TensorList& inputs, TensorList& outputs, const Attrs& attrs,
                    const Tensor& room) {
  const KernelFn& kernel = op.kernels[size_t(DeviceType::CPU)];
  if (!op.scratch[size_t(DeviceType::CPU)]) return kernel(inputs, outputs, attrs);
  const int64_t bytes = kernel_scratch(op, inputs, outputs, attrs);
  MF_CHECK(bytes <= room.numel(), Error, op.name, ": a fused step's scratch of ", bytes,
           " bytes exceeds the ", room.numel(), " its program planned");
  outputs.push_back(make_view(room, {bytes}, {1}, room.storage_offset()));
  kernel(inputs, outputs, attrs);
  outputs.pop_back();
}

// Elements [begin, begin + length) of a contiguous tensor as a block of
// shape (length / unit, trailing...), unit = numel(trailing).
Tensor block_of(const Tensor& t, int64_t begin, int64_t length, const Shape& trailing) {
  Shape sizes{length / std::max<int64_t>(1, shape_numel(trailing))};
  sizes.insert(sizes.end(), trailing.begin(), trailing.end());
  return make_view(t, sizes, contiguous_strides(sizes), t.storage_offset() + begin);
}

// An input broadcast over the leading dims, without its leading 1s.
Tensor trailing_view(const Tensor& t) {
  size_t lead = 0;
  while (lead < t.sizes().size() && t.sizes()[lead] == 1) ++lead;
  const Shape sizes(t.sizes().begin() + std::ptrdiff_t(lead), t.sizes().end());
  const Shape strides(t.strides().begin() + std::ptrdiff_t(lead), t.strides().end());
  return make_view(t, sizes, strides, t.storage_offset());
}

// Elements [begin, begin + length) of the full-size result as a block of a
// node output: the output itself for a full-size one, the block's rows for
// a per-row output (layer_norm's mean and rstd).
Tensor output_block(const Tensor& t, int64_t n, int64_t begin, int64_t length, const Shape& trailing) {
  if (t.numel() == n) return block_of(t, begin, length, trailing);
  const int64_t per_row = n / t.numel();
  return make_view(t, {length / per_row}, {1}, t.storage_offset() + begin / per_row);
}

// Note [Fused program scratch]: a fused node is a leaf too (Note [Kernel
// scratch]). Its program takes, over a Workspace (Note [Measured kernels]):
// the column sum's partial rows (and its float32 total for a 16-bit
// result), then one slot per thread holding the block buffers of the
// steps whose results stay inside the program, followed by room for the
// scratch of the kernels the slot's steps call, sized by their ScratchFns
// on the first and the last block (the only block shapes there are).
struct ProgramShape {
  int64_t n, block_size, blocks;
};

ProgramShape shape_of(const FusedProgram& program, const TensorList& outputs) {
  const int64_t n = outputs[size_t(program.steps.back().outputs[0])].numel();
  const int64_t unit = shape_numel(program.trailing);
  const int64_t block_size = unit * std::max<int64_t>(1, kFusedBlock / unit);
  return {n, block_size, (n + block_size - 1) / block_size};
}

void run_program(const FusedProgram& program, const TensorList& inputs, TensorList& outputs, Workspace& ws) {
  static const OpDef& sum_op = dispatch::op("sum");
  const auto [n, block_size, blocks] = shape_of(program, outputs);
  const size_t count = program.steps.size();
  TensorList broadcast(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].dim() > 0 && inputs[i].numel() != n) broadcast[i] = trailing_view(inputs[i]);
  // Note [Bias gradients]: one partial row sum per block.
  const bool column_sum = program.column_sum_output >= 0;
  const int64_t columns = column_sum ? program.trailing.back() : 0;
  const bool keepdim = column_sum && program.column_sum_attrs.get_bool("keepdim");
  // Partial sums of a low-precision gradient are kept in float32.
  const DType sum_dtype = column_sum ? outputs[size_t(program.column_sum_output)].dtype() : DType::Float32;
  const DType partial_dtype = sum_dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor partials, total;
  if (column_sum) {
    partials = ws.take({blocks, columns}, partial_dtype);
    const Tensor& result = outputs[size_t(program.column_sum_output)];
    total = sum_dtype == partial_dtype ? result : ws.take(result.sizes(), partial_dtype);
  }
  // A slot's layout: the internal steps' block buffers, then the room.
  std::vector<int64_t> buffer_at(count, -1);
  ScratchLayout slot("fused program");
  for (size_t k = 0; k < count; ++k)
    if (program.steps[k].outputs[0] < 0) {
      buffer_at[k] = slot.next();
      slot.add({block_size}, program.steps[k].dtype);
    }
  const int64_t room_at = slot.next();
  // Runs block `block` with the slot's buffers (their data, or stand-ins
  // while measuring); returns the most scratch a kernel asked for.
  auto run_block = [&](int64_t block, const Tensor& slot_buffer, bool measuring) {
    const int64_t begin = block * block_size, length = std::min(block_size, n - begin);
    const Tensor room = measuring ? Tensor()
                                  : make_view(slot_buffer, {slot_buffer.numel() - room_at}, {1},
                                              slot_buffer.storage_offset() + room_at);
    int64_t most = 0;
    TensorList args, outs, results(count);
    for (size_t k = 0; k < count; ++k) {
      const FusedStep& step = program.steps[k];
      args.clear();
      for (int32_t a : step.args) {
        if (a < 0) args.push_back(results[size_t(~a)]);
        else if (inputs[size_t(a)].dim() == 0) args.push_back(inputs[size_t(a)]);
        else if (broadcast[size_t(a)].defined()) args.push_back(broadcast[size_t(a)]);
        else args.push_back(block_of(inputs[size_t(a)], begin, length, program.trailing));
      }
      outs.clear();
      for (int32_t o : step.outputs) {
        if (o >= 0) {
          outs.push_back(output_block(outputs[size_t(o)], n, begin, length, program.trailing));
        } else {
          const Tensor buffer = measuring ? make_meta({block_size}, step.dtype)
                                          : Tensor(std::make_shared<TensorImpl>(
                                                slot_buffer.storage(), Shape{block_size}, Shape{1},
                                                (slot_buffer.storage_offset() + buffer_at[k]) /
                                                    int64_t(itemsize(step.dtype)),
                                                step.dtype));
          outs.push_back(block_of(buffer, 0, length, program.trailing));
        }
      }
      if (measuring) most = std::max(most, kernel_scratch(*step.op, args, outs, step.attrs));
      else run_cpu_kernel(*step.op, args, outs, step.attrs, room);
      results[k] = outs[0];
    }
    if (column_sum) {
      const Tensor& last = results.back();
      TensorList rows{make_view(last, {length / columns, columns}, {columns, 1}, last.storage_offset())};
      TensorList partial{keepdim ? make_view(partials, {1, columns}, {columns, 1}, partials.storage_offset() +
                                                                                     block * columns)
                                 : make_view(partials, {columns}, {1}, partials.storage_offset() + block * columns)};
      if (measuring) most = std::max(most, kernel_scratch(sum_op, rows, partial, program.column_sum_attrs));
      else run_cpu_kernel(sum_op, rows, partial, program.column_sum_attrs, room);
    }
    return most;
  };
  if (ws.measuring()) {
    int64_t room = run_block(0, Tensor(), true);
    if (blocks > 1) room = std::max(room, run_block(blocks - 1, Tensor(), true));
    ws.take_slots(std::min<int64_t>(get_num_threads(), blocks), {room_at + room}, DType::UInt8);
    if (column_sum) ws.take({kernel_scratch(sum_op, {partials}, {total}, program.column_sum_attrs)}, DType::UInt8);
    return;
  }
  const int64_t room = std::max(run_block(0, Tensor(), true), blocks > 1 ? run_block(blocks - 1, Tensor(), true) : 0);
  const std::vector<Tensor> slots =
      ws.take_slots(std::min<int64_t>(get_num_threads(), blocks), {room_at + room}, DType::UInt8);
  cpu::for_each_slot(blocks, int64_t(slots.size()),
                     [&](int64_t slot_index, int64_t block) { run_block(block, slots[size_t(slot_index)], false); });
  if (column_sum) {
    Tensor& result = outputs[size_t(program.column_sum_output)];
    TensorList sums{total};
    const Tensor room_for_sum =
        ws.take({kernel_scratch(sum_op, {partials}, sums, program.column_sum_attrs)}, DType::UInt8);
    run_cpu_kernel(sum_op, {partials}, sums, program.column_sum_attrs, room_for_sum);
    if (sum_dtype != partial_dtype) cpu::copy_cast(result, total);
  }
}

// softmax over the last dim: rows are whole in every block, so it can end a
// group (Note [Elementwise fusion]).
bool is_row_softmax(const Node& n, const std::vector<Value>& values) {
  static const OpDef& softmax = dispatch::op("softmax");
  if (n.op != &softmax || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const int64_t dim = n.attrs.get_int("dim"), ndim = int64_t(values[size_t(n.outputs[0])].sizes.size());
  return ndim > 0 && (dim == -1 || dim == ndim - 1);
}

}  // namespace

int64_t trailing_dims(const Value& v, const Shape& out) {
  if (v.sizes.empty() || (v.sizes == out && v.strides == contiguous_strides(v.sizes))) return 0;
  size_t lead = 0;
  while (lead < v.sizes.size() && v.sizes[lead] == 1) ++lead;
  const Shape tail(v.sizes.begin() + std::ptrdiff_t(lead), v.sizes.end());
  const Shape tail_strides(v.strides.begin() + std::ptrdiff_t(lead), v.strides.end());
  if (tail.empty() || tail.size() >= out.size() || tail_strides != contiguous_strides(tail)) return -1;
  if (!std::equal(tail.begin(), tail.end(), out.end() - std::ptrdiff_t(tail.size()))) return -1;
  return int64_t(tail.size());
}

bool is_whole_buffer(const Value& v, ValueId id) {
  return v.root == id && v.offset == 0 && v.strides == contiguous_strides(v.sizes);
}

namespace {

// A fused node's work over a Workspace: with product_first, the product
// (its scratch first), then the program.
void run_fused(const FusedProgram& program, const TensorList& inputs, TensorList& outputs, Workspace& ws) {
  if (!program.product_first) return run_program(program, inputs, outputs, ws);
  // Output 0 is the product (n, m) or, when only the epilogue's result is
  // kept, that result in its own shape: addmm's kernel sees it as (n, m).
  static const OpDef& addmm = dispatch::op("addmm");
  static const Attrs unit_scales{{"beta", Scalar(1)}, {"alpha", Scalar(1)}};
  const Shape shape{inputs[1].size(0), inputs[2].size(1)};
  TensorList product{make_view(outputs[0], shape, contiguous_strides(shape), outputs[0].storage_offset())};
  const TensorList operands{inputs[0], inputs[1], inputs[2]};
  {
    const Workspace::Turn turn(ws);
    const Tensor room = ws.take({kernel_scratch(addmm, operands, product, unit_scales)}, DType::UInt8);
    if (!ws.measuring()) run_cpu_kernel(addmm, operands, product, unit_scales, room);
  }
  TensorList program_inputs{outputs[0]};
  program_inputs.insert(program_inputs.end(), inputs.begin() + 3, inputs.end());
  if (!ws.measuring()) return run_program(program, program_inputs, outputs, ws);
  // Measuring: the product's pieces and the program's are not live at once.
  ScratchLayout pieces("fused program");
  Workspace own(pieces);
  run_program(program, program_inputs, outputs, own);
  ws.take({pieces.bytes()}, DType::UInt8);
}

}  // namespace

KernelFn fused_kernel(std::shared_ptr<const FusedProgram> program) {
  return [program](const TensorList& inputs, TensorList& outputs, const Attrs&) {
    Scratch taken(outputs);
    Workspace ws(taken);
    run_fused(*program, inputs, outputs, ws);
  };
}

ScratchFn fused_scratch(std::shared_ptr<const FusedProgram> program) {
  return [program](const TensorList& inputs, const std::vector<TensorMeta>& metas, const Attrs&) {
    ScratchLayout layout("fused program");
    Workspace ws(layout);
    TensorList outputs;
    for (const TensorMeta& m : metas) outputs.push_back(make_meta(m.sizes, m.dtype, m.device));
    run_fused(*program, inputs, outputs, ws);
    return layout.bytes();
  };
}

int fuse_elementwise(Graph& graph) {
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  const std::vector<int32_t> uses = graph.use_counts();
  std::vector<int32_t> aliases(values.size(), 0);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].root != ValueId(i)) ++aliases[size_t(values[i].root)];
  std::vector<bool> is_output(values.size(), false);
  for (ValueId id : graph.outputs()) is_output[size_t(id)] = true;

  std::vector<bool> fusible(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.fused || n.inplace || n.is_view() || n.random_counters || n.outputs.size() != 1 || !is_elementwise(*n.op))
      continue;
    const Value& out = values[size_t(n.outputs[0])];
    bool ok = out.device.is_cpu() && is_whole_buffer(out, n.outputs[0]) && shape_numel(out.sizes) >= kMinFusedElements;
    for (ValueId in : n.inputs) {
      if (!ok) break;
      if (in == kNoValue) {
        ok = false;
        break;
      }
      ok = trailing_dims(values[size_t(in)], out.sizes) >= 0;
    }
    fusible[i] = ok;
  }
  // A softmax over the last dim may end a group, never continue one.
  std::vector<bool> row_root(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.fused || n.inplace || !is_row_softmax(n, values)) continue;
    const Value& out = values[size_t(n.outputs[0])];
    row_root[i] = out.device.is_cpu() && is_whole_buffer(out, n.outputs[0]) &&
                  shape_numel(out.sizes) >= kMinFusedElements;
  }
  // Groups grow backwards from their last member through single-use inputs.
  std::vector<int32_t> group(nodes.size(), -1);
  for (size_t i = nodes.size(); i-- > 0;) {
    if (!fusible[i] && !row_root[i]) continue;
    if (group[i] < 0) group[i] = int32_t(i);
    const Shape& shape = values[size_t(nodes[i].outputs[0])].sizes;
    for (ValueId in : nodes[i].inputs) {
      const int32_t p = values[size_t(in)].producer;
      if (p < 0 || !fusible[size_t(p)] || group[size_t(p)] >= 0 || uses[size_t(in)] != 1 ||
          is_output[size_t(in)] || aliases[size_t(in)] != 0 || values[size_t(in)].sizes != shape)
        continue;
      group[size_t(p)] = group[i];
    }
  }
  std::unordered_map<int32_t, std::vector<size_t>> members;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (group[i] >= 0) members[group[i]].push_back(i);

  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (auto& [root, list] : members) {
    if (list.size() < 2) continue;
    std::sort(list.begin(), list.end());
    std::unordered_map<ValueId, int32_t> step_of;  // member output -> step index
    for (size_t k = 0; k < list.size(); ++k) step_of[nodes[list[k]].outputs[0]] = int32_t(k);
    // External inputs, and whether an in-place node before the last member
    // writes one of them after the member reading it.
    std::vector<ValueId> externals;
    bool hazard = false;
    for (size_t k = 0; k < list.size() && !hazard; ++k)
      for (ValueId in : nodes[list[k]].inputs) {
        if (step_of.contains(in)) continue;
        if (std::find(externals.begin(), externals.end(), in) == externals.end()) externals.push_back(in);
        for (size_t j = list[k] + 1; j < size_t(root) && !hazard; ++j)
          hazard = in != kNoValue && graph.writes_buffer(nodes[j], values[size_t(in)].root);
      }
    if (hazard) continue;
    auto program = std::make_shared<FusedProgram>();
    const Shape& shape = values[size_t(nodes[size_t(root)].outputs[0])].sizes;
    int64_t trailing = row_root[size_t(root)] ? 1 : 0;
    for (ValueId in : externals) trailing = std::max(trailing, trailing_dims(values[size_t(in)], shape));
    program->trailing.assign(shape.end() - trailing, shape.end());
    std::ostringstream text;
    for (size_t k = 0; k < list.size(); ++k) {
      const Node& m = nodes[list[k]];
      FusedStep step{.op = m.op, .attrs = m.attrs, .dtype = values[size_t(m.outputs[0])].dtype};
      if (row_root[list[k]]) step.attrs.set("dim", int64_t(-1));  // blocks have their own rank
      if (k + 1 == list.size()) step.outputs = {0};
      text << (k ? "; " : "") << "s" << k << " = " << m.op->name << "(";
      for (size_t a = 0; a < m.inputs.size(); ++a) {
        auto member = step_of.find(m.inputs[a]);
        const auto external = std::find(externals.begin(), externals.end(), m.inputs[a]);
        const int32_t arg = member != step_of.end() && member->second < int32_t(k)
                                ? ~member->second
                                : int32_t(external - externals.begin());
        step.args.push_back(arg);
        text << (a ? ", " : "") << (arg < 0 ? "s" + std::to_string(~arg) : "in" + std::to_string(arg));
      }
      if (!step.attrs.items().empty()) text << "; " << step.attrs.str();
      text << ")";
      program->steps.push_back(std::move(step));
    }
    Node fused{.op = &fused_elementwise_op(), .attrs = {{"program", text.str()}}, .inputs = externals,
               .outputs = nodes[size_t(root)].outputs, .fused = program};
    fused.pipeline = nodes[size_t(root)].pipeline;
    nodes[size_t(root)] = std::move(fused);
    for (size_t k = 0; k + 1 < list.size(); ++k) removed[list[k]] = true;
    count += int(list.size());
  }
  if (count) graph.remove_nodes(removed);
  return count;
}

}  // namespace mf::graph
