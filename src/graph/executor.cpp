// Static memory planning, lowering and the runtime; see Note [Plans] and
// Note [Static memory planning] in executor.h.
#include "meshflow/graph/executor.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "backend/capture.h"
#include "distributed/job_thread.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/distributed/global.h"
#include "meshflow/generator.h"
#include "meshflow/graph/fusion.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/profiler.h"

namespace mf::graph {

namespace {

int64_t align_up(int64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

const OpDef& send_op() {
  static const OpDef& op = dispatch::op("comm_send");
  return op;
}
const OpDef& recv_op() {
  static const OpDef& op = dispatch::op("comm_recv");
  return op;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Whether value id owns a buffer that the plan places in the arena.
bool is_planned(const Graph& graph, ValueId id) {
  const Value& v = graph.value(id);
  if (v.root != id) return false;
  return v.kind == ValueKind::Input || v.kind == ValueKind::Intermediate;
}

// The device a node's kernel runs on: that of its first output (or input).
Device node_device(const Graph& graph, const Node& node) {
  return graph.value(node.outputs.empty() ? node.inputs[0] : node.outputs[0]).device;
}

// A tensor of value id's layout for a ScratchFn: a variable's or constant's
// own tensor, else one without data over a storage as large as its buffer's.
Tensor layout_of(const Graph& graph, ValueId id) {
  if (id == kNoValue) return Tensor();
  const Value& v = graph.value(id);
  if (v.tensor.defined()) return v.tensor;
  const Value& owner = graph.value(v.root == kNoValue ? id : v.root);
  auto storage = std::make_shared<StorageImpl>(size_t(owner.nbytes()), v.device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), v.sizes, v.strides, v.offset, v.dtype));
}

}  // namespace

std::vector<int64_t> scratch_bytes(const Graph& graph) {
  std::vector<int64_t> bytes(graph.nodes().size(), -1);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = graph.nodes()[i];
    if (node.is_view()) continue;
    const ScratchFn scratch =
        node.fused ? fused_scratch(node.fused) : node.op->scratch[size_t(node_device(graph, node).type())];
    if (!scratch) continue;
    TensorList inputs;
    for (ValueId id : node.inputs) inputs.push_back(layout_of(graph, id));
    std::vector<TensorMeta> outputs;
    for (ValueId id : node.outputs) {
      const Value& v = graph.value(id);
      outputs.push_back({v.sizes, v.dtype, v.device});
    }
    bytes[i] = scratch(inputs, outputs, node.attrs);
  }
  return bytes;
}

std::vector<int32_t> communication_waits(const Graph& graph) {
  const auto& nodes = graph.nodes();
  const auto& values = graph.values();
  auto root_of = [&](ValueId id) { return values[size_t(id)].root; };
  std::vector<int32_t> waits(nodes.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& c = nodes[i];
    if (!c.op->collective || c.op == &send_op()) continue;
    std::vector<ValueId> read, written;
    for (ValueId in : c.inputs)
      if (in != kNoValue) read.push_back(root_of(in));
    for (ValueId out : c.outputs) written.push_back(root_of(out));
    auto among = [&](const std::vector<ValueId>& roots, ValueId id) {
      return id != kNoValue && std::find(roots.begin(), roots.end(), root_of(id)) != roots.end();
    };
    waits[i] = int32_t(nodes.size());
    for (size_t j = i + 1; j < nodes.size(); ++j) {
      const Node& n = nodes[j];
      if (n.is_view()) continue;  // views touch no data
      bool conflict = false;
      for (size_t k = 0; k < n.inputs.size(); ++k)
        conflict = conflict || among(written, n.inputs[k]) || (n.writes_input(k) && among(read, n.inputs[k]));
      if (conflict) {
        waits[i] = int32_t(j);
        break;
      }
    }
  }
  return waits;
}

MemoryPlan plan_memory(const Graph& graph) {
  const auto& values = graph.values();
  const auto& nodes = graph.nodes();
  const auto end_of_run = int32_t(nodes.size());
  MemoryPlan plan;
  plan.offsets.assign(values.size(), -1);
  plan.lifetimes.assign(values.size(), {INT_MAX, -1});
  // Times: graph inputs are written at -1, node i runs at i, outputs are
  // read at end_of_run.
  auto touch = [&](ValueId id, int32_t time) {
    if (id == kNoValue) return;
    auto& life = plan.lifetimes[size_t(graph.value(id).root)];
    life.first = std::min(life.first, time);
    life.second = std::max(life.second, time);
  };
  for (ValueId id : graph.inputs()) touch(id, -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (ValueId id : nodes[i].inputs) touch(id, int32_t(i));
    for (ValueId id : nodes[i].outputs) touch(id, int32_t(i));
  }
  for (ValueId id : graph.outputs()) touch(id, end_of_run);
  // A collective's buffers are in use until its wait node (Note
  // [Overlapping communication]).
  const std::vector<int32_t> waits = communication_waits(graph);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (waits[i] < 0) continue;
    for (ValueId id : nodes[i].inputs) touch(id, waits[i]);
    for (ValueId id : nodes[i].outputs) touch(id, waits[i]);
  }

  struct Placed {
    int64_t offset, size;
    int32_t first, last;
  };
  // What gets an offset: every touched buffer (an input that no node reads
  // included: its lifetime is the write at -1 alone, the run still copies
  // it in), and each kernel's scratch, which lives for its own step alone
  // (Note [Kernel scratch]); placed largest first, so a large scratch is
  // not left to whatever gaps the buffers leave.
  struct Item {
    int64_t bytes;
    int32_t first, last;
    ValueId value;  // kNoValue: node `node`'s scratch
    int32_t node;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < values.size(); ++i)
    if (is_planned(graph, ValueId(i)) && plan.lifetimes[i].first <= plan.lifetimes[i].second)
      items.push_back({values[i].nbytes(), plan.lifetimes[i].first, plan.lifetimes[i].second, ValueId(i), -1});
  plan.scratch_offsets.assign(nodes.size(), -1);
  plan.scratch_bytes = scratch_bytes(graph);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (plan.scratch_bytes[i] > 0)
      items.push_back({plan.scratch_bytes[i], int32_t(i), std::max(int32_t(i), waits[i]), kNoValue, int32_t(i)});
    else if (plan.scratch_bytes[i] == 0)
      plan.scratch_offsets[i] = 0;
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.first < b.first;
  });
  std::vector<Placed> placed;
  std::vector<const Placed*> conflicts;
  // Live bytes over time (lifetimes are inclusive: a buffer counts from its
  // first node to its last).
  std::vector<int64_t> delta(nodes.size() + 3, 0);
  auto place = [&](int64_t size, int32_t first, int32_t last) {
    size = align_up(size);
    plan.total_bytes += size;
    delta[size_t(first + 1)] += size;
    delta[size_t(last + 2)] -= size;
    conflicts.clear();
    for (const Placed& p : placed)
      if (p.first <= last && first <= p.last) conflicts.push_back(&p);
    std::sort(conflicts.begin(), conflicts.end(),
              [](const Placed* a, const Placed* b) { return a->offset < b->offset; });
    int64_t offset = 0;
    for (const Placed* c : conflicts) {
      if (offset + size <= c->offset) break;
      offset = std::max(offset, c->offset + c->size);
    }
    placed.push_back({offset, size, first, last});
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    return offset;
  };
  for (const Item& item : items) {
    const int64_t offset = place(item.bytes, item.first, item.last);
    if (item.value != kNoValue) plan.offsets[size_t(item.value)] = offset;
    else plan.scratch_offsets[size_t(item.node)] = offset;
  }
  int64_t live = 0;
  for (int64_t d : delta) plan.live_peak_bytes = std::max(plan.live_peak_bytes, live += d);
  return plan;
}

Executable::Executable(Graph graph, bool overlap_communication)
    : graph_(std::move(graph)), overlap_communication_(overlap_communication) {
  if (graph_.random_span == 0) {
    // A hand-built graph: one block per random_key (or node), in node order.
    std::unordered_map<uint64_t, uint64_t> position;
    for (Node& n : graph_.nodes()) {
      if (!n.random_counters) continue;
      auto [it, first] = position.try_emplace(n.random_key, graph_.random_span);
      if (first || n.random_key == 0) {
        it->second = graph_.random_span;
        graph_.random_span += n.random_counters;
      }
      n.random_position = it->second;
    }
  }
  plan_ = plan_memory(graph_);
  lower();
}

void Executable::reserve_random_counters() {
  if (graph_.random_span) random_base_ = int64_t(default_generator().reserve(graph_.random_span));
}

Executable::~Executable() = default;

// Note [Device-generic graphs]: a graph runs on the device of its values.
// Its arena is allocated there, each node runs its op's kernel of that
// device, and inputs, outputs and message buffers are copied by the copy
// op's kernel of the device (no host loop touches device memory). A graph
// whose arena values lie on two devices is refused when it is lowered.
Device Executable::arena_device() const {
  const auto& values = graph_.values();
  std::optional<Device> device;
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    if (!is_planned(graph_, ValueId(i))) continue;
    if (!device) device = v.device;
    MF_CHECK(*device == v.device, Error, "graph: its values lie on ", *device, " and ", v.device, " (",
             v.producer >= 0 ? "the output of " + graph_.nodes()[size_t(v.producer)].op->name
                             : v.input_index >= 0 ? "input " + std::to_string(v.input_index) : std::string("a value"),
             v.name.empty() ? "" : " '" + v.name + "'",
             "); a graph runs on one device (move the inputs and the model there first)");
  }
  return device.value_or(Device());
}

void Executable::lower() {
  const auto& values = graph_.values();
  arena_ = make_empty({std::max<int64_t>(plan_.arena_bytes, 1)}, DType::UInt8, arena_device());
  tensors_.assign(values.size(), Tensor());
  variable_storages_.clear();
  // Each buffer gets a storage of its own over its arena bytes, so kernels
  // see an output as eager gives it: offset 0 in its own storage.
  auto arena_tensor = [&](ValueId id) {
    const Value& v = values[size_t(id)];
    char* data = static_cast<char*>(arena_.data_ptr()) + plan_.offsets[size_t(id)];
    auto storage = std::make_shared<StorageImpl>(data, size_t(v.nbytes()), arena_.device(), [](void*) {}, nullptr);
    return Tensor(std::make_shared<TensorImpl>(std::move(storage), v.sizes, v.strides, v.offset, v.dtype));
  };
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    if (v.kind == ValueKind::Variable || v.kind == ValueKind::Constant) tensors_[i] = v.tensor;
    if (v.kind == ValueKind::Variable) variable_storages_.push_back(v.tensor.storage().get());
    if (v.kind == ValueKind::Input) tensors_[i] = arena_tensor(ValueId(i));
  }
  steps_.clear();
  // Node index -> index of its step (views have none).
  std::vector<int32_t> step_of(graph_.nodes().size() + 1, -1);
  for (const Node& node : graph_.nodes()) {
    TensorList inputs;
    inputs.reserve(node.inputs.size());
    for (ValueId id : node.inputs) inputs.push_back(id == kNoValue ? Tensor() : tensors_[size_t(id)]);
    if (node.is_view()) {
      TensorList outs = node.op->view(inputs, node.attrs);
      for (size_t i = 0; i < outs.size(); ++i) tensors_[size_t(node.outputs[i])] = outs[i];
      continue;
    }
    Step step{.op = node.op, .inputs = std::move(inputs), .attrs = node.attrs, .lr_group = node.lr_group,
              .random_counters = node.random_counters, .random_position = node.random_position};
    if (node.inplace) {
      tensors_[size_t(node.outputs[0])] = step.inputs[0];
      step.outputs.push_back(step.inputs[0]);
    } else {
      for (size_t k = 0; k < node.outputs.size(); ++k) {
        const ValueId id = node.outputs[k];
        const Value& v = values[size_t(id)];
        tensors_[size_t(id)] =
            k == 0 && node.overwrites >= 0
                ? Tensor(std::make_shared<TensorImpl>(step.inputs[size_t(node.overwrites)].storage(), v.sizes,
                                                      v.strides, v.offset, v.dtype))
                : arena_tensor(id);
        step.outputs.push_back(tensors_[size_t(id)]);
      }
    }
    const size_t index = size_t(&node - graph_.nodes().data());
    if (const int64_t offset = plan_.scratch_offsets[index]; offset >= 0) {
      const int64_t bytes = plan_.scratch_bytes[index];
      auto storage = std::make_shared<StorageImpl>(static_cast<char*>(arena_.data_ptr()) + offset, size_t(bytes),
                                                   arena_.device(), [](void*) {}, nullptr);
      step.outputs.push_back(
          Tensor(std::make_shared<TensorImpl>(std::move(storage), Shape{bytes}, Shape{1}, 0, DType::UInt8)));
    }
    step.tag = node.pipeline;
    if (step.tag.phase == Phase::None && !steps_.empty()) step.tag = steps_.back().tag;
    step.send = node.op == &send_op();
    step.recv = node.op == &recv_op();
    const Device device = node_device(graph_, node);
    MF_CHECK(!node.fused || device.is_cpu(), Error, "graph: the fused node ", node.op->name,
             " runs on the CPU only, but its values are on ", device);
    step.kernel = node.fused ? fused_kernel(node.fused) : node.op->kernels[size_t(device.type())];
    MF_CHECK(bool(step.kernel), Error, node.op->name, ": no kernel for device ", device);
    step_of[index] = int32_t(steps_.size());
    steps_.push_back(std::move(step));
  }
  // Note [Captured steps]: a plan on a device, without random draws (their
  // counters move every run) or communication (another rank's calls must
  // match every run), may be recorded; a new lowering drops a recording.
  captured_.reset();
  plain_runs_ = 0;
  capturable_ = !arena_.device().is_cpu();
  for (const Step& step : steps_)
    capturable_ = capturable_ && !step.random_counters && !step.op->collective && !step.send && !step.recv;
  // Note [Overlapping communication]: each collective gets a slot that its
  // wait node's step (or the end of the run) waits for.
  final_waits_.clear();
  num_slots_ = 0;
  if (!overlap_communication_) return;
  const std::vector<int32_t> waits = communication_waits(graph_);
  for (size_t i = 0; i < waits.size(); ++i) {
    if (waits[i] < 0) continue;
    const int32_t slot = num_slots_++;
    steps_[size_t(step_of[i])].async_slot = slot;
    if (waits[i] == int32_t(waits.size())) final_waits_.push_back(slot);
    else steps_[size_t(step_of[size_t(waits[i])])].waits.push_back(slot);
  }
  if (num_slots_ && !comm_thread_) {
    comm_thread_ = std::make_unique<distributed::JobThread>("graph communication");
    comm_thread_->set_idle_poll([this] { return poll_messages(); });
  }
}

bool Executable::refresh_variables() {
  bool changed = false;
  for (const StateBinding& b : graph_.state_bindings) {
    const optim::StateValue::Dict& state = b.optimizer->state(b.param);
    auto it = state.find(b.key);
    MF_CHECK(it != state.end() && it->second.is_tensor(), Error, "graph: the optimizer state '", b.key,
             "' of a parameter of shape ", shape_str(b.param.sizes()),
             " that this graph updates is gone; trace the graph again");
    Value& v = graph_.values()[size_t(b.value)];
    const Tensor& entry = it->second.to_tensor();
    const Tensor& now = entry.is_global() ? global_to_local(entry) : entry;
    if (now.is_same(v.tensor)) continue;
    MF_CHECK(now.sizes() == v.sizes && now.strides() == v.strides && now.storage_offset() == v.offset &&
                 now.dtype() == v.dtype,
             Error, "graph: the optimizer state '", b.key, "' was replaced by a tensor of another layout (",
             dtype_name(now.dtype()), shape_str(now.sizes()), "); trace the graph again");
    v.tensor = now;
    changed = true;
  }
  size_t k = 0;
  for (const Value& v : graph_.values())
    if (v.kind == ValueKind::Variable && v.tensor.storage().get() != variable_storages_[k++]) changed = true;
  return changed;
}

void Executable::bind_inputs(const TensorList& inputs) {
  const auto& graph_inputs = graph_.inputs();
  const auto& absent = graph_.absent_inputs;
  MF_CHECK(inputs.size() == graph_inputs.size() + absent.size(), ValueError, "graph: expected ",
           graph_inputs.size() + absent.size(), " inputs, got ", inputs.size());
  TensorList locals;
  size_t next_absent = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    MF_CHECK(t.defined(), ValueError, "graph: input ", i, " is undefined");
    if (next_absent < absent.size() && absent[next_absent].first == i) {
      const GlobalLayout& layout = absent[next_absent++].second;
      MF_CHECK(t.is_global() && placement_of(t) == layout.placement && sbp_of(t) == layout.sbp &&
                   t.sizes() == layout.shape,
               ValueError, "graph: input ", i, " is ", t.is_global() ? "global " + nd_sbp_str(sbp_of(t)) : "local",
               " of ", shape_str(t.sizes()), " but the graph was compiled for ", layout.str());
      continue;
    }
    const Value& v = graph_.value(graph_inputs[locals.size()]);
    MF_CHECK(t.is_global() == v.global.has_value(), ValueError, "graph: input ", i, " is ",
             t.is_global() ? "a global tensor" : "a local tensor", " but the graph was compiled for ",
             v.global ? "a global one" : "a local one");
    if (v.global) {
      MF_CHECK(placement_of(t) == v.global->placement && sbp_of(t) == v.global->sbp && t.sizes() == v.global->shape,
               ValueError, "graph: input ", i, " is global ", nd_sbp_str(sbp_of(t)), " of ", shape_str(t.sizes()),
               " on ", placement_of(t).str(), " but the graph was compiled for ", v.global->str());
    }
    const Tensor& local = v.global ? global_to_local(t) : t;
    MF_CHECK(local.sizes() == v.sizes && local.dtype() == v.dtype, ShapeError, "graph: input ", i, " has ",
             dtype_name(local.dtype()), shape_str(local.sizes()), " but the graph was compiled for ",
             dtype_name(v.dtype), shape_str(v.sizes));
    MF_CHECK(local.device() == v.device, Error, "graph: input ", i, " is on ", local.device(),
             " but the graph was compiled for ", v.device);
    locals.push_back(local);
  }
  if (refresh_variables()) lower();
  for (size_t i = 0; i < locals.size(); ++i) {
    Tensor& dst = tensors_[size_t(graph_inputs[i])];
    copy_on_device(dst, locals[i]);
  }
}

void Executable::copy_on_device(Tensor& dst, const Tensor& src) {
  static const OpDef& copy = dispatch::op("copy");
  const KernelFn& kernel = copy.kernels[size_t(dst.device().type())];
  MF_CHECK(bool(kernel), Error, "graph: no copy kernel for device ", dst.device());
  TensorList outs{dst};
  kernel({dst, src}, outs, Attrs());
}

void Executable::refresh_attrs(Step& step) {
  if (step.lr_group >= 0) {
    const LrSource& source = graph_.lr_sources[size_t(step.lr_group)];
    step.attrs.set("lr", source.optimizer->param_groups()[source.group].lr());
  }
  if (step.random_counters) {
    step.attrs.set("seed", int64_t(default_generator().seed()));
    step.attrs.set("offset", random_base_ + int64_t(step.random_position));
  }
}

bool Executable::poll_messages() {
  std::unique_lock<std::mutex> lock(works_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return true;
  bool outstanding = false;
  try {
    for (auto* list : {&receives_, &sends_})
      for (auto& work : *list) outstanding = outstanding || (work && !work->is_completed());
  } catch (...) {
    return false;  // the wait that follows reports the error
  }
  return outstanding;
}

void Executable::on_comm_thread(const std::function<void()>& job) {
  if (comm_thread_) comm_thread_->submit(job).get();
  else job();
}

namespace {

// A plan node's kernel inside its profiler span (Note [Profiler]).
template <class Step>
void run_kernel(Step& step) {
  profiler::Span span("graph", step.op->name.c_str());
  step.kernel(step.inputs, step.outputs, step.attrs);
}

}  // namespace

void Executable::run_steps() {
  reserve_random_counters();
  std::vector<std::future<void>> pending(static_cast<size_t>(num_slots_));
  {
    std::lock_guard<std::mutex> lock(works_mutex_);
    receives_.assign(size_t(num_slots_), nullptr);
    sends_.clear();
  }
  timeline_.clear();
  std::vector<std::future<void>> posted_sends;
  auto wait_slot = [&](int32_t slot) {
    pending[size_t(slot)].get();
    if (receives_[size_t(slot)]) {
      on_comm_thread([this, slot] {
        std::shared_ptr<distributed::Work> work;
        {
          std::lock_guard<std::mutex> lock(works_mutex_);
          work = std::move(receives_[size_t(slot)]);
        }
        work->wait();
      });
    }
  };
  try {
    for (Step& step : steps_) {
      for (int32_t slot : step.waits) wait_slot(slot);
      if (step.lr_group >= 0 || step.random_counters) refresh_attrs(step);
      if (step.send) {
        // A copy: the step's buffer is free as soon as the step ends.
        Tensor copy = make_empty(step.inputs[0].sizes(), step.inputs[0].dtype(), step.inputs[0].device());
        copy_on_device(copy, step.inputs[0]);
        auto post = [this, copy, dst = int(step.attrs.get_int("dst")), tag = int(step.attrs.get_int("tag"))] {
          auto work = distributed::world().isend(copy, dst, tag);
          std::lock_guard<std::mutex> lock(works_mutex_);
          sends_.push_back(std::move(work));
        };
        if (comm_thread_) posted_sends.push_back(comm_thread_->submit(post));
        else post();
      } else if (step.recv && step.async_slot >= 0) {
        pending[size_t(step.async_slot)] = comm_thread_->submit([this, &step] {
          auto work = distributed::world().irecv(step.outputs[0], int(step.attrs.get_int("src")),
                                                 int(step.attrs.get_int("tag")));
          std::lock_guard<std::mutex> lock(works_mutex_);
          receives_[size_t(step.async_slot)] = std::move(work);
        });
      } else if (step.async_slot >= 0) {
        pending[size_t(step.async_slot)] =
            comm_thread_->submit([&step] { run_kernel(step); });
      } else if (timing_) {
        const double start = seconds_now();
        run_kernel(step);
        const double end = seconds_now();
        const PipelineTag& last = timeline_.empty() ? step.tag : timeline_.back().tag;
        if (timeline_.empty() || last.stage != step.tag.stage || last.micro_batch != step.tag.micro_batch ||
            last.phase != step.tag.phase)
          timeline_.push_back({step.tag, start, end});
        else
          timeline_.back().end = end;
      } else {
        run_kernel(step);
      }
    }
    for (int32_t slot : final_waits_) wait_slot(slot);
    for (auto& p : posted_sends) p.get();
    on_comm_thread([this] {
      std::vector<std::shared_ptr<distributed::Work>> sends;
      {
        std::lock_guard<std::mutex> lock(works_mutex_);
        sends.swap(sends_);
      }
      for (auto& work : sends) work->wait();
    });
  } catch (...) {
    // The communication thread may still use the plan's buffers.
    for (auto& p : pending)
      if (p.valid()) p.wait();
    for (auto& p : posted_sends)
      if (p.valid()) p.wait();
    std::vector<std::shared_ptr<distributed::Work>> dropped;  // waited for by their destructors, unlocked
    {
      std::lock_guard<std::mutex> lock(works_mutex_);
      dropped.swap(sends_);
      for (auto& work : receives_) dropped.push_back(std::move(work));
      receives_.clear();
    }
    throw;
  }
}

void Executable::set_capture(bool on) {
  if (on != capture_) captured_.reset();
  capture_ = on;
}

std::vector<double> Executable::learning_rates() const {
  std::vector<double> lrs;
  for (const LrSource& source : graph_.lr_sources)
    lrs.push_back(source.optimizer->param_groups()[source.group].lr());
  return lrs;
}

// Note [Captured steps]: the first run goes step by step (libraries open,
// plans and handles are made outside a recording), the second is recorded
// and replayed, later ones replay.
void Executable::run_captured() {
  std::vector<double> lrs = learning_rates();
  if (captured_ && lrs == captured_lrs_) return captured_->replay();
  captured_.reset();
  if (plain_runs_++ == 0) return run_steps();
  try {
    captured_ = mf::capture(arena_.device(), [this] { run_steps(); });
  } catch (const Error&) {
    // A kernel waited for the host or allocated: nothing ran, and this plan
    // runs step by step from now on.
    captured_.reset();
  }
  if (!captured_) {
    capturable_ = false;
    return run_steps();
  }
  ++num_captures_;
  captured_lrs_ = std::move(lrs);
  captured_->replay();
}

TensorList Executable::run(const TensorList& inputs) {
  profiler::Span span("graph", "graph step");
  bind_inputs(inputs);
  if (capture_ && capturable_ && !timing_) run_captured();
  else run_steps();
  TensorList outputs;
  size_t next_absent = 0;
  const auto& absent = graph_.absent_outputs;
  for (size_t i = 0; i < graph_.outputs().size(); ++i) {
    for (; next_absent < absent.size() && absent[next_absent].first == outputs.size(); ++next_absent) {
      const GlobalLayout& layout = absent[next_absent].second;
      outputs.push_back(make_global(Tensor(), layout.shape, graph_.absent_output_dtypes.at(next_absent),
                                    layout.placement, layout.sbp));
    }
    const Tensor& src = tensors_[size_t(graph_.outputs()[i])];
    Tensor out = make_empty(src.sizes(), src.dtype(), src.device());
    copy_on_device(out, src);
    if (const auto& layout = graph_.output_layouts()[i])
      out = make_global(std::move(out), layout->shape, src.dtype(), layout->placement, layout->sbp);
    outputs.push_back(std::move(out));
  }
  for (; next_absent < absent.size(); ++next_absent) {
    const GlobalLayout& layout = absent[next_absent].second;
    outputs.push_back(make_global(Tensor(), layout.shape, graph_.absent_output_dtypes.at(next_absent),
                                  layout.placement, layout.sbp));
  }
  return outputs;
}

namespace {

// "matmul (1024, 256)T (256, 1024)": the op and its inputs' shapes, T for a
// transposed matrix (strides of the last two dims swapped).
std::string shape_key(const std::string& name, const TensorList& inputs) {
  std::ostringstream os;
  os << name;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    os << " " << shape_str(t.sizes());
    if (t.dim() >= 2 && t.stride(-2) == 1 && t.size(-2) > 1) os << "T";
  }
  return os.str();
}

}  // namespace

std::string Executable::profile(const TensorList& inputs, int runs, bool by_shape) {
  std::map<std::string, std::pair<double, int64_t>> per_op;  // seconds, calls
  double total = 0;
  for (int r = 0; r < runs; ++r) {
    bind_inputs(inputs);
    reserve_random_counters();
    for (Step& step : steps_) {
      if (step.lr_group >= 0 || step.random_counters) refresh_attrs(step);
      const auto begin = std::chrono::steady_clock::now();
      step.kernel(step.inputs, step.outputs, step.attrs);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      auto& entry = per_op[by_shape ? shape_key(step.op->name, step.inputs) : step.op->name];
      entry.first += s;
      entry.second += 1;
      total += s;
    }
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(per_op.begin(), per_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::ostringstream os;
  os << "op  ms/run  calls/run  (total " << 1e3 * total / runs << " ms/run)\n";
  for (const auto& [name, entry] : rows)
    os << name << "  " << 1e3 * entry.first / runs << "  " << entry.second / runs << "\n";
  return os.str();
}

int64_t Executable::forward_peak_bytes() const {
  const auto& values = graph_.values();
  const auto& nodes = graph_.nodes();
  std::vector<int64_t> delta(nodes.size() + 3, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    if (plan_.offsets[i] < 0 || values[i].producer < 0) continue;
    if (nodes[size_t(values[i].producer)].pipeline.phase != Phase::Forward) continue;
    const auto [first, last] = plan_.lifetimes[i];
    delta[size_t(first + 1)] += values[i].nbytes();
    delta[size_t(last + 2)] -= values[i].nbytes();
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) peak = std::max(peak, live += d);
  return peak;
}

std::string Executable::memory_report(int max_rows) const {
  const auto& values = graph_.values();
  const auto& nodes = graph_.nodes();
  // The time with the most live bytes.
  std::vector<int64_t> live(nodes.size() + 2, 0);
  std::vector<ValueId> planned;
  for (size_t i = 0; i < values.size(); ++i) {
    if (plan_.offsets[i] < 0) continue;
    planned.push_back(ValueId(i));
    const auto [first, last] = plan_.lifetimes[i];
    for (int32_t t = first; t <= last; ++t) live[size_t(t + 1)] += values[i].nbytes();
  }
  const auto peak = int32_t(std::max_element(live.begin(), live.end()) - live.begin()) - 1;
  std::vector<ValueId> at_peak;
  for (ValueId id : planned)
    if (plan_.lifetimes[size_t(id)].first <= peak && peak <= plan_.lifetimes[size_t(id)].second) at_peak.push_back(id);
  std::sort(at_peak.begin(), at_peak.end(),
            [&](ValueId a, ValueId b) { return values[size_t(a)].nbytes() > values[size_t(b)].nbytes(); });
  std::ostringstream os;
  os << "peak before node " << peak << " (" << (peak >= 0 && peak < int32_t(nodes.size()) ? nodes[size_t(peak)].op->name : "")
     << "): " << live[size_t(peak + 1)] << " bytes in " << at_peak.size() << " buffers\n";
  for (size_t k = 0; k < at_peak.size() && int(k) < max_rows; ++k) {
    const Value& v = values[size_t(at_peak[k])];
    const std::string writer = v.kind == ValueKind::Input ? "input" : nodes[size_t(v.producer)].op->name;
    os << "  " << value_name(graph_, at_peak[k]) << " " << dtype_name(v.dtype) << shape_str(v.sizes) << " "
       << v.nbytes() << " bytes, from " << writer << ", live over nodes " << plan_.lifetimes[size_t(at_peak[k])].first
       << ".." << plan_.lifetimes[size_t(at_peak[k])].second << "\n";
  }
  return os.str();
}

std::string Executable::str() const {
  std::ostringstream os;
  os << graph_.str() << "\n" << steps_.size() << " kernel steps; planned memory " << plan_.arena_bytes
     << " bytes (at most " << plan_.live_peak_bytes << " live at once, " << plan_.total_bytes << " without reuse)";
  return os.str();
}

}  // namespace mf::graph
