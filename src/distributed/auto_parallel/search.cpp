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

#include "meshflow/distributed/auto_parallel.h"
#include "meshflow/dispatch.h"
#include "meshflow/error.h"

namespace mf::distributed::auto_parallel {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double nbytes(const Shape& shape, DType dtype) { return double(shape_numel(shape)) * double(itemsize(dtype)); }

// How many parts layout cuts a tensor into (per rank, bytes / this).
double parts_of(const NdSbp& layout, const Shape& mesh) {
  double p = 1;
  for (size_t a = 0; a < layout.size(); ++a)
    if (layout[a].is_split()) p *= double(mesh[a]);
  return p;
}

// Whether layout leaves every rank a nonempty part of every dim.
bool fits(const NdSbp& layout, const Shape& shape, const Shape& mesh) {
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t parts = 1;
    for (size_t a = 0; a < layout.size(); ++a)
      if (layout[a].is_split() && layout[a].axis() == int64_t(d)) parts *= mesh[a];
    if (parts > 1 && shape[d] < parts) return false;
  }
  for (const Sbp& s : layout)
    if (s.is_split() && s.axis() >= int64_t(shape.size())) return false;
  return true;
}

struct Boxing {
  double time = 0, bytes = 0;
  std::vector<std::string> collectives;
};

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1 << 20));
  return buf;
}

// Boxing a tensor of `bytes` from one layout to another, one mesh axis
// after the other (as boxing does), each axis's collective over that
// axis's group on the part the other axes leave.
void transition(const CostModel& model, const Shape& mesh, const NdSbp& from, const NdSbp& to, double bytes,
                Boxing* out, bool describe) {
  for (size_t a = 0; a < from.size(); ++a) {
    if (from[a] == to[a] || mesh[a] == 1) continue;  // one rank along the axis: nothing moves
    double part = bytes;
    for (size_t b = 0; b < from.size(); ++b) {
      if (b == a) continue;
      const Sbp& s = b < a ? to[b] : from[b];
      if (s.is_split()) part /= double(mesh[b]);
    }
    const int64_t m = mesh[a];
    const Sbp &f = from[a], &t = to[a];
    const char* kind = nullptr;
    if (f.is_partial_sum()) kind = t.is_broadcast() ? "all_reduce" : t.is_split() ? "reduce_scatter" : nullptr;
    else if (f.is_split()) kind = t.is_broadcast() ? "all_gather" : t.is_split() ? "all_to_all" : nullptr;
    if (kind) {
      // Boxing copies the data around some collectives (boxing.cpp): an
      // all-to-all packs its blocks and unpacks them; a gather or a
      // reduce-scatter along a dim other than 0 moves that dim first and
      // back. Each copy reads and writes the local part.
      double copied = 0;  // bytes copied on a rank
      if (f.is_split() && t.is_split()) copied = 2 * part / double(m);
      else if (f.is_split() && t.is_broadcast() && f.axis() != 0) copied = part / double(m) + part;
      else if (f.is_partial_sum() && t.is_split() && t.axis() != 0) copied = part + part / double(m);
      out->time += 2 * copied / model.memory_bandwidth;
      out->time += model.collective(kind, m, part);
      const double f_bytes = std::string(kind) == "all_reduce" ? 2.0 * double(m - 1) / double(m) : double(m - 1) / double(m);
      out->bytes += part * f_bytes;
      if (describe) out->collectives.push_back(std::string(kind) + " " + mib(part) + " over " + std::to_string(m));
    } else {
      // Local: a slice of a broadcast tensor, or zeros padding a partial sum.
      out->time += (t.is_split() ? part / double(m) : part) / model.memory_bandwidth;
    }
  }
}

double transition_time(const CostModel& model, const Shape& mesh, const NdSbp& from, const NdSbp& to,
                       double bytes) {
  if (from == to) return 0;
  Boxing b;
  transition(model, mesh, from, to, bytes, &b, false);
  return b.time;
}

// The layouts a call's signature choice gives its inputs and outputs.
struct CallChoice {
  std::vector<size_t> per_axis;
  std::vector<NdSbp> in, out;
  double compute = 0;
};

double compute_time(const CostModel& model, const CallRecord& c, const std::vector<NdSbp>& in,
                    const std::vector<NdSbp>& out, const Shape& mesh, DType dtype) {
  // Each mesh axis on which the signature splits some tensor divides the
  // work; an all-broadcast or partial signature repeats it on every rank.
  double frac = 1;
  for (size_t a = 0; a < mesh.size(); ++a) {
    bool split = false;
    for (const NdSbp& l : in) split = split || (!l.empty() && l[a].is_split());
    for (const NdSbp& l : out) split = split || l[a].is_split();
    if (split) frac /= double(mesh[a]);
  }
  const double rate = dtype == kFloat64                          ? model.gemm_flops_f64
                      : (dtype == kBFloat16 || dtype == kFloat16) ? model.gemm_flops_16
                                                                  : model.gemm_flops;
  // A view moves no data.
  const double intensity = c.flops / std::max(c.bytes, 1.0);
  const double efficiency =
      model.gemm_half_intensity > 0 && c.flops > 0 ? intensity / (intensity + model.gemm_half_intensity) : 1.0;
  const double t = c.op->view ? 0.0 : std::max(c.flops / (rate * efficiency), c.bytes / model.memory_bandwidth);
  return model.op_overhead + frac * t;
}

struct Problem {
  const CallLog& log;
  const CostModel& model;
  Shape mesh;
  std::vector<std::vector<NdSbp>> source_choices;
  std::vector<std::vector<CallChoice>> call_choices;

  Problem(const CallLog& l, const CostModel& m) : log(l), model(m), mesh(l.placement->hierarchy()) {
    const size_t axes = mesh.size();
    for (const SourceRecord& s : log.sources) {
      std::vector<NdSbp> choices;
      if (s.pinned) {
        choices.push_back(*s.pinned);
      } else {
        // Per axis: broadcast or a split of any dim; all combinations that fit.
        std::vector<std::vector<Sbp>> per_axis(axes);
        for (size_t a = 0; a < axes; ++a) {
          per_axis[a].push_back(Sbp::broadcast());
          for (size_t d = 0; d < s.shape.size(); ++d) per_axis[a].push_back(Sbp::split(int64_t(d)));
        }
        NdSbp cur(axes, Sbp::broadcast());
        std::function<void(size_t)> rec = [&](size_t a) {
          if (a == axes) {
            if (fits(cur, s.shape, mesh)) choices.push_back(cur);
            return;
          }
          for (const Sbp& x : per_axis[a]) {
            cur[a] = x;
            rec(a + 1);
          }
        };
        rec(0);
      }
      source_choices.push_back(std::move(choices));
    }
    for (const CallRecord& c : log.calls) {
      std::vector<CallChoice> choices;
      CallChoice cur;
      cur.per_axis.assign(axes, 0);
      std::function<void(size_t)> rec = [&](size_t a) {
        if (a == axes) {
          CallChoice ch;
          ch.per_axis = cur.per_axis;
          const size_t nin = c.inputs.size(), nout = c.outputs.size();
          ch.in.assign(nin, NdSbp(axes, Sbp::broadcast()));
          ch.out.assign(nout, NdSbp(axes, Sbp::broadcast()));
          for (size_t x = 0; x < axes; ++x) {
            const SbpSignature& sig = c.candidates[x][ch.per_axis[x]];
            for (size_t i = 0; i < nin && i < sig.inputs.size(); ++i) ch.in[i][x] = sig.inputs[i];
            for (size_t o = 0; o < nout && o < sig.outputs.size(); ++o) ch.out[o][x] = sig.outputs[o];
          }
          for (size_t i = 0; i < nin; ++i)
            if (c.inputs[i] >= 0 && !fits(ch.in[i], log.values[size_t(c.inputs[i])].shape, mesh)) return;
          for (size_t o = 0; o < nout; ++o)
            if (c.outputs[o] >= 0 && !fits(ch.out[o], log.values[size_t(c.outputs[o])].shape, mesh)) return;
          DType dtype = kFloat32;
          if (!c.outputs.empty() && c.outputs[0] >= 0) dtype = log.values[size_t(c.outputs[0])].dtype;
          else if (!c.inputs.empty() && c.inputs[0] >= 0) dtype = log.values[size_t(c.inputs[0])].dtype;
          std::vector<NdSbp> defined_in;
          for (size_t i = 0; i < nin; ++i) defined_in.push_back(c.inputs[i] >= 0 ? ch.in[i] : NdSbp{});
          ch.compute = compute_time(model, c, defined_in, ch.out, mesh, dtype);
          choices.push_back(std::move(ch));
          return;
        }
        for (size_t k = 0; k < c.candidates[a].size(); ++k) {
          cur.per_axis[a] = k;
          rec(a + 1);
        }
      };
      rec(0);
      MF_CHECK(!choices.empty(), Error, "auto parallel: ", c.op->name, " has no signature that fits the mesh");
      call_choices.push_back(std::move(choices));
    }
  }

  size_t num_sources() const { return source_choices.size(); }
  size_t node_of_call(size_t c) const { return num_sources() + c; }
  double source_memory(size_t s, size_t x) const {
    const SourceRecord& r = log.sources[s];
    return double(r.copies) * nbytes(r.shape, r.dtype) / parts_of(source_choices[s][x], mesh);
  }
  // The layout value v has when node choices are `assign`.
  NdSbp layout_of(int64_t v, const std::vector<int32_t>& assign) const {
    const ValueRecord& r = log.values[size_t(v)];
    if (r.kind == ValueKind::Fixed) return r.fixed;
    if (r.kind == ValueKind::Source) return source_choices[size_t(r.node)][size_t(assign[size_t(r.node)])];
    const CallChoice& ch = call_choices[size_t(r.node)][size_t(assign[node_of_call(size_t(r.node))])];
    return size_t(r.index) < ch.out.size() ? ch.out[size_t(r.index)] : NdSbp(mesh.size(), Sbp::broadcast());
  }
};

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
    auto cost = [&](const NdSbp& have, const NdSbp& want) {
      return transition_time(m, mesh, have, want, bytes) + (written ? transition_time(m, mesh, want, have, bytes) : 0);
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
//  * the step's inputs are held from the start to their last read.
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
  auto moves = [&](const NdSbp& have, const NdSbp& want) {
    for (size_t a = 0; a < have.size(); ++a)
      if (have[a] != want[a] && p.mesh[a] > 1) return true;
    return false;
  };
  std::vector<bool> communicated(ns, false);
  for (const auto& [v, src] : p.log.accumulations)
    if (moves(p.layout_of(v, assign), p.source_choices[size_t(src)][size_t(assign[size_t(src)])]))
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
      if (!moves(have, want)) continue;
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
  double live = 0, peak = 0;
  int64_t peak_at = 0;
  for (size_t t = 0; t < nc; ++t) {
    live += delta[t];
    if (live > peak) peak = live, peak_at = int64_t(t);
  }
  if (at_peak) {
    at_peak->clear();
    for (size_t v = 0; v < nv; ++v)
      if (held[v] > 0 && values[v].kind == ValueKind::Output && first[v] <= peak_at && end[v] >= peak_at &&
          !(gap[v].first <= peak_at && peak_at <= gap[v].second))
        at_peak->push_back(int64_t(v));
  }
  return peak;
}

// The predictions of an assignment, walking the log.
// at_peak (if given) gets the values live when the live bytes peak.
void evaluate(const Problem& p, const std::vector<int32_t>& assign, Plan& plan, std::vector<int64_t>* at_peak = nullptr) {
  const size_t ns = p.num_sources();
  plan.compute_time = plan.communication_time = plan.communication_bytes = 0;
  plan.parameter_memory = 0;
  for (size_t s = 0; s < ns; ++s) plan.parameter_memory += p.source_memory(s, size_t(assign[s]));
  auto box = [&](int64_t v, const NdSbp& want, bool written) {
    const ValueRecord& r = p.log.values[size_t(v)];
    const NdSbp have = p.layout_of(v, assign);
    Boxing b;
    if (have != want) transition(p.model, p.mesh, have, want, nbytes(r.shape, r.dtype), &b, false);
    if (written && have != want) transition(p.model, p.mesh, want, have, nbytes(r.shape, r.dtype), &b, false);
    plan.communication_time += b.time;
    plan.communication_bytes += b.bytes;
  };
  for (size_t c = 0; c < p.log.calls.size(); ++c) {
    const CallRecord& rec = p.log.calls[c];
    const CallChoice& ch = p.call_choices[c][size_t(assign[ns + c])];
    plan.compute_time += ch.compute;
    for (size_t i = 0; i < rec.inputs.size(); ++i)
      if (rec.inputs[i] >= 0) box(rec.inputs[i], ch.in[i], rec.op->writes_input(i, rec.inplace));
  }
  for (const auto& [v, s] : p.log.accumulations) box(v, p.source_choices[size_t(s)][size_t(assign[size_t(s)])], false);
  const double peak = peak_live_bytes(p, assign, at_peak);
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
      std::vector<int64_t> at_peak;
      evaluate(p, solve(p, lambda, priced, &core), out, &at_peak);
      if (lambda == 0 || out.memory <= limit) return;
      bool added = false;
      for (int64_t v : at_peak)
        if (!priced[size_t(v)]) priced[size_t(v)] = added = true;
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
      transition(model, p.mesh, have, ch.in[i], nbytes(r.shape, r.dtype), &b, true);
      if (rec.op->writes_input(i, rec.inplace)) transition(model, p.mesh, ch.in[i], have, nbytes(r.shape, r.dtype), &b, true);
      out.boxing += b.time;
      out.boxing_bytes += b.bytes;
      for (auto& s : b.collectives) out.collectives.push_back(std::move(s));
    }
    costs.push_back(std::move(out));
  }
  return costs;
}

}  // namespace mf::distributed::auto_parallel
