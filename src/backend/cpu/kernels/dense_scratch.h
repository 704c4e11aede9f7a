// Dense copies of a CPU kernel's inputs in its scratch (Note [Kernel
// scratch] in meshflow/op_def.h): a kernel that reads its inputs as flat
// arrays takes a copy of each non-contiguous one from the buffer its
// ScratchFn sized, so it allocates nothing itself. A contiguous input is
// read in place and costs no scratch.
#pragma once

#include <initializer_list>
#include <vector>

#include "backend/common/scratch.h"
#include "backend/cpu/kernels/loops.h"
#include "meshflow/op_def.h"

namespace mf::cpu {

// t itself when undefined or contiguous, else a contiguous copy in the next
// piece of taken (add_dense in backend/common/scratch.h sizes it).
inline Tensor dense(const Tensor& t, Scratch& taken) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = taken.take(t.sizes(), t.dtype());
  copy_cast(c, t);
  return c;
}

// The ScratchFn of a kernel that takes dense(in[i]) for each i of inputs,
// in that order, and nothing else.
inline ScratchFn dense_inputs_scratch(const char* op, std::initializer_list<size_t> inputs) {
  return [op, which = std::vector<size_t>(inputs)](const TensorList& in, const std::vector<TensorMeta>&,
                                                    const Attrs&) {
    ScratchLayout layout(op);
    for (size_t i : which)
      if (i < in.size()) add_dense(layout, in[i]);
    return layout.bytes();
  };
}

}  // namespace mf::cpu
