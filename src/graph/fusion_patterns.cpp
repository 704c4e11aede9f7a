// Fusions around matrix products and norms: Note [Linear epilogues],
// Note [Bias gradients] and Note [Residual layer norm] in fusion.h. Each
// pass turns a small pattern into a node running a FusedProgram.
#include <algorithm>
#include <sstream>

#include "meshflow/dispatch.h"
#include "meshflow/graph/fusion.h"
#include "meshflow/graph/passes.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/gemm.h"

namespace mf::graph {
namespace {

// Whether value id is the buffer of `root`, whole and in order (root itself
// or a reshaping view of it).
bool covers_whole(const std::vector<Value>& values, ValueId id, ValueId root) {
  const Value& v = values[size_t(id)];
  return v.root == root && v.offset == 0 && v.strides == contiguous_strides(v.sizes) &&
         shape_numel(v.sizes) == shape_numel(values[size_t(root)].sizes);
}

// Whether a node strictly between first and last writes the buffer of
// `root` in place.
bool written_between(const Graph& graph, ValueId root, size_t first, size_t last) {
  for (size_t k = first + 1; k < last; ++k) {
    const Node& n = graph.nodes()[k];
    if (graph.writes_buffer(n, root)) return true;
  }
  return false;
}

// "s1 = gelu(s0; approximate=none)" for the program's text attribute.
std::string step_text(const FusedStep& step, size_t index) {
  std::ostringstream os;
  os << "s" << index << " = " << step.op->name << "(";
  for (size_t a = 0; a < step.args.size(); ++a)
    os << (a ? ", " : "") << (step.args[a] < 0 ? "s" + std::to_string(~step.args[a]) : "in" + std::to_string(step.args[a]));
  if (!step.attrs.items().empty()) os << "; " << step.attrs.str();
  os << ")";
  return os.str();
}

std::string program_text(const FusedProgram& program) {
  std::ostringstream os;
  if (program.product_first) os << "in0 = addmm(bias, a, b); ";
  for (size_t k = 0; k < program.steps.size(); ++k) os << (k ? "; " : "") << step_text(program.steps[k], k);
  return os.str();
}

// sgd_update without momentum, its gradient the product a @ b:
//   p = p - lr * (g + weight_decay * p) = (1 - lr * weight_decay) p - lr g
// (+ lr g when maximizing), one GEMM with beta = 1 - lr * weight_decay.
void matmul_sgd_update_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  const double lr = attrs.get_float("lr");
  const Shape shape{in[1].size(0), in[2].size(1)};
  Tensor param = make_view(out[0], shape, contiguous_strides(shape), out[0].storage_offset());
  cpu::matmul(in[1], in[2], param, Scalar(attrs.get_bool("maximize") ? lr : -lr),
              Scalar(1.0 - lr * attrs.get_float("weight_decay")), ws);
}

// Removes the nodes a pattern pass replaced, then the views that only they
// read (a rewritten node reads its inputs without them); returns count.
int remove_rewritten(Graph& graph, const std::vector<bool>& removed, int count) {
  if (count) {
    graph.remove_nodes(removed);
    eliminate_dead_code(graph);
  }
  return count;
}

}  // namespace

const OpDef& matmul_sgd_update_op() {
  static const OpDef op = [] {
    OpDef def = graph_only_op("matmul_sgd_update", {"param", "a", "b"});
    def.kernels[size_t(DeviceType::CPU)] = cpu::run_measured<matmul_sgd_update_kernel>;
    def.scratch[size_t(DeviceType::CPU)] = cpu::measure<matmul_sgd_update_kernel>;
    return def;
  }();
  return op;
}

int fuse_updates_into_gemms(Graph& graph) {
  static const OpDef& sgd_update = dispatch::op("sgd_update");
  static const OpDef& matmul = dispatch::op("matmul");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  const BufferUses readers(graph);
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t u = 0; u < nodes.size(); ++u) {
    const Node& update = nodes[u];
    // Without momentum, and unconditional (a grad scaler's found_inf input
    // would have to skip the product's write too).
    if (update.op != &sgd_update || !update.inplace || update.inputs[2] != kNoValue ||
        (update.inputs.size() > 3 && update.inputs[3] != kNoValue))
      continue;
    const ValueId param = update.inputs[0], grad = update.inputs[1];
    const Value& p = values[size_t(param)];
    const Value& g = values[size_t(grad)];
    const ValueId product = g.root;
    const Value& mv = values[size_t(product)];
    if (mv.producer < 0 || !p.device.is_cpu() || mv.sizes.size() != 2 || !is_whole_buffer(mv, product) ||
        mv.dtype != p.dtype || readers.outputs[size_t(product)] > 0 || readers.users[size_t(product)].size() != 1 ||
        g.sizes != p.sizes || g.strides != p.strides || g.offset != p.offset || p.strides != contiguous_strides(p.sizes))
      continue;
    const auto m = size_t(mv.producer);
    const Node& mm = nodes[m];
    if (mm.op != &matmul || mm.fused || mm.inplace || removed[m] || mm.outputs.size() != 1) continue;
    // The parameter keeps its old value until the update: nothing between
    // the product and the update may read or write it, and the product
    // must not read it.
    bool ok = true;
    for (int32_t r : readers.users[size_t(p.root)]) ok = ok && (r <= int32_t(m) || r >= int32_t(u));
    for (ValueId in : mm.inputs) ok = ok && values[size_t(in)].root != p.root;
    if (!ok) continue;
    Node fused{.op = &matmul_sgd_update_op(), .attrs = update.attrs, .inputs = {param, mm.inputs[0], mm.inputs[1]},
               .outputs = update.outputs, .inplace = true, .lr_group = update.lr_group};
    fused.pipeline = nodes[m].pipeline;
    nodes[m] = std::move(fused);
    removed[u] = true;
    ++count;
  }
  return remove_rewritten(graph, removed, count);
}

int fuse_linear_activations(Graph& graph) {
  static const OpDef& addmm = dispatch::op("addmm");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  const BufferUses readers(graph);
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& mm = nodes[i];
    if (mm.op != &addmm || mm.fused || mm.inplace || removed[i]) continue;
    const ValueId product = mm.outputs[0];
    const Value& p = values[size_t(product)];
    if (!p.device.is_cpu() || p.sizes.size() != 2 || !is_whole_buffer(p, product) ||
        mm.attrs.get_scalar("beta").to_double() != 1.0 || mm.attrs.get_scalar("alpha").to_double() != 1.0)
      continue;
    const Value& bias = values[size_t(mm.inputs[0])];
    if (bias.dtype != p.dtype || shape_numel(bias.sizes) != p.sizes[1] || trailing_dims(bias, p.sizes) != 1) continue;
    // The first reader must be a unary elementwise op (an activation, a
    // scale, ...) of the whole product (a later one is a recomputation,
    // Note [Recomputation], which must stay late).
    const auto& list = readers.users[size_t(product)];
    if (list.empty()) continue;
    const auto act = size_t(list[0]);
    const Node& a = nodes[act];
    if (a.fused || a.inplace || a.random_counters || a.outputs.size() != 1 || a.inputs.size() != 1 ||
        !is_elementwise(*a.op) || !covers_whole(values, a.inputs[0], product) ||
        values[size_t(a.outputs[0])].dtype != p.dtype || !is_whole_buffer(values[size_t(a.outputs[0])], a.outputs[0]))
      continue;
    bool written = false;
    for (int32_t r : list) {
      const Node& n = nodes[size_t(r)];
      written = written || graph.writes_buffer(n, product);
    }
    if (written) continue;
    const bool keep_product = list.size() > 1 || readers.outputs[size_t(product)] > 0;
    auto program = std::make_shared<FusedProgram>();
    program->product_first = true;
    program->trailing = {p.sizes[1]};
    program->steps.push_back(
        {.op = a.op, .attrs = a.attrs, .args = {0}, .outputs = {keep_product ? 1 : 0}, .dtype = p.dtype});
    std::vector<ValueId> outputs{a.outputs[0]};
    if (keep_product) outputs.insert(outputs.begin(), product);
    Node fused{.op = &fused_linear_op(), .attrs = {{"program", program_text(*program)}}, .inputs = mm.inputs,
               .outputs = std::move(outputs), .fused = std::move(program)};
    fused.pipeline = nodes[i].pipeline;
    nodes[i] = std::move(fused);
    removed[act] = true;
    count += 2;
  }
  return remove_rewritten(graph, removed, count);
}

int fuse_gelu_with_backward(Graph& graph) {
  static const OpDef& gelu = dispatch::op("gelu");
  static const OpDef& gelu_backward = dispatch::op("gelu_backward");
  static const OpDef& both = dispatch::op("gelu_with_backward");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t b = 0; b < nodes.size(); ++b) {
    const Node& back = nodes[b];
    if (back.op != &gelu_backward || back.inplace || back.fused) continue;
    const ValueId grad = back.inputs[0], x = back.inputs[1];
    const ValueId grad_root = values[size_t(grad)].root, x_root = values[size_t(x)].root;
    const Value& out = values[size_t(back.outputs[0])];
    if (!out.device.is_cpu() || !is_whole_buffer(out, back.outputs[0]) || !covers_whole(values, grad, grad_root) ||
        !covers_whole(values, x, x_root) || values[size_t(grad_root)].dtype != out.dtype ||
        values[size_t(x_root)].dtype != out.dtype)
      continue;
    // The gradient's buffer as written by its producer (before the GELU
    // below), unchanged until the gradient is read.
    const int32_t grad_made = values[size_t(grad_root)].producer;
    if (written_between(graph, grad_root, size_t(std::max(grad_made, 0)), b)) continue;
    // The last GELU of the same input after the gradient exists: a
    // recomputation (Note [Recomputation]).
    for (size_t a = b; a-- > 0 && int32_t(a) > grad_made;) {
      const Node& forward = nodes[a];
      if (forward.op != &gelu || forward.inplace || forward.fused || removed[a] ||
          forward.attrs.get_string("approximate") != back.attrs.get_string("approximate"))
        continue;
      const Value& y = values[size_t(forward.outputs[0])];
      if (!covers_whole(values, forward.inputs[0], x_root) || !is_whole_buffer(y, forward.outputs[0]) ||
          y.dtype != out.dtype)
        continue;
      if (written_between(graph, x_root, a, b)) break;
      auto program = std::make_shared<FusedProgram>();
      program->steps.push_back(
          {.op = &both, .attrs = back.attrs, .args = {0, 1}, .outputs = {0, 1}, .dtype = out.dtype});
      Node fused{.op = &fused_elementwise_op(), .attrs = {{"program", program_text(*program)}},
                 .inputs = {grad_root, forward.inputs[0]}, .outputs = {back.outputs[0], forward.outputs[0]},
                 .fused = std::move(program)};
      fused.pipeline = nodes[a].pipeline;
      nodes[a] = std::move(fused);
      removed[b] = true;
      ++count;
      break;
    }
  }
  return remove_rewritten(graph, removed, count);
}

int fuse_bias_gradients(Graph& graph) {
  static const OpDef& sum = dispatch::op("sum");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t j = 0; j < nodes.size(); ++j) {
    const Node& s = nodes[j];
    if (s.op != &sum || s.inplace || s.outputs.size() != 1) continue;
    const Value& in = values[size_t(s.inputs[0])];
    const Shape dims = s.attrs.get_shape("dims");
    if (in.sizes.size() != 2 || dims.size() != 1 || (dims[0] != 0 && dims[0] != -2)) continue;
    const ValueId root = in.root;
    const Value& r = values[size_t(root)];
    if (r.producer < 0 || !r.device.is_cpu() || !is_whole_buffer(r, root) || !covers_whole(values, s.inputs[0], root) ||
        in.sizes[1] != r.sizes.back())
      continue;
    const auto g = size_t(r.producer);
    const Node& producer = nodes[g];
    if (producer.inplace || producer.random_counters || producer.outputs[0] != root ||
        written_between(graph, root, g, j))
      continue;
    auto program = std::make_shared<FusedProgram>();
    if (producer.op == &fused_elementwise_op() && producer.fused && producer.fused->column_sum_output < 0 &&
        producer.fused->steps.back().outputs[0] == 0) {
      *program = *producer.fused;
    } else if (!producer.fused && is_elementwise(*producer.op) && producer.outputs.size() == 1) {
      int64_t trailing = 0;
      FusedStep step{.op = producer.op, .attrs = producer.attrs, .outputs = {0}, .dtype = r.dtype};
      // Every input must be the output's layout or broadcast over leading
      // dims (trailing_dims -1: any other layout, such as an expanded scalar).
      for (size_t a = 0; a < producer.inputs.size() && trailing >= 0; ++a) {
        const ValueId input = producer.inputs[a];
        const int64_t t = input == kNoValue ? -1 : trailing_dims(values[size_t(input)], r.sizes);
        trailing = t < 0 ? -1 : std::max(trailing, t);
        step.args.push_back(int32_t(a));
      }
      if (trailing < 0) continue;
      program->trailing.assign(r.sizes.end() - trailing, r.sizes.end());
      program->steps.push_back(std::move(step));
    } else {
      continue;
    }
    if (program->trailing.empty()) program->trailing = {r.sizes.back()};
    program->column_sum_output = int32_t(producer.outputs.size());
    program->column_sum_attrs = s.attrs;
    std::vector<ValueId> outputs = producer.outputs;
    outputs.push_back(s.outputs[0]);
    Node fused{.op = &fused_elementwise_op(),
               .attrs = {{"program", program_text(*program) + "; column sum"}},
               .inputs = producer.inputs,
               .outputs = std::move(outputs),
               .fused = std::move(program)};
    fused.pipeline = nodes[g].pipeline;
    nodes[g] = std::move(fused);
    removed[j] = true;
    ++count;
  }
  return remove_rewritten(graph, removed, count);
}

int fuse_add_layer_norms(Graph& graph) {
  static const OpDef& add = dispatch::op("add");
  static const OpDef& layer_norm = dispatch::op("layer_norm");
  auto& nodes = graph.nodes();
  const auto& values = graph.values();
  const BufferUses readers(graph);
  std::vector<bool> removed(nodes.size(), false);
  int count = 0;
  for (size_t j = 0; j < nodes.size(); ++j) {
    const Node& ln = nodes[j];
    if (ln.op != &layer_norm || ln.inplace || ln.fused || ln.attrs.get_int("normalized_ndim") != 1) continue;
    const ValueId x = ln.inputs[0], weight = ln.inputs[1], bias = ln.inputs[2];
    const Value& xv = values[size_t(x)];
    if (weight == kNoValue || bias == kNoValue || xv.producer < 0 || !xv.device.is_cpu() || !is_whole_buffer(xv, x))
      continue;
    const auto i = size_t(xv.producer);
    const Node& sum = nodes[i];
    const auto& list = readers.users[size_t(x)];
    // The layer norm must be the first reader: a later one is a
    // recomputation (Note [Recomputation]) that must stay late.
    if (sum.op != &add || sum.inplace || sum.fused || removed[i] || list.empty() || list[0] != int32_t(j)) continue;
    int64_t trailing = 1;
    for (ValueId in : sum.inputs) trailing = std::max(trailing, trailing_dims(values[size_t(in)], xv.sizes));
    bool ok = trailing > 0;
    for (ValueId in : sum.inputs)
      ok = ok && trailing_dims(values[size_t(in)], xv.sizes) >= 0 && values[size_t(in)].dtype == xv.dtype;
    // weight and bias must exist where the add runs, unchanged until the norm.
    for (ValueId p : {weight, bias}) {
      const Value& pv = values[size_t(p)];
      ok = ok && trailing_dims(pv, xv.sizes) == 1 && pv.producer < int32_t(i) &&
           !written_between(graph, pv.root, i, j);
    }
    if (!ok || written_between(graph, x, i, j)) continue;
    const bool keep_sum = list.size() > 1 || readers.outputs[size_t(x)] > 0;
    const int32_t first_out = keep_sum ? 1 : 0;
    auto program = std::make_shared<FusedProgram>();
    program->trailing.assign(xv.sizes.end() - trailing, xv.sizes.end());
    program->steps.push_back(
        {.op = &add, .attrs = sum.attrs, .args = {0, 1}, .outputs = {keep_sum ? 0 : -1}, .dtype = xv.dtype});
    program->steps.push_back({.op = &layer_norm,
                              .attrs = ln.attrs,
                              .args = {~0, 2, 3},
                              .outputs = {first_out, first_out + 1, first_out + 2},
                              .dtype = xv.dtype});
    std::vector<ValueId> outputs = ln.outputs;
    if (keep_sum) outputs.insert(outputs.begin(), x);
    Node fused{.op = &fused_add_layer_norm_op(), .attrs = {{"program", program_text(*program)}},
               .inputs = {sum.inputs[0], sum.inputs[1], weight, bias}, .outputs = std::move(outputs),
               .fused = std::move(program)};
    fused.pipeline = nodes[i].pipeline;
    nodes[i] = std::move(fused);
    removed[j] = true;
    count += 2;
  }
  if (count) graph.remove_nodes(removed);
  return count;
}

}  // namespace mf::graph
