// RNN, LSTM, GRU and their cells over the fused rnn_layer op
// (Note [Fused recurrent layers] in src/ops/rnn.cpp).
#include "meshflow/nn/rnn.h"

#include <cmath>

#include "meshflow/checked_size.h"
#include "meshflow/error.h"
#include "meshflow/nn/init.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/rnn.h"
#include "meshflow/ops/shape.h"
#include "nn/repr.h"

namespace mf::nn {
namespace {

std::string rnn_mode(const std::string& nonlinearity) {
  MF_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", ValueError, "Unknown nonlinearity '", nonlinearity,
           "'. Select from 'tanh' or 'relu'.");
  return nonlinearity == "tanh" ? "rnn_tanh" : "rnn_relu";
}

Tensor new_param(const Shape& shape) { return empty(shape, TensorOptions{.dtype = default_dtype()}); }

// Every weight and bias ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
void reset_uniform(const Module& m, int64_t hidden_size) {
  const double bound = hidden_size > 0 ? 1.0 / std::sqrt(double(hidden_size)) : 0.0;
  for (const auto& [name, p] : m.own_parameters())
    if (p.defined()) init::uniform_(p, -bound, bound);
}

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

// --- RNNBase ------------------------------------------------------------------------

RNNBase::RNNBase(std::string type_name, std::string mode_name, int64_t input_size, int64_t hidden_size,
                 const RNNOptions& options)
    : Module(std::move(type_name)),
      mode(std::move(mode_name)),
      input_size(input_size),
      hidden_size(hidden_size),
      options(options) {
  MF_CHECK(options.dropout >= 0.0 && options.dropout <= 1.0, ValueError,
           "dropout should be a number in range [0, 1] representing the probability of an element being zeroed");
  MF_CHECK(hidden_size > 0, ValueError, "hidden_size must be greater than zero");
  MF_CHECK(options.num_layers > 0, ValueError, "num_layers must be greater than zero");
  MF_CHECK(input_size >= 0, ValueError, this->type_name(), ": input_size must be non-negative, got ", input_size);
  const int64_t gates = checked_mul(rnn_gate_count(mode), hidden_size, this->type_name(), "the gates' size");
  // The parameters' memory, refused up front rather than layer by layer.
  const double per_layer = double(gates) * double(input_size + hidden_size * (num_directions() + 1) + 2) *
                           double(num_directions()) * double(itemsize(default_dtype()));
  check_host_memory(this->type_name(), per_layer * double(options.num_layers), "of parameters");
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    const int64_t layer_input =
        layer == 0 ? input_size : checked_mul(hidden_size, num_directions(), this->type_name(), "a layer's input");
    for (int64_t d = 0; d < num_directions(); ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d ? "_reverse" : "");
      register_parameter("weight_ih" + suffix, new_param({gates, layer_input}));
      register_parameter("weight_hh" + suffix, new_param({gates, hidden_size}));
      if (options.bias) {
        register_parameter("bias_ih" + suffix, new_param({gates}));
        register_parameter("bias_hh" + suffix, new_param({gates}));
      }
    }
  }
  reset_parameters();
}

void RNNBase::reset_parameters() { reset_uniform(*this, hidden_size); }

std::string RNNBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (options.num_layers != 1) s += ", num_layers=" + std::to_string(options.num_layers);
  if (!options.bias) s += ", bias=False";
  if (options.batch_first) s += ", batch_first=True";
  if (options.dropout != 0) s += ", dropout=" + py_float(options.dropout);
  if (options.bidirectional) s += ", bidirectional=True";
  return s;
}

Tensor RNNBase::checked_state(const Tensor& h, const Tensor& x, int64_t batch, bool batched, const char* which) {
  const Shape expected{options.num_layers * num_directions(), batch, hidden_size};
  if (!h.defined()) return zeros(expected, TensorOptions{.dtype = x.dtype(), .device = x.device()});
  if (batched)
    MF_CHECK(h.dim() == 3, ShapeError, type_name(), ": for batched 3-D input, ", which,
             " should also be 3-D but got ", h.dim(), "-D tensor");
  else
    MF_CHECK(h.dim() == 2, ShapeError, type_name(), ": for unbatched 2-D input, ", which,
             " should also be 2-D but got ", h.dim(), "-D tensor");
  Tensor s = batched ? h : unsqueeze(h, 1);
  MF_CHECK(s.sizes() == expected, ShapeError, type_name(), ": expected ", which, " of size ",
           shape_tuple(batched ? expected : Shape{expected[0], expected[2]}), ", got ", shape_str(h.sizes()));
  return s;
}

RNNResult RNNBase::forward_rnn(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  MF_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3), ValueError, type_name(),
           ": Expected input to be 2-D or 3-D but received ", input.defined() ? input.dim() : 0, "-D tensor");
  const bool batched = input.dim() == 3;
  const Tensor x = batched ? (options.batch_first ? transpose(input, 0, 1) : input) : unsqueeze(input, 1);
  MF_CHECK(x.size(-1) == input_size, ShapeError, type_name(), ": input.size(-1) must be equal to input_size. Expected ",
           input_size, ", got ", x.size(-1));
  const int64_t batch = x.size(1);
  const bool lstm = mode == "lstm";
  Tensor h = checked_state(h0, x, batch, batched, "hx");
  Tensor c = lstm ? checked_state(c0, x, batch, batched, "cx") : Tensor();
  RNNResult r = run_layers(x, {}, h, c);
  if (!batched) {
    r.output = squeeze(r.output, 1);
    r.h_n = squeeze(r.h_n, 1);
    if (lstm) r.c_n = squeeze(r.c_n, 1);
  } else if (options.batch_first) {
    r.output = transpose(r.output, 0, 1);
  }
  return r;
}

RNNResult RNNBase::forward_packed(const Tensor& data, const Shape& batch_sizes, const Tensor& h0, const Tensor& c0) {
  MF_CHECK(data.defined() && data.dim() == 2, ShapeError, type_name(),
           ": expected packed data of shape (N, input_size), got ", data.defined() ? shape_str(data.sizes()) : "None");
  MF_CHECK(!batch_sizes.empty(), ValueError, type_name(), ": a packed sequence needs at least one step");
  MF_CHECK(data.size(-1) == input_size, ShapeError, type_name(),
           ": input.size(-1) must be equal to input_size. Expected ", input_size, ", got ", data.size(-1));
  const int64_t batch = batch_sizes[0];
  Tensor h = checked_state(h0, data, batch, true, "hx");
  Tensor c = mode == "lstm" ? checked_state(c0, data, batch, true, "cx") : Tensor();
  return run_layers(data, batch_sizes, h, c);
}

RNNResult RNNBase::run_layers(const Tensor& x, const Shape& batch_sizes, Tensor h0, Tensor c0) {
  const bool lstm = mode == "lstm";
  const int64_t dirs = num_directions(), per = options.bias ? 4 : 2;
  Tensor layer_input = x;
  TensorList hs, cs;
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    TensorList outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = layer * dirs + d;
      const size_t slot = size_t(idx * per);
      RnnLayerOutput r = rnn_layer(layer_input, select(h0, 0, idx), lstm ? select(c0, 0, idx) : Tensor(),
                                   param_at(slot), param_at(slot + 1), options.bias ? param_at(slot + 2) : Tensor(),
                                   options.bias ? param_at(slot + 3) : Tensor(), mode, d == 1, batch_sizes);
      outs.push_back(r.output);
      hs.push_back(r.h_n);
      if (lstm) cs.push_back(r.c_n);
    }
    layer_input = dirs == 2 ? cat(outs, -1) : outs[0];
    if (layer + 1 < options.num_layers && options.dropout > 0 && is_training())
      layer_input = dropout(layer_input, options.dropout, true);
  }
  return {layer_input, stack(hs, 0), lstm ? stack(cs, 0) : Tensor()};
}

RNN::RNN(int64_t input_size, int64_t hidden_size, const RNNOptions& options, const std::string& nonlinearity)
    : RNNBase("RNN", rnn_mode(nonlinearity), input_size, hidden_size, options), nonlinearity(nonlinearity) {}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, const RNNOptions& options)
    : RNNBase("LSTM", "lstm", input_size, hidden_size, options) {}

GRU::GRU(int64_t input_size, int64_t hidden_size, const RNNOptions& options)
    : RNNBase("GRU", "gru", input_size, hidden_size, options) {}

// --- cells --------------------------------------------------------------------------

RNNCellBase::RNNCellBase(std::string type_name, std::string mode_name, int64_t input_size, int64_t hidden_size,
                         bool bias)
    : Module(std::move(type_name)), mode(std::move(mode_name)), input_size(input_size), hidden_size(hidden_size) {
  MF_CHECK(hidden_size > 0, ValueError, "hidden_size must be greater than zero");
  MF_CHECK(input_size >= 0, ValueError, this->type_name(), ": input_size must be non-negative, got ", input_size);
  const int64_t gates = checked_mul(rnn_gate_count(mode), hidden_size, this->type_name(), "the gates' size");
  register_parameter("weight_ih", new_param({gates, input_size}));
  register_parameter("weight_hh", new_param({gates, hidden_size}));
  register_parameter("bias_ih", bias ? new_param({gates}) : Tensor());
  register_parameter("bias_hh", bias ? new_param({gates}) : Tensor());
  reset_parameters();
}

void RNNCellBase::reset_parameters() { reset_uniform(*this, hidden_size); }

std::string RNNCellBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (!param_at(2).defined()) s += ", bias=False";
  return s;
}

std::pair<Tensor, Tensor> RNNCellBase::step(const Tensor& input, const Tensor& h, const Tensor& c) {
  MF_CHECK(input.defined() && (input.dim() == 1 || input.dim() == 2), ValueError, type_name(),
           ": Expected input to be 1-D or 2-D but received ", input.defined() ? input.dim() : 0, "-D tensor");
  const bool batched = input.dim() == 2;
  const Tensor x = batched ? input : unsqueeze(input, 0);
  MF_CHECK(x.size(1) == input_size, ShapeError, type_name(), ": input has inconsistent input_size: got ", x.size(1),
           " expected ", input_size);
  const int64_t batch = x.size(0);
  const bool lstm = mode == "lstm";
  auto state = [&](const Tensor& s, const char* which) {
    if (!s.defined()) return zeros({batch, hidden_size}, TensorOptions{.dtype = x.dtype(), .device = x.device()});
    MF_CHECK(s.dim() == input.dim(), ShapeError, type_name(), ": Expected ", which, " to be ", input.dim(),
             "-D like the input, but received ", s.dim(), "-D tensor");
    Tensor b = batched ? s : unsqueeze(s, 0);
    MF_CHECK(b.size(0) == batch, ShapeError, type_name(), ": Input batch size ", batch, " doesn't match ", which,
             " batch size ", b.size(0));
    MF_CHECK(b.size(1) == hidden_size, ShapeError, type_name(), ": ", which, " has inconsistent hidden_size: got ",
             b.size(1), ", expected ", hidden_size);
    return b;
  };
  const Tensor h0 = state(h, "hx"), c0 = lstm ? state(c, "cx") : Tensor();
  RnnLayerOutput r = rnn_layer(unsqueeze(x, 0), h0, c0, param_at(0), param_at(1), param_at(2), param_at(3), mode);
  if (!batched) return {squeeze(r.h_n, 0), lstm ? squeeze(r.c_n, 0) : Tensor()};
  return {r.h_n, r.c_n};
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, const std::string& nonlinearity)
    : RNNCellBase("RNNCell", rnn_mode(nonlinearity), input_size, hidden_size, bias), nonlinearity(nonlinearity) {}

std::string RNNCell::extra_repr() const {
  std::string s = RNNCellBase::extra_repr();
  if (nonlinearity != "tanh") s += ", nonlinearity=" + nonlinearity;
  return s;
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("LSTMCell", "lstm", input_size, hidden_size, bias) {}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("GRUCell", "gru", input_size, hidden_size, bias) {}

}  // namespace mf::nn
