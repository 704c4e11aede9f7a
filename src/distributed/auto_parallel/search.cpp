// The strategy search of Note [Auto parallel] in
// meshflow/distributed/auto_parallel.h: choices per node, the pairwise cost
// graph, exact eliminations, a searched core, and the plan's predictions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "distributed/auto_parallel/problem.h"
#include "meshflow/error.h"

namespace mf::distributed::auto_parallel {
namespace {

using namespace detail;

// The pairwise cost graph: unary costs per node choice, tables per edge.
struct Graph {
  std::vector<std::vector<double>> unary;
  struct Table {
    int64_t a, b;  // a < b; rows: a's choices
    size_t cols;
    std::vector<double> v;
  };
  std::vector<Table> tables;
  std::vector<std::unordered_map<int64_t, size_t>> adj;  // neighbour -> table
  std::vector<bool> alive;

  size_t size(int64_t n) const { return unary[size_t(n)].size(); }
  double edge(const Table& t, int64_t from, size_t x, size_t y) const {  // from's choice x, the other's y
    return from == t.a ? t.v[x * t.cols + y] : t.v[y * t.cols + x];
  }
  Table& table(int64_t u, int64_t v) {
    auto it = adj[size_t(u)].find(v);
    if (it != adj[size_t(u)].end()) return tables[it->second];
    const int64_t a = std::min(u, v), b = std::max(u, v);
    tables.push_back({a, b, size(b), std::vector<double>(size(a) * size(b), 0.0)});
    adj[size_t(u)][v] = tables.size() - 1;
    adj[size_t(v)][u] = tables.size() - 1;
    return tables.back();
  }
  template <class F>
  void add(int64_t u, int64_t v, F cost) {  // cost(u's choice, v's choice)
    if (u == v) {
      for (size_t x = 0; x < size(u); ++x) unary[size_t(u)][x] += cost(x, x);
      return;
    }
    Table& t = table(u, v);
    for (size_t x = 0; x < size(u); ++x)
      for (size_t y = 0; y < size(v); ++y) (u == t.a ? t.v[x * t.cols + y] : t.v[y * t.cols + x]) += cost(x, y);
  }
  void remove_edge(int64_t u, int64_t v) {
    adj[size_t(u)].erase(v);
    adj[size_t(v)].erase(u);
  }
};

// lambda prices memory (seconds per byte per rank): the parameters' and
// their state's, and that of the values in `priced` (those live at the
// peak of an earlier plan).
Graph build_graph(const Problem& p, double lambda, const std::vector<bool>& priced) {
  Graph g;
  const size_t ns = p.num_sources(), n = ns + p.call_choices.size();
  g.unary.resize(n);
  g.adj.resize(n);
  g.alive.assign(n, true);
  for (size_t s = 0; s < ns; ++s) {
    for (size_t x = 0; x < p.source_choices[s].size(); ++x) g.unary[s].push_back(lambda * p.source_memory(s, x));
  }
  for (size_t c = 0; c < p.call_choices.size(); ++c)
    for (const CallChoice& ch : p.call_choices[c]) g.unary[ns + c].push_back(ch.compute);
  if (lambda > 0) {
    for (size_t v = 0; v < p.log.values.size(); ++v) {
      const ValueRecord& r = p.log.values[v];
      if (!priced[v] || r.kind != ValueKind::Output) continue;
      const auto& choices = p.call_choices[size_t(r.node)];
      for (size_t x = 0; x < choices.size(); ++x) {
        const NdSbp& out = size_t(r.index) < choices[x].out.size() ? choices[x].out[size_t(r.index)]
                                                                   : NdSbp(p.mesh.size(), Sbp::broadcast());
        g.unary[ns + size_t(r.node)][x] += lambda * nbytes(r.shape, r.dtype) / parts_of(out, p.mesh);
      }
    }
  }
  const CostModel& m = p.model;
  const Shape& mesh = p.mesh;
  // A read of value v by node `reader` needing layout need(x) for its choice
  // x (written: boxed back after).
  auto read = [&](int64_t v, int64_t reader, auto need, bool written) {
    const ValueRecord& r = p.log.values[size_t(v)];
    const double bytes = nbytes(r.shape, r.dtype);
    const CallRecord* call = reader >= int64_t(ns) ? &p.log.calls[size_t(reader) - ns] : nullptr;
    auto cost = [&](const NdSbp& have, const NdSbp& want) {
      Boxing b;
      read_boxing(m, mesh, call, have, want, bytes, written, &b, false);
      return b.time;
    };
    if (r.kind == ValueKind::Fixed) {
      for (size_t x = 0; x < g.size(reader); ++x) g.unary[size_t(reader)][x] += cost(r.fixed, need(x));
    } else if (r.kind == ValueKind::Source) {
      const auto& choices = p.source_choices[size_t(r.node)];
      g.add(r.node, reader, [&](size_t xs, size_t y) { return cost(choices[xs], need(y)); });
    } else {
      const int64_t producer = int64_t(ns) + r.node;
      const auto& choices = p.call_choices[size_t(r.node)];
      g.add(producer, reader, [&](size_t xp, size_t y) {
        const CallChoice& ch = choices[xp];
        const NdSbp have = size_t(r.index) < ch.out.size() ? ch.out[size_t(r.index)] : NdSbp(mesh.size(), Sbp::broadcast());
        return cost(have, need(y));
      });
    }
  };
  for (size_t c = 0; c < p.call_choices.size(); ++c) {
    const CallRecord& rec = p.log.calls[c];
    const auto& choices = p.call_choices[c];
    for (size_t i = 0; i < rec.inputs.size(); ++i) {
      if (rec.inputs[i] < 0) continue;
      read(rec.inputs[i], int64_t(ns + c), [&](size_t x) -> const NdSbp& { return choices[x].in[i]; },
           rec.op->writes_input(i, rec.inplace));
    }
  }
  for (const auto& [v, s] : p.log.accumulations) {
    const auto& choices = p.source_choices[size_t(s)];
    read(v, s, [&](size_t x) -> const NdSbp& { return choices[x]; }, false);
  }
  return g;
}

struct Elimination {
  int64_t node;
  int64_t a = -1, b = -1;      // the neighbours it had (-1: none)
  std::vector<int32_t> arg;    // its best choice per neighbour choice(s)
};

// Eliminates every node of at most two neighbours (exactly), in place.
std::vector<Elimination> eliminate(Graph& g) {
  std::vector<Elimination> done;
  std::vector<int64_t> queue;
  for (size_t n = 0; n < g.unary.size(); ++n)
    if (g.adj[n].size() <= 2) queue.push_back(int64_t(n));
  while (!queue.empty()) {
    const int64_t x = queue.back();
    queue.pop_back();
    if (!g.alive[size_t(x)] || g.adj[size_t(x)].size() > 2) continue;
    const auto& ux = g.unary[size_t(x)];
    Elimination e{x};
    std::vector<int64_t> nbrs;
    for (const auto& [y, t] : g.adj[size_t(x)]) nbrs.push_back(y);
    std::sort(nbrs.begin(), nbrs.end());
    if (nbrs.empty()) {
      e.arg.push_back(int32_t(std::min_element(ux.begin(), ux.end()) - ux.begin()));
    } else if (nbrs.size() == 1) {
      const int64_t y = nbrs[0];
      const Graph::Table t = g.tables[g.adj[size_t(x)].at(y)];
      e.a = y;
      for (size_t yc = 0; yc < g.size(y); ++yc) {
        double best = kInf;
        int32_t arg = 0;
        for (size_t xc = 0; xc < ux.size(); ++xc) {
          const double v = ux[xc] + g.edge(t, x, xc, yc);
          if (v < best) best = v, arg = int32_t(xc);
        }
        g.unary[size_t(y)][yc] += best;
        e.arg.push_back(arg);
      }
      g.remove_edge(x, y);
      if (g.adj[size_t(y)].size() <= 2) queue.push_back(y);
    } else {
      const int64_t a = nbrs[0], b = nbrs[1];
      const Graph::Table ta = g.tables[g.adj[size_t(x)].at(a)], tb = g.tables[g.adj[size_t(x)].at(b)];
      e.a = a;
      e.b = b;
      const size_t na = g.size(a), nb = g.size(b);
      std::vector<double> best(na * nb, kInf);
      e.arg.assign(na * nb, 0);
      for (size_t xc = 0; xc < ux.size(); ++xc)
        for (size_t ac = 0; ac < na; ++ac) {
          const double va = ux[xc] + g.edge(ta, x, xc, ac);
          for (size_t bc = 0; bc < nb; ++bc) {
            const double v = va + g.edge(tb, x, xc, bc);
            if (v < best[ac * nb + bc]) best[ac * nb + bc] = v, e.arg[ac * nb + bc] = int32_t(xc);
          }
        }
      g.remove_edge(x, a);
      g.remove_edge(x, b);
      g.add(a, b, [&](size_t ac, size_t bc) { return best[ac * nb + bc]; });
      if (g.adj[size_t(a)].size() <= 2) queue.push_back(a);
      if (g.adj[size_t(b)].size() <= 2) queue.push_back(b);
    }
    g.alive[size_t(x)] = false;
    done.push_back(std::move(e));
  }
  return done;
}

// The core (nodes of three or more neighbours): greedy starts, each
// improved by coordinate descent; the best assignment wins.
void solve_core(const Graph& g, size_t num_sources, std::vector<int32_t>& assign) {
  std::vector<int64_t> core;
  for (size_t n = 0; n < g.unary.size(); ++n)
    if (g.alive[n]) core.push_back(int64_t(n));
  if (core.empty()) return;
  auto local = [&](int64_t n, size_t x, const std::vector<int32_t>& as, bool only_assigned) {
    double v = g.unary[size_t(n)][x];
    for (const auto& [y, t] : g.adj[size_t(n)]) {
      if (as[size_t(y)] < 0) {
        if (!only_assigned) return kInf;
        continue;
      }
      v += g.edge(g.tables[t], n, x, size_t(as[size_t(y)]));
    }
    return v;
  };
  auto best_choice = [&](int64_t n, const std::vector<int32_t>& as, bool only_assigned) {
    double best = kInf;
    int32_t arg = 0;
    for (size_t x = 0; x < g.size(n); ++x) {
      const double v = local(n, x, as, only_assigned);
      if (v < best) best = v, arg = int32_t(x);
    }
    return arg;
  };
  auto energy = [&](const std::vector<int32_t>& as) {
    double e = 0;
    for (int64_t n : core) {
      e += g.unary[size_t(n)][size_t(as[size_t(n)])];
      for (const auto& [y, t] : g.adj[size_t(n)])
        if (y > n) e += g.edge(g.tables[t], n, size_t(as[size_t(n)]), size_t(as[size_t(y)]));
    }
    return e;
  };
  // A small core is solved exactly, by enumeration in mixed radix.
  double combos = 1;
  for (int64_t n : core) combos *= double(g.size(n));
  if (combos <= 2e5) {
    std::vector<int32_t> as(g.unary.size(), -1);
    for (int64_t n : core) as[size_t(n)] = 0;
    double best_energy = kInf;
    std::vector<int32_t> best = as;
    for (;;) {
      const double e = energy(as);
      if (e < best_energy) best_energy = e, best = as;
      size_t k = 0;
      for (; k < core.size(); ++k) {
        int32_t& x = as[size_t(core[k])];
        if (size_t(++x) < g.size(core[k])) break;
        x = 0;
      }
      if (k == core.size()) break;
    }
    for (int64_t n : core) assign[size_t(n)] = best[size_t(n)];
    return;
  }
  size_t max_source_choices = 1;
  for (int64_t n : core)
    if (size_t(n) < num_sources) max_source_choices = std::max(max_source_choices, g.size(n));
  double best_energy = kInf;
  std::vector<int32_t> best;
  // Start k (k >= 1) puts every core parameter at its choice k - 1 (every
  // one broadcast, every one split on dim 0, ...); start 0 leaves them to
  // the greedy pass.
  for (size_t k = 0; k <= max_source_choices; ++k) {
    std::vector<int32_t> as(g.unary.size(), -1);
    if (k > 0)
      for (int64_t n : core)
        if (size_t(n) < num_sources) as[size_t(n)] = int32_t(std::min(k - 1, g.size(n) - 1));
    for (int64_t n : core)
      if (as[size_t(n)] < 0) as[size_t(n)] = best_choice(n, as, true);
    for (int sweep = 0; sweep < 100; ++sweep) {
      bool changed = false;
      for (int64_t n : core) {
        const int32_t x = best_choice(n, as, false);
        if (x != as[size_t(n)] && local(n, size_t(x), as, false) < local(n, size_t(as[size_t(n)]), as, false) - 1e-15) {
          as[size_t(n)] = x;
          changed = true;
        }
      }
      if (!changed) break;
    }
    const double e = energy(as);
    if (e < best_energy) best_energy = e, best = as;
  }
  for (int64_t n : core) assign[size_t(n)] = best[size_t(n)];
}

std::vector<int32_t> solve(const Problem& p, double lambda, const std::vector<bool>& priced, int64_t* core_nodes) {
  Graph g = build_graph(p, lambda, priced);
  std::vector<Elimination> elims = eliminate(g);
  std::vector<int32_t> assign(g.unary.size(), -1);
  int64_t core = 0;
  for (bool a : g.alive) core += a ? 1 : 0;
  if (core_nodes) *core_nodes = core;
  solve_core(g, p.num_sources(), assign);
  for (auto it = elims.rbegin(); it != elims.rend(); ++it) {
    if (it->a < 0) assign[size_t(it->node)] = it->arg[0];
    else if (it->b < 0) assign[size_t(it->node)] = it->arg[size_t(assign[size_t(it->a)])];
    else assign[size_t(it->node)] = it->arg[size_t(assign[size_t(it->a)]) * g.size(it->b) + size_t(assign[size_t(it->b)])];
  }
  return assign;
}

// The predictions of an assignment, walking the log.
void evaluate(const Problem& p, const std::vector<int32_t>& assign, Plan& plan) {
  const size_t ns = p.num_sources();
  plan.compute_time = plan.communication_time = plan.communication_bytes = 0;
  plan.parameter_memory = 0;
  for (size_t s = 0; s < ns; ++s) plan.parameter_memory += p.source_memory(s, size_t(assign[s]));
  auto box = [&](int64_t v, const NdSbp& want, bool written, const CallRecord* reader) {
    const ValueRecord& r = p.log.values[size_t(v)];
    const NdSbp have = p.layout_of(v, assign);
    Boxing b;
    read_boxing(p.model, p.mesh, reader, have, want, nbytes(r.shape, r.dtype), written, &b, false);
    plan.communication_time += b.time;
    plan.communication_bytes += b.bytes;
  };
  for (size_t c = 0; c < p.log.calls.size(); ++c) {
    const CallRecord& rec = p.log.calls[c];
    const CallChoice& ch = p.call_choices[c][size_t(assign[ns + c])];
    plan.compute_time += ch.compute;
    for (size_t i = 0; i < rec.inputs.size(); ++i)
      if (rec.inputs[i] >= 0) box(rec.inputs[i], ch.in[i], rec.op->writes_input(i, rec.inplace), &rec);
  }
  for (const auto& [v, s] : p.log.accumulations)
    box(v, p.source_choices[size_t(s)][size_t(assign[size_t(s)])], false, nullptr);
  plan.peak_values.clear();
  const double peak = peak_live_bytes(p, assign, &plan.peak_values);
  plan.memory = plan.parameter_memory + peak;
  plan.step_time = plan.compute_time + plan.communication_time;
  plan.sources.clear();
  for (size_t s = 0; s < ns; ++s) plan.sources.push_back(p.source_choices[s][size_t(assign[s])]);
  plan.calls.clear();
  plan.ops.clear();
  for (size_t c = 0; c < p.log.calls.size(); ++c) {
    plan.calls.push_back(p.call_choices[c][size_t(assign[ns + c])].per_axis);
    plan.ops.push_back(p.log.calls[c].op);
  }
}

}  // namespace

Plan search(const CallLog& log, const CostModel& model, const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MF_CHECK(log.placement.has_value(), ValueError, "auto parallel: the step made no global op call to plan");
  MF_CHECK(options.memory_limit >= 0, ValueError, "auto parallel: the memory limit must be >= 0 bytes, got ",
           options.memory_limit);
  const Problem p(log, model);
  const double limit = options.memory_limit;
  std::vector<bool> priced(log.values.size(), false);
  int64_t core = 0;
  // A plan at price lambda; under a limit, the values live at each plan's
  // peak join the priced ones (a few rounds) until the peak fits.
  auto attempt = [&](double lambda, Plan& out) {
    for (int round = 0; round < 6; ++round) {
      evaluate(p, solve(p, lambda, priced, &core), out);
      if (lambda == 0 || out.memory <= limit) return;
      bool added = false;
      for (int64_t v : out.peak_values)
        if (!priced[size_t(v)] && log.values[size_t(v)].kind == ValueKind::Output) priced[size_t(v)] = added = true;
      if (!added) return;
    }
  };
  Plan plan;
  attempt(0.0, plan);
  plan.core_nodes = core;
  if (limit > 0 && plan.memory > limit) {
    // The smallest price of memory (seconds per byte) that meets the limit.
    double lo = 0, hi = 1e-15;
    Plan at_hi;
    for (;;) {
      attempt(hi, at_hi);
      if (at_hi.memory <= limit || hi > 1e3) break;
      lo = hi;
      hi *= 8;
    }
    if (at_hi.memory <= limit) {
      for (int i = 0; i < 24 && hi / std::max(lo, 1e-18) > 1.05; ++i) {
        const double mid = lo > 0 ? std::sqrt(lo * hi) : hi / 8;
        Plan at_mid;
        attempt(mid, at_mid);
        if (at_mid.memory <= limit) {
          hi = mid;
          at_hi = std::move(at_mid);
        } else {
          lo = mid;
        }
      }
    }
    at_hi.core_nodes = core;
    at_hi.memory_limit_met = at_hi.memory <= limit;
    plan = std::move(at_hi);
  }
  plan.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

namespace {

// The node choices of a given plan (Problem's indices).
std::vector<int32_t> assignment_of(const Problem& p, const std::vector<std::vector<size_t>>& calls,
                                   const std::vector<NdSbp>& sources) {
  const CallLog& log = p.log;
  MF_CHECK(calls.size() == log.calls.size() && sources.size() == log.sources.size(), ValueError,
           "auto parallel: a plan needs ", log.calls.size(), " call choices and ", log.sources.size(),
           " source layouts, got ", calls.size(), " and ", sources.size());
  std::vector<int32_t> assign;
  for (size_t s = 0; s < sources.size(); ++s) {
    const auto& choices = p.source_choices[s];
    auto it = std::find(choices.begin(), choices.end(), sources[s]);
    MF_CHECK(it != choices.end(), ValueError, "auto parallel: ", nd_sbp_str(sources[s]), " is not a layout of ",
             log.sources[s].name, " the search considers");
    assign.push_back(int32_t(it - choices.begin()));
  }
  for (size_t c = 0; c < calls.size(); ++c) {
    const auto& choices = p.call_choices[c];
    auto it = std::find_if(choices.begin(), choices.end(), [&](const CallChoice& ch) { return ch.per_axis == calls[c]; });
    MF_CHECK(it != choices.end(), ValueError, "auto parallel: call ", c, " (", log.calls[c].op->name,
             ") has no such signature the search considers");
    assign.push_back(int32_t(it - choices.begin()));
  }
  return assign;
}

}  // namespace

Plan predict(const CallLog& log, const CostModel& model, const std::vector<std::vector<size_t>>& calls,
             const std::vector<NdSbp>& sources) {
  MF_CHECK(log.placement.has_value(), ValueError, "auto parallel: the step made no global op call to plan");
  const Problem p(log, model);
  Plan plan;
  evaluate(p, assignment_of(p, calls, sources), plan);
  return plan;
}

std::vector<CallCost> call_costs(const CallLog& log, const CostModel& model, const Plan& plan) {
  MF_CHECK(log.placement.has_value(), ValueError, "auto parallel: the step made no global op call to plan");
  const Problem p(log, model);
  const std::vector<int32_t> assign = assignment_of(p, plan.calls, plan.sources);
  const size_t ns = p.num_sources();
  std::vector<CallCost> costs;
  for (size_t c = 0; c < log.calls.size(); ++c) {
    const CallRecord& rec = log.calls[c];
    const CallChoice& ch = p.call_choices[c][size_t(assign[ns + c])];
    CallCost out{.inputs = ch.in, .outputs = ch.out, .compute = ch.compute};
    for (size_t i = 0; i < rec.inputs.size(); ++i) {
      const int64_t v = rec.inputs[i];
      if (v < 0) continue;
      const ValueRecord& r = log.values[size_t(v)];
      const NdSbp have = p.layout_of(v, assign);
      if (have == ch.in[i]) continue;
      Boxing b;
      read_boxing(model, p.mesh, &rec, have, ch.in[i], nbytes(r.shape, r.dtype), rec.op->writes_input(i, rec.inplace),
                  &b, true);
      out.boxing += b.time;
      out.boxing_bytes += b.bytes;
      for (auto& s : b.collectives) out.collectives.push_back(std::move(s));
    }
    costs.push_back(std::move(out));
  }
  return costs;
}

}  // namespace mf::distributed::auto_parallel
