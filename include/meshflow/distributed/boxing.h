// Boxing: the communication that turns the local tensors of a global tensor
// laid out one way into those of another layout (OneFlow's boxing).
//
// Transitions along one mesh axis, with their cost in bytes moved per rank
// for a (sub-)tensor of B bytes over m ranks:
//   P -> B   all-reduce          2 B (m - 1) / m
//   P -> S   reduce-scatter        B (m - 1) / m
//   S -> B   all-gather            B (m - 1) / m
//   S(i) -> S(j)  all-to-all       B (m - 1) / m^2
//   B -> S   local slice           0
//   B -> P, S -> P  local          0   (one rank keeps the values, the
//                                       others hold zeros)
// An n-D change runs one mesh axis at a time when the axes' splits are on
// different tensor dims; otherwise (two mesh axes splitting one dim) it goes
// through broadcast. A placement change gathers the value on the source
// placement, sends it to the target's ranks that lack it, and slices.
// Uneven splits (a dim not divisible by the number of parts) follow
// split_range everywhere.
#pragma once

#include <string>
#include <vector>

#include "meshflow/distributed/placement.h"
#include "meshflow/tensor.h"

namespace mf::distributed {

struct BoxingStep {
  int64_t mesh_axis;  // -1 for a placement change
  Sbp from, to;
  std::string collective;  // "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "slice", "local", "send_recv"
};

// The steps from (from_placement, from) to (to_placement, to), cached per
// (placements, sbps, shape).
const std::vector<BoxingStep>& boxing_plan(const Shape& global_shape, const Placement& from_placement,
                                           const NdSbp& from, const Placement& to_placement, const NdSbp& to);

// Cost of converting a (sub-)tensor of `bytes` from `from` to `to` along one
// mesh axis of `parts` ranks: the bytes a rank moves (the table above), plus
// the zeros S -> P adds to a shard, plus one byte for any change, so that
// among otherwise equal choices the one that keeps a layout wins. The
// global interpreter ranks SBP signatures by it.
double transition_cost(const Sbp& from, const Sbp& to, double bytes, int64_t parts);

// This rank's local tensor under the target layout, from its local tensor
// under the source layout (undefined on ranks outside the source placement;
// dtype is the global tensor's). Collective over the ranks of both placements;
// ranks outside both return an undefined tensor, and the local tensor of a
// rank outside the target placement is undefined.
Tensor box(const Tensor& local, const Shape& global_shape, DType dtype, const Placement& from_placement,
           const NdSbp& from, const Placement& to_placement, const NdSbp& to);

// Test-only: every all-gather ("all_gather") or reduce-scatter
// ("reduce_scatter") of boxing, eager or compiled, sleeps `seconds` on this
// rank before it communicates (0: off). Results must not depend on it.
// Note [Local devices]: a member's part of a global tensor on a device
// placement lives on the device of its local rank (cuda:<local rank modulo
// the devices visible>), as OneFlow places one process per GPU; a CPU
// placement's on the host. Local tensors placed on a device placement
// from the host move there (to_global, the global factories).
Device local_device(const Placement& placement);

void set_test_comm_delay(const std::string& kind, double seconds);

}  // namespace mf::distributed
