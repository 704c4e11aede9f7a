// The graph IR: building, rewriting helpers and the printer.
#include "meshflow/graph/ir.h"

#include <algorithm>
#include <iterator>
#include <sstream>

#include "meshflow/dispatch.h"

namespace mf::graph {

int64_t Value::nbytes() const {
  // An owner's buffer spans its largest reachable element.
  int64_t last = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return (last + 1) * int64_t(itemsize(dtype));
}

ValueId Graph::add_value(Value v) {
  const auto id = ValueId(values_.size());
  if (v.root == kNoValue) v.root = id;
  values_.push_back(std::move(v));
  return id;
}

std::string GlobalLayout::str() const {
  return "global " + nd_sbp_str(sbp) + " of " + shape_str(shape) + " on " + placement.str();
}

ValueId Graph::add_input(const TensorMeta& meta, std::string name, std::optional<GlobalLayout> global) {
  Value v{.kind = ValueKind::Input, .sizes = meta.sizes, .strides = contiguous_strides(meta.sizes),
          .dtype = meta.dtype, .device = meta.device, .input_index = int32_t(inputs_.size()),
          .name = std::move(name), .global = std::move(global)};
  const ValueId id = add_value(std::move(v));
  inputs_.push_back(id);
  return id;
}

namespace {
Value value_of(ValueKind kind, const Tensor& t, std::string name) {
  return Value{.kind = kind, .sizes = t.sizes(), .strides = t.strides(), .offset = t.storage_offset(),
               .dtype = t.dtype(), .device = t.device(), .tensor = t, .name = std::move(name)};
}
}  // namespace

ValueId Graph::add_variable(const Tensor& tensor, std::string name) {
  return add_value(value_of(ValueKind::Variable, tensor, std::move(name)));
}

ValueId Graph::add_constant(const Tensor& tensor) { return add_value(value_of(ValueKind::Constant, tensor, {})); }

bool Graph::writes_buffer(const Node& n, ValueId root) const {
  if (!n.writes_inputs()) return false;
  for (size_t k = 0; k < n.inputs.size(); ++k)
    if (n.writes_input(k) && n.inputs[k] != kNoValue && value(n.inputs[k]).root == root) return true;
  return false;
}

Tensor Graph::meta_tensor(ValueId id) const {
  const Value& v = value(id);
  const Value& owner = value(v.root);
  auto storage = std::make_shared<StorageImpl>(size_t(owner.nbytes()), v.device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), v.sizes, v.strides, v.offset, v.dtype));
}

void Graph::set_outputs(std::vector<ValueId> outputs, std::vector<std::optional<GlobalLayout>> layouts) {
  MF_CHECK(layouts.empty() || layouts.size() == outputs.size(), ValueError, "graph: ", outputs.size(),
           " outputs but ", layouts.size(), " output layouts");
  if (layouts.empty()) layouts.resize(outputs.size());
  outputs_ = std::move(outputs);
  output_layouts_ = std::move(layouts);
}

int32_t Graph::append_node(Node node, const std::vector<Value>& outputs) {
  const auto index = int32_t(nodes_.size());
  node.outputs.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value v = outputs[i];
    v.kind = ValueKind::Intermediate;
    v.tensor = Tensor();
    v.name.clear();
    v.global.reset();
    v.input_index = -1;
    v.producer = index;
    v.output_index = int32_t(i);
    if (node.inplace && i == 0) v.root = value(node.inputs.at(0)).root;
    else if (node.is_view()) v.root = value(node.inputs.at(0)).root;
    else v.root = kNoValue;
    node.outputs.push_back(add_value(std::move(v)));
  }
  nodes_.push_back(std::move(node));
  return index;
}

std::vector<ValueId> Graph::add_node(const OpDef& op, std::vector<ValueId> inputs, Attrs attrs) {
  TensorList metas;
  for (ValueId id : inputs) metas.push_back(id == kNoValue ? Tensor() : meta_tensor(id));
  std::vector<Value> outs;
  if (op.view) {
    for (const Tensor& t : op.view(metas, attrs))
      outs.push_back(Value{.sizes = t.sizes(), .strides = t.strides(), .offset = t.storage_offset(),
                           .dtype = t.dtype(), .device = t.device()});
  } else {
    for (const TensorMeta& m : dispatch::infer(op, metas, attrs))
      outs.push_back(Value{.sizes = m.sizes, .strides = contiguous_strides(m.sizes), .dtype = m.dtype,
                           .device = m.device});
  }
  const int32_t index = append_node(Node{.op = &op, .attrs = std::move(attrs), .inputs = std::move(inputs)}, outs);
  return nodes_[size_t(index)].outputs;
}

ValueId Graph::add_inplace_node(const OpDef& op, std::vector<ValueId> inputs, Attrs attrs) {
  MF_CHECK(op.inplace, Error, "graph: ", op.name, " has no in-place form");
  const Value& self = value(inputs.at(0));
  Value out{.sizes = self.sizes, .strides = self.strides, .offset = self.offset, .dtype = self.dtype,
            .device = self.device};
  const int32_t index =
      append_node(Node{.op = &op, .attrs = std::move(attrs), .inputs = std::move(inputs), .inplace = true}, {out});
  return nodes_[size_t(index)].outputs[0];
}

void Graph::replace_uses(ValueId from, ValueId to) {
  // What lived in from's buffer (its views, in-place writes of it) now
  // lives in to's: the memory plan keeps that buffer alive for their reads.
  if (values_.at(size_t(from)).root == from)
    for (Value& v : values_)
      if (v.root == from) v.root = values_.at(size_t(to)).root;
  for (Node& n : nodes_)
    for (ValueId& v : n.inputs)
      if (v == from) v = to;
  for (ValueId& v : outputs_)
    if (v == from) v = to;
}

void Graph::remove_nodes(const std::vector<bool>& removed) {
  std::vector<Node> kept;
  kept.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(nodes_[i]));
  nodes_ = std::move(kept);
  for (Value& v : values_) v.producer = -1;
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (ValueId out : nodes_[i].outputs) values_[size_t(out)].producer = int32_t(i);
}

void Graph::reorder(const std::vector<int32_t>& order) {
  MF_CHECK(order.size() == nodes_.size(), Error, "internal: Graph::reorder got ", order.size(), " indices for ",
           nodes_.size(), " nodes");
  std::vector<Node> sorted;
  sorted.reserve(nodes_.size());
  for (int32_t i : order) sorted.push_back(std::move(nodes_.at(size_t(i))));
  nodes_ = std::move(sorted);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (ValueId out : nodes_[i].outputs) values_[size_t(out)].producer = int32_t(i);
}

std::vector<int32_t> Graph::use_counts() const {
  std::vector<int32_t> uses(values_.size(), 0);
  for (const Node& n : nodes_)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++uses[size_t(v)];
  for (ValueId v : outputs_) ++uses[size_t(v)];
  return uses;
}

BufferUses::BufferUses(const Graph& graph)
    : users(graph.values().size()),
      writers(graph.values().size()),
      last_use(graph.values().size(), -1),
      outputs(graph.values().size(), 0) {
  const auto& nodes = graph.nodes();
  auto root_of = [&](ValueId id) { return size_t(graph.value(id).root); };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] == kNoValue) continue;
      const size_t root = root_of(n.inputs[k]);
      last_use[root] = int64_t(i);
      if (!n.is_view() && (users[root].empty() || users[root].back() != int32_t(i))) users[root].push_back(int32_t(i));
      if (n.writes_input(k) && (writers[root].empty() || writers[root].back() != int32_t(i)))
        writers[root].push_back(int32_t(i));
    }
    for (ValueId out : n.outputs) last_use[root_of(out)] = int64_t(i);
  }
  for (ValueId out : graph.outputs()) {
    last_use[root_of(out)] = int64_t(nodes.size());
    ++outputs[root_of(out)];
  }
}

void BufferUses::merge(ValueId into, ValueId from) {
  const auto a = size_t(into), b = size_t(from);
  last_use[a] = std::max(last_use[a], last_use[b]);
  outputs[a] += outputs[b];
  for (auto* lists : {&users, &writers}) {
    auto& dst = (*lists)[a];
    const auto& src = (*lists)[b];
    std::vector<int32_t> merged;
    std::set_union(dst.begin(), dst.end(), src.begin(), src.end(), std::back_inserter(merged));
    dst = std::move(merged);
  }
}

std::string value_name(const Graph& graph, ValueId id) {
  if (id == kNoValue) return "None";
  const Value& v = graph.value(id);
  return v.name.empty() ? "%" + std::to_string(id) : "%" + v.name;
}

namespace {
std::string type_str(const Value& v) {
  std::ostringstream os;
  os << dtype_name(v.dtype) << shape_str(v.sizes);
  if (v.strides != contiguous_strides(v.sizes) || v.offset != 0) os << " strides" << shape_str(v.strides);
  return os.str();
}
}  // namespace

std::string Graph::str() const {
  std::ostringstream os;
  os << "graph(";
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Value& v = value(inputs_[i]);
    os << (i ? ", " : "") << value_name(*this, inputs_[i]) << ": " << type_str(v);
    if (v.global) os << " " << v.global->str();
  }
  os << ") {\n";
  for (size_t i = 0; i < values_.size(); ++i) {
    const Value& v = values_[i];
    if (v.kind != ValueKind::Variable && v.kind != ValueKind::Constant) continue;
    os << "  " << value_name(*this, ValueId(i)) << ": " << type_str(v)
       << (v.kind == ValueKind::Variable ? " variable" : " constant") << "\n";
  }
  for (const Node& n : nodes_) {
    os << "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << value_name(*this, n.outputs[i]);
    os << " = " << n.op->name << (n.inplace ? "_(" : "(");
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << value_name(*this, n.inputs[i]);
    if (!n.attrs.items().empty()) os << "; " << n.attrs.str();
    os << ")  # ";
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const Value& v = value(n.outputs[i]);
      os << (i ? ", " : "") << type_str(v);
      if (v.global) os << " of global " << nd_sbp_str(v.global->sbp) << " " << shape_str(v.global->shape);
    }
    if (n.is_view()) os << " view";
    if (n.overwrites >= 0) os << " over " << value_name(*this, n.inputs[size_t(n.overwrites)]);
    if (n.recomputed) os << " recomputed";
    os << "\n";
  }
  os << "  return ";
  for (size_t i = 0; i < outputs_.size(); ++i) {
    os << (i ? ", " : "") << value_name(*this, outputs_[i]);
    if (output_layouts_[i]) os << " (" << output_layouts_[i]->str() << ")";
  }
  os << "\n}";
  return os.str();
}

}  // namespace mf::graph
