// nn.RNN, nn.LSTM, nn.GRU and their cells with torch.nn's signatures. A
// PackedSequence (meshflow.nn.utils.rnn) input runs packed: its data and
// batch sizes go to the layer, the initial state is reordered into the
// packed rows' order (sorted_indices) and the final state back
// (unsorted_indices), as in PyTorch.
#include <cctype>

#include "meshflow/nn/rnn.h"
#include "meshflow/ops/shape.h"
#include "nn_modules.h"

namespace mf::python {
namespace {

using namespace nn;  // NOLINT: every class bound here lives in mf::nn

// PyTorch's name of a mode ("LSTM", "RNN_TANH").
std::string torch_mode(const std::string& mode) {
  std::string s = mode;
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// hx as the layer's (h0, c0): a tuple (h_0, c_0) for LSTM, one tensor otherwise.
std::pair<Tensor, Tensor> initial_state(const std::string& layer, bool lstm, py::handle hx) {
  if (hx.is_none()) return {};
  if (!lstm) return {hx.cast<Tensor>(), Tensor()};
  MF_CHECK(py::isinstance<py::tuple>(hx) && py::len(hx) == 2, TypeError, layer,
           ": hx must be a tuple (h_0, c_0) of tensors, got ", std::string(py::str(py::type::of(hx).attr("__name__"))));
  auto t = hx.cast<py::tuple>();
  return {t[0].cast<Tensor>(), t[1].cast<Tensor>()};
}

py::object final_state(bool lstm, const Tensor& h, const Tensor& c) {
  return lstm ? py::object(py::make_tuple(h, c)) : py::cast(h);
}

py::object rnn_forward(RNNBase& self, py::object input, py::object hx) {
  const bool lstm = self.mode == "lstm";
  auto [h0, c0] = initial_state(self.type_name(), lstm, hx);
  py::object packed_type = py::module_::import("meshflow.nn.utils.rnn").attr("PackedSequence");
  if (!py::isinstance(input, packed_type)) {
    RNNResult r = self.forward_rnn(input.cast<Tensor>(), h0, c0);
    return py::make_tuple(r.output, final_state(lstm, r.h_n, r.c_n));
  }
  const Tensor data = input.attr("data").cast<Tensor>();
  py::object batch_sizes = input.attr("batch_sizes"), sorted = input.attr("sorted_indices"),
             unsorted = input.attr("unsorted_indices");
  const Shape sizes = batch_sizes.attr("tolist")().cast<Shape>();
  if (!sorted.is_none()) {
    const Tensor order = sorted.cast<Tensor>();
    if (h0.defined()) h0 = index_select(h0, 1, order);
    if (c0.defined()) c0 = index_select(c0, 1, order);
  }
  RNNResult r = self.forward_packed(data, sizes, h0, c0);
  if (!unsorted.is_none()) {
    const Tensor order = unsorted.cast<Tensor>();
    r.h_n = index_select(r.h_n, 1, order);
    if (lstm) r.c_n = index_select(r.c_n, 1, order);
  }
  return py::make_tuple(packed_type(r.output, batch_sizes, sorted, unsorted), final_state(lstm, r.h_n, r.c_n));
}

// The attributes every recurrent layer shares.
template <typename Cls>
Cls& rnn_attributes(Cls& cls) {
  cls.def("forward", &rnn_forward, py::arg("input"), py::arg("hx") = py::none())
      .def("reset_parameters", &RNNBase::reset_parameters)
      // PyTorch packs the weights into one buffer for cuDNN; on the CPU it does
      // nothing, and neither does meshflow, whose weights are used as they are.
      .def("flatten_parameters", [](RNNBase&) {})
      .def_readonly("input_size", &RNNBase::input_size)
      .def_readonly("hidden_size", &RNNBase::hidden_size)
      .def_property_readonly("num_layers", [](const RNNBase& m) { return m.options.num_layers; })
      .def_property_readonly("bias", [](const RNNBase& m) { return m.options.bias; })
      .def_property_readonly("batch_first", [](const RNNBase& m) { return m.options.batch_first; })
      .def_property_readonly("dropout", [](const RNNBase& m) { return m.options.dropout; })
      .def_property_readonly("bidirectional", [](const RNNBase& m) { return m.options.bidirectional; })
      .def_property_readonly("proj_size", [](const RNNBase&) { return 0; })
      .def_property_readonly("mode", [](const RNNBase& m) { return torch_mode(m.mode); })
      // [[weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0], ...], one list per layer and direction.
      .def_property_readonly("all_weights", [](const RNNBase& m) {
        const auto& params = m.own_parameters();
        const size_t per = m.options.bias ? 4 : 2;
        py::list out;
        for (size_t i = 0; i < params.size(); i += per) {
          py::list group;
          for (size_t j = i; j < i + per; ++j) group.append(params[j].second);
          out.append(group);
        }
        return out;
      });
  return cls;
}

RNNOptions rnn_options(int64_t num_layers, bool bias, bool batch_first, double dropout, bool bidirectional) {
  return RNNOptions{num_layers, bias, batch_first, dropout, bidirectional};
}

py::object cell_forward(RNNCellBase& self, const Tensor& input, py::object hx) {
  const bool lstm = self.mode == "lstm";
  auto [h, c] = initial_state(self.type_name(), lstm, hx);
  auto [h1, c1] = self.step(input, h, c);
  return final_state(lstm, h1, c1);
}

}  // namespace

void init_nn_rnn(py::module_& m) {
  auto base = layer<RNNBase>(m, "RNNBase");
  rnn_attributes(base);

  sublayer<RNN, RNNBase>(m, "RNN")
      // torch.nn.RNN takes nonlinearity by keyword only: positional arguments
      // after hidden_size are RNNBase's (num_layers, bias, batch_first, ...).
      .def(py::init([](int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
                       double dropout, bool bidirectional, const std::string& nonlinearity,
                       std::optional<Device> device, std::optional<DType> dtype) {
        return made(std::make_shared<RNN>(input_size, hidden_size,
                                          rnn_options(num_layers, bias, batch_first, dropout, bidirectional),
                                          nonlinearity),
                    device, dtype);
      }), py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1, py::arg("bias") = true,
          py::arg("batch_first") = false, py::arg("dropout") = 0.0, py::arg("bidirectional") = false, py::kw_only(),
          py::arg("nonlinearity") = "tanh", py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def_readonly("nonlinearity", &RNN::nonlinearity);
  sublayer<LSTM, RNNBase>(m, "LSTM")
      .def(py::init([](int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
                       double dropout, bool bidirectional, int64_t proj_size, std::optional<Device> device,
                       std::optional<DType> dtype) {
        MF_CHECK(proj_size == 0, ValueError, "LSTM: proj_size > 0 (projected LSTM) is not supported, got proj_size=",
                 proj_size);
        return made(std::make_shared<LSTM>(input_size, hidden_size,
                                           rnn_options(num_layers, bias, batch_first, dropout, bidirectional)),
                    device, dtype);
      }), py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1, py::arg("bias") = true,
          py::arg("batch_first") = false, py::arg("dropout") = 0.0, py::arg("bidirectional") = false,
          py::arg("proj_size") = 0, py::arg("device") = py::none(), py::arg("dtype") = py::none());
  sublayer<GRU, RNNBase>(m, "GRU")
      .def(py::init([](int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
                       double dropout, bool bidirectional, std::optional<Device> device, std::optional<DType> dtype) {
        return made(std::make_shared<GRU>(input_size, hidden_size,
                                          rnn_options(num_layers, bias, batch_first, dropout, bidirectional)),
                    device, dtype);
      }), py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1, py::arg("bias") = true,
          py::arg("batch_first") = false, py::arg("dropout") = 0.0, py::arg("bidirectional") = false,
          py::arg("device") = py::none(), py::arg("dtype") = py::none());

  layer<RNNCellBase>(m, "RNNCellBase")
      .def("forward", &cell_forward, py::arg("input"), py::arg("hx") = py::none())
      .def("reset_parameters", &RNNCellBase::reset_parameters)
      .def_readonly("input_size", &RNNCellBase::input_size)
      .def_readonly("hidden_size", &RNNCellBase::hidden_size)
      .def_property_readonly("bias", [](const RNNCellBase& c) { return c.parameter("bias_ih").defined(); });
  sublayer<RNNCell, RNNCellBase>(m, "RNNCell")
      .def(py::init([](int64_t input_size, int64_t hidden_size, bool bias, const std::string& nonlinearity,
                       std::optional<Device> device, std::optional<DType> dtype) {
        return made(std::make_shared<RNNCell>(input_size, hidden_size, bias, nonlinearity), device, dtype);
      }), py::arg("input_size"), py::arg("hidden_size"), py::arg("bias") = true, py::arg("nonlinearity") = "tanh",
          py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def_readonly("nonlinearity", &RNNCell::nonlinearity);
  sublayer<LSTMCell, RNNCellBase>(m, "LSTMCell")
      .def(py::init([](int64_t input_size, int64_t hidden_size, bool bias, std::optional<Device> device,
                       std::optional<DType> dtype) {
        return made(std::make_shared<LSTMCell>(input_size, hidden_size, bias), device, dtype);
      }), py::arg("input_size"), py::arg("hidden_size"), py::arg("bias") = true, py::arg("device") = py::none(),
          py::arg("dtype") = py::none());
  sublayer<GRUCell, RNNCellBase>(m, "GRUCell")
      .def(py::init([](int64_t input_size, int64_t hidden_size, bool bias, std::optional<Device> device,
                       std::optional<DType> dtype) {
        return made(std::make_shared<GRUCell>(input_size, hidden_size, bias), device, dtype);
      }), py::arg("input_size"), py::arg("hidden_size"), py::arg("bias") = true, py::arg("device") = py::none(),
          py::arg("dtype") = py::none());
}

}  // namespace mf::python
