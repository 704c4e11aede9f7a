#include <atomic>
#include <utility>
#include <vector>

#include "meshflow/autograd.h"
#include "autograd/observer.h"
#include "meshflow/distributed/auto_parallel.h"
#include "meshflow/distributed/global.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
std::atomic<int> g_next_hook_handle{1};
thread_local bool t_grad_enabled = true;
}  // namespace

int next_hook_handle() { return g_next_hook_handle.fetch_add(1); }

namespace {
// A hook may replace a gradient, but with one of the same shape and dtype (as
// in PyTorch); anything else would reach .grad or the next node unnoticed.
Tensor checked_hook_result(const Tensor& replaced, const Tensor& grad) {
  MF_CHECK(replaced.sizes() == grad.sizes(), ShapeError, "register_hook: the hook changed the gradient's shape from ",
           shape_str(grad.sizes()), " to ", shape_str(replaced.sizes()));
  MF_CHECK(replaced.dtype() == grad.dtype(), TypeError, "register_hook: the hook changed the gradient's dtype from ",
           dtype_name(grad.dtype()), " to ", dtype_name(replaced.dtype()));
  return replaced;
}
}  // namespace

bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

// --- Node -------------------------------------------------------------------------

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

uint64_t autograd::next_sequence_nr() { return g_next_sequence_nr.load(); }

int Node::add_tensor_hook(uint32_t output_nr, TensorHook hook) {
  int handle = next_hook_handle();
  tensor_hooks_.emplace_back(handle, output_nr, std::move(hook));
  return handle;
}

void Node::remove_tensor_hook(int handle) {
  std::erase_if(tensor_hooks_, [&](const auto& h) { return std::get<0>(h) == handle; });
}

Tensor Node::run_tensor_hooks(uint32_t output_nr, Tensor grad) const {
  for (const auto& [handle, nr, hook] : tensor_hooks_) {
    if (nr != output_nr || !grad.defined()) continue;
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = checked_hook_result(replaced, grad);
  }
  return grad;
}

// --- AccumulateGrad -----------------------------------------------------------------

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> variable) : variable_(std::move(variable)) {
  output_metas_.push_back(TensorMeta{variable_->sizes(), variable_->dtype(), variable_->device()});
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor grad = std::move(grads.at(0));
  if (!grad.defined()) return {};
  auto& meta = variable_->ensure_autograd();
  for (const auto& [handle, hook] : meta.hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = checked_hook_result(replaced, grad);
  }
  if (const auto& global = variable_->global()) {
    // A global leaf's gradient has the leaf's layout or its gradient layout
    // (a partial sum is reduced, a local zero-filled gradient laid out).
    const NdSbp& layout = global->grad_sbp ? *global->grad_sbp : global->sbp;
    Tensor laid_out = grad.is_global() ? to_global(grad, global->placement, layout)
                                       : global_from_full(grad, global->placement, layout);
    if (distributed::auto_parallel::LogCalls::active())
      distributed::auto_parallel::log_accumulation(Tensor(variable_), grad, laid_out);
    grad = std::move(laid_out);
  }
  if (!meta.grad.defined()) {
    // Keep the gradient's graph only when differentiating twice; otherwise
    // store a detached copy so .grad never aliases another tensor's memory.
    meta.grad = GradMode::is_enabled() ? grad : clone(grad.detach());
  } else if (GradMode::is_enabled()) {
    meta.grad = add(meta.grad, grad);
  } else {
    add_(meta.grad, grad);
  }
  if (!meta.post_accumulate_hooks.empty()) {
    const Tensor leaf(variable_);
    // A hook may remove itself: iterate over a copy.
    auto hooks = meta.post_accumulate_hooks;
    for (const auto& [handle, hook] : hooks) hook(leaf);
  }
  return {};
}

void Node::record_input_edges(const TensorList& inputs, std::vector<TensorMeta>& metas) {
  next_edges_.assign(inputs.size(), Edge{});
  metas.assign(inputs.size(), TensorMeta{});
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    metas[i] = TensorMeta{t.sizes(), t.dtype(), t.device()};
    if (t.requires_grad()) next_edges_[i] = gradient_edge(t);
  }
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  auto& meta = t.impl()->ensure_autograd();
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = output_nr;
  meta.grad_accumulator.reset();
}

Edge gradient_edge(const Tensor& t) {
  auto& meta = t.impl()->ensure_autograd();
  if (meta.grad_fn) return Edge{meta.grad_fn, meta.output_nr};
  auto acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

// --- saved tensor hooks (Note [Saved tensor hooks]) -------------------------------------

namespace {
thread_local std::vector<std::shared_ptr<const SavedTensorHooks>> t_saved_tensor_hooks;
thread_local bool t_recomputing = false;

// While a pack or unpack hook runs, no hooks apply: ops a hook records save
// their tensors as usual (they would otherwise re-enter the hook).
struct HooksSuspended {
  std::vector<std::shared_ptr<const SavedTensorHooks>> stack = std::exchange(t_saved_tensor_hooks, {});
  ~HooksSuspended() { t_saved_tensor_hooks = std::move(stack); }
};
}  // namespace

namespace autograd {

void push_saved_tensor_hooks(std::shared_ptr<const SavedTensorHooks> hooks) {
  MF_CHECK(hooks && hooks->pack && hooks->unpack, ValueError, "saved_tensors_hooks: pack and unpack must be given");
  t_saved_tensor_hooks.push_back(std::move(hooks));
}

void pop_saved_tensor_hooks() {
  MF_CHECK(!t_saved_tensor_hooks.empty(), Error, "saved_tensors_hooks: no hooks are installed on this thread");
  t_saved_tensor_hooks.pop_back();
}

SavedTensorHooksGuard::SavedTensorHooksGuard(std::shared_ptr<const SavedTensorHooks> hooks) {
  push_saved_tensor_hooks(std::move(hooks));
}
SavedTensorHooksGuard::~SavedTensorHooksGuard() { pop_saved_tensor_hooks(); }

RecomputationGuard::RecomputationGuard() : prev_(std::exchange(t_recomputing, true)) {}
RecomputationGuard::~RecomputationGuard() { t_recomputing = prev_; }
bool in_recomputation() { return t_recomputing; }

}  // namespace autograd

// --- SavedTensor ---------------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& t, bool is_output_of_node)
    : version_(t.version()), is_output_(is_output_of_node) {
  requires_grad_ = t.requires_grad();
  if (!t_saved_tensor_hooks.empty()) {
    hooks_ = t_saved_tensor_hooks.back();
    meta_ = TensorMeta{t.sizes(), t.dtype(), t.device()};
    if (is_output_of_node) {
      output_nr_ = t.output_nr();
    } else if (requires_grad_) {
      edge_ = gradient_edge(t);
    }
    // The hook may save, recompute or drop; it runs last so that a throwing
    // hook leaves nothing half-recorded.
    HooksSuspended suspended;
    packed_ = hooks_->pack(is_output_of_node ? t.detach() : t);
    return;
  }
  if (is_output_of_node) {
    // Note [Saved outputs]: keep the data without the grad_fn (the node owns
    // this SavedTensor; holding its own output would be a cycle).
    data_ = t.detach();
    output_nr_ = t.output_nr();
  } else {
    data_ = t;
  }
}

void SavedTensor::reset() {
  data_ = Tensor();
  packed_.reset();
  hooks_.reset();
  edge_ = Edge{};
}

Tensor SavedTensor::relinked(Tensor t, const std::shared_ptr<Node>& node) const {
  if (is_output_) {
    set_history(t, node, output_nr_);
  } else {
    set_history(t, edge_.fn, edge_.input_nr);
  }
  return t;
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& node, const char* op_name, int index) const {
  if (hooks_) {
    Tensor t;
    {
      HooksSuspended suspended;
      t = hooks_->unpack(packed_);
    }
    MF_CHECK(t.defined(), TypeError, "saved_tensors_hooks: the unpack hook must return a Tensor (", 
             is_output_ ? "output " : "input ", index, " of ", op_name, ")");
    MF_CHECK(t.sizes() == meta_.sizes, ShapeError, "saved_tensors_hooks: the unpack hook returned a tensor of shape ",
             shape_str(t.sizes()), " for ", is_output_ ? "output " : "input ", index, " of ", op_name,
             ", which was saved with shape ", shape_str(meta_.sizes));
    MF_CHECK(t.dtype() == meta_.dtype, TypeError, "saved_tensors_hooks: the unpack hook returned a tensor of dtype ",
             dtype_name(t.dtype()), " for ", is_output_ ? "output " : "input ", index, " of ", op_name,
             ", which was saved with dtype ", dtype_name(meta_.dtype));
    if (!requires_grad_) return t.detach();
    return relinked(t.detach(), node);
  }
  MF_CHECK(data_.version() == version_, Error,
           "backward: one of the tensors needed for gradient computation has been modified by an ",
           "in-place operation: ", is_output_ ? "output " : "input ", index, " of ", op_name,
           " is at version ", data_.version(), "; expected version ", version_,
           ". Hint: replace the in-place op (x.add_(...), x[...] = ...) by its out-of-place form.");
  if (!is_output_ || !requires_grad_) return data_;
  return relinked(data_.detach(), node);
}

}  // namespace mf
