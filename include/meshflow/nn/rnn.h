// torch.nn's recurrent layers: RNN, LSTM and GRU (multi-layer,
// bidirectional, dropout between layers, batch_first, unbatched and packed
// inputs) and their cells, over the fused rnn_layer op (meshflow/ops/rnn.h).
// Parameter names, layout and initialisation are PyTorch's.
#pragma once

#include <string>

#include "meshflow/nn/module.h"

namespace mf::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;
  bool bidirectional = false;
};

// What a recurrent layer returns: the output sequence and the final states
// (h_n, and c_n for LSTM), each (D * num_layers, N, H), or (D * num_layers,
// H) for an unbatched input.
struct RNNResult {
  Tensor output, h_n, c_n;
};

// mode: "rnn_tanh", "rnn_relu", "lstm" or "gru".
class RNNBase : public Module {
 public:
  RNNBase(std::string type_name, std::string mode, int64_t input_size, int64_t hidden_size,
          const RNNOptions& options);
  // input (L, N, H_in), (N, L, H_in) when batch_first, or (L, H_in); h0 and
  // c0 (D * num_layers, N, H) or (D * num_layers, H); undefined: zeros.
  RNNResult forward_rnn(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  // A packed sequence: data (sum of batch_sizes, H_in), non-increasing
  // batch sizes; h0 and c0 (D * num_layers, batch_sizes[0], H) in the
  // packed rows' order. The output is packed data (sum of batch_sizes, D * H).
  RNNResult forward_packed(const Tensor& data, const Shape& batch_sizes, const Tensor& h0 = Tensor(),
                           const Tensor& c0 = Tensor());
  Tensor forward(const Tensor& input) override { return forward_rnn(input).output; }
  void reset_parameters();
  std::string extra_repr() const override;
  int64_t num_directions() const { return options.bidirectional ? 2 : 1; }

  const std::string mode;
  const int64_t input_size, hidden_size;
  const RNNOptions options;

 private:
  RNNResult run_layers(const Tensor& x, const Shape& batch_sizes, Tensor h0, Tensor c0);
  Tensor checked_state(const Tensor& h, const Tensor& x, int64_t batch, bool batched, const char* which);
};

class RNN : public RNNBase {
 public:
  // nonlinearity: "tanh" or "relu".
  RNN(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {}, const std::string& nonlinearity = "tanh");
  const std::string nonlinearity;
};
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {});
};
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {});
};

// One step: input (N, H_in) or (H_in); h (and c) (N, H) or (H); undefined:
// zeros. Returns h' (and c').
class RNNCellBase : public Module {
 public:
  RNNCellBase(std::string type_name, std::string mode, int64_t input_size, int64_t hidden_size, bool bias);
  std::pair<Tensor, Tensor> step(const Tensor& input, const Tensor& h = Tensor(), const Tensor& c = Tensor());
  Tensor forward(const Tensor& input) override { return step(input).first; }
  void reset_parameters();
  std::string extra_repr() const override;

  const std::string mode;
  const int64_t input_size, hidden_size;
};

class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, const std::string& nonlinearity = "tanh");
  std::string extra_repr() const override;
  const std::string nonlinearity;
};
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
};
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
};

}  // namespace mf::nn
