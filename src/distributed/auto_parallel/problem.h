// The search problem of Note [Auto parallel] in
// meshflow/distributed/auto_parallel.h, shared by the search (search.cpp)
// and the memory model (memory.cpp): the layouts a choice gives, the cost
// of compute and of boxing, and every node's choices.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "meshflow/distributed/auto_parallel.h"
#include "meshflow/error.h"

namespace mf::distributed::auto_parallel::detail {

constexpr double kInf = std::numeric_limits<double>::infinity();

inline double nbytes(const Shape& shape, DType dtype) { return double(shape_numel(shape)) * double(itemsize(dtype)); }

// How many parts layout cuts a tensor into (per rank, bytes / this).
inline double parts_of(const NdSbp& layout, const Shape& mesh) {
  double p = 1;
  for (size_t a = 0; a < layout.size(); ++a)
    if (layout[a].is_split()) p *= double(mesh[a]);
  return p;
}

// Whether layout leaves every rank a nonempty part of every dim.
inline bool fits(const NdSbp& layout, const Shape& shape, const Shape& mesh) {
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

inline std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1 << 20));
  return buf;
}

// Boxing a tensor of `bytes` from one layout to another, one mesh axis
// after the other (as boxing does), each axis's collective over that
// axis's group on the part the other axes leave.
inline void transition(const CostModel& model, const Shape& mesh, const NdSbp& from, const NdSbp& to, double bytes,
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
      // The latter are transposing copies (Note [Transposed operands in the
      // cost model]).
      if (f.is_split() && t.is_split()) out->time += 2 * (2 * part / double(m)) / model.memory_bandwidth;
      else if (f.is_split() && t.is_broadcast() && f.axis() != 0)
        out->time += 2 * (part / double(m) + part) / model.transposed_bandwidth();
      else if (f.is_partial_sum() && t.is_split() && t.axis() != 0)
        out->time += 2 * (part + part / double(m)) / model.transposed_bandwidth();
      out->time += model.collective(kind, m, part) + model.sync_latency;
      const double f_bytes = std::string(kind) == "all_reduce" ? 2.0 * double(m - 1) / double(m) : double(m - 1) / double(m);
      out->bytes += part * f_bytes;
      if (describe) out->collectives.push_back(std::string(kind) + " " + mib(part) + " over " + std::to_string(m));
    } else {
      // Local: a slice of a broadcast tensor, or zeros padding a partial sum.
      out->time += (t.is_split() ? part / double(m) : part) / model.memory_bandwidth;
    }
  }
}

// Whether boxing from one layout to the other moves data (along a mesh
// axis of one rank nothing moves).
inline bool moves(const Shape& mesh, const NdSbp& from, const NdSbp& to) {
  for (size_t a = 0; a < from.size(); ++a)
    if (from[a] != to[a] && mesh[a] > 1) return true;
  return false;
}

// The boxing of a value of `bytes` that a call (`reader`; null for a
// parameter's gradient) reads in layout `to` from layout `from`, boxed back
// after when the call writes it. A boxed input of a transposing view also
// costs the view's readers a transposing copy (Note [Transposed operands in
// the cost model] in log.cpp): its local part read and written at the
// transpose bandwidth instead of the memory bandwidth.
inline void read_boxing(const CostModel& model, const Shape& mesh, const CallRecord* reader, const NdSbp& from,
                        const NdSbp& to, double bytes, bool written, Boxing* out, bool describe) {
  if (from == to) return;
  transition(model, mesh, from, to, bytes, out, describe);
  if (written) transition(model, mesh, to, from, bytes, out, describe);
  if (reader && reader->transposes && moves(mesh, from, to)) {
    const double local = bytes / parts_of(to, mesh);
    out->time += std::max(0.0, 2 * local / model.transposed_bandwidth() - 2 * local / model.memory_bandwidth);
  }
}

// The layouts a call's signature choice gives its inputs and outputs.
struct CallChoice {
  std::vector<size_t> per_axis;
  std::vector<NdSbp> in, out;
  double compute = 0;
  double scratch = 0;  // bytes of the kernel's scratch on one rank (Note [Predicted memory])
};

// A rank's shape of a global one under layout (splits rounded up).
inline Shape shard_shape(Shape shape, const NdSbp& layout, const Shape& mesh) {
  for (size_t a = 0; a < layout.size() && a < mesh.size(); ++a)
    if (layout[a].is_split() && size_t(layout[a].axis()) < shape.size()) {
      int64_t& d = shape[size_t(layout[a].axis())];
      d = (d + mesh[a] - 1) / mesh[a];
    }
  return shape;
}

// The bytes a rank's kernel of call c asks for as scratch (Note [Kernel
// scratch]) on its shards under layouts in/out, from the CPU kernel's
// ScratchFn over contiguous stand-ins; 0 for placements on other devices
// (their kernels' workspaces are not predicted) or where the ScratchFn
// cannot size the stand-ins.
inline double scratch_bytes(const CallLog& log, const CallRecord& c, const std::vector<NdSbp>& in,
                            const std::vector<NdSbp>& out, const Shape& mesh) {
  if (!log.placement || log.placement->type() != DeviceType::CPU) return 0;
  const ScratchFn& fn = c.op->scratch[size_t(DeviceType::CPU)];
  if (!fn) return 0;
  TensorList inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i] < 0) {
      inputs.emplace_back();
      continue;
    }
    const ValueRecord& v = log.values[size_t(c.inputs[i])];
    inputs.push_back(make_meta(shard_shape(v.shape, in[i], mesh), v.dtype));
  }
  std::vector<TensorMeta> outputs;
  for (size_t o = 0; o < c.outputs.size(); ++o) {
    if (c.outputs[o] < 0) {
      outputs.push_back({o < c.out_shapes.size() ? c.out_shapes[o] : Shape{}, kFloat32, Device()});
      continue;
    }
    const ValueRecord& v = log.values[size_t(c.outputs[o])];
    outputs.push_back({shard_shape(v.shape, out[o], mesh), v.dtype, Device()});
  }
  try {
    return double(fn(inputs, outputs, c.attrs));
  } catch (const std::exception&) {
    return 0;
  }
}

// A rank's share of a call's work: each mesh axis on which the signature
// splits some tensor divides it; an all-broadcast or partial signature
// repeats it on every rank.
inline double work_share(const std::vector<NdSbp>& in, const std::vector<NdSbp>& out, const Shape& mesh) {
  double frac = 1;
  for (size_t a = 0; a < mesh.size(); ++a) {
    bool split = false;
    for (const NdSbp& l : in) split = split || (!l.empty() && l[a].is_split());
    for (const NdSbp& l : out) split = split || l[a].is_split();
    if (split) frac /= double(mesh[a]);
  }
  return frac;
}

inline double compute_time(const CostModel& model, const CallRecord& c, const std::vector<NdSbp>& in,
                    const std::vector<NdSbp>& out, const Shape& mesh, DType dtype) {
  const double frac = work_share(in, out, mesh);
  const double kind = c.op->flops_kind == FlopsKind::Convolution ? model.conv_efficiency
                      : c.op->flops_kind == FlopsKind::Attention   ? model.attention_efficiency
                                                                   : 1.0;
  const double rate = kind * (dtype == kFloat64                          ? model.gemm_flops_f64
                              : (dtype == kBFloat16 || dtype == kFloat16) ? model.gemm_flops_16
                                                                          : model.gemm_flops);
  // A view moves no data (unless it copied).
  const double intensity = c.flops / std::max(c.bytes, 1.0);
  const double efficiency =
      model.gemm_half_intensity > 0 && c.flops > 0 ? intensity / (intensity + model.gemm_half_intensity) : 1.0;
  double bandwidth = c.transposed ? model.transposed_bandwidth() : model.memory_bandwidth;
  if (!model.op_bandwidth.empty())
    if (auto it = model.op_bandwidth.find(c.rate_key); it != model.op_bandwidth.end()) bandwidth = it->second;
  const double t = (c.op->view && !c.copies) || c.forwarded ? 0.0 : std::max(c.flops / (rate * efficiency), c.bytes / bandwidth);
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
          ch.scratch = scratch_bytes(log, c, ch.in, ch.out, mesh);
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

// The peak bytes per rank of the step's values under an assignment
// (Note [Predicted memory] in memory.cpp); at_peak (if given) gets the
// values live at the peak.
double peak_live_bytes(const Problem& p, const std::vector<int32_t>& assign, std::vector<int64_t>* at_peak);

}  // namespace mf::distributed::auto_parallel::detail
