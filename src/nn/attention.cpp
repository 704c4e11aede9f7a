// MultiheadAttention (PyTorch 1.13's layout and parameter names).
#include <cmath>
#include <limits>

#include "meshflow/autograd.h"
#include "meshflow/error.h"
#include "meshflow/nn/init.h"
#include "meshflow/nn/layers.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"

namespace mf::nn {
namespace {

// An additive float mask from a bool one (true = not allowed -> -inf).
Tensor additive_mask(const Tensor& mask, DType dtype, const char* arg) {
  if (mask.dtype() == kBool) {
    Tensor bias = zeros(mask.shape(), TensorOptions{.dtype = dtype, .device = mask.device()});
    return masked_fill(bias, mask, -std::numeric_limits<double>::infinity());
  }
  MF_CHECK(is_floating(mask.dtype()), TypeError, "MultiheadAttention: ", arg,
           " must be bool or floating point, got ", dtype_name(mask.dtype()));
  return mask;
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                       bool batch_first)
    : Module("MultiheadAttention"),
      embed_dim(embed_dim),
      num_heads(num_heads),
      dropout(dropout),
      batch_first(batch_first) {
  MF_CHECK(embed_dim > 0 && num_heads > 0, ValueError,
           "MultiheadAttention: embed_dim and num_heads must be positive, got ", embed_dim, " and ", num_heads);
  MF_CHECK(embed_dim % num_heads == 0, ValueError, "MultiheadAttention: embed_dim (", embed_dim,
           ") must be divisible by num_heads (", num_heads, ")");
  MF_CHECK(dropout >= 0 && dropout <= 1, ValueError, "MultiheadAttention: dropout must be between 0 and 1, got ",
           dropout);
  TensorOptions options{.dtype = default_dtype()};
  register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}, options));
  register_parameter("in_proj_bias", bias ? empty({3 * embed_dim}, options) : Tensor());
  auto out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  out_proj->set_type_name("NonDynamicallyQuantizableLinear");
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(param_at(0));
  if (param_at(1).defined()) {
    init::zeros_(param_at(1));
    init::zeros_(std::static_pointer_cast<Linear>(child("out_proj"))->bias());
  }
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights,
                                                      const Tensor& attn_mask, bool average_attn_weights) {
  const char* name = "MultiheadAttention";
  MF_CHECK(query.dim() == 2 || query.dim() == 3, ShapeError, name,
           ": query must be 2-D (unbatched) or 3-D, got shape ", shape_str(query.shape()));
  MF_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), ShapeError, name,
           ": query, key and value must have the same rank, got shapes ", shape_str(query.shape()), ", ",
           shape_str(key.shape()), " and ", shape_str(value.shape()));
  MF_CHECK(query.size(-1) == embed_dim, ShapeError, name, ": expected query's last dimension to be embed_dim (",
           embed_dim, "), got shape ", shape_str(query.shape()));
  const bool unbatched = query.dim() == 2;
  // To (N, L, E).
  auto batch_major = [&](const Tensor& t) {
    if (unbatched) return unsqueeze(t, 0);
    return batch_first ? t : transpose(t, 0, 1);
  };
  Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  const int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1), e = embed_dim, h = num_heads, d = e / h;
  MF_CHECK(k_in.size(0) == n && v_in.size(0) == n && v_in.size(1) == s, ShapeError, name,
           ": key and value must have query's batch size and the same length, got shapes ",
           shape_str(query.shape()), ", ", shape_str(key.shape()), " and ", shape_str(value.shape()));

  const Tensor& w = param_at(0);
  const Tensor& b = param_at(1);
  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    auto qkv = chunk(linear(q_in, w, b), 3, -1);  // one GEMM for self-attention
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    auto ws = chunk(w, 3, 0);
    TensorList bs = b.defined() ? chunk(b, 3, 0) : TensorList{Tensor(), Tensor(), Tensor()};
    q = linear(q_in, ws[0], bs[0]);
    k = linear(k_in, ws[1], bs[1]);
    v = linear(v_in, ws[2], bs[2]);
  }
  auto heads = [&](const Tensor& t, int64_t len) { return transpose(reshape(t, {n, len, h, d}), 1, 2); };
  q = heads(q, l), k = heads(k, s), v = heads(v, s);  // (N, H, len, D)

  Tensor mask;  // additive, broadcastable to (N, H, L, S)
  if (attn_mask.defined()) {
    Tensor m = additive_mask(attn_mask, q.dtype(), "attn_mask");
    if (m.dim() == 2) {
      MF_CHECK(m.size(0) == l && m.size(1) == s, ShapeError, name, ": the shape of the 2D attn_mask is ",
               shape_str(m.shape()), ", but should be ", shape_str({l, s}));
    } else {
      MF_CHECK(m.dim() == 3 && m.size(0) == n * h && m.size(1) == l && m.size(2) == s, ShapeError, name,
               ": the shape of the 3D attn_mask is ", shape_str(m.shape()), ", but should be ",
               shape_str({n * h, l, s}));
      m = reshape(m, {n, h, l, s});
    }
    mask = m;
  }
  if (key_padding_mask.defined()) {
    Tensor kp = unbatched ? unsqueeze(key_padding_mask, 0) : key_padding_mask;
    MF_CHECK(kp.dim() == 2 && kp.size(0) == n && kp.size(1) == s, ShapeError, name,
             ": expected key_padding_mask of shape ", shape_str({n, s}), ", got ",
             shape_str(key_padding_mask.shape()));
    Tensor m = reshape(additive_mask(kp, q.dtype(), "key_padding_mask"), {n, 1, 1, s});
    mask = mask.defined() ? add(mask, m) : m;
  }
  const double p = is_training() ? dropout : 0.0;

  Tensor out, weights;
  if (need_weights) {
    Tensor scores = matmul(mul(q, Scalar(1.0 / std::sqrt(double(d)))), transpose(k, -2, -1));
    if (mask.defined()) scores = add(scores, mask);
    Tensor probs = softmax(scores, -1);
    if (p > 0) probs = mf::dropout(probs, p, true);  // the weights returned are those applied, as in PyTorch
    weights = average_attn_weights ? mean(probs, {1}) : probs;
    out = matmul(probs, v);
  } else {
    out = scaled_dot_product_attention(q, k, v, mask, p);
  }
  out = reshape(transpose(out, 1, 2), {n, l, e});
  out = (*child("out_proj"))(out);
  if (unbatched) {
    out = squeeze(out, 0);
    if (weights.defined()) weights = squeeze(weights, 0);
  } else if (!batch_first) {
    out = transpose(out, 0, 1);
  }
  return {out, weights};
}

}  // namespace mf::nn
