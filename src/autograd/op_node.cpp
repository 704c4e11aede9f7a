#include "autograd/op_node.h"

#include <cctype>

#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"

namespace mf {

// PyTorch's node names: the op in CamelCase, "Backward0" ("cross_entropy"
// -> "CrossEntropyBackward0").
std::string OpNode::name() const {
  std::string n;
  bool upper = true;
  for (char c : op_->name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    n += upper ? char(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return n + "Backward0";
}

void OpNode::record_inputs(const TensorList& inputs, const Tensor& saved_self_override) {
  record_input_edges(inputs, input_metas_);
  saved_inputs_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    if (i < 32 && (op_->save_inputs & (1u << i))) {
      const Tensor& saved = (i == 0 && saved_self_override.defined()) ? saved_self_override : t;
      saved_inputs_[i] = SavedTensor(saved, false);
    }
  }
}

void OpNode::record_outputs(const TensorList& outputs) {
  auto self = shared_from_this();
  output_metas_.resize(outputs.size());
  saved_outputs_.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    output_metas_[i] = TensorMeta{t.sizes(), t.dtype(), t.device()};
    if (is_floating(t.dtype())) set_history(t, self, uint32_t(i));
    if (i < 32 && (op_->save_outputs & (1u << i))) saved_outputs_[i] = SavedTensor(t, true);
  }
}

void OpNode::release_variables() {
  for (auto& s : saved_inputs_) s.reset();
  for (auto& s : saved_outputs_) s.reset();
  released_ = true;
}

TensorList OpNode::apply(TensorList&& grad_outputs) {
  MF_CHECK(!released_ || (op_->save_inputs == 0 && op_->save_outputs == 0), Error,
           "backward: trying to backward through the graph a second time (or to use saved tensors after ",
           "they were freed); pass retain_graph=True to the first backward call (at ", name(), ")");
  auto self = shared_from_this();
  BackwardContext ctx{attrs_, {}, {}, std::move(grad_outputs), input_metas_, {}};
  ctx.received_grad.resize(ctx.grad_outputs.size());
  for (size_t i = 0; i < ctx.grad_outputs.size(); ++i) {
    const auto& m = output_metas_[i];
    ctx.received_grad[i] = ctx.grad_outputs[i].defined();
    if (!ctx.grad_outputs[i].defined() && is_floating(m.dtype))
      ctx.grad_outputs[i] = zeros(m.sizes, {.dtype = m.dtype, .device = m.device});
  }
  ctx.inputs.resize(saved_inputs_.size());
  for (size_t i = 0; i < saved_inputs_.size(); ++i)
    if (saved_inputs_[i].defined()) ctx.inputs[i] = saved_inputs_[i].unpack(self, op_->name.c_str(), int(i));
  ctx.outputs.resize(saved_outputs_.size());
  for (size_t i = 0; i < saved_outputs_.size(); ++i)
    if (saved_outputs_[i].defined()) ctx.outputs[i] = saved_outputs_[i].unpack(self, op_->name.c_str(), int(i));
  ctx.needs_input_grad.resize(next_edges_.size());
  const std::vector<bool>* mask = autograd::current_edge_mask();
  for (size_t i = 0; i < next_edges_.size(); ++i)
    ctx.needs_input_grad[i] = next_edges_[i].valid() && (!mask || (*mask)[i]);

  TensorList grads = op_->backward(ctx);
  MF_CHECK(grads.size() == next_edges_.size(), Error, "internal: backward of ", op_->name, " returned ",
           grads.size(), " gradients for ", next_edges_.size(), " inputs");
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!ctx.needs_input_grad[i]) {
      grads[i] = Tensor();
      continue;
    }
    if (!grads[i].defined()) continue;
    const auto& m = input_metas_[i];
    MF_CHECK(grads[i].sizes() == m.sizes, Error, "internal: backward of ", op_->name, " returned a gradient of shape ",
             shape_str(grads[i].sizes()), " for input ", i, " of shape ", shape_str(m.sizes));
    if (grads[i].dtype() != m.dtype) grads[i] = to(grads[i], m.dtype);
  }
  return grads;
}

}  // namespace mf
