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
#include "meshflow/parallel.h"

namespace mf::cpu {

// t itself when undefined or contiguous, else a contiguous copy in the next
// piece of taken (add_dense in backend/common/scratch.h sizes it).
inline Tensor dense(const Tensor& t, Scratch& taken) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = taken.take(t.sizes(), t.dtype());
  copy_cast(c, t);
  return c;
}

// dense() over a Workspace (Note [Measured kernels]): measuring, only the
// piece is taken.
inline Tensor dense(const Tensor& t, Workspace& ws) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = ws.take(t.sizes(), t.dtype());
  if (!ws.measuring()) copy_cast(c, t);
  return c;
}

// fn(slot, item) for every item in [0, n), in parallel over `slots`
// per-thread buffers (Workspace::take_slots): slot s runs items s, s +
// slots, ... in order, so an item's result does not depend on the slots.
template <typename F>
void for_each_slot(int64_t n, int64_t slots, const F& fn) {
  parallel_for(0, slots, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t slot = lo; slot < hi; ++slot)
      for (int64_t item = slot; item < n; item += slots) fn(slot, item);
  });
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

// A kernel written over a Workspace (Note [Measured kernels] in
// backend/common/scratch.h), and its KernelFn and ScratchFn: the kernel
// carving its scratch, and the kernel measuring over stand-ins of its
// outputs without data.
using MeasuredKernel = void (*)(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws);

template <MeasuredKernel K>
void run_measured(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Scratch taken(out);
  Workspace ws(taken);
  K(in, out, attrs, ws);
}

template <MeasuredKernel K>
int64_t measure(const TensorList& in, const std::vector<TensorMeta>& outputs, const Attrs& attrs) {
  ScratchLayout layout("kernel scratch");
  Workspace ws(layout);
  TensorList out;
  for (const TensorMeta& m : outputs) out.push_back(make_meta(m.sizes, m.dtype, m.device));
  K(in, out, attrs, ws);
  return layout.bytes();
}

}  // namespace mf::cpu
