// The Transformer family (include/meshflow/nn/transformer.h), composed of
// MultiheadAttention, Linear, LayerNorm and Dropout as torch.nn 1.13's.
#include "meshflow/nn/transformer.h"

#include <algorithm>
#include <limits>

#include "meshflow/autograd.h"
#include "meshflow/checked_size.h"
#include "meshflow/error.h"
#include "meshflow/nn/init.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/shape.h"

namespace mf::nn {
namespace {

void check_activation(const std::string& layer, const std::string& activation) {
  MF_CHECK(activation == "relu" || activation == "gelu", ValueError, layer, ": activation should be relu/gelu, not ",
           activation);
}

void check_dims(const std::string& layer, int64_t d_model, int64_t nhead, const TransformerLayerOptions& o) {
  MF_CHECK(o.dim_feedforward >= 0, ValueError, layer, ": dim_feedforward must be non-negative, got ",
           o.dim_feedforward);
  MF_CHECK(d_model > 0 && nhead > 0, ValueError, layer, ": d_model and nhead must be positive, got ", d_model,
           " and ", nhead);
}

void register_attention(Module& m, const char* name, int64_t d_model, int64_t nhead, const TransformerLayerOptions& o) {
  m.register_module(name, std::make_shared<MultiheadAttention>(d_model, nhead, o.dropout, true, o.batch_first));
}

void register_feed_forward(Module& m, int64_t d_model, const TransformerLayerOptions& o) {
  m.register_module("linear1", std::make_shared<Linear>(d_model, o.dim_feedforward));
  m.register_module("dropout", std::make_shared<Dropout>(o.dropout));
  m.register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, d_model));
}

// linear2(dropout(activation(linear1(x)))), then the block's dropout.
Tensor feed_forward(const Module& m, const Tensor& x, const std::string& activation, const char* out_dropout) {
  Tensor y = (*m.child("linear1"))(x);
  y = activation == "gelu" ? gelu(y) : relu(y);
  y = (*m.child("linear2"))((*m.child("dropout"))(y));
  return (*m.child(out_dropout))(y);
}

// Attention of x over kv through child `attn`, then dropout `out_dropout`.
Tensor attention_block(const Module& m, const char* attn, const Tensor& x, const Tensor& kv, const Tensor& mask,
                       const Tensor& key_padding_mask, const char* out_dropout) {
  auto& layer = static_cast<MultiheadAttention&>(*m.child(attn));
  Tensor y = layer.forward(x, kv, kv, key_padding_mask, false, mask).first;
  return (*m.child(out_dropout))(y);
}

// The parameters and buffers of `from` copied into `to` (same layout), in
// from's dtype, and its training flag.
template <typename M>
std::shared_ptr<M> copied_into(const M& from, std::shared_ptr<M> to) {
  const TensorList params = from.parameters();
  if (!params.empty()) to->to(params.front().dtype());
  to->load_state_dict(from.state_dict());
  to->train(from.is_training());
  return to;
}

}  // namespace

void check_clones(const Module& layer, int64_t num_layers, const std::string& owner) {
  MF_CHECK(num_layers >= 0, ValueError, owner, ": num_layers must be non-negative, got ", num_layers);
  double bytes = 0;
  for (const Tensor& p : layer.parameters()) bytes += double(p.numel()) * double(p.element_size());
  check_host_memory(owner, bytes * double(num_layers), "of parameters for the layers");
}

namespace {

template <typename Layer>
std::vector<std::shared_ptr<Layer>> clones(const Layer& layer, int64_t n, const char* owner) {
  check_clones(layer, n, owner);
  std::vector<std::shared_ptr<Layer>> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(layer.clone());
  return out;
}

// Registers the layers as child "layers" (a ModuleList) and the norm as
// child "norm" (None when absent).
template <typename Layer>
void register_stack(Module& m, const std::vector<std::shared_ptr<Layer>>& layers, ModulePtr norm) {
  auto list = std::make_shared<ModuleList>();
  for (const auto& layer : layers) {
    MF_CHECK(layer != nullptr, ValueError, m.type_name(), ": a layer is None");
    list->push_back(layer);
  }
  m.register_module("layers", list);
  m.register_module("norm", norm);
}

Tensor apply_norm(const Module& m, const Tensor& x) {
  ModulePtr norm = m.child("norm");
  return norm ? (*norm)(x) : x;
}

}  // namespace

// --- TransformerEncoderLayer -------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerLayerOptions& options)
    : Module("TransformerEncoderLayer"), d_model(d_model), nhead(nhead), options(options) {
  check_activation(type_name(), options.activation);
  check_dims(type_name(), d_model, nhead, options);
  register_attention(*this, "self_attn", d_model, nhead, options);
  register_feed_forward(*this, d_model, options);
  register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const {
  return copied_into(*this, std::make_shared<TransformerEncoderLayer>(d_model, nhead, options));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask) {
  Module& norm1 = *child("norm1");
  Module& norm2 = *child("norm2");
  Tensor x = src;
  if (options.norm_first) {
    const Tensor n1 = norm1(x);
    x = add(x, attention_block(*this, "self_attn", n1, n1, src_mask, src_key_padding_mask, "dropout1"));
    return add(x, feed_forward(*this, norm2(x), options.activation, "dropout2"));
  }
  x = norm1(add(x, attention_block(*this, "self_attn", x, x, src_mask, src_key_padding_mask, "dropout1")));
  return norm2(add(x, feed_forward(*this, x, options.activation, "dropout2")));
}

// --- TransformerDecoderLayer -------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerLayerOptions& options)
    : Module("TransformerDecoderLayer"), d_model(d_model), nhead(nhead), options(options) {
  check_activation(type_name(), options.activation);
  check_dims(type_name(), d_model, nhead, options);
  register_attention(*this, "self_attn", d_model, nhead, options);
  register_attention(*this, "multihead_attn", d_model, nhead, options);
  register_feed_forward(*this, d_model, options);
  for (const char* norm : {"norm1", "norm2", "norm3"})
    register_module(norm, std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps));
  for (const char* dropout : {"dropout1", "dropout2", "dropout3"})
    register_module(dropout, std::make_shared<Dropout>(options.dropout));
}

std::shared_ptr<TransformerDecoderLayer> TransformerDecoderLayer::clone() const {
  return copied_into(*this, std::make_shared<TransformerDecoderLayer>(d_model, nhead, options));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask) {
  MF_CHECK(tgt.defined() && memory.defined(), ValueError, type_name(), ": tgt and memory must be given");
  Module& norm1 = *child("norm1");
  Module& norm2 = *child("norm2");
  Module& norm3 = *child("norm3");
  Tensor x = tgt;
  if (options.norm_first) {
    const Tensor n1 = norm1(x);
    x = add(x, attention_block(*this, "self_attn", n1, n1, tgt_mask, tgt_key_padding_mask, "dropout1"));
    x = add(x, attention_block(*this, "multihead_attn", norm2(x), memory, memory_mask, memory_key_padding_mask,
                               "dropout2"));
    return add(x, feed_forward(*this, norm3(x), options.activation, "dropout3"));
  }
  x = norm1(add(x, attention_block(*this, "self_attn", x, x, tgt_mask, tgt_key_padding_mask, "dropout1")));
  x = norm2(add(x, attention_block(*this, "multihead_attn", x, memory, memory_mask, memory_key_padding_mask,
                                   "dropout2")));
  return norm3(add(x, feed_forward(*this, x, options.activation, "dropout3")));
}

// --- the stacks ----------------------------------------------------------------------------

TransformerEncoder::TransformerEncoder(const std::vector<std::shared_ptr<TransformerEncoderLayer>>& layers,
                                       ModulePtr norm)
    : Module("TransformerEncoder"), layers_(layers) {
  register_stack(*this, layers, std::move(norm));
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers, ModulePtr norm)
    : TransformerEncoder(clones(layer, num_layers, "TransformerEncoder"), std::move(norm)) {}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask) {
  Tensor x = src;
  for (const auto& layer : layers_) x = layer->forward(x, mask, src_key_padding_mask);
  return apply_norm(*this, x);
}

TransformerDecoder::TransformerDecoder(const std::vector<std::shared_ptr<TransformerDecoderLayer>>& layers,
                                       ModulePtr norm)
    : Module("TransformerDecoder"), layers_(layers) {
  register_stack(*this, layers, std::move(norm));
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers, ModulePtr norm)
    : TransformerDecoder(clones(layer, num_layers, "TransformerDecoder"), std::move(norm)) {}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask) {
  Tensor x = tgt;
  for (const auto& layer : layers_)
    x = layer->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
  return apply_norm(*this, x);
}

// --- Transformer -----------------------------------------------------------------------------

Transformer::Transformer(const TransformerOptions& options, std::shared_ptr<TransformerEncoder> custom_encoder,
                         std::shared_ptr<TransformerDecoder> custom_decoder)
    : Module("Transformer"),
      d_model(options.d_model),
      nhead(options.nhead),
      batch_first(options.layer.batch_first) {
  const double eps = options.layer.layer_norm_eps;
  // Refused before any layer is built (a layer's parameters: 4 d_model^2 of
  // attention plus 2 d_model dim_feedforward of feed-forward, and a
  // decoder's second attention).
  const double width = double(d_model), ff = double(options.layer.dim_feedforward);
  const double encoder_layer = 4 * width * width + 2 * width * ff, decoder_layer = encoder_layer + 4 * width * width;
  check_host_memory("Transformer",
                    (encoder_layer * double(std::max<int64_t>(options.num_encoder_layers, 0)) +
                     decoder_layer * double(std::max<int64_t>(options.num_decoder_layers, 0))) *
                        double(itemsize(default_dtype())),
                    "of parameters");
  if (custom_encoder) {
    register_module("encoder", custom_encoder);
  } else {
    TransformerEncoderLayer layer(d_model, nhead, options.layer);
    register_module("encoder", std::make_shared<TransformerEncoder>(
                                   layer, options.num_encoder_layers, std::make_shared<LayerNorm>(Shape{d_model}, eps)));
  }
  if (custom_decoder) {
    register_module("decoder", custom_decoder);
  } else {
    TransformerDecoderLayer layer(d_model, nhead, options.layer);
    register_module("decoder", std::make_shared<TransformerDecoder>(
                                   layer, options.num_decoder_layers, std::make_shared<LayerNorm>(Shape{d_model}, eps)));
  }
  for (const Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask) {
  MF_CHECK(src.defined() && tgt.defined(), ValueError, "Transformer: src and tgt must be given");
  const bool batched = src.dim() == 3;
  if (batched && tgt.dim() == 3) {
    const int64_t batch_dim = batch_first ? 0 : 1;
    MF_CHECK(src.size(batch_dim) == tgt.size(batch_dim), Error, "the batch number of src and tgt must be equal");
  }
  MF_CHECK(src.dim() > 0 && tgt.dim() > 0 && src.size(-1) == d_model && tgt.size(-1) == d_model, Error,
           "the feature number of src and tgt must be equal to d_model");
  auto& encoder = static_cast<TransformerEncoder&>(*child("encoder"));
  auto& decoder = static_cast<TransformerDecoder&>(*child("decoder"));
  Tensor memory = encoder.forward(src, src_mask, src_key_padding_mask);
  return decoder.forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz, DType dtype) {
  MF_CHECK(sz >= 0, ValueError, "generate_square_subsequent_mask: sz must be non-negative, got ", sz);
  return triu(full({sz, sz}, Scalar(-std::numeric_limits<double>::infinity()), TensorOptions{.dtype = dtype}), 1);
}

}  // namespace mf::nn
