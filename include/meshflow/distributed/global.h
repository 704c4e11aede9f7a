// Global tensors: one logical tensor laid out over the ranks of a placement
// by an SBP per mesh axis, each rank holding its local shard (OneFlow's
// global view).
//
// A global tensor is a Tensor whose TensorImpl carries a GlobalMeta: its own
// sizes are the global shape (it holds no data), and `local` is this rank's
// shard (undefined on ranks outside the placement). Conversions between
// layouts run boxing (boxing.h) and are collective over the ranks involved.
// Ops on global tensors run through the global interpreter
// (src/distributed/global_interpreter.cpp), recording autograd as usual.
#pragma once

#include <optional>

#include "meshflow/distributed/placement.h"
#include "meshflow/tensor.h"

namespace mf {

struct GlobalMeta {
  Placement placement;
  NdSbp sbp;
  Tensor local;
  // A leaf whose gradient is accumulated in another layout than its own
  // (ZeRO stage 2, Note [ZeRO as layouts] in meshflow/optim/optimizer.h).
  std::optional<NdSbp> grad_sbp;
  // A tensor stored in `sbp` that ops read in this layout: the global
  // interpreter boxes it to compute_sbp before every op that reads it
  // without writing it (ZeRO stage 3: a parameter kept as row shards and
  // gathered at each use, in forward and in backward).
  std::optional<NdSbp> compute_sbp;
};

// Sets (or, with nullopt, clears) the layout a global leaf's gradient is
// accumulated in.
void set_grad_layout(const Tensor& leaf, std::optional<NdSbp> sbp);
// Stores the global tensor t in layout `stored` from now on, in place (its
// identity, autograd leaf status and gradient stay; its shard is replaced,
// and a defined gradient is re-laid out too), with ops reading it in
// `compute` (nullopt: in `stored`). Collective over t's placement.
void set_storage_layout(const Tensor& t, const NdSbp& stored, std::optional<NdSbp> compute);

// A global tensor from this rank's shard `local` (OneFlow's to_global of a
// local tensor): under split, each rank's tensor is its part and the global
// size of the split dim is the sum over the mesh axis (gathered); under
// broadcast every rank holds the whole value; under partial_sum the value is
// the sum over ranks. Collective over the placement.
Tensor local_to_global(const Tensor& local, const Placement& placement, const NdSbp& sbp);
// The same logical tensor under another placement and/or SBP (boxing).
Tensor global_to_global(const Tensor& global, const Placement& placement, const NdSbp& sbp);
// This rank's shard (undefined outside the placement).
Tensor global_to_local(const Tensor& global);
// The three above record no autograd; these do (Note [Conversion
// gradients] in global.cpp): Tensor.to_global (from a local or a global
// tensor) and Tensor.to_local.
Tensor to_global(const Tensor& t, const Placement& placement, const NdSbp& sbp);
Tensor to_local(const Tensor& global);

// A global tensor holding `full` (the same value on every rank) laid out by
// sbp: each rank keeps its slice; partial_sum keeps the value on the first
// rank of each mesh axis and zeros elsewhere (a contiguous slice may share
// full's memory). No communication. Global
// factories are built on it so that their values do not depend on the SBP
// or the world size.
Tensor global_from_full(const Tensor& full, const Placement& placement, const NdSbp& sbp);

// The global tensor of this rank's shard `local` (undefined outside the
// placement), which must already be the shard that (global_shape, sbp)
// gives this rank: no communication and no check (the global interpreter's
// and compiled graphs' results).
Tensor make_global(Tensor local, const Shape& global_shape, DType dtype, const Placement& placement,
                   const NdSbp& sbp);

const Placement& placement_of(const Tensor& global);
const NdSbp& sbp_of(const Tensor& global);

}  // namespace mf
