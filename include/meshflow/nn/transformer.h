// torch.nn's Transformer family: TransformerEncoderLayer,
// TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and
// Transformer, with PyTorch 1.13's parameter names, layouts and defaults.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meshflow/nn/layers.h"

namespace mf::nn {

struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;

// Children self_attn, linear1, dropout, linear2, norm1, norm2, dropout1,
// dropout2. src (S, N, E), (N, S, E) when batch_first, or (S, E).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerLayerOptions& options = {});
  Tensor forward(const Tensor& src) override { return forward(src, Tensor(), Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask);
  // A new layer with the same configuration, dtype, training flag and a
  // copy of the parameters (the clones of TransformerEncoder).
  std::shared_ptr<TransformerEncoderLayer> clone() const;
  const int64_t d_model, nhead;
  const TransformerLayerOptions options;

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
};

// Children self_attn, multihead_attn, linear1, dropout, linear2, norm1..3,
// dropout1..3. tgt (T, N, E) and memory (S, N, E) (batch first when
// batch_first; unbatched (T, E) and (S, E)).
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerLayerOptions& options = {});
  using Module::forward;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  std::shared_ptr<TransformerDecoderLayer> clone() const;
  const int64_t d_model, nhead;
  const TransformerLayerOptions options;
};

// num_layers layers (child "layers", a ModuleList of the given clones) and
// an optional final norm (child "norm", None when absent).
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const std::vector<std::shared_ptr<TransformerEncoderLayer>>& layers, ModulePtr norm = nullptr);
  // num_layers clones of layer.
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers, ModulePtr norm = nullptr);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor(), Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask);
  int64_t num_layers() const { return int64_t(layers_.size()); }

 private:
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers_;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const std::vector<std::shared_ptr<TransformerDecoderLayer>>& layers, ModulePtr norm = nullptr);
  TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers, ModulePtr norm = nullptr);
  using Module::forward;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  int64_t num_layers() const { return int64_t(layers_.size()); }

 private:
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers_;
};

// Throws ValueError for a negative num_layers and OutOfMemoryError when
// num_layers copies of layer's parameters would not fit in memory.
void check_clones(const Module& layer, int64_t num_layers, const std::string& owner);

struct TransformerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  TransformerLayerOptions layer;
};

// Children encoder (a TransformerEncoder with a final LayerNorm) and decoder
// (likewise), or the custom ones given; every parameter with more than one
// dimension is re-initialised Xavier-uniform, as in PyTorch.
class Transformer : public Module {
 public:
  explicit Transformer(const TransformerOptions& options = {}, std::shared_ptr<TransformerEncoder> custom_encoder = nullptr,
                       std::shared_ptr<TransformerDecoder> custom_decoder = nullptr);
  using Module::forward;
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  // (sz, sz) float: -inf above the diagonal, 0 elsewhere.
  static Tensor generate_square_subsequent_mask(int64_t sz, DType dtype = kFloat32);
  const int64_t d_model, nhead;
  const bool batch_first;
};

}  // namespace mf::nn
