// Neural-network ops (torch.nn.functional): softmax, normalisation,
// embedding, dropout, losses and attention. Convolution and pooling are in
// conv.h. Losses take reduction "mean", "sum" or "none".
#pragma once

#include <optional>
#include <string>

#include "meshflow/tensor.h"

namespace mf {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Updates running_mean/var in place when training and they are defined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = {});
// Bags of embedding rows reduced by mode ("sum", "mean", "max"): input
// (B, N) is B bags of N indices; a 1-d input is split into bags at offsets
// (with include_last_offset, offsets' last entry ends the last bag).
// per_sample_weights (input's shape, mode "sum" only) scale the rows;
// padding_idx rows are left out. Returns (bags, embedding_dim).
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const Tensor& offsets = Tensor(),
                     const std::string& mode = "mean", const Tensor& per_sample_weights = Tensor(),
                     bool include_last_offset = false, std::optional<int64_t> padding_idx = {});
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, const std::string& reduction = "mean",
                     double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, const std::string& reduction = "mean");
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(),
                                        const std::string& reduction = "mean");
// q (..., L, E), k (..., S, E), v (..., S, Ev); attn_mask bool (true = keep)
// or additive float, broadcastable to (..., L, S).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = {});

}  // namespace mf
