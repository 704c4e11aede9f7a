// GradientReducer: Note [Gradient buckets] in meshflow/distributed/reducer.h.
#include "meshflow/distributed/reducer.h"

#include <algorithm>
#include <future>
#include <optional>

#include "distributed/job_thread.h"
#include "meshflow/autograd.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf::distributed {
namespace {

// Note [One reduction thread]: every DistributedDataParallel of the process
// hands its buckets to this one thread. Two modules wrapped apart (a model's
// bottom and top) reduce in the same backward pass; with a thread each,
// their collectives on one communicator could start in another order on
// each rank and mismatch. On one thread they run in the order the backward
// launches them, which is the same on every rank.
JobThread& reduction_thread() {
  static JobThread thread("DDP reduction");
  return thread;
}

struct Bucket {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;  // of each parameter in buffer
  Tensor buffer;                 // flat, the parameters' dtype
  size_t pending = 0;            // parameters not yet copied in this pass
  std::future<void> reduced;
};

// Note [Reducing device tensors]: tensors on a device reduce over the
// device's group of the same ranks (Note [Device groups]: NCCL for CUDA),
// or, where its backend has none, through host copies over the host group.
// Either way the result is the host group's reduction.
struct DeviceReduction {
  Communicator* host = nullptr;
  std::shared_ptr<Communicator> device;  // null: stage through the host

  DeviceReduction(Communicator& group, const Device& where) : host(&group) {
    if (!where.is_cpu()) device = device_group(group.world_ranks(), where);
  }
  void all_reduce(Tensor& t) const {
    run(t, [](Communicator& c, Tensor& x) { c.all_reduce(x); });
  }
  void broadcast(Tensor& t, int root) const {
    run(t, [root](Communicator& c, Tensor& x) { c.broadcast(x, root); });
  }

 private:
  template <typename Call>
  void run(Tensor& t, const Call& call) const {
    if (t.device().is_cpu()) return call(*host, t);
    if (device) return call(*device, t);
    NoGradGuard no_grad;
    Tensor staged = to(t, Device());
    call(*host, staged);
    copy_(t, staged);
  }
};

}  // namespace

struct GradientReducer::State {
  TensorList params;
  Communicator* comm = nullptr;
  std::optional<DeviceReduction> reduction;  // over comm, on the parameters' device
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;  // per parameter
  std::vector<bool> ready;        // per parameter, this pass
  std::vector<int> hooks;
  bool sync = true;
  bool as_view = false;  // gradient_as_bucket_view
  bool in_pass = false;
  size_t next_launch = 0;
  JobThread* worker = nullptr;

  void start_pass() {
    in_pass = true;
    next_launch = 0;
    std::fill(ready.begin(), ready.end(), false);
    for (Bucket& b : buckets) b.pending = b.params.size();
  }

  void fill(size_t i, const Tensor& grad) {
    Bucket& b = buckets[bucket_of[i]];
    const size_t k = size_t(std::find(b.params.begin(), b.params.end(), i) - b.params.begin());
    Tensor slot = narrow(b.buffer, 0, b.offsets[k], params[i].numel());
    NoGradGuard no_grad;
    if (grad.defined() && grad.data_ptr() == slot.data_ptr()) {
      // The gradient is the bucket's view already (gradient_as_bucket_view).
    } else if (grad.defined()) {
      copy_(slot, reshape(grad.detach(), {-1}));
    } else {
      zero_(slot);
    }
  }

  // Hands complete buckets to the worker, in bucket order.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch++];
      b.reduced = worker->submit([this, buffer = b.buffer]() mutable { reduction->all_reduce(buffer); });
    }
  }

  void on_grad(size_t i) {
    if (!sync) return;
    if (!in_pass) {
      start_pass();
      autograd::queue_callback([this] { finish_pass(); });
    }
    ready[i] = true;
    Bucket& b = buckets[bucket_of[i]];
    fill(i, params[i].grad());
    if (--b.pending == 0) launch_ready();
  }

  void finish_pass() {
    in_pass = false;
    // Parameters that got no gradient on this rank contribute their .grad
    // (zeros without one).
    for (size_t i = 0; i < params.size(); ++i) {
      Bucket& b = buckets[bucket_of[i]];
      if (!ready[i]) {
        ready[i] = true;
        fill(i, params[i].grad());
        --b.pending;
      }
    }
    launch_ready();
    for (Bucket& b : buckets) b.reduced.get();
    const double scale = 1.0 / double(comm->size());
    NoGradGuard no_grad;
    if (as_view) {
      // Each .grad becomes its slice of the bucket: one copy of the
      // gradients is held, not two.
      for (Bucket& b : buckets) {
        mul_(b.buffer, Scalar(scale));
        for (size_t k = 0; k < b.params.size(); ++k) {
          const Tensor& p = params[b.params[k]];
          Tensor view = reshape(narrow(b.buffer, 0, b.offsets[k], p.numel()), p.shape());
          if (!p.grad().defined() || p.grad().data_ptr() != view.data_ptr()) p.set_grad(view);
        }
      }
      return;
    }
    for (const Bucket& b : buckets) {
      for (size_t k = 0; k < b.params.size(); ++k) {
        const Tensor& p = params[b.params[k]];
        Tensor mean = mul(reshape(narrow(b.buffer, 0, b.offsets[k], p.numel()), p.shape()), Scalar(scale));
        if (p.grad().defined()) {
          Tensor g = p.grad();
          copy_(g, mean);
        } else {
          p.set_grad(mean);
        }
      }
    }
  }
};

GradientReducer::GradientReducer(TensorList params, int64_t bucket_cap_bytes, Communicator* comm,
                                 bool gradient_as_bucket_view)
    : state_(std::make_shared<State>()) {
  MF_CHECK(bucket_cap_bytes > 0, ValueError, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
           bucket_cap_bytes, " bytes");
  State& s = *state_;
  s.comm = comm ? comm : &world();
  s.as_view = gradient_as_bucket_view;
  s.params = std::move(params);
  for (size_t i = 0; i < s.params.size(); ++i) {
    const Tensor& p = s.params[i];
    MF_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), ValueError,
             "DistributedDataParallel: parameter ", i, " is not a leaf tensor that requires grad");
    MF_CHECK(!p.is_global(), ValueError, "DistributedDataParallel: parameter ", i,
             " is global; a global model is data-parallel through its SBP (Module.to_global)");
    MF_CHECK(p.device() == s.params[0].device(), ValueError, "DistributedDataParallel: parameter ", i, " is on ",
             p.device(), " but parameter 0 on ", s.params[0].device(), "; the module's parameters must share a device");
  }
  s.reduction.emplace(*s.comm, s.params.empty() ? Device() : s.params[0].device());
  // Reverse order, grouped per dtype, capped per bucket.
  s.bucket_of.assign(s.params.size(), 0);
  std::vector<int64_t> open(kNumDTypes, -1);
  std::vector<int64_t> bytes(kNumDTypes, 0);
  for (size_t r = s.params.size(); r-- > 0;) {
    const Tensor& p = s.params[r];
    const size_t d = size_t(p.dtype());
    const int64_t n = p.numel() * int64_t(itemsize(p.dtype()));
    if (open[d] < 0 || (bytes[d] > 0 && bytes[d] + n > bucket_cap_bytes)) {
      open[d] = int64_t(s.buckets.size());
      bytes[d] = 0;
      s.buckets.emplace_back();
    }
    Bucket& b = s.buckets[size_t(open[d])];
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(r);
    s.bucket_of[r] = size_t(open[d]);
    bytes[d] += n;
  }
  for (Bucket& b : s.buckets) {
    const Tensor& last = s.params[b.params.back()];
    b.buffer = zeros({b.offsets.back() + last.numel()}, {.dtype = last.dtype(), .device = last.device()});
  }
  s.ready.assign(s.params.size(), false);
  s.worker = &reduction_thread();
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.hooks.push_back(s.params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto state = weak.lock()) state->on_grad(i);
    }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < state_->params.size(); ++i) state_->params[i].remove_hook(state_->hooks[i]);
}

void GradientReducer::set_sync(bool sync) { state_->sync = sync; }
bool GradientReducer::sync() const { return state_->sync; }

std::vector<std::vector<size_t>> GradientReducer::bucket_params() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : state_->buckets) out.push_back(b.params);
  return out;
}

void broadcast_tensors(const TensorList& tensors, int root, Communicator* comm) {
  Communicator& c = comm ? *comm : world();
  NoGradGuard no_grad;
  for (const Tensor& t : tensors) {
    MF_CHECK(t.defined() && t.is_contiguous() && !t.is_global(), ValueError,
             "broadcast_tensors: expected contiguous local tensors");
    Tensor target = t.detach();
    DeviceReduction(c, t.device()).broadcast(target, root);
  }
}

}  // namespace mf::distributed
