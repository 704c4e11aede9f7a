// OpNode: the autograd node recorded for one dispatched op call. It keeps
// only what the op's backward asked for (OpDef::save_inputs/save_outputs).
#pragma once

#include "meshflow/autograd.h"
#include "meshflow/op_def.h"

namespace mf {

class OpNode final : public Node {
 public:
  OpNode(const OpDef& op, Attrs attrs) : op_(&op), attrs_(std::move(attrs)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  std::string name() const override;
  void release_variables() override;

  // Recording, in dispatch order: inputs first, then outputs.
  void record_inputs(const TensorList& inputs, const Tensor& saved_self_override = Tensor());
  void record_outputs(const TensorList& outputs);

 private:
  const OpDef* op_;
  Attrs attrs_;
  std::vector<TensorMeta> input_metas_;
  std::vector<SavedTensor> saved_inputs_;
  std::vector<SavedTensor> saved_outputs_;
  bool released_ = false;
};

}  // namespace mf
