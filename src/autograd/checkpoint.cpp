// Note [Activation checkpointing] (autograd.h).
#include <memory>
#include <utility>

#include "meshflow/autocast.h"
#include "meshflow/autograd.h"
#include "meshflow/generator.h"

namespace mf::autograd {
namespace {

// What the first run saw, restored for the recomputation.
struct ForwardState {
  bool rng = false;
  uint64_t seed = 0, offset = 0;
  struct Autocast {
    bool enabled;
    DType dtype;
  };
  Autocast cpu{}, cuda{};
  bool cache_enabled = true;

  static ForwardState capture(bool rng) {
    ForwardState s;
    s.rng = rng;
    if (rng) {
      s.seed = default_generator().seed();
      s.offset = default_generator().offset();
    }
    s.cpu = {autocast::is_enabled(DeviceType::CPU), autocast::get_dtype(DeviceType::CPU)};
    s.cuda = {autocast::is_enabled(DeviceType::CUDA), autocast::get_dtype(DeviceType::CUDA)};
    s.cache_enabled = autocast::is_cache_enabled();
    return s;
  }
};

// Puts the generator back where the backward left it.
struct GeneratorRestore {
  uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  ~GeneratorRestore() { default_generator().set_state(seed, offset); }
};

class Frame {
 public:
  Frame(std::function<TensorList(const TensorList&)> fn, const TensorList& inputs, const CheckpointOptions& options)
      : fn_(std::move(fn)), inputs_(inputs), options_(options), state_(ForwardState::capture(options.preserve_rng_state)) {
    for (const Tensor& t : inputs_) versions_.push_back(t.defined() ? t.version() : 0);
  }

  TensorList run_forward() { return fn_(inputs_); }

  size_t record(const Tensor& t) {
    metas_.push_back(TensorMeta{t.sizes(), t.dtype(), t.device()});
    return metas_.size() - 1;
  }

  Tensor take(size_t index) {
    // A second backward (retain_graph) finds its tensors handed out already.
    if (index >= values_.size() || !values_[index].defined()) recompute();
    return std::move(values_[index]);
  }

 private:
  void recompute() {
    TensorList inputs(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Tensor& t = inputs_[i];
      if (!t.defined()) continue;
      MF_CHECK(t.version() == versions_[i], CheckpointError, "checkpoint: input ", i,
               " was modified in place after the forward (at version ", t.version(), ", expected ", versions_[i],
               "), so recomputing the forward would give other values");
      inputs[i] = t.detach();
      if (t.requires_grad()) inputs[i].requires_grad_(true);
    }
    TensorList collected;
    auto hooks = std::make_shared<SavedTensorHooks>();
    hooks->pack = [&collected](const Tensor& t) -> std::shared_ptr<void> {
      collected.push_back(t.detach());
      return nullptr;
    };
    hooks->unpack = [](const std::shared_ptr<void>&) -> Tensor {
      throw CheckpointError("checkpoint: a backward ran inside the recomputation of a checkpointed forward");
    };
    {
      std::optional<GeneratorRestore> restore;
      if (state_.rng) {
        restore.emplace();
        default_generator().set_state(state_.seed, state_.offset);
      }
      AutocastGuard cpu(DeviceType::CPU, state_.cpu.dtype, state_.cpu.enabled, state_.cache_enabled);
      AutocastGuard cuda(DeviceType::CUDA, state_.cuda.dtype, state_.cuda.enabled, state_.cache_enabled);
      EnableGradGuard grad;
      RecomputationGuard recomputation;
      SavedTensorHooksGuard guard(hooks);
      fn_(inputs);
    }
    if (options_.determinism_check) {
      MF_CHECK(collected.size() == metas_.size(), CheckpointError, "checkpoint: the recomputed forward saved ",
               collected.size(), " tensors for backward, the forward saved ", metas_.size(),
               " (the checkpointed function must do the same computation each time it runs)");
      for (size_t i = 0; i < metas_.size(); ++i) {
        const TensorMeta& m = metas_[i];
        const Tensor& t = collected[i];
        MF_CHECK(t.sizes() == m.sizes && t.dtype() == m.dtype, CheckpointError, "checkpoint: saved tensor ", i,
                 " was ", shape_str(m.sizes), " ", dtype_name(m.dtype), " in the forward but ", shape_str(t.sizes()),
                 " ", dtype_name(t.dtype()), " when recomputed (the checkpointed function must do the same ",
                 "computation each time it runs)");
      }
    } else {
      MF_CHECK(collected.size() >= metas_.size(), CheckpointError, "checkpoint: the recomputed forward saved ",
               collected.size(), " tensors for backward, fewer than the forward's ", metas_.size());
    }
    values_ = std::move(collected);
  }

  std::function<TensorList(const TensorList&)> fn_;
  TensorList inputs_;
  std::vector<uint32_t> versions_;
  CheckpointOptions options_;
  ForwardState state_;
  std::vector<TensorMeta> metas_;
  TensorList values_;
};

}  // namespace

TensorList checkpoint(std::function<TensorList(const TensorList&)> fn, const TensorList& inputs,
                      const CheckpointOptions& options) {
  MF_CHECK(fn != nullptr, ValueError, "checkpoint: no function was given");
  auto frame = std::make_shared<Frame>(std::move(fn), inputs, options);
  auto hooks = std::make_shared<SavedTensorHooks>();
  hooks->pack = [frame](const Tensor& t) -> std::shared_ptr<void> {
    return std::make_shared<size_t>(frame->record(t));
  };
  hooks->unpack = [frame](const std::shared_ptr<void>& packed) -> Tensor {
    return frame->take(*static_cast<const size_t*>(packed.get()));
  };
  SavedTensorHooksGuard guard(hooks);
  return frame->run_forward();
}

}  // namespace mf::autograd
