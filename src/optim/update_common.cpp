// Shared pieces of the fused optimizer update ops; see update_common.h.
#include "optim/update_common.h"

namespace mf::optim::detail {

std::vector<TensorMeta> infer_update(const std::string& op, const TensorList& in,
                                     std::initializer_list<StateInput> state, int step_index) {
  const Tensor& param = in[0];
  const Tensor& grad = in[1];
  MF_CHECK(param.defined(), ValueError, op, ": param is undefined");
  MF_CHECK(is_floating(param.dtype()), TypeError, op, ": expected a floating-point param, got ",
           dtype_name(param.dtype()));
  MF_CHECK(grad.defined(), ValueError, op, ": grad is undefined");
  MF_CHECK(grad.sizes() == param.sizes(), ShapeError, op, ": grad has shape ", shape_str(grad.sizes()),
           " but param has shape ", shape_str(param.sizes()));
  MF_CHECK(grad.dtype() == param.dtype(), TypeError, op, ": grad has dtype ", dtype_name(grad.dtype()),
           " but param has dtype ", dtype_name(param.dtype()));
  const auto& names = dispatch::op(op).inputs;
  for (const StateInput& s : state) {
    const Tensor& t = in[s.index];
    const std::string& name = names[s.index];
    MF_CHECK(t.defined() == s.required, ValueError, op, ": ", name,
             s.required ? " is required by the given options but undefined"
                        : " must be undefined with the given options");
    if (!t.defined()) continue;
    MF_CHECK(t.sizes() == param.sizes(), ShapeError, op, ": ", name, " has shape ", shape_str(t.sizes()),
             " but param has shape ", shape_str(param.sizes()));
    MF_CHECK(t.dtype() == param.dtype(), TypeError, op, ": ", name, " has dtype ", dtype_name(t.dtype()),
             " but param has dtype ", dtype_name(param.dtype()));
  }
  if (step_index >= 0) {
    const Tensor& step = in[size_t(step_index)];
    MF_CHECK(step.defined(), ValueError, op, ": step is undefined");
    MF_CHECK(step.numel() == 1 && is_floating(step.dtype()), TypeError, op,
             ": step must be a one-element floating-point tensor, got shape ", shape_str(step.sizes()), " and dtype ",
             dtype_name(step.dtype()));
  }
  return {{param.sizes(), param.dtype(), param.device()}};
}

void* FlatOperands::flat(const Tensor& t, bool written) {
  if (!t.defined()) return nullptr;
  if (t.is_contiguous()) return t.data_ptr();
  NoGradGuard no_grad;
  Tensor copy = contiguous(t.detach());
  if (written) copies_.emplace_back(t, copy);
  else keep_alive_.push_back(copy);
  return copy.data_ptr();
}

void FlatOperands::write_back() {
  for (auto& [original, copy] : copies_) {
    Tensor dst = original;
    cpu::copy_cast(dst, copy);
  }
  copies_.clear();
}

double increment_step(const Tensor& step) {
  return dispatch_floating(step.dtype(), "optimizer step", [&]<typename T>() {
    T* p = static_cast<T*>(step.data_ptr());
    *p = T(acc_type<T>(*p) + acc_type<T>(1));
    return double(acc_type<T>(*p));
  });
}

void apply_update(const OpDef& op, const TensorList& inputs, const Attrs& attrs, const TensorList& also_written) {
  NoGradGuard no_grad;
  dispatch::apply_inplace(op, inputs, attrs);
  for (const Tensor& t : also_written)
    if (t.defined()) t.bump_version();
}

}  // namespace mf::optim::detail
