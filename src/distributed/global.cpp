#include "meshflow/distributed/global.h"

#include "distributed/checked_communicator.h"

#include "meshflow/autograd.h"
#include "meshflow/backend.h"
#include "meshflow/distributed/boxing.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/error.h"
#include "meshflow/graph/trace.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

constexpr int64_t kMaxDims = 16;

const GlobalMeta& meta_of(const Tensor& t, const char* op) {
  MF_CHECK(t.defined() && t.is_global(), ValueError, op, ": expected a global tensor");
  return *t.impl()->global();
}

// Note [Conversion gradients]: to_global and to_local change the layout,
// not the value, so a gradient passes through them converted back: to the
// source's placement and SBP, with a partial sum replaced by broadcast (each
// rank's part of a sum gets the whole gradient); through to_local the local
// gradients are taken as shards of the input's layout, as OneFlow does.
class ConversionNode final : public Node {
 public:
  ConversionNode(const char* name, std::function<Tensor(const Tensor&)> backward)
      : name_(name), backward_(std::move(backward)) {}
  TensorList apply(TensorList&& grads) override {
    return {grads.at(0).defined() ? backward_(grads[0]) : Tensor()};
  }
  std::string name() const override { return name_; }

 private:
  const char* name_;
  std::function<Tensor(const Tensor&)> backward_;
};

void record_conversion(const char* name, const Tensor& input, const Tensor& output,
                       std::function<Tensor(const Tensor&)> backward) {
  if (!(GradMode::is_enabled() && input.defined() && input.requires_grad() && output.defined())) return;
  auto node = std::make_shared<ConversionNode>(name, std::move(backward));
  node->mutable_next_edges().push_back(gradient_edge(input));
  node->output_metas().push_back(TensorMeta{output.sizes(), output.dtype(), output.device()});
  auto& meta = output.impl()->ensure_autograd();
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = 0;
}

NdSbp gradient_sbp(NdSbp sbp) {
  for (Sbp& s : sbp)
    if (s.is_partial_sum()) s = Sbp::broadcast();
  return sbp;
}

// A gradient as a global tensor on p: the engine zero-fills a missing one
// as a local tensor of the global shape.
Tensor as_global(const Tensor& grad, const Placement& p) {
  return grad.is_global() ? grad : global_from_full(grad, p, NdSbp(size_t(p.ndim()), Sbp::broadcast()));
}

// The column of gather_shapes' rows that holds layout_hash.
constexpr int64_t kLayoutColumn = kMaxDims + 2;
constexpr int64_t kRowSize = kMaxDims + 3;

// A hash of the placement and SBP a rank passed: ranks that disagree about
// either would build different communicators or boxings and wait on each
// other forever, so to_global compares them with the shapes.
int64_t layout_hash(const Placement& placement, const NdSbp& sbp) {
  const std::string text = placement.str() + nd_sbp_str(sbp);
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return int64_t(h >> 1);
}

// Every rank's (ndim, dtype, dims..., layout hash) so that each rank checks
// the same facts and reaches the same verdict (no rank waits on one that
// failed).
std::vector<std::vector<int64_t>> gather_shapes(const Tensor& local, bool member, int64_t layout) {
  // Shapes are metadata: exchanged now, also while a graph is traced.
  graph::SuspendTracing eager;
  const int64_t world = distributed::get_world_size();
  Tensor mine = full({kRowSize}, Scalar(int64_t(-1)), {.dtype = DType::Int64});
  int64_t* m = mine.data<int64_t>();
  if (member) {
    m[0] = local.dim();
    m[1] = int64_t(local.dtype());
    for (int64_t d = 0; d < std::min(local.dim(), kMaxDims); ++d) m[d + 2] = local.size(d);
  }
  m[kLayoutColumn] = layout;
  Tensor all = empty({world, kRowSize}, {.dtype = DType::Int64});
  distributed::world().all_gather(reshape(mine, {1, kRowSize}), all, std::vector<int64_t>(size_t(world), 1));
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(world));
  const int64_t* a = all.data<int64_t>();
  for (int64_t r = 0; r < world; ++r) out[size_t(r)].assign(a + r * kRowSize, a + (r + 1) * kRowSize);
  return out;
}

}  // namespace

namespace {
// Every rank the placement names is a rank of the world.
void check_ranks_exist(const Placement& placement, const char* op) {
  for (int r : placement.ranks()) {
    MF_CHECK(r < distributed::get_world_size(), ValueError, op, ": ", placement.str(), " names rank ", r,
             " but the world has ", distributed::get_world_size(), " ranks");
  }
}
}  // namespace

Tensor make_global(Tensor local, const Shape& global_shape, DType dtype, const Placement& placement,
                   const NdSbp& sbp) {
  // Its device is a member's local device (Note [Local devices]), so that
  // what is made like it (gradient seeds and zero fills) lands there.
  Tensor g = make_meta(global_shape, dtype, distributed::local_device(placement));
  g.impl()->set_global(std::make_shared<const GlobalMeta>(GlobalMeta{placement, sbp, std::move(local)}));
  return g;
}

const Placement& placement_of(const Tensor& global) { return meta_of(global, "placement").placement; }
const NdSbp& sbp_of(const Tensor& global) { return meta_of(global, "sbp").sbp; }

Tensor local_to_global(const Tensor& local, const Placement& placement, const NdSbp& sbp) {
  const char* op = "to_global";
  const int me = distributed::get_rank();
  const bool member = placement.contains(me);
  check_ranks_exist(placement, op);
  if (member) {
    MF_CHECK(local.defined(), ValueError, op, ": rank ", me, " is in the placement but its tensor is None");
    MF_CHECK(!local.is_global(), ValueError, op, ": the tensor is already global; use global_to_global");
    MF_CHECK(local.device().type() == placement.type() || local.device().is_cpu(), ValueError, op, ": a ",
             local.device().str(), " tensor can't be placed on ", placement.str());
    MF_CHECK(local.dim() <= kMaxDims, ValueError, op, ": tensors of more than ", kMaxDims, " dims are not supported");
  }
  auto shapes = gather_shapes(local, member, layout_hash(placement, sbp));
  // The verdict below depends only on the gathered table: every rank agrees.
  std::vector<int> other_layout;
  for (size_t r = 0; r < shapes.size(); ++r)
    if (shapes[r][kLayoutColumn] != shapes[0][kLayoutColumn]) other_layout.push_back(int(r));
  MF_CHECK(other_layout.empty(), ValueError, op, ": world ranks ", distributed::format_ranks(other_layout),
           " pass another placement or sbp than world rank 0 (this rank, world rank ", me, ", passes ",
           placement.str(), " and sbp ", nd_sbp_str(sbp), "); every rank must pass the same placement and sbp");
  const auto& first = shapes[size_t(placement.ranks()[0])];
  const int64_t ndim = first[0];
  for (int r : placement.ranks()) {
    const auto& s = shapes[size_t(r)];
    MF_CHECK(s[0] == ndim && s[1] == first[1], ShapeError, op, ": rank ", r, " has a ", s[0],
             "-d tensor of dtype ", dtype_name(DType(s[1])), " but rank ", placement.ranks()[0], " has a ", ndim,
             "-d tensor of dtype ", dtype_name(DType(first[1])));
  }
  check_nd_sbp(sbp, placement, ndim, op);
  // Global shape: every unsplit dim must agree; a split dim is the sum of
  // the parts along its mesh axes, which must be a balanced split.
  Shape global(first.begin() + 2, first.begin() + 2 + ndim);
  std::vector<bool> split_dim(size_t(ndim), false);
  for (const Sbp& s : sbp) {
    if (s.is_split()) split_dim[size_t(s.axis())] = true;
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (!split_dim[size_t(d)]) continue;
    // Sum over the mesh of the parts of rank coordinates differing only in
    // the axes that split d: sum over all ranks / product of the other axes.
    int64_t total = 0, others = 1;
    for (int r : placement.ranks()) total += shapes[size_t(r)][size_t(d + 2)];
    for (size_t a = 0; a < sbp.size(); ++a) {
      if (!(sbp[a].is_split() && sbp[a].axis() == d)) others *= placement.hierarchy()[a];
    }
    global[size_t(d)] = total / others;
  }
  for (int r : placement.ranks()) {
    Shape expected = local_shape(global, sbp, placement, placement.coords(r));
    Shape got(shapes[size_t(r)].begin() + 2, shapes[size_t(r)].begin() + 2 + ndim);
    MF_CHECK(got == expected, ShapeError, op, ": rank ", r, "'s tensor has shape ", shape_str(got), " but ",
             nd_sbp_str(sbp), " of a global ", shape_str(global), " tensor on ", placement.str(), " gives it ",
             shape_str(expected), " (shapes must agree across ranks, and splits must be balanced: sizes differ by at "
             "most one, larger parts first)");
  }
  const DType dtype = DType(first[1]);
  Tensor part = member ? contiguous(local.detach()) : Tensor();
  if (member && part.device().type() != placement.type()) part = to(part, distributed::local_device(placement));
  return make_global(std::move(part), global, dtype, placement, sbp);
}

Tensor global_to_global(const Tensor& global, const Placement& placement, const NdSbp& sbp) {
  const GlobalMeta& m = meta_of(global, "to_global");
  check_nd_sbp(sbp, placement, global.dim(), "to_global");
  Tensor local = distributed::box(m.local, global.shape(), global.dtype(), m.placement, m.sbp, placement, sbp);
  return make_global(std::move(local), global.shape(), global.dtype(), placement, sbp);
}

Tensor global_to_local(const Tensor& global) { return meta_of(global, "to_local").local; }

Tensor to_global(const Tensor& t, const Placement& placement, const NdSbp& sbp) {
  MF_CHECK(t.defined() || !placement.contains(distributed::get_rank()), ValueError,
           "to_global: the tensor is None");
  if (t.defined() && t.is_global()) {
    const GlobalMeta& from = *t.impl()->global();
    Tensor out = global_to_global(t, placement, sbp);
    record_conversion("ToGlobalBackward", t, out,
                      [p = from.placement, s = gradient_sbp(from.sbp), to_p = placement](const Tensor& g) {
                        return to_global(as_global(g, to_p), p, s);
                      });
    return out;
  }
  Tensor out = local_to_global(t, placement, sbp);
  record_conversion("ToGlobalBackward", t, out,
                    [placement, s = gradient_sbp(sbp), device = t.defined() ? t.device() : Device()](const Tensor& g) {
                      // A host tensor placed on a device gets its gradient on the host.
                      return to(to_local(to_global(as_global(g, placement), placement, s)), device);
                    });
  return out;
}

Tensor to_local(const Tensor& global) {
  const GlobalMeta& m = meta_of(global, "to_local");
  // A shard of its own, so that the conversion's autograd is not attached
  // to the global tensor's storage.
  Tensor out = m.local.defined() ? m.local.detach() : Tensor();
  record_conversion("ToLocalBackward", global, out,
                    [p = m.placement, s = m.sbp](const Tensor& g) { return to_global(g, p, s); });
  return out;
}

void set_grad_layout(const Tensor& leaf, std::optional<NdSbp> sbp) {
  MF_CHECK(leaf.is_global(), ValueError, "set_grad_layout: expected a global tensor");
  const GlobalMeta& now = *leaf.impl()->global();
  if (sbp) check_nd_sbp(*sbp, now.placement, leaf.dim(), "set_grad_layout");
  if (sbp == now.sbp) sbp.reset();
  if (sbp == now.grad_sbp) return;
  auto changed = std::make_shared<GlobalMeta>(now);
  changed->grad_sbp = std::move(sbp);
  leaf.impl()->set_global(std::move(changed));
}

void set_storage_layout(const Tensor& t, const NdSbp& stored, std::optional<NdSbp> compute) {
  MF_CHECK(t.is_global(), ValueError, "set_storage_layout: expected a global tensor");
  const GlobalMeta& now = *t.impl()->global();
  check_nd_sbp(stored, now.placement, t.dim(), "set_storage_layout");
  if (compute) check_nd_sbp(*compute, now.placement, t.dim(), "set_storage_layout");
  if (compute == stored) compute.reset();
  if (stored == now.sbp && compute == now.compute_sbp) return;
  NoGradGuard no_grad;
  auto changed = std::make_shared<GlobalMeta>(now);
  if (stored != now.sbp) {
    // A copy of this rank's part, so that the old shard's memory is freed
    // (rows taken from a whole tensor would be a view of it).
    const Tensor moved = global_to_local(global_to_global(t, now.placement, stored));
    changed->local = moved.defined() ? clone(moved) : moved;
    changed->sbp = stored;
  }
  changed->compute_sbp = std::move(compute);
  const Tensor grad = t.grad();
  t.impl()->set_global(std::move(changed));
  if (grad.defined() && grad.is_global() && sbp_of(grad) != stored)
    t.set_grad(global_to_global(grad, placement_of(grad), stored));
}

Tensor global_from_full(const Tensor& full, const Placement& placement, const NdSbp& sbp) {
  check_nd_sbp(sbp, placement, full.dim(), "global factory");
  check_ranks_exist(placement, "global factory");
  const int me = distributed::get_rank();
  if (!placement.contains(me)) return make_global(Tensor(), full.shape(), full.dtype(), placement, sbp);
  const std::vector<int64_t> coords = placement.coords(me);
  Tensor local = full.detach();
  if (full.device().type() != placement.type()) local = to(local, distributed::local_device(placement));
  bool zero = false;
  for (size_t a = 0; a < sbp.size(); ++a) {
    if (sbp[a].is_split()) {
      auto [b, e] = split_range(local.size(sbp[a].axis()), placement.hierarchy()[a], coords[a]);
      local = narrow(local, sbp[a].axis(), b, e - b);
    } else if (sbp[a].is_partial_sum() && coords[a] != 0) {
      zero = true;
    }
  }
  local = zero ? zeros(local.shape(), {.dtype = local.dtype(), .device = local.device()}) : contiguous(local);
  return make_global(std::move(local), full.shape(), full.dtype(), placement, sbp);
}

}  // namespace mf
