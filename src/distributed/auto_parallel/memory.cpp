// The memory model of the strategy search (Note [Predicted memory]).
#include <algorithm>
#include <limits>
#include <numeric>

#include "distributed/auto_parallel/problem.h"
#include "meshflow/dispatch.h"

namespace mf::distributed::auto_parallel::detail {

// Note [Predicted memory]: the peak of a step's values per rank follows
// the rules by which the graph plans its arena (graph/passes.cpp and
// plan_memory in graph/executor.cpp), applied to the log:
//  * a view's output, and an in-place call's, live in their input's buffer;
//  * a clone of a value read for the last time, and an elementwise call's
//    output of the size and layout of an input read for the last time (and
//    by no other input), take that input's buffer;
//  * an update (a call that writes its inputs and makes no output) runs
//    right after the last call that touches its inputs' buffers;
//  * an input boxed to another layout is a buffer of its own at its call,
//    with the packed or permuted copy boxing makes around a collective; a
//    parameter gathered along dim 0 is gathered one gather ahead;
//  * the step's inputs are held from the start to their last read;
//  * a call's kernel scratch (Note [Kernel scratch]: operand copies, GEMM
//    and convolution workspaces) is held at its call only, sized by the
//    CPU kernel's ScratchFn on the rank's shards (CallChoice::scratch).
// A buffer counts from its first call to its last, both included; the peak
// is the largest sum of buffers live at one call (the graph's live peak).
double peak_live_bytes(const Problem& p, const std::vector<int32_t>& assign, std::vector<int64_t>* at_peak) {
  static const OpDef& clone_op = dispatch::op("clone");
  const auto& values = p.log.values;
  const auto& calls = p.log.calls;
  const size_t nv = values.size(), nc = calls.size(), ns = p.num_sources();
  std::vector<int64_t> parent(nv);
  std::iota(parent.begin(), parent.end(), int64_t(0));
  auto root = [&](int64_t v) {
    while (parent[size_t(v)] != v) v = parent[size_t(v)] = parent[size_t(parent[size_t(v)])];
    return v;
  };
  auto local_bytes = [&](const Shape& shape, DType dtype, const NdSbp& layout) {
    return nbytes(shape, dtype) / parts_of(layout, p.mesh);
  };
  auto choice = [&](size_t c) -> const CallChoice& { return p.call_choices[c][size_t(assign[ns + c])]; };
  for (const CallRecord& rec : calls) {
    if ((!rec.op->view && !rec.inplace) || rec.inputs.empty() || rec.inputs[0] < 0) continue;
    for (size_t o = 0; o < rec.outputs.size() && (rec.op->view || o == 0); ++o)
      if (rec.outputs[o] >= 0) parent[size_t(rec.outputs[o])] = root(rec.inputs[0]);
  }
  // A gradient boxed into its parameter's layout by a collective: the
  // collective's buffers are in use until the update that waits for it,
  // which stays where it is.
  std::vector<bool> communicated(ns, false);
  for (const auto& [v, src] : p.log.accumulations)
    if (moves(p.mesh, p.layout_of(v, assign), p.source_choices[size_t(src)][size_t(assign[size_t(src)])]))
      communicated[size_t(src)] = true;
  auto source_of = [&](int64_t v) {
    return values[size_t(v)].kind == ValueKind::Source ? values[size_t(v)].node : int64_t(-1);
  };
  std::vector<int64_t> last(nv, -1);  // per buffer: the last call touching it, in log order
  std::vector<bool> written(nv, false);  // per buffer: written by a later call (in place)
  for (const CallRecord& rec : calls)
    for (size_t i = 0; i < rec.inputs.size(); ++i)
      if (rec.inputs[i] >= 0 && rec.op->writes_input(i, rec.inplace)) written[size_t(root(rec.inputs[i]))] = true;
  for (size_t c = 0; c < nc; ++c)
    for (const auto* list : {&calls[c].inputs, &calls[c].outputs})
      for (int64_t v : *list)
        if (v >= 0) last[size_t(root(v))] = std::max(last[size_t(root(v))], int64_t(c));
  for (size_t c = 0; c < nc; ++c) {
    const CallRecord& rec = calls[c];
    if (rec.op->view || rec.inplace || rec.outputs.size() != 1 || rec.outputs[0] < 0) continue;
    if (rec.op != &clone_op && !rec.op->elementwise) continue;
    const int64_t out = rec.outputs[0];
    if (rec.op == &clone_op && rec.inputs[0] >= 0 && values[size_t(rec.inputs[0])].gradient >= 0) {
      // A parameter's gradient stored (AccumulateGrad's clone): a boxed
      // gradient is stored in the collective's output buffer, and one
      // already in place keeps its buffer if it is a whole one.
      const ValueRecord& laid_out = values[size_t(rec.inputs[0])];
      const int64_t g = root(laid_out.gradient);
      if (!communicated[size_t(laid_out.node)] && g == laid_out.gradient && values[size_t(g)].kind == ValueKind::Output &&
          last[size_t(g)] <= int64_t(c)) {
        const int64_t out_root = root(out);
        parent[size_t(out_root)] = g;
        last[size_t(g)] = std::max(last[size_t(g)], last[size_t(out_root)]);
      }
      continue;
    }
    const ValueRecord& ov = values[size_t(out)];
    const NdSbp out_layout = p.layout_of(out, assign);
    for (size_t i = 0; i < rec.inputs.size(); ++i) {
      const int64_t x = rec.inputs[i];
      if (x < 0 || root(x) != x || values[size_t(x)].kind != ValueKind::Output || last[size_t(x)] != int64_t(c))
        continue;
      const ValueRecord& xv = values[size_t(x)];
      const NdSbp x_layout = p.layout_of(x, assign);
      if (xv.shape != ov.shape || xv.dtype != ov.dtype || x_layout != choice(c).in[i] || x_layout != out_layout)
        continue;
      bool shared = false;
      for (size_t k = 0; k < rec.inputs.size(); ++k)
        shared = shared || (k != i && rec.inputs[k] >= 0 && root(rec.inputs[k]) == x);
      if (shared) continue;
      const int64_t out_root = root(out);
      parent[size_t(out_root)] = x;
      written[size_t(x)] = true;
      last[size_t(x)] = std::max(last[size_t(x)], last[size_t(out_root)]);
      break;
    }
  }
  // When each call runs (updates move up), and each buffer's span.
  std::vector<int64_t> touched(nv, -1), first(nv, std::numeric_limits<int64_t>::max()), end(nv, -1);
  std::vector<int64_t> when(nc), source_last(ns, 0);
  std::vector<std::vector<int64_t>> readers(nv);  // per buffer: when the calls that read it run
  for (size_t c = 0; c < nc; ++c) {
    const CallRecord& rec = calls[c];
    bool writes = false, makes = false, waits = false;
    for (size_t i = 0; i < rec.inputs.size(); ++i) writes = writes || rec.op->writes_input(i, rec.inplace);
    for (int64_t v : rec.outputs) makes = makes || v >= 0;
    for (int64_t v : rec.inputs) waits = waits || (v >= 0 && source_of(v) >= 0 && communicated[size_t(source_of(v))]);
    int64_t t = int64_t(c);
    if (writes && !makes && !waits && !rec.op->collective) {
      t = 0;
      for (int64_t v : rec.inputs)
        if (v >= 0) t = std::max(t, touched[size_t(root(v))]);
    }
    when[c] = t;
    for (int64_t v : rec.inputs)
      if (v >= 0 && source_of(v) >= 0) source_last[size_t(source_of(v))] = std::max(source_last[size_t(source_of(v))], t);
    if (!rec.op->view)
      for (int64_t v : rec.inputs)
        if (v >= 0) readers[size_t(root(v))].push_back(t);
    for (const auto* list : {&rec.inputs, &rec.outputs})
      for (int64_t v : *list) {
        if (v < 0) continue;
        const size_t r = size_t(root(v));
        touched[r] = std::max(touched[r], t);
        first[r] = std::min(first[r], t);
        end[r] = std::max(end[r], t);
      }
  }
  for (const auto& [v, src] : p.log.accumulations) {
    const size_t r = size_t(root(v));
    if (communicated[size_t(src)] && end[r] >= 0) end[r] = std::max(end[r], source_last[size_t(src)]);
  }
  std::vector<double> delta(nc + 2, 0.0);
  auto hold = [&](double bytes, int64_t from, int64_t to) {
    delta[size_t(from)] += bytes;
    delta[size_t(to) + 1] -= bytes;
  };

  // A cheap value read across a long gap (forward to backward) is made
  // again before its later readers if its inputs are still held there
  // (recompute_elementwise in graph/passes.cpp): it is not held across the
  // gap. Its inputs may be held up to slack calls longer to feed it.
  auto is_held = [&](int64_t r) {
    return values[size_t(r)].kind == ValueKind::Output ||
           (values[size_t(r)].kind == ValueKind::Fixed && values[size_t(r)].step_input);
  };
  static const OpDef& layer_norm_op = dispatch::op("layer_norm");
  const auto slack = int64_t(nc / 64), long_gap = std::max<int64_t>(2, int64_t(nc / 32));
  std::vector<std::pair<int64_t, int64_t>> gap(nv, {0, -1});  // per buffer: calls it is not held over
  for (size_t v = 0; v < nv; ++v) {
    const ValueRecord& r = values[v];
    if (r.kind != ValueKind::Output || r.index != 0 || root(int64_t(v)) != int64_t(v) || written[v]) continue;
    const CallRecord& maker = calls[size_t(r.node)];
    if (maker.inplace || maker.op->mutates || (maker.op != &clone_op && maker.op != &layer_norm_op && !maker.op->elementwise))
      continue;
    std::vector<int64_t>& uses = readers[v];
    std::sort(uses.begin(), uses.end());
    uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
    size_t split = uses.size();
    for (size_t k = uses.size(); k-- > 1;) {
      bool alive = true;
      for (int64_t in : maker.inputs)
        if (in >= 0 && is_held(root(in))) alive = alive && end[size_t(root(in))] + slack >= uses[k];
      if (!alive) break;
      split = k;
    }
    if (split == uses.size() || uses[split] - uses[split - 1] < long_gap) continue;
    gap[v] = {uses[split - 1] + 1, uses[split] - 1};
    for (int64_t in : maker.inputs)
      if (in >= 0 && is_held(root(in))) end[size_t(root(in))] = std::max(end[size_t(root(in))], uses[split]);
  }
  std::vector<double> held(nv, 0.0);
  for (size_t v = 0; v < nv; ++v) {
    const ValueRecord& r = values[v];
    if (root(int64_t(v)) != int64_t(v) || end[v] < 0 || !is_held(int64_t(v))) continue;
    held[v] = local_bytes(r.shape, r.dtype, r.kind == ValueKind::Fixed ? r.fixed : p.layout_of(int64_t(v), assign));
    if (r.kind == ValueKind::Fixed) first[v] = 0;
    hold(held[v], first[v], end[v]);
    if (gap[v].first <= gap[v].second) hold(-held[v], gap[v].first, gap[v].second);
  }
  int64_t previous_gather = -1;  // when the last parameter gathered along dim 0 was read
  for (size_t c = 0; c < nc; ++c) {
    const CallRecord& rec = calls[c];
    for (size_t i = 0; i < rec.inputs.size(); ++i) {
      const int64_t x = rec.inputs[i];
      if (x < 0) continue;
      const NdSbp have = p.layout_of(x, assign), &want = choice(c).in[i];
      if (!moves(p.mesh, have, want)) continue;
      // A parameter's gather along dim 0 reads the parameter itself; the
      // graph issues it one gather ahead (prefetch_gathers), so its result
      // is held from the previous such read.
      bool prefetched = values[size_t(x)].kind == ValueKind::Source;
      for (size_t a = 0; a < have.size(); ++a)
        if (have[a] != want[a] && p.mesh[a] > 1)
          prefetched = prefetched && have[a].is_split() && have[a].axis() == 0 && want[a].is_broadcast();
      if (prefetched) {
        const ValueRecord& xv = values[size_t(x)];
        hold(local_bytes(xv.shape, xv.dtype, want), previous_gather >= 0 ? previous_gather : when[c], when[c]);
        previous_gather = when[c];
        continue;
      }
      // The boxed copy, and while boxing makes it, the packed or permuted
      // copies around its collectives (as transition() counts them).
      const ValueRecord& xv = values[size_t(x)];
      double working = local_bytes(xv.shape, xv.dtype, want);
      for (size_t a = 0; a < have.size(); ++a)
        if (have[a] != want[a] && p.mesh[a] > 1 &&
            ((have[a].is_split() && (want[a].is_split() || have[a].axis() != 0)) ||
             (have[a].is_partial_sum() && want[a].is_split() && want[a].axis() != 0)))
          working = std::max(working, local_bytes(xv.shape, xv.dtype, have) + local_bytes(xv.shape, xv.dtype, want));
      hold(working, when[c], when[c]);
    }
  }
  for (size_t c = 0; c < nc; ++c)
    if (const double bytes = choice(c).scratch; bytes > 0) hold(bytes, when[c], when[c]);
  double live = 0, peak = 0;
  int64_t peak_at = 0;
  for (size_t t = 0; t < nc; ++t) {
    live += delta[t];
    if (live > peak) peak = live, peak_at = int64_t(t);
  }
  if (at_peak) {
    at_peak->clear();
    for (size_t v = 0; v < nv; ++v)
      if (held[v] > 0 && first[v] <= peak_at && end[v] >= peak_at &&
          !(gap[v].first <= peak_at && peak_at <= gap[v].second))
        at_peak->push_back(int64_t(v));
  }
  return peak;
}

}  // namespace mf::distributed::auto_parallel::detail
