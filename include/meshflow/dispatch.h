// The one door every op goes through:
//   dispatch::apply(op, inputs, attrs)
//     -> autocast layer (casts floating inputs per op.autocast inside an
//        autocast region; Note [Autocast] in autocast.h)
//     -> autograd layer (records a Node when an input requires grad)
//     -> interpreter (local: runs the device kernel or the view function;
//        global: distributed::interpret_global)
#pragma once

#include "meshflow/op_def.h"

namespace mf::dispatch {

TensorList apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs = {});
// apply() for ops with exactly one output.
Tensor apply_one(const OpDef& op, const TensorList& inputs, const Attrs& attrs = {});
// Runs op with inputs[0] as its output (op.inplace must be set): the result
// must have inputs[0]'s shape, and its dtype must cast to inputs[0]'s.
// Bumps the version counter and rebases inputs[0]'s autograd history.
Tensor apply_inplace(const OpDef& op, const TensorList& inputs, const Attrs& attrs = {});

// One op call as it reached the dispatcher (CallRecorder).
struct RecordedCall {
  const OpDef* op = nullptr;
  TensorList inputs;  // copies taken before the call
  Attrs attrs;
  bool inplace = false;
};

// While alive, records every op call on local tensors made on this thread,
// in order (the per-signature tests replay them on global tensors).
class CallRecorder {
 public:
  CallRecorder();
  ~CallRecorder();
  CallRecorder(const CallRecorder&) = delete;
  CallRecorder& operator=(const CallRecorder&) = delete;
  std::vector<RecordedCall> calls;

 private:
  CallRecorder* prev_;
};

// op.infer with every output shape checked (Note [Checked sizes] in
// checked_size.h): a negative or overflowing size is an error naming the op.
// Every interpreter infers through here.
std::vector<TensorMeta> infer(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

// Looks the op up once: `static const OpDef& op = dispatch::op("add");`
const OpDef& op(std::string_view name);

}  // namespace mf::dispatch
