// The SBP rule builders of meshflow/distributed/sbp_rules.h.
#include "meshflow/distributed/sbp_rules.h"

#include <algorithm>

namespace mf::sbp {
namespace {

// out_dim of an output of rank nd, as a dim of t aligned from the right;
// -1 when t lacks it or broadcasts along it.
int64_t aligned_dim(const Tensor& t, int64_t out_dim, int64_t nd, int64_t out_size) {
  const int64_t td = out_dim - (nd - t.dim());
  return td >= 0 && t.size(td) == out_size ? td : -1;
}

Sbp split_or_broadcast(int64_t dim) { return dim >= 0 ? Sbp::split(dim) : Sbp::broadcast(); }

}  // namespace

SbpRuleFn elementwise(Partial partial, int partial_input) {
  return [partial, partial_input](const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t) {
    std::vector<SbpSignature> sigs;
    const Shape& out = outs[0];
    const int64_t nd = int64_t(out.size());
    for (int64_t d = 0; d < nd; ++d) {
      SbpSignature s;
      for (const Tensor& t : in)
        s.inputs.push_back(t.defined() ? split_or_broadcast(aligned_dim(t, d, nd, out[size_t(d)])) : Sbp::broadcast());
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

SbpRuleFn matmul(bool with_bias) {
  return [with_bias](const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t) {
    const size_t ia = with_bias ? 1 : 0, ib = ia + 1;
    const Tensor& a = in[ia];
    const Tensor& b = in[ib];
    const Shape& out = outs[0];
    const int64_t nd = int64_t(out.size());
    auto bias = [&](std::vector<Sbp> when_present) { return with_bias ? when_present : std::vector<Sbp>{}; };
    auto bias_split = [&](int64_t out_dim) {
      return bias({split_or_broadcast(aligned_dim(in[0], out_dim, nd, out[size_t(out_dim)]))});
    };
    auto sig = [&](std::vector<Sbp> s, Sbp sa, Sbp sb, Sbp o) {
      s.push_back(sa);
      s.push_back(sb);
      return SbpSignature{std::move(s), {o}};
    };
    std::vector<SbpSignature> sigs;
    if (a.dim() >= 2) sigs.push_back(sig(bias_split(nd - 2), Sbp::split(a.dim() - 2), Sbp::broadcast(), Sbp::split(nd - 2)));
    if (b.dim() >= 2) sigs.push_back(sig(bias_split(nd - 1), Sbp::broadcast(), Sbp::split(b.dim() - 1), Sbp::split(nd - 1)));
    // Batch dims present (unbroadcast) in both operands.
    for (int64_t d = 0; d < nd - 2; ++d) {
      const int64_t da = aligned_dim(a, d, nd, out[size_t(d)]), db = aligned_dim(b, d, nd, out[size_t(d)]);
      if (da >= 0 && db >= 0) sigs.push_back(sig(bias_split(d), Sbp::split(da), Sbp::split(db), Sbp::split(d)));
    }
    // The contraction split: each rank sums its part of k.
    const int64_t ka = a.dim() - 1, kb = b.dim() >= 2 ? b.dim() - 2 : 0;
    sigs.push_back(sig(bias({Sbp::partial_sum()}), Sbp::split(ka), Sbp::split(kb), Sbp::partial_sum()));
    sigs.push_back(sig(bias({Sbp::partial_sum()}), Sbp::partial_sum(), Sbp::broadcast(), Sbp::partial_sum()));
    sigs.push_back(sig(bias({Sbp::partial_sum()}), Sbp::broadcast(), Sbp::partial_sum(), Sbp::partial_sum()));
    return sigs;
  };
}

SbpRuleFn reduce(bool split_reduced_to_partial, bool partial_passes) {
  return [=](const TensorList& in, const std::vector<Shape>& outs, const Attrs& attrs, int64_t) {
    const Tensor& x = in[0];
    const Shape dims = attrs.has("dims") ? attrs.get_shape("dims") : Shape{};
    const bool keepdim = attrs.has("keepdim") && attrs.get_bool("keepdim");
    std::vector<bool> reduced(size_t(x.dim()), dims.empty());
    for (int64_t d : dims) {  // already checked by infer; a 0-d input's dim 0 names no dim
      const int64_t n = d < 0 ? d + x.dim() : d;
      if (n >= 0 && n < x.dim()) reduced[size_t(n)] = true;
    }
    std::vector<SbpSignature> sigs;
    int64_t out_d = 0;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (!reduced[size_t(d)]) {
        sigs.push_back({{Sbp::split(d)}, std::vector<Sbp>(outs.size(), Sbp::split(out_d))});
      } else if (split_reduced_to_partial) {
        sigs.push_back({{Sbp::split(d)}, std::vector<Sbp>(outs.size(), Sbp::partial_sum())});
      }
      if (!reduced[size_t(d)] || keepdim) ++out_d;
    }
    if (partial_passes) sigs.push_back({{Sbp::partial_sum()}, std::vector<Sbp>(outs.size(), Sbp::partial_sum())});
    return sigs;
  };
}

SbpRuleFn independent(CoupledDims coupled) {
  return [coupled = std::move(coupled)](const TensorList& in, const std::vector<Shape>& outs, const Attrs& attrs,
                                        int64_t) {
    const Shape& out = outs[0];
    const int64_t nd = int64_t(out.size());
    std::vector<bool> free(size_t(nd), true);
    for (int64_t d : coupled(in, attrs)) {
      const int64_t n = d < 0 ? d + nd : d;
      if (n >= 0 && n < nd) free[size_t(n)] = false;
    }
    std::vector<SbpSignature> sigs;
    for (int64_t d = 0; d < nd; ++d) {
      if (!free[size_t(d)]) continue;
      SbpSignature s;
      for (const Tensor& t : in) {
        const bool aligned = t.defined() && t.dim() == nd && t.size(d) == out[size_t(d)];
        s.inputs.push_back(aligned ? Sbp::split(d) : Sbp::broadcast());
      }
      bool ok = true;
      for (const Shape& o : outs) {
        ok = ok && int64_t(o.size()) == nd && o[size_t(d)] == out[size_t(d)];
        s.outputs.push_back(Sbp::split(d));
      }
      if (ok) sigs.push_back(std::move(s));
    }
    return sigs;
  };
}

SbpRuleFn independent_of_attr(const char* name) {
  return independent([name = std::string(name)](const TensorList&, const Attrs& attrs) {
    if (!attrs.has(name)) return std::vector<int64_t>{};
    const auto& v = attrs.items();
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& kv) { return kv.first == name; });
    if (std::holds_alternative<Shape>(it->second.value())) {
      const Shape& dims = attrs.get_shape(name);
      return std::vector<int64_t>(dims.begin(), dims.end());
    }
    return std::vector<int64_t>{attrs.get_int(name)};
  });
}

SbpRuleFn leading_dims(int64_t n) {
  return independent([n](const TensorList& in, const Attrs&) {
    std::vector<int64_t> coupled;
    for (int64_t d = n; d < in[0].dim(); ++d) coupled.push_back(d);
    return coupled;
  });
}

SbpRuleFn batched(std::vector<int64_t> input_core, std::vector<int64_t> output_core) {
  return [input_core = std::move(input_core), output_core = std::move(output_core)](
             const TensorList& in, const std::vector<Shape>& outs, const Attrs&, int64_t) {
    const int64_t nb = int64_t(outs[0].size()) - output_core[0];
    std::vector<SbpSignature> sigs;
    for (int64_t d = 0; d < nb; ++d) {
      SbpSignature s;
      for (size_t i = 0; i < in.size(); ++i) {
        const Tensor& t = in[i];
        const int64_t t_batch = t.defined() ? t.dim() - input_core[i] : 0, td = d - (nb - t_batch);
        s.inputs.push_back(td >= 0 && t.size(td) == outs[0][size_t(d)] ? Sbp::split(td) : Sbp::broadcast());
      }
      for (size_t j = 0; j < outs.size(); ++j) s.outputs.push_back(Sbp::split(d));
      sigs.push_back(std::move(s));
    }
    return sigs;
  };
}

SbpRuleFn broadcast_only() {
  return [](const TensorList&, const std::vector<Shape>&, const Attrs&, int64_t) {
    return std::vector<SbpSignature>{};
  };
}

}  // namespace mf::sbp
