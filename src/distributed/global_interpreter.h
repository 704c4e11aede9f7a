// The eager global interpreter (global_interpreter.cpp; Note [SBP
// signatures] in meshflow/distributed/sbp_rules.h). dispatch::apply sends
// an op here when one of its inputs is a global tensor.
#pragma once

#include "meshflow/distributed/sbp_rules.h"

namespace mf::distributed {

// Global outputs of op on inputs of which at least one is global; all
// global inputs must share one placement. Collective over the ranks of the
// placement (every rank must make the same call).
TensorList interpret_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs);
// In-place form: the result, boxed to inputs[0]'s layout, is written into
// inputs[0]'s local tensor.
Tensor interpret_global_inplace(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

}  // namespace mf::distributed
