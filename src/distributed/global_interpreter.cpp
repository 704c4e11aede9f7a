// The eager global interpreter: runs an op whose inputs are global tensors
// by choosing an SBP signature, boxing the inputs to it, running the local
// op on each rank's shards and wrapping the results as global tensors.
//
// Note [SBP signatures]: a rule lists, for one mesh axis, the ways an op can
// run: the SBP each input must have and the SBP that the outputs then have
// (elementwise ops pass a split through, matmul turns a split contraction
// into a partial sum, ...). Every op can run with every input and output
// broadcast (each rank computes the whole result), which is the signature
// of ops without a rule and the one that attrs holding global shapes
// (sum_to, ...) need; view and expand have rules and get their "size" attr
// rewritten to the local shape. On an n-D mesh the signature is chosen per
// mesh axis, each axis's candidates ranked by the bytes their boxing moves
// for the inputs as they are. Local (non-global) inputs, such as the
// factory results inside backward formulas, are taken as broadcast: the
// same value on every rank. Autograd is recorded by dispatch at the global
// level, so backward formulas run through this interpreter too.
#include "distributed/global_interpreter.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "meshflow/autograd.h"
#include "meshflow/distributed/boxing.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/distributed/global.h"
#include "meshflow/dispatch.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"

namespace mf::distributed {
namespace {

struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
};
// parts: the number of ranks on the mesh axis the signature is for.
using SbpRule = std::function<std::vector<SbpSignature>(const TensorList& inputs, const std::vector<Shape>& outputs,
                                                        const Attrs& attrs, int64_t parts)>;

enum class Partial { None, All, One };

// Elementwise with broadcasting: output dim d split -> each input split on
// its aligned dim (or broadcast where it has size 1 or lacks the dim).
// Partial::All: all inputs partial -> partial (add, sub, neg);
// Partial::One: input `partial_input` partial, the others broadcast
// (mul's either input, div's numerator).
SbpRule elementwise(Partial partial, int partial_input = -1) {
  return [partial, partial_input](const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t) {
    std::vector<SbpSignature> sigs;
    const Shape& out = outs[0];
    const int64_t nd = int64_t(out.size());
    for (int64_t d = 0; d < nd; ++d) {
      SbpSignature s;
      for (const Tensor& t : in) {
        if (!t.defined()) {
          s.inputs.push_back(Sbp::broadcast());
          continue;
        }
        const int64_t td = d - (nd - t.dim());
        s.inputs.push_back(td >= 0 && t.size(td) == out[size_t(d)] ? Sbp::split(td) : Sbp::broadcast());
      }
      s.outputs.assign(outs.size(), Sbp::split(d));
      sigs.push_back(std::move(s));
    }
    if (partial == Partial::All) {
      sigs.push_back({std::vector<Sbp>(in.size(), Sbp::partial_sum()), std::vector<Sbp>(outs.size(), Sbp::partial_sum())});
    } else if (partial == Partial::One) {
      for (size_t i = 0; i < in.size(); ++i) {
        if (partial_input >= 0 && int(i) != partial_input) continue;
        std::vector<Sbp> ins(in.size(), Sbp::broadcast());
        ins[i] = Sbp::partial_sum();
        sigs.push_back({ins, std::vector<Sbp>(outs.size(), Sbp::partial_sum())});
      }
    }
    return sigs;
  };
}

// a (..., n, k) @ b (..., k, m); for addmm a leading input t broadcast to
// the output.
SbpRule matmul_rule(bool has_t) {
  return [has_t](const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t) {
    const size_t ia = has_t ? 1 : 0, ib = ia + 1;
    const Tensor& a = in[ia];
    const Tensor& b = in[ib];
    const int64_t nd = int64_t(outs[0].size());
    auto t_sbp = [&](int64_t out_dim) {
      if (!has_t) return std::vector<Sbp>{};
      const Tensor& t = in[0];
      const int64_t td = out_dim - (nd - t.dim());
      return std::vector<Sbp>{td >= 0 && t.size(td) == outs[0][size_t(out_dim)] ? Sbp::split(td) : Sbp::broadcast()};
    };
    auto sig = [&](std::vector<Sbp> t, Sbp sa, Sbp sb, Sbp out) {
      t.push_back(sa);
      t.push_back(sb);
      return SbpSignature{t, {out}};
    };
    std::vector<SbpSignature> sigs;
    sigs.push_back(sig(t_sbp(nd - 2), Sbp::split(a.dim() - 2), Sbp::broadcast(), Sbp::split(nd - 2)));
    sigs.push_back(sig(t_sbp(nd - 1), Sbp::broadcast(), Sbp::split(b.dim() - 1), Sbp::split(nd - 1)));
    // Batch dims present (unbroadcast) in both operands.
    for (int64_t d = 0; d < nd - 2; ++d) {
      const int64_t da = d - (nd - a.dim()), db = d - (nd - b.dim());
      if (da >= 0 && db >= 0 && a.size(da) == outs[0][size_t(d)] && b.size(db) == outs[0][size_t(d)])
        sigs.push_back(sig(t_sbp(d), Sbp::split(da), Sbp::split(db), Sbp::split(d)));
    }
    std::vector<Sbp> tp = has_t ? std::vector<Sbp>{Sbp::partial_sum()} : std::vector<Sbp>{};
    sigs.push_back(sig(tp, Sbp::split(a.dim() - 1), Sbp::split(b.dim() - 2), Sbp::partial_sum()));
    sigs.push_back(sig(tp, Sbp::partial_sum(), Sbp::broadcast(), Sbp::partial_sum()));
    sigs.push_back(sig(tp, Sbp::broadcast(), Sbp::partial_sum(), Sbp::partial_sum()));
    return sigs;
  };
}

// sum / mean over attr "dims" (empty: all) with "keepdim".
SbpRule reduce_rule(bool split_reduced_to_partial) {
  return [split_reduced_to_partial](const TensorList& in, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
    const Tensor& x = in[0];
    Shape dims = attrs.get_shape("dims");
    const bool keepdim = attrs.get_bool("keepdim");
    std::vector<bool> reduced(size_t(x.dim()), dims.empty());
    for (int64_t d : dims) reduced[size_t(d < 0 ? d + x.dim() : d)] = true;
    std::vector<SbpSignature> sigs;
    int64_t out_d = 0;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (!reduced[size_t(d)]) {
        sigs.push_back({{Sbp::split(d)}, {Sbp::split(out_d)}});
      } else if (split_reduced_to_partial) {
        sigs.push_back({{Sbp::split(d)}, {Sbp::partial_sum()}});
      }
      if (!reduced[size_t(d)] || keepdim) ++out_d;
    }
    sigs.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
    return sigs;
  };
}

// permute(dims): a split follows its dim.
std::vector<SbpSignature> permute_rule(const TensorList& in, const std::vector<Shape>&, const Attrs& attrs, int64_t) {
  const Shape& perm = attrs.get_shape("dims");
  std::vector<SbpSignature> sigs;
  for (size_t out_d = 0; out_d < perm.size(); ++out_d) {
    int64_t d = perm[out_d] < 0 ? perm[out_d] + in[0].dim() : perm[out_d];
    sigs.push_back({{Sbp::split(d)}, {Sbp::split(int64_t(out_d))}});
  }
  sigs.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return sigs;
}

// view(size): a split dim stays split where the output has a dim that
// starts at the same offset (the product of the dims before it) and either
// has the same size, or merges this dim with the ones after it, or is the
// first of the dims this one unfolds into, when the split divides evenly
// (each rank's part then stays one balanced block, as when linear folds
// (N, T, E) into (N * T, E) and back).
std::vector<SbpSignature> view_rule(const TensorList& in, const std::vector<Shape>& outs, const Attrs&,
                                    int64_t parts) {
  const Shape& from = in[0].shape();
  const Shape& to = outs[0];
  std::vector<SbpSignature> sigs;
  int64_t before_in = 1;
  for (size_t d = 0; d < from.size(); ++d) {
    int64_t before_out = 1;
    for (size_t e = 0; e < to.size(); ++e) {
      if (before_out == before_in && from[d] > 1) {
        int64_t merged = 1;
        size_t last = d;
        while (last < from.size() && merged * from[last] <= to[e] && to[e] % (merged * from[last]) == 0) {
          merged *= from[last++];
          if (merged == to[e]) break;
        }
        // Or this dim splits into the output dims from e on (the unfold
        // back to (N, T, E)).
        int64_t unfolded = 1;
        for (size_t f = e; f < to.size() && unfolded < from[d]; ++f) unfolded *= to[f];
        const bool same = to[e] == from[d];
        const bool merges = merged == to[e] && from[d] % parts == 0;
        const bool unfolds = unfolded == from[d] && to[e] % parts == 0;
        if (same || merges || unfolds) sigs.push_back({{Sbp::split(int64_t(d))}, {Sbp::split(int64_t(e))}});
        break;
      }
      before_out *= to[e];
    }
    before_in *= from[d];
  }
  sigs.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return sigs;
}

// expand(size): dims that are not expanded keep their split.
std::vector<SbpSignature> expand_rule(const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t) {
  const Tensor& x = in[0];
  const int64_t nd = int64_t(outs[0].size());
  std::vector<SbpSignature> sigs;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t e = d + (nd - x.dim());
    if (x.size(d) == outs[0][size_t(e)] && x.size(d) > 1) sigs.push_back({{Sbp::split(d)}, {Sbp::split(e)}});
  }
  return sigs;
}

// cross_entropy_backward(grad, logits (N, C), target (N), weight (C), lse (N),
// total_weight): each row's gradient needs only its own row, the loss's
// normaliser comes in as total_weight, so the rows can be split.
std::vector<SbpSignature> cross_entropy_backward_rule(const TensorList& in, const std::vector<Shape>&, const Attrs&,
                                                      int64_t) {
  const int64_t rows = in[1].size(0);
  auto rowwise = [&](const Tensor& t) {
    return t.defined() && t.dim() >= 1 && t.size(0) == rows ? Sbp::split(0) : Sbp::broadcast();
  };
  return {{{rowwise(in[0]), Sbp::split(0), Sbp::split(0), Sbp::broadcast(), rowwise(in[4]), Sbp::broadcast()},
           {Sbp::split(0)}}};
}

const std::unordered_map<std::string, SbpRule>& rules() {
  static const std::unordered_map<std::string, SbpRule> table = [] {
    std::unordered_map<std::string, SbpRule> t;
    for (const char* name : {"add", "sub"}) t[name] = elementwise(Partial::All);
    t["neg"] = elementwise(Partial::All);
    t["clone"] = elementwise(Partial::All);  // linear: a partial sum stays one
    t["mul"] = elementwise(Partial::One);
    t["div"] = elementwise(Partial::One, 0);
    for (const char* name : {"relu", "gelu", "gelu_backward", "silu", "leaky_relu", "elu", "softplus", "clamp", "abs",
                             "sign", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
                             "sigmoid", "erf", "pow", "pow_scalar", "maximum", "minimum", "atan2", "where",
                             "masked_fill", "lerp", "addcmul", "addcdiv", "cast", "remainder", "div_rounding",
                             "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                             "logical_not", "isnan", "isinf", "isfinite", "bitwise_and", "bitwise_or", "bitwise_xor",
                             "bitwise_not", "floor", "ceil", "round", "trunc"})
      t[name] = elementwise(Partial::None);
    t["matmul"] = matmul_rule(false);
    t["addmm"] = matmul_rule(true);
    t["sum"] = reduce_rule(true);
    t["mean"] = reduce_rule(false);
    t["permute"] = permute_rule;
    t["view"] = view_rule;
    t["expand"] = expand_rule;
    t["cross_entropy_backward"] = cross_entropy_backward_rule;
    return t;
  }();
  return table;
}

std::vector<Shape> output_shapes(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  std::vector<Shape> shapes;
  if (op.view) {
    for (const Tensor& t : op.view(inputs, attrs)) shapes.push_back(t.shape());
  } else {
    for (const TensorMeta& m : op.infer(inputs, attrs)) shapes.push_back(m.sizes);
  }
  return shapes;
}

// A metadata tensor standing for a global input in infer and view (which
// must not see the GlobalMeta: they would refuse it as an op input).
Tensor meta_like(const Tensor& t) { return t.defined() ? make_meta(t.shape(), t.dtype(), t.device()) : t; }

}  // namespace

namespace {

// An op call on global inputs after signature choice and boxing.
struct Prepared {
  const Placement* placement = nullptr;
  TensorList metas;                 // metadata stand-ins of the inputs
  std::vector<Shape> out_shapes;
  std::vector<NdSbp> in_sbp, out_sbp;
  TensorList local_inputs;          // this rank's boxed shards
};

// inplace: prefer, per mesh axis, the signatures that keep input 0's
// layout, so that the op writes into input 0's own shard.
Prepared prepare(const OpDef& op, const TensorList& inputs, const Attrs& attrs, bool inplace) {
  Prepared r;
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
  r.out_shapes = output_shapes(op, r.metas, attrs);

  // Current layout of every input (local inputs: broadcast).
  std::vector<NdSbp> current;
  for (const Tensor& t : inputs) {
    current.push_back(t.defined() && t.is_global() ? sbp_of(t) : NdSbp(size_t(axes), Sbp::broadcast()));
  }
  auto rule = rules().find(op.name);

  r.in_sbp.assign(inputs.size(), NdSbp(size_t(axes), Sbp::broadcast()));
  r.out_sbp.assign(r.out_shapes.size(), NdSbp(size_t(axes), Sbp::broadcast()));
  for (int64_t a = 0; a < axes; ++a) {
    std::vector<SbpSignature> candidates;
    if (rule != rules().end() && !r.out_shapes.empty())
      candidates = rule->second(r.metas, r.out_shapes, attrs, p.hierarchy()[size_t(a)]);
    candidates.push_back({std::vector<Sbp>(inputs.size(), Sbp::broadcast()),
                          std::vector<Sbp>(r.out_shapes.size(), Sbp::broadcast())});
    double best = std::numeric_limits<double>::infinity();
    const SbpSignature* chosen = nullptr;
    bool keeps_self = false;
    for (const SbpSignature& sig : candidates) keeps_self = keeps_self || sig.inputs[0] == current[0][size_t(a)];
    for (const SbpSignature& sig : candidates) {
      if (inplace && keeps_self && sig.inputs[0] != current[0][size_t(a)]) continue;
      double cost = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inputs[i].defined()) continue;
        const double bytes = double(inputs[i].numel()) * double(itemsize(inputs[i].dtype()));
        cost += transition_cost(current[i][size_t(a)], sig.inputs[i], bytes, p.hierarchy()[size_t(a)]);
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
  Tensor g = make_meta(r.out_shapes[o], dtype);
  g.impl()->set_global(std::make_shared<const GlobalMeta>(GlobalMeta{*r.placement, r.out_sbp[o], std::move(local)}));
  return g;
}

}  // namespace

// The attrs of the local op: view and expand take the output's shape, which
// on a shard is the local shape.
Attrs local_attrs(const OpDef& op, const Attrs& attrs, const Prepared& r) {
  if (op.name != "view" && op.name != "expand") return attrs;
  Attrs out;
  for (const auto& [key, value] : attrs.items()) {
    if (key == "size") {
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
  TensorList outputs;
  for (size_t o = 0; o < r.out_shapes.size(); ++o) {
    DType dtype = !local_outputs.empty() ? local_outputs[o].dtype()
                  : op.view              ? inputs[0].dtype()
                                         : op.infer(r.metas, attrs)[o].dtype;
    outputs.push_back(wrap_output(r, o, dtype, local_outputs.empty() ? Tensor() : local_outputs[o]));
  }
  return outputs;
}

Tensor interpret_global_inplace(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  const Tensor& self = inputs[0];
  MF_CHECK(self.is_global(), ValueError, op.name, "_: writing a global result into a local tensor");
  Prepared r = prepare(op, inputs, attrs, true);
  const GlobalMeta& target = *self.impl()->global();
  if (!target.placement.contains(get_rank())) return self;
  {
    // Runs in place on the boxed shard of self (its own shard when the
    // signature keeps its layout), so update ops that read and write
    // input 0 and further inputs work as on local tensors.
    NoGradGuard no_grad;
    dispatch::apply_inplace(op, r.local_inputs, attrs);
  }
  // Decided by layouts only, so that every rank makes the same collectives.
  if (r.in_sbp[0] != target.sbp) {
    Tensor local =
        box(r.local_inputs[0], self.shape(), self.dtype(), target.placement, r.in_sbp[0], target.placement, target.sbp);
    NoGradGuard no_grad;
    Tensor dst = target.local;
    copy_(dst, local);
  }
  return self;
}

}  // namespace mf::distributed
