// clip_grad_norm_ written with ops (norm, stack, clamp, mul_), as PyTorch's.
#include "meshflow/optim/clip_grad.h"

#include <cmath>

#include <algorithm>
#include <set>

#include "meshflow/autograd.h"
#include "meshflow/distributed/global.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"

namespace mf::nn::utils {

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  NoGradGuard no_grad;
  TensorList grads;
  for (const Tensor& p : params) {
    MF_CHECK(p.defined(), ValueError, "clip_grad_norm_: a parameter is an undefined tensor");
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g.detach());
  }
  if (grads.empty()) return zeros({});
  // The norm of the per-gradient norms is the norm of all elements (for
  // infinity too: the max of maxima). Mixed dtypes meet in their promotion.
  TensorList norms;
  DType dtype = grads[0].dtype();
  for (const Tensor& g : grads) {
    MF_CHECK(is_floating(g.dtype()), TypeError, "clip_grad_norm_: gradients must be floating-point, got ",
             dtype_name(g.dtype()));
    norms.push_back(norm(g, norm_type));
    dtype = promote_types(dtype, g.dtype());
  }
  for (Tensor& n : norms) n = to(n, dtype);
  // Gradients of pipeline stages live on different placements: their norms
  // meet, broadcast, on the union of the ranks, so that every stage scales
  // by the norm over all of them.
  const bool apart = grads[0].is_global() && std::any_of(grads.begin(), grads.end(), [&](const Tensor& g) {
                       return !g.is_global() || !(placement_of(g) == placement_of(grads[0]));
                     });
  if (apart) {
    std::set<int> ranks;
    for (const Tensor& g : grads) {
      MF_CHECK(g.is_global(), ValueError, "clip_grad_norm_: the gradients mix local and global tensors");
      ranks.insert(placement_of(g).ranks().begin(), placement_of(g).ranks().end());
    }
    const Placement all(placement_of(grads[0]).type(), std::vector<int>(ranks.begin(), ranks.end()));
    for (Tensor& n : norms) n = to_global(n, all, NdSbp{Sbp::broadcast()});
  }
  Tensor total_norm = norms.size() == 1 ? norms[0] : norm(stack(norms), norm_type);
  if (error_if_nonfinite) {
    const double total = total_norm.item<double>();
    MF_CHECK(std::isfinite(total), Error, "clip_grad_norm_: the total norm of order ", norm_type,
             " for gradients from `parameters` is non-finite (", total,
             "), so it cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
             "anyway, set error_if_nonfinite=false");
  }
  const Tensor clip_coef = clamp(div(scalar_tensor(max_norm, dtype, total_norm.device()), add(total_norm, 1e-6)),
                                 std::nullopt, 1.0);
  for (Tensor& g : grads)
    mul_(g, apart ? to_global(clip_coef, placement_of(g), NdSbp(placement_of(g).hierarchy().size(), Sbp::broadcast()))
                  : clip_coef);
  return total_norm;
}

}  // namespace mf::nn::utils
