#include "meshflow/distributed/boxing.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "distributed/comm_ops.h"
#include "meshflow/autograd.h"
#include "meshflow/backend.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf::distributed {
namespace {

// Note [Boxing plans]: a plan is a list of one-axis transitions (and at most
// one placement change). When no two mesh axes split the same tensor dim in
// the source, the target, or any state in between, each differing axis is
// converted directly, in axis order. Otherwise the plan goes through
// broadcast: the source is gathered axis by axis from the last mesh axis
// (so that nested splits of one dim are undone innermost first), moved to
// the target placement, and cut axis by axis from the first. The executor
// is the same for both: the size of a split dim at a mesh axis is the global
// size cut by the splits of the earlier axes in the current state.

bool distinct_split_dims(const NdSbp& sbp) {
  std::vector<int64_t> dims;
  for (const Sbp& s : sbp) {
    if (!s.is_split()) continue;
    if (std::find(dims.begin(), dims.end(), s.axis()) != dims.end()) return false;
    dims.push_back(s.axis());
  }
  return true;
}

std::string transition_name(const Sbp& from, const Sbp& to) {
  if (from == to) return "none";
  if (from.is_partial_sum()) return to.is_broadcast() ? "all_reduce" : "reduce_scatter";
  if (from.is_split()) return to.is_broadcast() ? "all_gather" : to.is_split() ? "all_to_all" : "local";
  return to.is_split() ? "slice" : "local";  // from broadcast
}

std::vector<BoxingStep> make_plan(const Placement& from_p, const NdSbp& from, const Placement& to_p,
                                  const NdSbp& to) {
  std::vector<BoxingStep> steps;
  if (from_p == to_p && from == to) return steps;  // the shard stays as it is
  if (from_p == to_p) {
    bool direct = true;
    NdSbp state = from;
    for (size_t a = 0; a < from.size() && direct; ++a) {
      state[a] = to[a];
      direct = distinct_split_dims(state);
    }
    if (direct && distinct_split_dims(from)) {
      for (size_t a = 0; a < from.size(); ++a) {
        if (from[a] != to[a]) steps.push_back({int64_t(a), from[a], to[a], transition_name(from[a], to[a])});
      }
      return steps;
    }
  }
  for (int64_t a = int64_t(from.size()) - 1; a >= 0; --a) {
    if (!from[size_t(a)].is_broadcast())
      steps.push_back({a, from[size_t(a)], Sbp::broadcast(), transition_name(from[size_t(a)], Sbp::broadcast())});
  }
  if (!(from_p == to_p)) steps.push_back({-1, Sbp::broadcast(), Sbp::broadcast(), "send_recv"});
  for (size_t a = 0; a < to.size(); ++a) {
    if (!to[a].is_broadcast()) steps.push_back({int64_t(a), Sbp::broadcast(), to[a], transition_name(Sbp::broadcast(), to[a])});
  }
  return steps;
}

std::string plan_key(const Shape& shape, const Placement& from_p, const NdSbp& from, const Placement& to_p,
                     const NdSbp& to) {
  return shape_str(shape) + from_p.str() + nd_sbp_str(from) + to_p.str() + nd_sbp_str(to);
}

// The ranks of one mesh axis's group (ascending: communicator order), and
// this rank's coordinate. The collectives are ops (Note [Communication ops]
// in comm_ops.h), so that a traced boxing becomes communication nodes.
struct AxisGroup {
  std::vector<int> ranks;
  int64_t size = 1;
  int64_t index = 0;
  std::vector<int> coord_of_comm_rank;  // comm rank -> coordinate along the axis
};

AxisGroup axis_group(const Placement& p, int64_t axis) {
  std::vector<int> members = p.axis_group(get_rank(), axis);
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  AxisGroup g;
  g.ranks = sorted;
  g.size = int64_t(members.size());
  g.index = p.coords(get_rank())[size_t(axis)];
  for (int r : sorted) g.coord_of_comm_rank.push_back(int(std::find(members.begin(), members.end(), r) - members.begin()));
  return g;
}

// Size of tensor dim d before mesh axis `axis` cuts it, in `state`.
int64_t size_before(const Shape& global, const NdSbp& state, const Placement& p, int64_t axis, int64_t d) {
  std::vector<int64_t> coords = p.coords(get_rank());
  int64_t n = global[size_t(d)];
  for (int64_t a = 0; a < axis; ++a) {
    const Sbp& s = state[size_t(a)];
    if (s.is_split() && s.axis() == d) {
      auto [b, e] = split_range(n, p.hierarchy()[size_t(a)], coords[size_t(a)]);
      n = e - b;
    }
  }
  return n;
}

// t with dim d first, contiguous.
Tensor dim_first(const Tensor& t, int64_t d) { return contiguous(d == 0 ? t : transpose(t, 0, d)); }
Tensor dim_back(const Tensor& t, int64_t d) { return d == 0 ? t : contiguous(transpose(t, 0, d)); }

// Row counts per comm rank for a dim of size n cut into the group's parts,
// and the same rows of a coordinate-ordered tensor reordered to comm order.
std::vector<int64_t> comm_counts(const AxisGroup& g, int64_t n) {
  std::vector<int64_t> counts;
  for (int c : g.coord_of_comm_rank) {
    auto [b, e] = split_range(n, g.size, c);
    counts.push_back(e - b);
  }
  return counts;
}

// Reorders the row blocks of t (dim 0) from `from` order to `to` order,
// where block k has counts[k] rows in `from` order and perm[k] is its
// position in `to` order.
Tensor reorder_blocks(const Tensor& t, const std::vector<int64_t>& counts, const std::vector<int>& perm) {
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == int(k);
  if (identity) return t;
  std::vector<Tensor> blocks(perm.size());
  int64_t offset = 0;
  for (size_t k = 0; k < perm.size(); ++k) {
    blocks[size_t(perm[k])] = narrow(t, 0, offset, counts[k]);
    offset += counts[k];
  }
  return cat(blocks, 0);
}

std::vector<int> inverse(const std::vector<int>& perm) {
  std::vector<int> inv(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inv[size_t(perm[k])] = int(k);
  return inv;
}

std::vector<int64_t> in_coord_order(const std::vector<int64_t>& comm_order, const std::vector<int>& coord_of) {
  std::vector<int64_t> out(comm_order.size());
  for (size_t k = 0; k < coord_of.size(); ++k) out[size_t(coord_of[k])] = comm_order[k];
  return out;
}

Tensor all_gather_dim(const AxisGroup& g, const Tensor& local, int64_t d, int64_t n) {
  std::vector<int64_t> counts = comm_counts(g, n);
  Tensor in = dim_first(local, d);
  Tensor out = comm_all_gather(in, g.ranks, counts);
  return dim_back(contiguous(reorder_blocks(out, counts, g.coord_of_comm_rank)), d);
}

Tensor reduce_scatter_dim(const AxisGroup& g, const Tensor& local, int64_t d) {
  const int64_t n = local.size(d);
  std::vector<int64_t> counts = comm_counts(g, n);
  // Blocks of the input in coordinate order -> comm order.
  Tensor in = contiguous(reorder_blocks(dim_first(local, d), in_coord_order(counts, g.coord_of_comm_rank),
                                        inverse(g.coord_of_comm_rank)));
  return dim_back(comm_reduce_scatter(in, g.ranks, counts), d);
}

// S(i) -> S(j) along one axis: every rank sends each peer the piece of its
// dim-i part that falls in the peer's dim-j range.
Tensor all_to_all_dims(const AxisGroup& g, const Tensor& local, int64_t i, int64_t j, int64_t n_i, int64_t n_j) {
  std::vector<Tensor> send;
  std::vector<int64_t> send_counts, recv_counts;
  Shape piece_shape;
  for (size_t k = 0; k < g.coord_of_comm_rank.size(); ++k) {
    const int c = g.coord_of_comm_rank[k];
    auto [jb, je] = split_range(n_j, g.size, c);
    auto [ib, ie] = split_range(n_i, g.size, c);
    Tensor piece = narrow(local, j, jb, je - jb);  // my dim-i part, peer's dim-j range
    send.push_back(reshape(dim_first(piece, i), {-1}));
    send_counts.push_back(piece.numel());
    auto [mjb, mje] = split_range(n_j, g.size, g.index);
    Shape recv_shape = local.shape();
    recv_shape[size_t(i)] = ie - ib;
    recv_shape[size_t(j)] = mje - mjb;
    recv_counts.push_back(shape_numel(recv_shape));
  }
  Tensor in = send.empty() ? empty({0}, {.dtype = local.dtype(), .device = local.device()}) : cat(send, 0);
  Tensor out = reshape(comm_all_to_all(reshape(in, {-1, 1}), g.ranks, send_counts, recv_counts), {-1});
  // Blocks arrive in comm order, each laid out dim i first; put them in
  // coordinate order along dim i.
  std::vector<Tensor> blocks(g.coord_of_comm_rank.size());
  int64_t offset = 0;
  auto [mjb, mje] = split_range(n_j, g.size, g.index);
  for (size_t k = 0; k < g.coord_of_comm_rank.size(); ++k) {
    const int c = g.coord_of_comm_rank[k];
    auto [ib, ie] = split_range(n_i, g.size, c);
    Shape block_shape = local.shape();
    block_shape[size_t(i)] = ie - ib;
    block_shape[size_t(j)] = mje - mjb;
    Shape first_shape = block_shape;
    std::swap(first_shape[0], first_shape[size_t(i)]);
    blocks[size_t(c)] = reshape(narrow(out, 0, offset, recv_counts[k]), first_shape);
    offset += recv_counts[k];
  }
  return dim_back(cat(blocks, 0), i);
}

// One transition along mesh axis `axis`; `state` is the current NdSbp.
Tensor transition(const Tensor& local, const Shape& global, const Placement& p, NdSbp& state, int64_t axis,
                  const Sbp& to) {
  const Sbp from = state[size_t(axis)];
  if (from == to) return local;
  AxisGroup g = axis_group(p, axis);
  Tensor out;
  if (g.size == 1) {
    // One rank along the axis: its shard is the whole value under every
    // layout, so the transition moves nothing.
    out = local;
  } else if (from.is_partial_sum()) {
    if (to.is_broadcast()) {
      out = comm_all_reduce(local, g.ranks);
    } else if (to.is_split()) {
      out = reduce_scatter_dim(g, local, to.axis());
    } else {
      out = local;
    }
  } else if (from.is_split()) {
    const int64_t n = size_before(global, state, p, axis, from.axis());
    if (to.is_broadcast()) {
      out = all_gather_dim(g, local, from.axis(), n);
    } else if (to.is_split()) {
      out = all_to_all_dims(g, local, from.axis(), to.axis(), n, size_before(global, state, p, axis, to.axis()));
    } else {  // S -> P: my part in place, zeros elsewhere
      auto [b, e] = split_range(n, g.size, g.index);
      Shape full = local.shape();
      full[size_t(from.axis())] = n;
      out = zeros(full, {.dtype = local.dtype(), .device = local.device()});
      Tensor window = narrow(out, from.axis(), b, e - b);
      copy_(window, local);
    }
  } else {  // broadcast
    if (to.is_split()) {
      const int64_t n = local.size(to.axis());
      auto [b, e] = split_range(n, g.size, g.index);
      out = contiguous(narrow(local, to.axis(), b, e - b));
    } else {  // B -> P: the first rank of the group keeps the value
      out = g.index == 0 ? local : zeros_like(local);
    }
  }
  state[size_t(axis)] = to;
  return out;
}

}  // namespace

Device local_device(const Placement& placement) {
  if (placement.type() == DeviceType::CPU) return Device();
  const int count = has_backend(placement.type()) ? get_backend(placement.type()).device_count() : 0;
  return Device(placement.type(), count > 0 ? get_local_rank() % count : 0);
}

namespace {

// The full value moves from the source placement's first rank to the
// target's ranks that are not in the source.
Tensor change_placement(const Tensor& full, const Shape& global, DType dtype, const Placement& from_p,
                        const Placement& to_p) {
  const int me = get_rank();
  const int root = from_p.ranks()[0];
  for (int r : to_p.ranks()) {
    if (from_p.contains(r)) continue;
    if (me == root) comm_send(full, r, 17);
    if (me == r) return comm_recv(global, dtype, root, 17, local_device(to_p));
  }
  return to_p.contains(me) ? full : Tensor();
}

}  // namespace

const std::vector<BoxingStep>& boxing_plan(const Shape& global_shape, const Placement& from_placement,
                                           const NdSbp& from, const Placement& to_placement, const NdSbp& to) {
  check_nd_sbp(from, from_placement, int64_t(global_shape.size()), "boxing (source)");
  check_nd_sbp(to, to_placement, int64_t(global_shape.size()), "boxing (target)");
  MF_CHECK(from_placement.type() == to_placement.type(), ValueError,
           "boxing: a placement change across device types (", from_placement.str(), " -> ", to_placement.str(),
           ") is not supported");
  static std::mutex mutex;
  static std::map<std::string, std::vector<BoxingStep>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = plan_key(global_shape, from_placement, from, to_placement, to);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_plan(from_placement, from, to_placement, to)).first;
  return it->second;
}

double transition_cost(const Sbp& from, const Sbp& to, double bytes, int64_t parts) {
  if (from == to) return 0;
  const double m = double(parts);
  double moved = 0;
  if (from.is_partial_sum()) {
    moved = to.is_broadcast() ? 2 * bytes * (m - 1) / m : to.is_split() ? bytes * (m - 1) / m : 0;
  } else if (from.is_split()) {
    moved = to.is_broadcast() ? bytes * (m - 1) / m : to.is_split() ? bytes * (m - 1) / (m * m) : bytes * (m - 1);
  }
  return moved + 1;
}

Tensor box(const Tensor& local, const Shape& global_shape, DType dtype, const Placement& from_placement,
           const NdSbp& from, const Placement& to_placement, const NdSbp& to) {
  const std::vector<BoxingStep>& plan = boxing_plan(global_shape, from_placement, from, to_placement, to);
  const int me = get_rank();
  if (!from_placement.contains(me) && !to_placement.contains(me)) return Tensor();
  NoGradGuard no_grad;
  if (from_placement.contains(me)) {
    MF_CHECK(local.defined() && local.dtype() == dtype && local.shape() == local_shape(global_shape, from, from_placement,
                                                              from_placement.coords(me)),
             ShapeError, "boxing: rank ", me, "'s local tensor has shape ",
             local.defined() ? shape_str(local.shape()) : std::string("None"), " and dtype ",
             local.defined() ? dtype_name(local.dtype()) : "None", " but a ", dtype_name(dtype), " tensor on ",
             from_placement.str(), " with ",
             nd_sbp_str(from), " gives it ",
             shape_str(local_shape(global_shape, from, from_placement, from_placement.coords(me))));
  }
  Tensor t = local;
  NdSbp state = from;
  const Placement* p = &from_placement;
  for (const BoxingStep& s : plan) {
    if (s.mesh_axis < 0) {
      t = change_placement(t, global_shape, dtype, from_placement, to_placement);
      p = &to_placement;
      state = NdSbp(to_placement.hierarchy().size(), Sbp::broadcast());
      if (!to_placement.contains(me)) return Tensor();
      continue;
    }
    if (!p->contains(me)) continue;
    t = transition(t, global_shape, *p, state, s.mesh_axis, s.to);
  }
  if (!to_placement.contains(me)) return Tensor();
  return t;
}

}  // namespace mf::distributed
