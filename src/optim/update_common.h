// Shared pieces of the fused optimizer update ops (sgd.cpp, adam.cpp,
// rmsprop.cpp, adagrad.cpp): operand checks for infer, flat operands for the
// kernels, the step counter, and the in-place call through the dispatcher.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/common/optim_functors.h"
#include "meshflow/autograd.h"
#include "meshflow/dispatch.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "backend/cpu/kernels/loops.h"

namespace mf::optim::detail {

// infer of an update op: input 0 is the parameter, input 1 its gradient;
// `state` lists the names of the inputs that must have the parameter's shape
// and dtype (an empty name skips the input), each defined or not as
// `required` says. The last input is the optional found_inf (Note [Skipped
// updates] in optimizer.h). Returns the parameter's metadata (the op's
// output is the parameter itself).
struct StateInput {
  size_t index;
  bool required;
};
std::vector<TensorMeta> infer_update(const std::string& op, const TensorList& in,
                                     std::initializer_list<StateInput> state, int step_index = -1);

// Note [Flat update operands]
// The update loops run over flat arrays of the parameter's dtype. A
// contiguous operand is used where it is; a strided one (a parameter that is
// a transposed view, a gradient accumulated with odd strides) is gathered
// into a contiguous copy, and copies of written operands are scattered back
// after the loop. Copies keep the one-pass loop simple at the cost of extra
// traffic only in the rare strided case.
class FlatOperands {
 public:
  // Pointer to a contiguous array of t's values (nullptr for an undefined t).
  template <typename T>
  T* written(const Tensor& t) {
    return static_cast<T*>(flat(t, true));
  }
  template <typename T>
  const T* read(const Tensor& t) {
    return static_cast<const T*>(flat(t, false));
  }
  // Copies the gathered written operands back into their tensors.
  void write_back();

 private:
  void* flat(const Tensor& t, bool written);
  std::vector<std::pair<Tensor, Tensor>> copies_;  // (original, contiguous copy)
  TensorList keep_alive_;
};

// step += 1 in the step tensor's own dtype (a float32 counter, as PyTorch's
// `step_t += 1`); returns the new value.
double increment_step(const Tensor& step);


// The hyperparameters of an update op from its attributes (Note [Shared
// optimizer updates]).
inline optim_functors::AdamConfig adam_config(const Attrs& attrs) {
  return {attrs.get_float("lr"), attrs.get_float("beta1"), attrs.get_float("beta2"), attrs.get_float("weight_decay"),
          attrs.get_float("eps"), attrs.get_bool("maximize")};
}
inline optim_functors::AdagradConfig adagrad_config(const Attrs& attrs) {
  return {attrs.get_float("lr"), attrs.get_float("lr_decay"), attrs.get_float("weight_decay"), attrs.get_float("eps"),
          attrs.get_bool("maximize")};
}
template <typename A>
optim_functors::RMSpropScalars<A> rmsprop_scalars(const Attrs& attrs) {
  const double alpha = attrs.get_float("alpha");
  return {A(attrs.get_bool("maximize") ? -1.0 : 1.0), A(attrs.get_float("weight_decay")), A(alpha), A(1 - alpha),
          A(attrs.get_float("eps")), A(attrs.get_float("momentum")), A(-attrs.get_float("lr"))};
}
template <typename A>
optim_functors::SGDScalars<A> sgd_scalars(const Attrs& attrs) {
  return {A(attrs.get_bool("maximize") ? -1.0 : 1.0), A(attrs.get_float("weight_decay")), A(attrs.get_float("momentum")),
          A(1.0 - attrs.get_float("dampening")), A(-attrs.get_float("lr"))};
}

// Calls f(std::bool_constant<b>{}) so that loop bodies branch at compile time.
template <typename F>
decltype(auto) dispatch_bool(bool b, F&& f) {
  return b ? f(std::true_type{}) : f(std::false_type{});
}

// A state tensor of parameter p filled with value, laid out as p: for a
// global parameter a global tensor with p's placement and SBP, each rank
// holding the state of its shard, so that the update, which runs on the
// parameter's layout, writes the state in place (a local tensor of the
// global shape would be sliced into a temporary copy on every step).
Tensor state_like(const Tensor& p, Scalar value = Scalar(0.0));

// Runs an update op into inputs[0] through the dispatcher with grad mode
// off (it writes the inputs of OpDef::mutates too).
void apply_update(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

}  // namespace mf::optim::detail
