// scaled_dot_product_attention:
//   dropout(softmax(q @ k^T * scale + bias)) @ v
// where bias is 0 / -inf from a bool mask (true = attend) or causal mask, or
// the additive float mask itself. It runs as one fused op, fused_attention
// (blocked, online softmax, no (L, S) weights kept: Note [Fused attention]
// in backend/cpu/kernels/attention.cpp), when q, k and v share their batch dims
// and the dtype rule of Note [Choosing fused attention] picks it;
// otherwise (and for a float mask that requires grad, or dropout on global
// tensors) it is composed from matmul, softmax and dropout, the gradients
// coming from the composed ops.
#include <cmath>
#include <limits>

#include "meshflow/autocast.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"
#include "ops/random_common.h"

namespace mf {
namespace {

// inputs (query, key, value, attn_mask); outputs (out, lse).
std::vector<TensorMeta> fused_infer(const TensorList& in, const Attrs&) {
  const Tensor& q = in[0];
  Shape out(q.sizes().begin(), q.sizes().end() - 1);
  const Shape lse = out;
  out.push_back(in[2].size(-1));
  return {{out, q.dtype(), q.device()}, {lse, q.dtype() == kFloat64 ? kFloat64 : kFloat32, q.device()}};
}

// `products` GEMMs of the (..., T, S) weights with head dim D, causal or not
// (a causal call skips about half the blocks).
template <int products>
double attention_flops(const TensorList& in, const std::vector<Shape>&, const Attrs& attrs) {
  const Tensor& q = in[0];
  const Tensor& k = in[1];
  const double weights = double(q.numel() / std::max<int64_t>(q.size(-1), 1)) * double(k.size(-2));
  const double causal = attrs.has("is_causal") && attrs.get_bool("is_causal") ? 0.5 : 1.0;
  return 2.0 * products * weights * double(q.size(-1)) * causal;
}

MF_REGISTER_OP(OpDef{
    .name = "fused_attention",
    .inputs = {"query", "key", "value", "attn_mask"},
    .infer = fused_infer,
    .backward = [](const BackwardContext& ctx) {
      MF_CHECK(!GradMode::is_enabled(), Error,
               "scaled_dot_product_attention: the fused attention's backward is not differentiable "
               "(create_graph=True is not supported through it)");
      static const OpDef& op = dispatch::op("fused_attention_backward");
      TensorList g = dispatch::apply(op,
                                     {ctx.grad_outputs[0], ctx.inputs[0], ctx.inputs[1], ctx.inputs[2],
                                      ctx.inputs[3], ctx.outputs[0], ctx.outputs[1]},
                                     ctx.attrs);
      return TensorList{g[0], g[1], g[2], Tensor()};
    },
    .save_inputs = 0b1111,
    .save_outputs = 0b11,
    .sbp = sbp::batched({2, 2, 2, 2}, {2, 1}),
    .flops = attention_flops<2>,
    .flops_kind = FlopsKind::Attention,
});

// inputs (grad_out, query, key, value, attn_mask, out, lse); outputs the
// gradients of query, key and value.
MF_REGISTER_OP(OpDef{
    .name = "fused_attention_backward",
    .inputs = {"grad_output", "query", "key", "value", "attn_mask", "output", "logsumexp"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[1].sizes(), in[1].dtype(), in[1].device()},
                                     {in[2].sizes(), in[2].dtype(), in[2].device()},
                                     {in[3].sizes(), in[3].dtype(), in[3].device()}};
    },
    .differentiable = false,
    .sbp = sbp::batched({2, 2, 2, 2, 2, 2, 1}, {2, 2, 2}),
    .flops = attention_flops<5>,  // four block products and the recomputed logits
    .flops_kind = FlopsKind::Attention,
});

bool any_global(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->is_global()) return true;
  return false;
}

}  // namespace

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
  if (attn_mask.defined())
    MF_CHECK(attn_mask.dtype() == kBool || is_floating(attn_mask.dtype()), TypeError, op,
             ": attn_mask must be bool (true = attend) or floating (added to the scores), got ",
             dtype_name(attn_mask.dtype()));
  const Shape batch(q.sizes().begin(), q.sizes().end() - 2);
  const bool global = any_global({&q, &k, &v, &attn_mask});
  // Note [Choosing fused attention]: the fused kernel multiplies in float32
  // (float64): for float32 and float64 it does the composed formula's work
  // (plus one recomputed product in backward) without the (L, S) weights,
  // so it is chosen always. 16-bit inputs are multiplied in their own
  // precision by the composed formula's GEMMs, faster than float32 blocks,
  // so there the fused kernel is chosen only where the weights the
  // composed formula keeps (scores, weights and their gradient, 16-bit)
  // would pass kFusedMinWeightBytes.
  int64_t weight_count = keys;
  for (int64_t d : batch) weight_count = checked_mul(weight_count, d, op, "the attention weights' count");
  weight_count = checked_mul(weight_count, queries, op, "the attention weights' count");
  constexpr int64_t kFusedMinWeightBytes = int64_t(512) << 20;
  const bool wide = q.dtype() == kFloat32 || q.dtype() == kFloat64;
  const bool fusable = keys > 0 && (wide || weight_count > kFusedMinWeightBytes / 6) &&
                       Shape(k.sizes().begin(), k.sizes().end() - 2) == batch &&
                       Shape(v.sizes().begin(), v.sizes().end() - 2) == batch &&
                       !(attn_mask.defined() && attn_mask.dtype() != kBool && attn_mask.requires_grad()) &&
                       !(global && (dropout_p > 0.0 || (attn_mask.defined() && !attn_mask.is_global())));
  if (fusable) {
    Tensor mask;
    if (attn_mask.defined()) {
      Shape scores_shape = batch;
      scores_shape.push_back(queries);
      scores_shape.push_back(keys);
      MF_CHECK(broadcast_shapes(scores_shape, attn_mask.sizes(), op) == scores_shape, ShapeError, op,
               ": attn_mask of shape ", shape_str(attn_mask.sizes()),
               " must broadcast to the attention weights' shape ", shape_str(scores_shape));
      mask = attn_mask.dtype() == kBool ? attn_mask : to(attn_mask, q.dtype());
      if (mask.dim() < 2) {
        Shape two(size_t(2 - mask.dim()), 1);
        two.insert(two.end(), mask.sizes().begin(), mask.sizes().end());
        mask = reshape(mask, two);
      }
    }
    Attrs attrs{{"scale", s}, {"is_causal", is_causal}, {"dropout_p", dropout_p}};
    if (dropout_p > 0.0) random_detail::with_stream(attrs, weight_count, 4);
    static const OpDef& fused_op = dispatch::op("fused_attention");
    return dispatch::apply(fused_op, {q, k, v, mask}, attrs)[0];
  }
  Tensor bias;  // additive, broadcastable to (..., L, S)
  if (is_causal) {
    bias = triu(full({queries, keys}, neg_inf, {.dtype = q.dtype(), .device = q.device()}), 1);
  } else if (attn_mask.defined()) {
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
