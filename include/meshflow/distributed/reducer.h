// Data-parallel gradient averaging for replicated local models
// (mf.nn.parallel.DistributedDataParallel): each rank runs the whole model
// on its part of the batch, and after backward every parameter's .grad is
// the mean over ranks of the ranks' gradients.
//
// Note [Gradient buckets]: parameters are grouped, in reverse registration
// order (roughly the order backward produces their gradients), into
// buckets of at most bucket_cap_bytes of one dtype. A hook after gradient
// accumulation copies a parameter's .grad into its bucket's flat buffer;
// when a bucket is complete it is handed, in bucket order, to a
// communication thread that all-reduces it while backward goes on. At the
// end of backward (autograd::queue_callback) the remaining buckets are
// reduced (parameters that got no gradient contribute zeros), and each
// .grad becomes its slice of the bucket divided by the world size. Every
// rank reduces the same buckets in the same order, so the collectives
// match whatever order gradients arrive in.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "meshflow/distributed/communicator.h"
#include "meshflow/tensor.h"

namespace mf::distributed {

class GradientReducer {
 public:
  // params: leaf tensors that require grad (contiguous, the same shapes and
  // order on every rank). comm: the group (default: world()).
  // gradient_as_bucket_view: after a pass each .grad is a view of its
  // bucket (PyTorch's option of that name), so the gradients are held once;
  // later backwards accumulate into the bucket itself.
  GradientReducer(TensorList params, int64_t bucket_cap_bytes, Communicator* comm = nullptr,
                  bool gradient_as_bucket_view = false);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // false: backward only accumulates locally (no_sync, for gradient
  // accumulation); the next backward with sync on reduces the sum.
  void set_sync(bool sync);
  bool sync() const;
  // Parameter indices per bucket, in reduction order.
  std::vector<std::vector<size_t>> bucket_params() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Sets every rank's tensors to root's (contiguous tensors, in place).
void broadcast_tensors(const TensorList& tensors, int root, Communicator* comm = nullptr);

}  // namespace mf::distributed
