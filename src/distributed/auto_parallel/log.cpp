// The call log of the first auto-parallel trace, the plan guard of the
// second, and the collective model (Note [Auto parallel] in
// meshflow/distributed/auto_parallel.h).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "meshflow/autograd.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/auto_parallel.h"
#include "meshflow/generator.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "meshflow/distributed/global.h"
#include "meshflow/error.h"
#include "meshflow/graph/trace.h"
#include "problem.h"

namespace mf::distributed::auto_parallel {
namespace {

thread_local CallLog* logging = nullptr;
thread_local FollowPlan* following = nullptr;

double nbytes(const Shape& shape, DType dtype) { return double(shape_numel(shape)) * double(itemsize(dtype)); }

// Note [Transposed operands in the cost model]
// A memory-bound op that reads an operand transposed in its last two dims
// (a permuted view's contiguous(), boxing's permuted copies around a gather
// or reduce-scatter along a dim other than 0, an elementwise op on a .t())
// walks one of its operands across cache lines: here a 1024 x 1024 float
// transpose takes 6-7x a plain copy's time even in blocks (Note
// [Transposing copies] in the CPU backend). Such calls are priced at the
// calibrated transpose bandwidth. Without it a plan that kept an MLP's
// weights split along dim 1 was predicted faster than data parallelism on 2
// ranks and measured 1.4x slower, a third of its step in those copies.
// The log is traced with every parameter broadcast, so an operand's strides
// are those of that plan. A plan that boxes the input of a transposing view
// (a permute whose input is itself a transposed view in the trace; between
// them, a weight's gradient reduce-scattered along dim 0) makes that input
// contiguous, and the view's readers then copy it transposed: the boxing
// pays that copy at the transpose bandwidth (read_boxing in problem.h).
bool is_transposed(const Tensor& t) {
  const int64_t nd = t.dim();
  if (nd < 2 || t.sizes()[nd - 1] < 16 || t.sizes()[nd - 2] < 16) return false;
  const int64_t inner = std::abs(t.strides()[nd - 1]), outer = std::abs(t.strides()[nd - 2]);
  return inner != 0 && outer != 0 && outer < inner;
}

// The size class of a call's input bytes (Note [Measured op rates]): its
// power of 16 at most, "1B", "16B", ..., "1MiB", "16MiB", ...
std::string size_class(double bytes) {
  static const char* const names[] = {"1B", "16B", "256B", "4KiB", "64KiB", "1MiB", "16MiB", "256MiB", "4GiB", "64GiB"};
  int k = 0;
  while (k + 1 < int(std::size(names)) && bytes >= std::ldexp(1.0, 4 * (k + 1))) ++k;
  return names[k];
}

// The ring algorithm's bytes per rank, as a multiple of the tensor's bytes.
double ring_factor(const std::string& kind, int64_t m) {
  const double f = double(m - 1) / double(m);
  return kind == "all_reduce" ? 2 * f : f;
}

}  // namespace

double CollectiveFit::operator()(double bytes) const {
  if (points.empty()) return 0;
  if (points.size() == 1) return points[0].second * std::max(1.0, bytes / std::max(points[0].first, 1.0));
  size_t i = 1;
  while (i + 1 < points.size() && points[i].first < bytes) ++i;
  const auto& [x0, y0] = points[i - 1];
  const auto& [x1, y1] = points[i];
  if (bytes <= x0) return y0;  // below the first point: its latency
  if (bytes < x1 && x0 > 0 && y0 > 0 && y1 > 0) {
    // Between two points: a power law through both (the measured curve
    // bends up where messages leave the caches; a chord overestimates).
    return y0 * std::pow(bytes / x0, std::log(y1 / y0) / std::log(x1 / x0));
  }
  const double beta = x1 > x0 ? (y1 - y0) / (x1 - x0) : 0.0;  // past the last point: its line
  return std::max(0.0, y0 + beta * (bytes - x0));
}

double CostModel::collective(const std::string& kind, int64_t ranks, double bytes) const {
  if (ranks <= 1) return 0;
  auto it = collectives.find(kind);
  if (it == collectives.end() || it->second.empty()) {
    // Undescribed: 20 us per ring step and 10 GB/s.
    return 20e-6 * double(ranks - 1) + bytes * ring_factor(kind, ranks) / 10e9;
  }
  // The fit of this group size, else the nearest one, its bytes scaled by
  // the ring's bytes per rank and its first point's time by its steps.
  int64_t best = -1;
  for (const auto& [m, fit] : it->second)
    if (best < 0 || std::abs(m - ranks) < std::abs(best - ranks) ||
        (std::abs(m - ranks) == std::abs(best - ranks) && m > best))
      best = m;
  const CollectiveFit& fit = it->second.at(best);
  if (best == ranks || best < 2) return fit(bytes);
  const double latency = fit.points.empty() ? 0 : fit.points.front().second;
  return fit(bytes * ring_factor(kind, ranks) / ring_factor(kind, best)) +
         latency * (double(ranks - 1) / double(best - 1) - 1.0);
}

// Note [Measured op rates]
// One bandwidth for every memory-bound op prices a GELU like an add, a
// layer norm like a copy and a copy of a permuted view like a contiguous
// one. Here GELU (an erf per element) and its gradient move 4-5 GB/s where
// an add moves 16-50, and in a slow spell a GPT's layer norms took 4x and
// its copies of permuted attention heads 10x what the one bandwidth
// predicted: the 1-rank step was predicted 30% low.
//
// So each memory-bound call of a logged step (no FLOPs, not a collective,
// not a view unless it copied: CallRecord::copies, timed as its clone) has
// a rate key: its op's name, with ":transposed" when it reads an operand
// transposed in its last two dims (Note [Transposed operands in the cost
// model]) or ":strided" when it reads another non-contiguous one, and the
// size class of its inputs' bytes (a power of 16: "@64KiB" holds 64 KiB to
// 1 MiB), so that a rate measured in cache is not reused for a call that
// streams from memory, in this step or another model's. The largest call
// of each key is run alone for a few milliseconds:
// - on the shapes a rank runs under a first plan (python/meshflow/
//   distributed/auto.py `_search` searches, measures, and searches again),
//   laid out in the logged strides' order of dims; floating inputs 0.5,
//   integer ones 0 (a valid index for any gather);
// - over as many copies of its inputs as span the call's reuse distance:
//   the bytes the step moves on a rank since each input was last written
//   or read (for a parameter or an input of the step, the step's footprint
//   on a rank, at most 64 MiB), averaged over the inputs by their bytes.
//   Run on one set of inputs an op reads them from the cache its last call
//   left them in; inside a step it finds them where the step left them: a
//   [1024, 128] layer norm took 81 us on one set and 180 us over 64 sets
//   (32 MiB), an add 16 and 85 us. Pricing every call hot left a GPT's
//   momentum updates and layer norms 3-4x low; pricing every call cold at
//   the logged (whole) shapes priced its chains of elementwise ops, whose
//   intermediates stay in cache, 1.8x high, and a wide MLP's updates of
//   weight shards as if they streamed the whole weights from memory.
// A rank's bytes of the call over its time less the op overhead is the
// key's rate; a call whose time is mostly that overhead keeps the memory
// bandwidth (a scalar add of a loss measured 100x below an add's rate, and
// then priced a BERT's adds 10x high). A call that fails alone (an attribute naming state of the
// step) keeps the default rate. The default generator is restored after,
// so that measuring draws no random numbers from the step's stream. The
// rates join the cost model (CostModel::op_bandwidth); under the launcher
// every rank takes rank 0's, so that every rank plans alike.
//
// Not modelled: what graph mode removes or fuses after tracing (elementwise
// chains fused into one pass, optimizer updates run inside the weight
// gradient's GEMM, gradient clones written in place). Such calls are
// priced as traced.
int64_t measure_op_rates(const CallLog& log, CostModel& model, double seconds, const Plan* plan) {
  // Each input's shape on a rank under the plan (its first part along each
  // split axis); without a plan, the logged shapes.
  std::vector<CallCost> costs;
  if (plan) costs = call_costs(log, model, *plan);
  const Shape mesh = log.placement ? log.placement->hierarchy() : Shape{};
  auto local = [&](Shape shape, const NdSbp& layout) {
    for (size_t a = 0; a < layout.size() && a < mesh.size(); ++a)
      if (layout[a].is_split()) {
        const int64_t d = layout[a].axis();
        shape[size_t(d)] = (shape[size_t(d)] + mesh[a] - 1) / mesh[a];
      }
    return shape;
  };
  std::unordered_map<std::string, size_t> largest;
  for (size_t i = 0; i < log.calls.size(); ++i) {
    const CallRecord& c = log.calls[i];
    const OpDef& op = *c.op;
    if ((op.view && !c.copies) || op.collective || c.flops > 0 || c.inputs.empty() ||
        model.op_bandwidth.count(c.rate_key))
      continue;
    auto [it, fresh] = largest.emplace(c.rate_key, i);
    if (!fresh && c.bytes > log.calls[it->second].bytes) it->second = i;
  }
  // The step's footprint: the bytes of all its values, at most 64 MiB.
  double footprint = 0;
  for (const ValueRecord& r : log.values) footprint += nbytes(r.shape, r.dtype);
  // The bytes the calls before each call moved on a rank (views that alias
  // move none); the footprint shrinks as the plan splits the calls.
  std::vector<double> moved(log.calls.size() + 1, 0.0);
  double whole = 0;
  for (size_t i = 0; i < log.calls.size(); ++i) {
    const CallRecord& c = log.calls[i];
    const double bytes = c.op->view && !c.copies ? 0.0 : c.bytes;
    moved[i + 1] = moved[i] + (plan ? detail::work_share(costs[i].inputs, costs[i].outputs, mesh) : 1.0) * bytes;
    whole += bytes;
  }
  if (whole > 0) footprint *= moved.back() / whole;
  footprint = std::min(footprint, double(64 << 20));
  // The reuse distance of call i: the bytes moved since each input was
  // last written or read in the step (the footprint for a parameter or an
  // input of the step), averaged over its inputs by their bytes.
  std::vector<int64_t> touched(log.values.size(), -1);
  std::vector<double> distance(log.calls.size(), 0.0);
  for (size_t i = 0; i < log.calls.size(); ++i) {
    const CallRecord& c = log.calls[i];
    double sum = 0, weight = 0;
    for (int64_t v : c.inputs) {
      if (v < 0) continue;
      const double b = nbytes(log.values[size_t(v)].shape, log.values[size_t(v)].dtype);
      const int64_t t = touched[size_t(v)];
      sum += b * (t < 0 ? footprint : std::min(footprint, moved[i] - moved[size_t(t) + 1]));
      weight += b;
      touched[size_t(v)] = int64_t(i);
    }
    distance[i] = weight > 0 ? sum / weight : 0.0;
    for (int64_t v : c.outputs)
      if (v >= 0) touched[size_t(v)] = int64_t(i);
  }
  using Clock = std::chrono::steady_clock;
  NoGradGuard no_grad;
  Generator& generator = default_generator();
  const uint64_t seed = generator.seed(), offset = generator.offset();
  int64_t measured = 0;
  for (const auto& [key, i] : largest) {
    const CallRecord& c = log.calls[i];
    double per_call = 0;
    try {
      // One set of inputs like the call's, each dense in its logged
      // strides' order of dims (a transposed or permuted operand stays so);
      // `bytes` gains the set's bytes.
      auto make_inputs = [&](double& bytes) {
        TensorList inputs;
        for (size_t k = 0; k < c.inputs.size(); ++k) {
          const int64_t v = c.inputs[k];
          if (v < 0) {
            inputs.emplace_back();
            continue;
          }
          const ValueRecord& r = log.values[size_t(v)];
          const Scalar fill = is_floating(r.dtype) ? Scalar(0.5) : Scalar(int64_t(0));
          const Shape shape = plan ? local(r.shape, costs[i].inputs[k]) : r.shape;
          const Shape& logged = k < c.input_strides.size() ? c.input_strides[k] : Shape{};
          if (logged.size() != shape.size() ||
              std::any_of(logged.begin(), logged.end(), [](int64_t st) { return st <= 0; })) {
            inputs.push_back(full(shape, fill, {.dtype = r.dtype}));
            bytes += nbytes(shape, r.dtype);
            continue;
          }
          // The logged layout's order of dims (a permutation), dense.
          std::vector<size_t> order(shape.size());
          for (size_t d = 0; d < order.size(); ++d) order[d] = d;
          std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logged[a] > logged[b]; });
          Shape strides(shape.size(), 0);
          int64_t extent = 1;
          for (size_t j = order.size(); j-- > 0;) {
            strides[order[j]] = extent;
            extent *= shape[order[j]];
          }
          bytes += double(extent) * double(itemsize(r.dtype));
          inputs.push_back(as_strided(full({extent}, fill, {.dtype = r.dtype}), shape, strides, 0));
        }
        return inputs;
      };
      // As many sets as span the call's reuse distance (at most 64), used
      // in turn: each set's inputs are then as far back in the memory
      // hierarchy as the step leaves the call's.
      double set_bytes = 0;
      std::vector<TensorList> sets{make_inputs(set_bytes)};
      const int64_t copies =
          std::clamp(int64_t(std::ceil(distance[i] / std::max(set_bytes, 1.0))), int64_t(1), int64_t(64));
      for (double more = 0; int64_t(sets.size()) < copies;) sets.push_back(make_inputs(more));
      // An attribute naming the output's shape names the local one.
      Attrs attrs = c.attrs;
      if (plan && !c.op->output_shape_attr.empty() && attrs.has(c.op->output_shape_attr) && !c.out_shapes.empty())
        attrs.set(c.op->output_shape_attr, local(c.out_shapes[0], costs[i].outputs.at(0)));
      // A view that copied is timed as its copy.
      auto run = [&](const TensorList& inputs) {
        return c.copies ? TensorList{clone(inputs.at(0))} : dispatch::apply(*c.op, inputs, attrs);
      };
      for (const TensorList& inputs : sets) run(inputs);  // warm
      int64_t calls = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        run(sets[size_t(calls) % sets.size()]);
        ++calls;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (elapsed < seconds && calls < 1000);
      per_call = elapsed / double(calls);
    } catch (const Error&) {
      continue;  // not runnable alone: the default rate prices it
    }
    // The bytes the call moves on a rank: its whole bytes times its share.
    const double share = plan ? detail::work_share(costs[i].inputs, costs[i].outputs, mesh) : 1.0;
    // A call whose time is mostly the op overhead measures no rate: it
    // keeps the memory bandwidth.
    const double busy = per_call - model.op_overhead;
    model.op_bandwidth[key] = busy > 0.5 * per_call ? share * c.bytes / busy : model.memory_bandwidth;
    ++measured;
  }
  generator.set_state(seed, offset);
  return measured;
}

int64_t CallLog::value_of(const Tensor& t) {
  if (!t.defined()) return -1;
  if (t.is_global()) {
    const auto& meta = t.impl()->global();
    if (auto it = ids.find(meta.get()); it != ids.end()) return it->second;
    const int64_t id = int64_t(values.size());
    values.push_back({.shape = t.sizes(), .dtype = t.dtype(), .kind = ValueKind::Fixed, .fixed = sbp_of(t)});
    ids[meta.get()] = id;
    keep.push_back(meta);
    return id;
  }
  // A local tensor: the same value on every rank.
  const int64_t id = int64_t(values.size());
  const size_t axes = placement ? size_t(placement->ndim()) : 1;
  values.push_back({.shape = t.sizes(), .dtype = t.dtype(), .kind = ValueKind::Fixed,
                    .fixed = NdSbp(axes, Sbp::broadcast())});
  return id;
}

int64_t CallLog::add_source(const Tensor& t, std::string name, bool pinned) {
  MF_CHECK(t.defined() && t.is_global(), ValueError, "auto parallel: parameter ", name,
           " must be a global tensor while the step is logged");
  if (!placement) placement = placement_of(t);
  MF_CHECK(placement_of(t) == *placement, ValueError, "auto parallel: parameter ", name, " is on ",
           placement_of(t).str(), " but the graph runs on ", placement->str(),
           "; the search lays out one placement");
  const auto& meta = t.impl()->global();
  if (auto it = ids.find(meta.get()); it != ids.end() && values[size_t(it->second)].kind == ValueKind::Source)
    return values[size_t(it->second)].node;  // the same parameter twice (tied weights)
  const int64_t s = int64_t(sources.size());
  sources.push_back({.name = std::move(name), .shape = t.sizes(), .dtype = t.dtype(), .copies = 1,
                     .pinned = pinned ? std::optional<NdSbp>(sbp_of(t)) : std::nullopt});
  tie(t, s);
  return s;
}

void CallLog::add_input(const Tensor& t) {
  if (!t.defined() || !t.is_global()) return;
  const int64_t v = value_of(t);
  if (values[size_t(v)].kind == ValueKind::Fixed) values[size_t(v)].step_input = true;
}

void CallLog::tie(const Tensor& t, int64_t source) {
  if (!t.defined() || !t.is_global()) return;
  const auto& meta = t.impl()->global();
  const int64_t id = int64_t(values.size());
  values.push_back({.shape = t.sizes(), .dtype = t.dtype(), .kind = ValueKind::Source, .node = source});
  ids[meta.get()] = id;
  keep.push_back(meta);
}

LogCalls::LogCalls(CallLog& log) : prev_(logging) { logging = &log; }
LogCalls::~LogCalls() { logging = prev_; }
CallLog* LogCalls::active() { return logging; }

void log_call(const OpDef& op, bool inplace, const TensorList& inputs, const TensorList& metas,
              const std::vector<Shape>& out_shapes, const Attrs& attrs, const TensorList& outputs) {
  CallLog& log = *logging;
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs)
    if (t.defined() && t.is_global()) first = first ? first : &t;
  if (!first) return;
  if (!log.placement) log.placement = placement_of(*first);
  MF_CHECK(placement_of(*first) == *log.placement, ValueError, "auto parallel: ", op.name, " runs on ",
           placement_of(*first).str(), " but the graph's other ops on ", log.placement->str(),
           "; the search lays out one placement (pipeline stages are not searched)");
  CallRecord rec;
  rec.op = &op;
  rec.inplace = inplace;
  if (const graph::Tracer* tracer = graph::current_tracer())
    rec.backward = tracer->in_backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    rec.inputs.push_back(log.value_of(t));
    if (!t.defined()) continue;
    // Read, and written again where the op mutates it (an optimizer
    // update's parameter and state); an in-place call's write is its output.
    const bool mutated = i < 32 && (op.mutates >> i) & 1u;
    rec.bytes += (mutated ? 2.0 : 1.0) * nbytes(t.sizes(), t.dtype());
  }
  for (int64_t parts : log.placement->hierarchy())
    rec.candidates.push_back(sbp_candidates(op, metas, out_shapes, attrs, parts));
  if (op.flops && !out_shapes.empty()) rec.flops = op.flops(metas, out_shapes, attrs);
  // A global tensor's own strides are its logical shape's; its local
  // tensor's are those of the memory the kernel reads (a rank outside the
  // placement holds none).
  auto memory_of = [](const Tensor& t) -> const Tensor& { return t.is_global() ? t.impl()->global()->local : t; };
  bool strided = false;
  for (const Tensor& t : inputs) {
    const bool held = t.defined() && memory_of(t).defined();
    rec.input_strides.push_back(held ? memory_of(t).strides() : Shape{});
    if (!held) continue;
    rec.transposed = rec.transposed || is_transposed(memory_of(t));
    strided = strided || !memory_of(t).is_contiguous();
  }
  if (op.view && !inputs.empty() && !outputs.empty() && inputs[0].defined() && outputs[0].defined()) {
    const Tensor &in = memory_of(inputs[0]), &out = memory_of(outputs[0]);
    if (in.defined() && out.defined()) {
      rec.copies = in.storage() != out.storage();
      rec.transposes = !rec.copies && is_transposed(in) != is_transposed(out);
    }
  }
  rec.transposed = rec.transposed && (!op.view || rec.copies) && rec.flops == 0;
  rec.rate_key = op.name + (rec.transposed ? ":transposed" : strided ? ":strided" : "") + "@" + size_class(rec.bytes);
  rec.metas = metas;
  rec.out_shapes = out_shapes;
  rec.attrs = attrs;
  const int64_t call = int64_t(log.calls.size());
  // Note [Forwarded clones in the cost model]
  // Graph mode's clone forwarding (forward_clones in src/graph/passes.cpp)
  // drops a clone whose source is an intermediate buffer that dies at the
  // clone, read contiguously: the clone's readers read the source's buffer.
  // Autograd clones each parameter's first gradient, so a step that priced
  // those copies predicted a wide MLP's step a third high on 2 ranks. A
  // contiguous clone of a call's output (or a view of one) is marked
  // forwarded here, and unmarked when a later call reads the same buffer.
  auto root_of = [&](int64_t v) {
    auto it = log.view_roots.find(v);
    return it == log.view_roots.end() ? v : it->second;
  };
  for (int64_t v : rec.inputs) {
    if (v < 0) continue;
    if (auto it = log.clone_readers.find(root_of(v)); it != log.clone_readers.end()) {
      log.calls[it->second].forwarded = false;
      log.clone_readers.erase(it);
    }
  }
  static const OpDef& clone_op = dispatch::op("clone");
  auto intermediate = [&](const ValueRecord& r) {  // a call's output, or a gradient the step computes
    return r.kind == ValueKind::Output || (r.kind == ValueKind::Source && r.gradient >= 0);
  };
  if (&op == &clone_op && !inplace && !strided && !rec.inputs.empty() && rec.inputs[0] >= 0 &&
      intermediate(log.values[size_t(root_of(rec.inputs[0]))])) {
    rec.forwarded = true;
    log.clone_readers[root_of(rec.inputs[0])] = size_t(call);
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Tensor& t = outputs[o];
    if (!t.defined()) {
      rec.outputs.push_back(-1);
      continue;
    }
    rec.bytes += nbytes(t.sizes(), t.dtype());
    const int64_t id = int64_t(log.values.size());
    log.values.push_back({.shape = t.sizes(), .dtype = t.dtype(), .kind = ValueKind::Output, .node = call,
                          .index = int64_t(o)});
    if (t.is_global()) {
      log.ids[t.impl()->global().get()] = id;
      log.keep.push_back(t.impl()->global());
    }
    rec.outputs.push_back(id);
    if (op.view && !rec.copies && !rec.inputs.empty() && rec.inputs[0] >= 0) log.view_roots[id] = root_of(rec.inputs[0]);
  }
  log.calls.push_back(std::move(rec));
}

void log_accumulation(const Tensor& variable, const Tensor& before, const Tensor& after) {
  CallLog& log = *logging;
  if (!variable.is_global()) return;
  auto it = log.ids.find(variable.impl()->global().get());
  if (it == log.ids.end() || log.values[size_t(it->second)].kind != ValueKind::Source) return;
  const int64_t source = log.values[size_t(it->second)].node;
  const int64_t gradient = before.defined() && before.is_global() ? log.value_of(before) : -1;
  if (gradient >= 0) log.accumulations.emplace_back(gradient, source);
  log.tie(after, source);
  if (after.defined() && after.is_global() && gradient >= 0)
    log.values[size_t(log.ids.at(after.impl()->global().get()))].gradient = gradient;
}

// Note [Pipeline parts of calls]: for a pipeline stage's step (the stage
// search, auto_pipeline.py), each call is
//  * an update: it writes its inputs and makes no output (the optimizers');
//  * backward input (I): a backward call whose results lead to the
//    gradient of one of `input_sources` (the stage's input, which the
//    previous stage waits for), read through later calls;
//  * backward weight (W): any other backward call (weight gradients and
//    their sums), which zero-bubble schedules run later;
//  * forward: the rest.
// This is the split the graph's pipeline schedule makes of a traced
// backward (graph/pipeline.cpp, step 3).
std::vector<CallPart> call_parts(const CallLog& log, const std::vector<int64_t>& input_sources) {
  const size_t nc = log.calls.size();
  std::vector<CallPart> parts(nc, CallPart::Forward);
  std::vector<bool> leads(log.values.size(), false);  // a value the input part needs
  for (const auto& [v, s] : log.accumulations)
    if (std::find(input_sources.begin(), input_sources.end(), s) != input_sources.end()) leads[size_t(v)] = true;
  for (size_t c = nc; c-- > 0;) {
    const CallRecord& rec = log.calls[c];
    bool writes = false, makes = false;
    for (size_t i = 0; i < rec.inputs.size(); ++i) writes = writes || rec.op->writes_input(i, rec.inplace);
    for (int64_t v : rec.outputs) makes = makes || v >= 0;
    if (writes && !makes && !rec.op->collective) {
      parts[c] = CallPart::Update;
      continue;
    }
    if (!rec.backward) continue;
    bool input = false;
    for (int64_t v : rec.outputs) input = input || (v >= 0 && leads[size_t(v)]);
    parts[c] = input ? CallPart::BackwardInput : CallPart::BackwardWeight;
    if (input)
      for (int64_t v : rec.inputs)
        if (v >= 0) leads[size_t(v)] = true;
  }
  return parts;
}

CallLog remesh(const CallLog& log, const Placement& mesh) {
  CallLog out;
  out.placement = mesh;
  out.calls = log.calls;
  out.values = log.values;
  out.sources = log.sources;
  out.accumulations = log.accumulations;
  const size_t axes = size_t(mesh.ndim());
  auto spread = [&](const NdSbp& layout, const std::string& what) {
    if (layout.size() == axes) return layout;
    for (const Sbp& s : layout)
      MF_CHECK(s == layout[0], ValueError, "auto parallel: ", what, " has layout ", nd_sbp_str(layout),
               ", which names no layout on a mesh of ", axes, " axes");
    return NdSbp(axes, layout.empty() ? Sbp::broadcast() : layout[0]);
  };
  for (ValueRecord& v : out.values)
    if (v.kind == ValueKind::Fixed) v.fixed = spread(v.fixed, "a traced input");
  for (SourceRecord& s : out.sources)
    if (s.pinned) s.pinned = spread(*s.pinned, s.name);
  for (CallRecord& c : out.calls) {
    c.candidates.clear();
    for (int64_t parts : mesh.hierarchy()) c.candidates.push_back(sbp_candidates(*c.op, c.metas, c.out_shapes, c.attrs, parts));
  }
  return out;
}

FollowPlan::FollowPlan(const Plan& plan) : plan_(&plan), prev_(following) { following = this; }
FollowPlan::~FollowPlan() { following = prev_; }

std::optional<std::vector<size_t>> FollowPlan::take(const OpDef& op) {
  FollowPlan* f = following;
  if (!f) return std::nullopt;
  const Plan& plan = *f->plan_;
  MF_CHECK(f->next_ < plan.calls.size(), Error, "auto parallel: the compiled step makes more global op calls than ",
           "the step the search planned (", plan.calls.size(), "; the next is ", op.name,
           "): build() must make the same calls on every trace");
  MF_CHECK(plan.ops[f->next_] == &op, Error, "auto parallel: global op call ", f->next_, " of the compiled step is ",
           op.name, " but the planned step's was ", plan.ops[f->next_]->name,
           ": build() must make the same calls on every trace");
  return plan.calls[f->next_++];
}

}  // namespace mf::distributed::auto_parallel
