// The eager global interpreter: runs an op whose inputs are global tensors
// by choosing an SBP signature from the op's rule (OpDef::sbp, Note [SBP
// signatures] in meshflow/distributed/sbp_rules.h), boxing the inputs to
// it, running the local op on each rank's shards and wrapping the results
// as global tensors.
//
// Every op can also run with every input and output broadcast (each rank
// computes the whole result). On an n-D mesh the signature is chosen per
// mesh axis, each axis's candidates ranked by the bytes their boxing moves
// for the inputs as they are. Local (non-global) inputs, such as the
// factory results inside backward formulas, are taken as broadcast: the
// same value on every rank. An attr holding output 0's shape
// (OpDef::output_shape_attr) is rewritten to the shard's shape. Autograd
// is recorded by dispatch at the global level, so backward formulas run
// through this interpreter too.
#include "distributed/global_interpreter.h"

#include <algorithm>
#include <limits>

#include "meshflow/autograd.h"
#include "meshflow/distributed/auto_parallel.h"
#include "meshflow/distributed/boxing.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/distributed/global.h"
#include "meshflow/dispatch.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"

namespace mf::distributed {
namespace {

// The innermost ForceSignature guard of this thread.
thread_local ForceSignature* forced = nullptr;

std::vector<Shape> output_shapes(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  std::vector<Shape> shapes;
  if (op.view) {
    for (const Tensor& t : op.view(inputs, attrs)) shapes.push_back(t.shape());
  } else {
    for (const TensorMeta& m : dispatch::infer(op, inputs, attrs)) shapes.push_back(m.sizes);
  }
  return shapes;
}

// A metadata tensor standing for a global input in infer and view (which
// must not see the GlobalMeta: they would refuse it as an op input).
Tensor meta_like(const Tensor& t) { return t.defined() ? make_meta(t.shape(), t.dtype(), t.device()) : t; }

}  // namespace

std::vector<SbpSignature> sbp_candidates(const OpDef& op, const TensorList& metas, const std::vector<Shape>& out_shapes,
                                         const Attrs& attrs, int64_t parts) {
  std::vector<SbpSignature> candidates;
  if (op.sbp && !out_shapes.empty()) candidates = op.sbp(metas, out_shapes, attrs, parts);
  // Splits that would leave a rank an empty part are dropped: kernels may
  // refuse empty channels or rows where the whole tensor is valid.
  auto too_small = [&](const Sbp& s, const Shape& shape) {
    return s.is_split() && (s.axis() >= int64_t(shape.size()) || shape[size_t(s.axis())] < parts);
  };
  std::erase_if(candidates, [&](const SbpSignature& sig) {
    for (size_t i = 0; i < metas.size(); ++i)
      if (metas[i].defined() && too_small(sig.inputs[i], metas[i].shape())) return true;
    for (size_t o = 0; o < out_shapes.size(); ++o)
      if (too_small(sig.outputs[o], out_shapes[o])) return true;
    return false;
  });
  candidates.push_back({std::vector<Sbp>(metas.size(), Sbp::broadcast()),
                        std::vector<Sbp>(out_shapes.size(), Sbp::broadcast())});
  return candidates;
}

std::vector<SbpSignature> sbp_candidates(const OpDef& op, const TensorList& inputs, const Attrs& attrs, int64_t parts) {
  TensorList metas;
  for (const Tensor& t : inputs) metas.push_back(meta_like(t));
  return sbp_candidates(op, metas, op.shape_depends_on_data ? std::vector<Shape>{} : output_shapes(op, metas, attrs),
                        attrs, parts);
}

ForceSignature::ForceSignature(const OpDef& op, std::vector<size_t> per_axis)
    : op_(&op), per_axis_(std::move(per_axis)), prev_(forced) {
  forced = this;
}

ForceSignature::~ForceSignature() { forced = prev_; }

std::optional<std::vector<size_t>> ForceSignature::take(const OpDef& op) {
  if (!forced || forced->op_ != &op) return std::nullopt;
  forced->op_ = nullptr;  // the op's first call only
  return std::move(forced->per_axis_);
}

namespace {

// An op call on global inputs after signature choice and boxing.
struct Prepared {
  const Placement* placement = nullptr;
  TensorList metas;                 // metadata stand-ins of the inputs
  std::vector<Shape> out_shapes;
  std::vector<NdSbp> in_sbp, out_sbp;
  TensorList local_inputs;          // this rank's boxed shards
  TensorList read;                  // the inputs as the op reads them (compute layouts applied)
};

// inplace: the call writes input 0. A signature's cost counts the boxing of
// the inputs into it and of the written inputs back to their own layouts
// (Note [Writing back]).
Prepared prepare(const OpDef& op, const TensorList& given, const Attrs& attrs, bool inplace) {
  Prepared r;
  // A tensor with a compute layout (GlobalMeta::compute_sbp) is read in it:
  // boxed first, unless the op writes it (then it stays in its own layout,
  // and is written back there).
  r.read = given;  // kept in r: r.placement points into one of them
  TensorList& inputs = r.read;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = given[i];
    if (!t.defined() || !t.is_global() || !t.impl()->global()->compute_sbp || op.writes_input(i, inplace)) continue;
    inputs[i] = global_to_global(t, placement_of(t), *t.impl()->global()->compute_sbp);
  }
  for (const Tensor& t : inputs) {
    if (!t.defined() || !t.is_global()) continue;
    if (!r.placement) {
      r.placement = &placement_of(t);
    } else {
      MF_CHECK(placement_of(t) == *r.placement, ValueError, op.name, ": inputs on different placements (",
               r.placement->str(), " and ", placement_of(t).str(), "); move one with to_global(placement=...)");
    }
  }
  const Placement& p = *r.placement;
  const int64_t axes = p.ndim();
  for (const Tensor& t : inputs) r.metas.push_back(meta_like(t));
  // Ops whose output shapes depend on the values run broadcast; their
  // shapes come from the local result (interpret_global).
  if (!op.shape_depends_on_data) r.out_shapes = output_shapes(op, r.metas, attrs);

  // Current layout of every input (local inputs: broadcast).
  std::vector<NdSbp> current;
  for (const Tensor& t : inputs) {
    current.push_back(t.defined() && t.is_global() ? sbp_of(t) : NdSbp(size_t(axes), Sbp::broadcast()));
  }
  // A forced signature applies to the first call of its op only; an
  // auto-parallel plan forces every call's (Note [Auto parallel]).
  std::vector<size_t> force;
  if (auto planned = auto_parallel::FollowPlan::take(op)) {
    force = std::move(*planned);
  } else if (auto taken = ForceSignature::take(op)) {
    force = std::move(*taken);
    MF_CHECK(int64_t(force.size()) == axes, ValueError, op.name, ": a forced signature needs one index per mesh axis (",
             axes, "), got ", force.size());
  }

  r.in_sbp.assign(inputs.size(), NdSbp(size_t(axes), Sbp::broadcast()));
  r.out_sbp.assign(r.out_shapes.size(), NdSbp(size_t(axes), Sbp::broadcast()));
  // Whether sig on mesh axis a, after the axes before it, would leave a
  // rank an empty part of some dim.
  auto leaves_empty_part = [&](const SbpSignature& sig, int64_t a) {
    auto empty = [&](const NdSbp& chosen, const Sbp& s, const Shape& shape) {
      if (!s.is_split()) return false;
      int64_t parts = p.hierarchy()[size_t(a)];
      for (int64_t b = 0; b < a; ++b)
        if (chosen[size_t(b)] == s) parts *= p.hierarchy()[size_t(b)];
      return shape[size_t(s.axis())] < parts;
    };
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined() && empty(r.in_sbp[i], sig.inputs[i], inputs[i].shape())) return true;
    for (size_t o = 0; o < r.out_shapes.size(); ++o)
      if (empty(r.out_sbp[o], sig.outputs[o], r.out_shapes[o])) return true;
    return false;
  };
  for (int64_t a = 0; a < axes; ++a) {
    const std::vector<SbpSignature> candidates =
        sbp_candidates(op, r.metas, r.out_shapes, attrs, p.hierarchy()[size_t(a)]);
    if (!force.empty()) {
      MF_CHECK(force[size_t(a)] < candidates.size(), IndexError, op.name, ": signature ", force[size_t(a)],
               " forced on mesh axis ", a, " but the op has ", candidates.size());
      const SbpSignature& sig = candidates[force[size_t(a)]];
      for (size_t i = 0; i < inputs.size(); ++i) r.in_sbp[i][size_t(a)] = sig.inputs[i];
      for (size_t o = 0; o < r.out_shapes.size(); ++o) r.out_sbp[o][size_t(a)] = sig.outputs[o];
      continue;
    }
    double best = std::numeric_limits<double>::infinity();
    const SbpSignature* chosen = nullptr;
    for (const SbpSignature& sig : candidates) {
      if (leaves_empty_part(sig, a)) continue;
      double cost = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inputs[i].defined()) continue;
        const double bytes = double(inputs[i].numel()) * double(itemsize(inputs[i].dtype()));
        const Sbp& now = current[i][size_t(a)];
        cost += transition_cost(now, sig.inputs[i], bytes, p.hierarchy()[size_t(a)]);
        if (op.writes_input(i, inplace)) cost += transition_cost(sig.inputs[i], now, bytes, p.hierarchy()[size_t(a)]);
      }
      if (cost < best) {
        best = cost;
        chosen = &sig;
      }
    }
    for (size_t i = 0; i < inputs.size(); ++i) r.in_sbp[i][size_t(a)] = chosen->inputs[i];
    for (size_t o = 0; o < r.out_shapes.size(); ++o) r.out_sbp[o][size_t(a)] = chosen->outputs[o];
  }
  // Box the inputs to the signature: a global input already in its layout
  // keeps its own shard (in-place ops write into it).
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) {
      r.local_inputs.push_back(t);
    } else if (t.is_global()) {
      r.local_inputs.push_back(box(global_to_local(t), t.shape(), t.dtype(), p, sbp_of(t), p, r.in_sbp[i]));
    } else {
      r.local_inputs.push_back(global_to_local(global_from_full(t, p, r.in_sbp[i])));
    }
  }
  return r;
}

Tensor wrap_output(const Prepared& r, size_t o, DType dtype, Tensor local) {
  return make_global(std::move(local), r.out_shapes[o], dtype, *r.placement, r.out_sbp[o]);
}

// Note [Writing back]: an op writes the shards its inputs were boxed to. A
// written input boxed to another layout (optimizer state kept S(0) under a
// replicated parameter, ZeRO's layout) gets the written shard boxed back
// and copied into its own shard; a local input, the whole result. Decided
// by layouts only, so that every rank makes the same collectives.
void write_back(const OpDef& op, const TensorList& inputs, const Prepared& r, bool inplace) {
  const Placement& p = *r.placement;
  const int me = get_rank();
  const NdSbp all_broadcast(size_t(p.ndim()), Sbp::broadcast());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !op.writes_input(i, inplace)) continue;
    const NdSbp& own = t.is_global() ? sbp_of(t) : all_broadcast;
    if (t.is_global() && r.in_sbp[i] == own) continue;  // written in its own shard
    Tensor back = box(r.local_inputs[i], t.shape(), t.dtype(), p, r.in_sbp[i], p, own);
    if (!p.contains(me)) continue;
    Tensor dst = t.is_global() ? t.impl()->global()->local : t;
    // The same memory already (compared by storage: while tracing, tensors
    // have no data).
    if (dst.storage() == back.storage() && dst.storage_offset() == back.storage_offset() &&
        dst.strides() == back.strides())
      continue;
    NoGradGuard no_grad;
    copy_(dst, back);
  }
}

}  // namespace

// The attrs of the local op: an attr holding output 0's shape gets the
// shard's shape.
Attrs local_attrs(const OpDef& op, const Attrs& attrs, const Prepared& r) {
  if (op.output_shape_attr.empty()) return attrs;
  Attrs out;
  for (const auto& [key, value] : attrs.items()) {
    if (key == op.output_shape_attr) {
      out.set(key, local_shape(r.out_shapes[0], r.out_sbp[0], *r.placement, r.placement->coords(get_rank())));
    } else {
      out.set(key, value);
    }
  }
  return out;
}

TensorList interpret_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  Prepared r = prepare(op, inputs, attrs, false);
  TensorList local_outputs;
  if (r.placement->contains(get_rank())) {
    NoGradGuard no_grad;
    // A global tensor's metadata is contiguous whatever its shards' strides,
    // so reshape may pick view for a shard that needs a copy.
    if (op.name == "view") r.local_inputs[0] = contiguous(r.local_inputs[0]);
    local_outputs = dispatch::apply(op, r.local_inputs, local_attrs(op, attrs, r));
  }
  if (op.mutates) write_back(op, inputs, r, false);
  const std::vector<Shape> planned_shapes = r.out_shapes;
  if (op.shape_depends_on_data) {
    MF_CHECK(r.placement->contains(get_rank()), ValueError, op.name,
             ": its output shape depends on the data, so every rank must be in the inputs' placement");
    for (const Tensor& t : local_outputs) {
      r.out_shapes.push_back(t.shape());
      r.out_sbp.emplace_back(size_t(r.placement->ndim()), Sbp::broadcast());
    }
  }
  TensorList outputs;
  for (size_t o = 0; o < r.out_shapes.size(); ++o) {
    DType dtype = !local_outputs.empty() ? local_outputs[o].dtype()
                  : op.view              ? inputs[0].dtype()
                                         : dispatch::infer(op, r.metas, attrs)[o].dtype;
    outputs.push_back(wrap_output(r, o, dtype, local_outputs.empty() ? Tensor() : local_outputs[o]));
  }
  if (auto_parallel::LogCalls::active()) auto_parallel::log_call(op, false, inputs, r.metas, planned_shapes, attrs, outputs);
  return outputs;
}

Tensor interpret_global_inplace(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  const Tensor& self = inputs[0];
  MF_CHECK(self.is_global(), ValueError, op.name, "_: writing a global result into a local tensor");
  Prepared r = prepare(op, inputs, attrs, true);
  if (r.placement->contains(get_rank())) {
    // Runs in place on the boxed shards (their own shards where the
    // signature keeps their layouts).
    NoGradGuard no_grad;
    dispatch::apply_inplace(op, r.local_inputs, attrs);
  }
  write_back(op, inputs, r, true);
  if (auto_parallel::LogCalls::active()) auto_parallel::log_call(op, true, inputs, r.metas, r.out_shapes, attrs, {});
  return self;
}

}  // namespace mf::distributed
