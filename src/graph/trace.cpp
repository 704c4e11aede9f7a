// The tracer; see Note [Tracing a train step] in trace.h.
#include "meshflow/graph/trace.h"

#include <algorithm>
#include <set>

#include "autograd/observer.h"
#include "distributed/comm_ops.h"
#include "meshflow/amp.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/distributed/global.h"
#include "meshflow/generator.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/one_embedding.h"
#include "meshflow/optim/optimizer.h"

namespace mf::graph {

namespace {
thread_local Tracer* tls_tracer = nullptr;

Value value_from(const Tensor& t) {
  return Value{.sizes = t.sizes(), .strides = t.strides(), .offset = t.storage_offset(), .dtype = t.dtype(),
               .device = t.device()};
}
// The tensor a graph binds for t: a global tensor's local tensor.
Tensor bound_tensor(const Tensor& t) { return t.is_global() ? global_to_local(t) : t; }

bool is_member(const Tensor& t) { return placement_of(t).contains(distributed::get_rank()); }

// Counters a random op reserved (Note [Counter-based random ops]): the op
// has just reserved them, so they end at the generator's offset.
uint64_t random_counters(const Attrs& attrs) {
  if (!attrs.has("seed") || !attrs.has("offset")) return 0;
  const auto first = uint64_t(attrs.get_int("offset"));
  const uint64_t end = default_generator().offset();
  return end > first ? end - first : 0;
}

// Note [Recomputed nodes] in ir.h
// and Note [Random counters of a run].
void mark_random(Node& node, uint64_t first_offset) {
  node.recomputed = autograd::in_recomputation();
  if (!node.random_counters) return;
  const auto offset = uint64_t(node.attrs.get_int("offset"));
  node.random_key = offset + 1;
  node.random_position = offset - first_offset;
}

}  // namespace

Tracer* current_tracer() { return tls_tracer; }

// Tells the tracer which autograd node the engine runs (pipeline tags).
class Tracer::Observer final : public autograd::BackwardObserver {
 public:
  explicit Observer(Tracer* tracer) : tracer_(tracer) {}
  void node_started(uint64_t sequence_nr) override {
    tracer_->in_backward_ = true;
    tracer_->backward_stage_ = -1;
    const auto& scopes = tracer_->stage_scopes_;
    auto it = std::upper_bound(scopes.begin(), scopes.end(), sequence_nr,
                               [](uint64_t s, const StageScope& scope) { return s < scope.begin; });
    if (it != scopes.begin() && sequence_nr < std::prev(it)->end) tracer_->backward_stage_ = std::prev(it)->stage;
  }
  void pass_ended() override {
    tracer_->in_backward_ = false;
    tracer_->backward_stage_ = -1;
  }

 private:
  Tracer* tracer_;
};

void Tracer::set_pipeline_phase(Phase phase, int32_t micro_batch) {
  phase_ = phase;
  micro_batch_ = micro_batch;
}

void Tracer::enter_stage(int32_t stage) {
  MF_CHECK(current_stage_ < 0, Error, "graph: pipeline stage ", stage, "'s module was called inside stage ",
           current_stage_, "'s module; stages cannot nest");
  MF_CHECK(stage >= 0, ValueError, "graph: a pipeline stage id must be >= 0, got ", stage);
  current_stage_ = stage;
  stage_scopes_.push_back({autograd::next_sequence_nr(), UINT64_MAX, stage});
}

void Tracer::exit_stage() {
  if (current_stage_ < 0) return;
  stage_scopes_.back().end = autograd::next_sequence_nr();
  current_stage_ = -1;
}

PipelineTag Tracer::pipeline_tag() const {
  if (in_backward_) return {.stage = backward_stage_, .micro_batch = micro_batch_, .phase = Phase::Backward};
  return {.stage = current_stage_, .micro_batch = micro_batch_, .phase = phase_};
}

SuspendTracing::SuspendTracing() : suspended_(tls_tracer) { tls_tracer = nullptr; }
SuspendTracing::~SuspendTracing() { tls_tracer = suspended_; }

void check_traceable(const Tensor& t, const char* what) {
  MF_CHECK(tls_tracer == nullptr || t.storage()->has_data(), Error, what,
           " is not traceable in graph mode: a traced tensor has no values until the compiled graph runs; "
           "return the tensor from build() and read it from the graph's output");
}

Tracer::Tracer() {
  MF_CHECK(tls_tracer == nullptr, Error, "graph: a trace is already active on this thread (build() of one graph "
                                         "called another graph)");
  Generator& gen = default_generator();
  generator_seed_ = gen.seed();
  generator_offset_ = gen.offset();
  tls_tracer = this;
  active_ = true;
  observer_ = std::make_unique<Observer>(this);
  previous_observer_ = autograd::set_backward_observer(observer_.get());
}

Tracer::~Tracer() { close(); }

void Tracer::close() {
  if (!active_) return;
  active_ = false;
  tls_tracer = nullptr;
  autograd::set_backward_observer(previous_observer_);
  if (scaling_) autograd::set_loss_scaling(scaling_->previous_hook);
  scaling_.reset();
  for (auto& [t, grad] : saved_grads_) t.set_grad(grad);
  saved_grads_.clear();
  default_generator().set_state(generator_seed_, generator_offset_);
  seen_.clear();
  ids_.clear();
  by_storage_.clear();
  state_of_.clear();
}

void Tracer::leave_global(const TensorList& outputs) {
  global_update_op_ = nullptr;
  global_update_group_ = -1;
  for (const Tensor& t : outputs) {
    if (!t.defined() || !t.is_global()) continue;
    const Tensor local = global_to_local(t);
    if (!local.defined()) continue;
    auto it = ids_.find(local.impl());
    const ValueId id = it != ids_.end() ? it->second : alias_of(local);
    if (id == kNoValue) continue;
    Value& v = graph_.values()[size_t(id)];
    if (v.kind == ValueKind::Intermediate && !v.global) v.global = GlobalLayout{placement_of(t), sbp_of(t), t.sizes()};
  }
}

TensorList Tracer::add_inputs(const TensorList& examples) {
  TensorList stand_ins;
  for (const Tensor& t : examples) {
    MF_CHECK(t.defined(), ValueError, "graph: input ", stand_ins.size(), " is undefined");
    if (!t.is_global()) {
      const ValueId id = graph_.add_input({t.sizes(), t.dtype(), t.device()});
      Tensor stand_in = make_meta(t.sizes(), t.dtype(), t.device());
      bind(stand_in, id);
      stand_ins.push_back(stand_in);
      continue;
    }
    const GlobalLayout layout{placement_of(t), sbp_of(t), t.sizes()};
    if (!is_member(t)) {  // another rank's input: no value here
      graph_.absent_inputs.emplace_back(stand_ins.size(), layout);
      stand_ins.push_back(make_global(Tensor(), t.sizes(), t.dtype(), layout.placement, layout.sbp));
      continue;
    }
    const Tensor& local = global_to_local(t);
    const ValueId id = graph_.add_input({local.sizes(), local.dtype(), local.device()}, {}, layout);
    Tensor stand_in = make_meta(local.sizes(), local.dtype(), local.device());
    bind(stand_in, id);
    stand_ins.push_back(make_global(stand_in, t.sizes(), t.dtype(), layout.placement, layout.sbp));
  }
  return stand_ins;
}

void Tracer::add_optimizer(optim::Optimizer& optimizer) {
  MF_CHECK(!scaling_, Error, "graph: add_optimizer after set_grad_scaler: the scaler would not cover this "
                             "optimizer; add every optimizer first");
  {
    // The state is real memory that the graph will update: make it eagerly.
    SuspendTracing eager;
    optimizer.init_state();
  }
  optimizers_.push_back(&optimizer);
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    graph_.lr_sources.push_back({&optimizer, g});
    for (const Tensor& p : groups[g].params) {
      lr_group_of_[p.impl()] = int32_t(graph_.lr_sources.size() - 1);
      shield_grad(p);
      for (const auto& [key, entry] : optimizer.state(p)) {
        const auto* name = std::get_if<std::string>(&key);
        if (name && entry.is_tensor() && entry.to_tensor().defined()) {
          const Tensor state = bound_tensor(entry.to_tensor());
          // (undefined: the state of another stage's parameter)
          if (state.defined()) state_of_[state.storage().get()] = {state, StateBinding{&optimizer, p, *name}};
        }
      }
    }
  }
}

void Tracer::set_grad_scaling(GradScaling scaling) {
  MF_CHECK(!scaling_, Error, "graph: set_grad_scaler called twice on one trace");
  MF_CHECK(!optimizers_.empty(), Error,
           "graph: set_grad_scaler needs an optimizer to make conditional: call add_optimizer first (a grad "
           "scaler scales a training step)");
  MF_CHECK(scaling.scale.defined() && scaling.scale.numel() == 1 && scaling.scale.dtype() == kFloat32 &&
               scaling.scale.storage()->has_data(),
           TypeError, "graph: set_grad_scaler: the scale must be a one-element float32 tensor with data");
  MF_CHECK(scaling.growth_tracker.defined() && scaling.growth_tracker.numel() == 1 &&
               scaling.growth_tracker.dtype() == kInt32 && scaling.growth_tracker.storage()->has_data(),
           TypeError, "graph: set_grad_scaler: the growth tracker must be a one-element int32 tensor with data");
  scaling_ = std::make_unique<Scaling>();
  scaling_->state = std::move(scaling);
  {
    // Flags the graph updates: real memory, made eagerly.
    SuspendTracing eager;
    for (optim::Optimizer* optimizer : optimizers_)
      scaling_->found_infs.emplace_back(optimizer, zeros({1}, {.dtype = kFloat32}));
  }
  const auto& flags = scaling_->found_infs;
  for (size_t i = 0; i < flags.size(); ++i)
    names_[flags[i].second.impl()] = "grad_scaler.found_inf" + (flags.size() > 1 ? "." + std::to_string(i) : "");
  names_[scaling_->state.scale.impl()] = "grad_scaler.scale";
  names_[scaling_->state.growth_tracker.impl()] = "grad_scaler.growth_tracker";
  scaling_->hook.scale = scaling_->state.scale;
  scaling_->hook.finish = [this] {
    if (!scaling_->deferred) unscale_gradients();
  };
  scaling_->previous_hook = autograd::set_loss_scaling(&scaling_->hook);
}

void Tracer::set_grad_scaler(amp::GradScaler& scaler) {
  MF_CHECK(scaler.is_enabled(), ValueError, "graph: set_grad_scaler got a disabled GradScaler");
  const amp::GradScalerOptions& o = scaler.options();
  Tensor scale, growth_tracker;
  {
    SuspendTracing eager;  // the scaler makes its tensors on first use
    scale = scaler.scale_tensor();
    growth_tracker = scaler.growth_tracker_tensor();
  }
  set_grad_scaling({.scale = scale,
                    .growth_tracker = growth_tracker,
                    .growth_factor = o.growth_factor,
                    .backoff_factor = o.backoff_factor,
                    .growth_interval = o.growth_interval});
}

void Tracer::defer_unscaling() {
  MF_CHECK(scaling_ && !scaling_->unscaled, Error, "graph: defer_unscaling needs a grad scaler and no backward yet");
  scaling_->deferred = true;
}

void Tracer::unscale_accumulated() {
  MF_CHECK(scaling_ && scaling_->deferred, Error, "graph: unscale_accumulated without defer_unscaling");
  scaling_->deferred = false;
  unscale_gradients();
}

void Tracer::unscale_gradients() {
  MF_CHECK(!scaling_->unscaled, Error,
           "graph: with a grad scaler build() may call backward() only once per step (the gradients are "
           "unscaled when it ends)");
  NoGradGuard no_grad;
  const Tensor inv_scale = reciprocal(scaling_->state.scale);
  for (auto& [optimizer, found_inf] : scaling_->found_infs) {
    zero_(found_inf);
    TensorList grads;
    for (const auto& group : optimizer->param_groups())
      for (const Tensor& p : group.params)
        if (one_embedding::unscale_if_embedding(p, found_inf, inv_scale)) {
          continue;  // a MultiTableEmbedding's sparse gradients
        } else if (p.grad().defined()) {
          MF_CHECK(p.grad().dtype() != kFloat16, ValueError,
                   "graph: the grad scaler cannot unscale float16 gradients (keep the parameters float32)");
          grads.push_back(p.grad());
        }
    amp::non_finite_check_and_unscale_(grads, found_inf, inv_scale);
    agree_on_found_inf(*optimizer, found_inf);
  }
  scaling_->unscaled = true;
}

// Pipeline stages: a rank checks only the gradients of its stages, so the
// flags are summed over every rank that holds a parameter of the optimizer,
// and a step that any stage found an inf in is skipped on all of them.
void Tracer::agree_on_found_inf(optim::Optimizer& optimizer, Tensor& found_inf) {
  std::set<int> ranks;
  bool apart = false;
  const Placement* first = nullptr;
  for (const auto& group : optimizer.param_groups())
    for (const Tensor& p : group.params) {
      if (!p.is_global()) return;
      const Placement& placement = placement_of(p);
      apart = apart || (first && !(placement == *first));
      first = &placement;
      ranks.insert(placement.ranks().begin(), placement.ranks().end());
    }
  if (!apart || !ranks.count(distributed::get_rank())) return;
  copy_(found_inf, distributed::comm_all_reduce(found_inf, std::vector<int>(ranks.begin(), ranks.end())));
}

void Tracer::name_variable(const Tensor& t, std::string name) {
  if (t.defined()) names_[bound_tensor(t).impl()] = std::move(name);
}

void Tracer::enter_global(const OpDef& op, const TensorList& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.is_global()) shield_grad(t);
  global_update_op_ = nullptr;
  global_update_group_ = -1;
  if (op.inplace && !inputs.empty() && inputs[0].defined())
    if (auto it = lr_group_of_.find(inputs[0].impl()); it != lr_group_of_.end()) {
      global_update_op_ = &op;
      global_update_group_ = it->second;
    }
}

void Tracer::shield_grad(const Tensor& t) {
  if (!t.requires_grad() || !t.is_leaf()) return;
  for (const auto& [seen, grad] : saved_grads_)
    if (seen.is_same(t)) return;
  saved_grads_.emplace_back(t, t.grad());
  t.set_grad(Tensor());
}

void Tracer::bind(const Tensor& t, ValueId id) {
  ids_[t.impl()] = id;
  auto& same_storage = by_storage_[t.storage().get()];
  if (same_storage.empty() || same_storage.back() != id) same_storage.push_back(id);
  seen_.push_back(t);
}

ValueId Tracer::alias_of(const Tensor& t) const {
  auto it = by_storage_.find(t.storage().get());
  if (it == by_storage_.end()) return kNoValue;
  for (auto id = it->second.rbegin(); id != it->second.rend(); ++id) {
    const Value& v = graph_.value(*id);
    if (v.sizes == t.sizes() && v.strides == t.strides() && v.offset == t.storage_offset() && v.dtype == t.dtype())
      return *id;
  }
  return kNoValue;
}

ValueId Tracer::value_of(const Tensor& t, const OpDef* op) {
  if (!t.defined()) return kNoValue;
  if (auto it = ids_.find(t.impl()); it != ids_.end()) return it->second;
  // Another handle of a tensor already seen (detach(), a saved tensor).
  if (const ValueId id = alias_of(t); id != kNoValue) {
    bind(t, id);
    return id;
  }
  MF_CHECK(!t.is_global(), Error, "internal: ", op ? op->name : std::string("graph"),
           ": a global tensor reached the lazy layer (global ops are traced through the global interpreter)");
  MF_CHECK(t.storage()->has_data(), Error, op ? op->name : std::string("graph"),
           ": got a traced tensor that this trace did not produce (a tensor kept from another graph's build()?)");
  std::string name;
  if (auto it = names_.find(t.impl()); it != names_.end()) name = it->second;
  // Optimizer state, also through another handle of its memory (a global
  // update takes a local step counter as broadcast: a detached handle).
  const StateBinding* state = nullptr;
  if (auto it = state_of_.find(t.storage().get()); it != state_of_.end()) {
    const Tensor& s = it->second.first;
    if (s.sizes() == t.sizes() && s.strides() == t.strides() && s.storage_offset() == t.storage_offset())
      state = &it->second.second;
  }
  if (state && name.empty())
    if (auto it = names_.find(bound_tensor(state->param).impl()); it != names_.end())
      name = it->second + "." + state->key;
  const ValueId id = graph_.add_variable(t, std::move(name));
  if (state) {
    graph_.state_bindings.push_back(*state);
    graph_.state_bindings.back().value = id;
  }
  shield_grad(t);
  bind(t, id);
  return id;
}

TensorList Tracer::record(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  Node node{.op = &op, .attrs = attrs, .pipeline = pipeline_tag()};
  for (const Tensor& t : inputs) node.inputs.push_back(value_of(t, &op));
  node.random_counters = random_counters(attrs);
  mark_random(node, generator_offset_);
  TensorList outputs;
  std::vector<Value> values;
  if (op.view) {
    outputs = op.view(inputs, attrs);
    for (Tensor& t : outputs) {
      t.impl()->set_is_view(true);
      values.push_back(value_from(t));
    }
  } else {
    for (const TensorMeta& m : dispatch::infer(op, inputs, attrs)) {
      outputs.push_back(make_meta(m.sizes, m.dtype, m.device));
      values.push_back(value_from(outputs.back()));
    }
  }
  const int32_t index = graph_.append_node(std::move(node), values);
  const auto& out_ids = graph_.nodes()[size_t(index)].outputs;
  for (size_t i = 0; i < outputs.size(); ++i) bind(outputs[i], out_ids[i]);
  return outputs;
}

void Tracer::record_inplace(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  Node node{.op = &op, .attrs = attrs, .inplace = true, .random_counters = random_counters(attrs),
            .pipeline = pipeline_tag()};
  mark_random(node, generator_offset_);
  for (const Tensor& t : inputs) node.inputs.push_back(value_of(t, &op));
  if (attrs.has("lr")) {
    int32_t group = -1;
    if (&op == global_update_op_) {
      group = global_update_group_;
      global_update_op_ = nullptr;  // one node per update
    } else if (auto it = lr_group_of_.find(inputs[0].impl()); it != lr_group_of_.end()) {
      group = it->second;
    }
    if (group >= 0) {
      node.lr_group = group;
      if (scaling_) node.inputs.back() = skip_input(op, graph_.lr_sources[size_t(group)].optimizer);
    }
  }
  const Value written = graph_.value(node.inputs[0]);
  const int32_t index = graph_.append_node(std::move(node), {written});
  // Later reads of the written tensor see the new value.
  bind(inputs[0], graph_.nodes()[size_t(index)].outputs[0]);
}

ValueId Tracer::skip_input(const OpDef& op, const optim::Optimizer* optimizer) {
  MF_CHECK(scaling_->unscaled, Error, op.name,
           ": the graph's grad scaler found no gradients to unscale: build() must call loss.backward() before "
           "the graph steps the optimizer");
  MF_CHECK(op.inputs.back() == "found_inf", Error, op.name, ": an update of a parameter under a grad scaler must take "
                                                         "a found_inf input to skip on");
  // add_optimizer refuses optimizers after set_grad_scaler: every one has a flag.
  auto it = std::find_if(scaling_->found_infs.begin(), scaling_->found_infs.end(),
                         [&](const auto& entry) { return entry.first == optimizer; });
  return value_of(it->second, &op);
}

int64_t Tracer::num_updates() const {
  return std::count_if(graph_.nodes().begin(), graph_.nodes().end(), [](const Node& n) { return n.lr_group >= 0; });
}

Graph Tracer::finish(const TensorList& outputs) {
  MF_CHECK(active_, Error, "graph: finish() called twice on one trace");
  std::vector<ValueId> ids;
  std::vector<std::optional<GlobalLayout>> layouts;
  for (const Tensor& t : outputs) {
    MF_CHECK(t.defined(), ValueError, "graph: build() returned an undefined tensor (output ", ids.size(), ")");
    if (t.is_global() && !is_member(t)) {  // another rank's result
      graph_.absent_outputs.emplace_back(ids.size() + graph_.absent_outputs.size(),
                                         GlobalLayout{placement_of(t), sbp_of(t), t.sizes()});
      graph_.absent_output_dtypes.push_back(t.dtype());
    } else if (t.is_global()) {
      ids.push_back(value_of(global_to_local(t), nullptr));
      layouts.emplace_back(GlobalLayout{placement_of(t), sbp_of(t), t.sizes()});
    } else {
      ids.push_back(value_of(t, nullptr));
      layouts.emplace_back();
    }
  }
  if (scaling_) {
    MF_CHECK(scaling_->unscaled, Error,
             "graph: a graph with a grad scaler must train: build() must call loss.backward()");
    NoGradGuard no_grad;
    Tensor found_inf = scaling_->found_infs[0].second;
    for (size_t i = 1; i < scaling_->found_infs.size(); ++i) found_inf = add(found_inf, scaling_->found_infs[i].second);
    const GradScaling& s = scaling_->state;
    amp::update_scale_(s.scale, s.growth_tracker, found_inf, s.growth_factor, s.backoff_factor, s.growth_interval);
  }
  graph_.set_outputs(std::move(ids), std::move(layouts));
  graph_.random_span = default_generator().offset() - generator_offset_;
  close();
  return std::move(graph_);
}

}  // namespace mf::graph
