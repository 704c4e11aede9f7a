// Note [Custom functions] (autograd.h): the node of a function whose
// backward is a callable.
#include <unordered_map>
#include <utility>

#include "meshflow/autograd.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"

namespace mf::autograd {
namespace {

class CustomFunctionNode final : public Node {
 public:
  explicit CustomFunctionNode(CustomFunction fn) : fn_(std::move(fn)) {}
  std::string name() const override { return fn_.name; }

  void record_inputs(const TensorList& inputs) { record_input_edges(inputs, input_metas_); }

  // outputs: what the forward returned; returns them as the graph sees them.
  TensorList record_outputs(const TensorList& inputs, const TensorList& outputs) {
    auto self = shared_from_this();
    std::unordered_map<const TensorImpl*, size_t> final_of;  // forward's output -> index
    TensorList linked(outputs.size());
    output_metas_.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      Tensor t = outputs[i];
      if (!t.defined()) continue;
      final_of.emplace(t.impl(), i);
      // An input returned as is, a leaf, or an output returned twice keeps
      // its own identity: the graph gets a new alias of it.
      bool alias = t.requires_grad() || t.grad_fn() != nullptr;
      for (const Tensor& in : inputs) alias = alias || (in.defined() && in.impl() == t.impl());
      for (size_t j = 0; j < i; ++j) alias = alias || (outputs[j].defined() && outputs[j].impl() == t.impl());
      if (alias) t = t.detach();
      output_metas_[i] = TensorMeta{t.sizes(), t.dtype(), t.device()};
      const bool differentiable = i >= fn_.non_differentiable.size() || !fn_.non_differentiable[i];
      if (differentiable && is_floating(t.dtype())) set_history(t, self, uint32_t(i));
      linked[i] = t;
    }
    saved_.reserve(fn_.saved.size());
    for (const Tensor& s : fn_.saved) {
      if (!s.defined()) {
        saved_.emplace_back();
        continue;
      }
      auto it = final_of.find(s.impl());
      saved_.emplace_back(it != final_of.end() ? linked[it->second] : s, it != final_of.end());
    }
    has_saved_ = !fn_.saved.empty();
    fn_.saved.clear();
    return linked;
  }

  TensorList apply(TensorList&& grad_outputs) override {
    MF_CHECK(!released_ || !has_saved_, Error, "backward: trying to backward through the graph a second time (or to ",
             "use saved tensors after they were freed); pass retain_graph=True to the first backward call (at ",
             name(), ")");
    auto self = shared_from_this();
    if (fn_.materialize_grads)
      for (size_t i = 0; i < grad_outputs.size(); ++i) {
        const auto& m = output_metas_[i];
        if (!grad_outputs[i].defined() && is_floating(m.dtype))
          grad_outputs[i] = zeros(m.sizes, {.dtype = m.dtype, .device = m.device});
      }
    TensorList saved(saved_.size());
    for (size_t i = 0; i < saved_.size(); ++i)
      if (saved_[i].defined()) saved[i] = saved_[i].unpack(self, fn_.name.c_str(), int(i));
    std::vector<bool> needs(next_edges_.size());
    const std::vector<bool>* mask = current_edge_mask();
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = next_edges_[i].valid() && (!mask || (*mask)[i]);

    TensorList grads = fn_.backward(grad_outputs, needs, saved);
    MF_CHECK(grads.size() == next_edges_.size(), ValueError, "function ", name(),
             " returned an incorrect number of gradients (expected ", next_edges_.size(), ", got ", grads.size(), ")");
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!needs[i] || !grads[i].defined()) {
        grads[i] = Tensor();
        continue;
      }
      const auto& m = input_metas_[i];
      MF_CHECK(grads[i].sizes() == m.sizes, ShapeError, "function ", name(), " returned an invalid gradient at index ",
               i, " - got ", shape_str(grads[i].sizes()), " but expected shape ", shape_str(m.sizes));
      MF_CHECK(is_floating(grads[i].dtype()), TypeError, "function ", name(), " returned a gradient of dtype ",
               dtype_name(grads[i].dtype()), " at index ", i, "; expected a floating-point gradient");
      if (grads[i].dtype() != m.dtype) grads[i] = to(grads[i], m.dtype);
    }
    return grads;
  }

  void release_variables() override {
    saved_.clear();
    released_ = true;
  }

 private:
  CustomFunction fn_;
  std::vector<TensorMeta> input_metas_;
  std::vector<SavedTensor> saved_;
  bool has_saved_ = false;
  bool released_ = false;
};

}  // namespace

TensorList link(CustomFunction fn, const TensorList& inputs, const TensorList& outputs) {
  MF_CHECK(fn.backward != nullptr, ValueError, "autograd function ", fn.name, ": no backward was given");
  bool any_requires = false;
  for (const Tensor& t : inputs) any_requires = any_requires || (t.defined() && t.requires_grad());
  if (!GradMode::is_enabled() || !any_requires) return outputs;
  auto node = std::make_shared<CustomFunctionNode>(std::move(fn));
  node->record_inputs(inputs);
  return node->record_outputs(inputs, outputs);
}

}  // namespace mf::autograd
