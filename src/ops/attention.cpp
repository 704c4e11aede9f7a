// scaled_dot_product_attention, composed from matmul, softmax and dropout:
//   softmax(q @ k^T * scale + bias) @ v
// where bias is 0 / -inf from a bool mask (true = attend) or causal mask, or
// the additive float mask itself. Gradients come from the composed ops.
#include <cmath>
#include <limits>

#include "meshflow/autocast.h"
#include "meshflow/dispatch.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"

namespace mf {

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  // Under autocast, q, k and v run in the matmuls' low precision.
  static const OpDef& matmul_op = dispatch::op("matmul");
  const Tensor q = autocast::cast_for(matmul_op, q_in), k = autocast::cast_for(matmul_op, k_in),
               v = autocast::cast_for(matmul_op, v_in);
  MF_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, ShapeError, op,
           ": expected q (..., L, E), k (..., S, E) and v (..., S, Ev), got shapes ", shape_str(q.sizes()), ", ",
           shape_str(k.sizes()), " and ", shape_str(v.sizes()));
  MF_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), TypeError, op,
           ": expected q, k and v of one floating-point dtype, got ", dtype_name(q.dtype()), ", ",
           dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  MF_CHECK(q.size(-1) == k.size(-1), ShapeError, op, ": q.shape[-1] (", q.size(-1), ") must equal k.shape[-1] (",
           k.size(-1), "); shapes ", shape_str(q.sizes()), " and ", shape_str(k.sizes()));
  MF_CHECK(k.size(-2) == v.size(-2), ShapeError, op, ": k.shape[-2] (", k.size(-2), ") must equal v.shape[-2] (",
           v.size(-2), "); shapes ", shape_str(k.sizes()), " and ", shape_str(v.sizes()));
  MF_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, ValueError, op, ": dropout_p must be between 0 and 1, got ",
           dropout_p);
  MF_CHECK(!(is_causal && attn_mask.defined()), ValueError, op,
           ": attn_mask must not be given together with is_causal=true");
  const int64_t queries = q.size(-2), keys = k.size(-2);
  const double s = scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  Tensor bias;  // additive, broadcastable to (..., L, S)
  if (is_causal) {
    bias = triu(full({queries, keys}, neg_inf, {.dtype = q.dtype(), .device = q.device()}), 1);
  } else if (attn_mask.defined()) {
    MF_CHECK(attn_mask.dtype() == kBool || is_floating(attn_mask.dtype()), TypeError, op,
             ": attn_mask must be bool (true = attend) or floating (added to the scores), got ",
             dtype_name(attn_mask.dtype()));
    bias = attn_mask.dtype() == kBool
               ? where(attn_mask, scalar_tensor(0.0, q.dtype(), q.device()), scalar_tensor(neg_inf, q.dtype(), q.device()))
               : to(attn_mask, q.dtype());
  }
  // (..., L, S); the scale is applied to q, the smaller operand when E < S.
  Tensor scores = matmul(mul(q, s), transpose(k, -2, -1));
  if (bias.defined()) {
    MF_CHECK(broadcast_shapes(scores.sizes(), bias.sizes(), op) == scores.sizes(), ShapeError, op,
             ": attn_mask of shape ", shape_str(bias.sizes()), " must broadcast to the attention weights' shape ",
             shape_str(scores.sizes()));
    scores = add(scores, bias);
  }
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true);
  return matmul(weights, v);
}

}  // namespace mf
