// nn.TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder,
// TransformerDecoder and Transformer with torch.nn's signatures. The stacks
// take copy.deepcopy clones of the layer they are given, as torch's
// _get_clones, so a layer's Python attributes are copied too.
#include "meshflow/nn/transformer.h"

#include "nn_modules.h"

namespace mf::python {
namespace {

using namespace nn;  // NOLINT: every class bound here lives in mf::nn

// activation: "relu", "gelu", or the function F.relu / F.gelu itself.
std::string activation_name(const char* layer, py::handle activation) {
  if (py::isinstance<py::str>(activation)) return activation.cast<std::string>();
  if (py::hasattr(activation, "__name__")) {
    const std::string name = py::str(activation.attr("__name__"));
    if (name == "relu" || name == "gelu") return name;
  }
  MF_CHECK(false, ValueError, layer, ": activation should be relu/gelu (a name or F.relu / F.gelu), not ",
           std::string(py::repr(activation)));
  return "";
}

TransformerLayerOptions layer_options(const char* layer, int64_t dim_feedforward, double dropout,
                                      py::handle activation, double eps, bool batch_first, bool norm_first) {
  return TransformerLayerOptions{dim_feedforward, dropout, activation_name(layer, activation), eps, batch_first,
                                 norm_first};
}

// num_layers deep copies of layer (a Layer or a subclass), each kept alive
// with its Python object.
template <typename Layer>
std::pair<std::vector<std::shared_ptr<Layer>>, py::list> deep_clones(const char* owner, py::handle layer,
                                                                    int64_t num_layers) {
  MF_CHECK(py::isinstance<Layer>(layer), TypeError, owner, ": expected a ", owner, "Layer, got ",
           std::string(py::str(py::type::of(layer).attr("__name__"))));
  check_clones(layer.cast<const Layer&>(), num_layers, owner);
  py::object deepcopy = py::module_::import("copy").attr("deepcopy");
  std::vector<std::shared_ptr<Layer>> layers;
  py::list objects;
  for (int64_t i = 0; i < num_layers; ++i) {
    py::object copy = deepcopy(layer);
    layers.push_back(copy.cast<std::shared_ptr<Layer>>());
    objects.append(copy);
  }
  return {layers, objects};
}

// The stack's children registered with their Python objects as owners
// (Note [Modules across C++ and Python]).
void own_children(Module& stack, const py::list& layers, py::handle norm) {
  auto list = std::make_shared<ModuleList>();
  for (py::handle layer : layers) list->push_back(layer.cast<ModulePtr>(), python_owner(layer));
  stack.register_module("layers", list);
  if (!norm.is_none()) stack.register_module("norm", norm.cast<ModulePtr>(), python_owner(norm));
}

ModulePtr optional_module(py::handle m) { return m.is_none() ? nullptr : m.cast<ModulePtr>(); }

}  // namespace

void init_nn_transformer(py::module_& m) {
  layer<TransformerEncoderLayer>(m, "TransformerEncoderLayer")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout, py::handle activation,
                       double eps, bool batch_first, bool norm_first, std::optional<Device> device,
                       std::optional<DType> dtype) {
        auto o = layer_options("TransformerEncoderLayer", dim_feedforward, dropout, activation, eps, batch_first,
                               norm_first);
        return made(std::make_shared<TransformerEncoderLayer>(d_model, nhead, o), device, dtype);
      }), py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
          py::arg("activation") = "relu", py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
          py::arg("norm_first") = false, py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&TransformerEncoderLayer::forward),
           py::arg("src"), py::arg("src_mask") = py::none(), py::arg("src_key_padding_mask") = py::none())
      .def_property_readonly("norm_first", [](const TransformerEncoderLayer& l) { return l.options.norm_first; });

  layer<TransformerDecoderLayer>(m, "TransformerDecoderLayer")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout, py::handle activation,
                       double eps, bool batch_first, bool norm_first, std::optional<Device> device,
                       std::optional<DType> dtype) {
        auto o = layer_options("TransformerDecoderLayer", dim_feedforward, dropout, activation, eps, batch_first,
                               norm_first);
        return made(std::make_shared<TransformerDecoderLayer>(d_model, nhead, o), device, dtype);
      }), py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
          py::arg("activation") = "relu", py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
          py::arg("norm_first") = false, py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", py::overload_cast<const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&>(&TransformerDecoderLayer::forward),
           py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(), py::arg("memory_mask") = py::none(),
           py::arg("tgt_key_padding_mask") = py::none(), py::arg("memory_key_padding_mask") = py::none())
      .def_property_readonly("norm_first", [](const TransformerDecoderLayer& l) { return l.options.norm_first; });

  layer<TransformerEncoder>(m, "TransformerEncoder")
      .def(py::init([](py::handle encoder_layer, int64_t num_layers, py::handle norm, bool, bool) {
        auto [layers, objects] = deep_clones<TransformerEncoderLayer>("TransformerEncoder", encoder_layer, num_layers);
        auto stack = std::make_shared<TransformerEncoder>(layers, optional_module(norm));
        own_children(*stack, objects, norm);
        return stack;
      }), py::arg("encoder_layer"), py::arg("num_layers"), py::arg("norm") = py::none(),
          py::arg("enable_nested_tensor") = true, py::arg("mask_check") = true)
      .def("forward", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&TransformerEncoder::forward),
           py::arg("src"), py::arg("mask") = py::none(), py::arg("src_key_padding_mask") = py::none())
      .def_property_readonly("num_layers", &TransformerEncoder::num_layers);

  layer<TransformerDecoder>(m, "TransformerDecoder")
      .def(py::init([](py::handle decoder_layer, int64_t num_layers, py::handle norm) {
        auto [layers, objects] = deep_clones<TransformerDecoderLayer>("TransformerDecoder", decoder_layer, num_layers);
        auto stack = std::make_shared<TransformerDecoder>(layers, optional_module(norm));
        own_children(*stack, objects, norm);
        return stack;
      }), py::arg("decoder_layer"), py::arg("num_layers"), py::arg("norm") = py::none())
      .def("forward", py::overload_cast<const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&>(&TransformerDecoder::forward),
           py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(), py::arg("memory_mask") = py::none(),
           py::arg("tgt_key_padding_mask") = py::none(), py::arg("memory_key_padding_mask") = py::none())
      .def_property_readonly("num_layers", &TransformerDecoder::num_layers);

  layer<Transformer>(m, "Transformer")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t num_encoder_layers, int64_t num_decoder_layers,
                       int64_t dim_feedforward, double dropout, py::handle activation, py::handle custom_encoder,
                       py::handle custom_decoder, double eps, bool batch_first, bool norm_first,
                       std::optional<Device> device, std::optional<DType> dtype) {
        TransformerOptions o{d_model, nhead, num_encoder_layers, num_decoder_layers,
                             layer_options("Transformer", dim_feedforward, dropout, activation, eps, batch_first,
                                           norm_first)};
        auto encoder = custom_encoder.is_none() ? nullptr : custom_encoder.cast<std::shared_ptr<TransformerEncoder>>();
        auto decoder = custom_decoder.is_none() ? nullptr : custom_decoder.cast<std::shared_ptr<TransformerDecoder>>();
        auto model = std::make_shared<Transformer>(o, encoder, decoder);
        if (encoder) model->register_module("encoder", encoder, python_owner(custom_encoder));
        if (decoder) model->register_module("decoder", decoder, python_owner(custom_decoder));
        return made(model, device, dtype);
      }), py::arg("d_model") = 512, py::arg("nhead") = 8, py::arg("num_encoder_layers") = 6,
          py::arg("num_decoder_layers") = 6, py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
          py::arg("activation") = "relu", py::arg("custom_encoder") = py::none(),
          py::arg("custom_decoder") = py::none(), py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
          py::arg("norm_first") = false, py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", py::overload_cast<const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, const Tensor&>(&Transformer::forward),
           py::arg("src"), py::arg("tgt"), py::arg("src_mask") = py::none(), py::arg("tgt_mask") = py::none(),
           py::arg("memory_mask") = py::none(), py::arg("src_key_padding_mask") = py::none(),
           py::arg("tgt_key_padding_mask") = py::none(), py::arg("memory_key_padding_mask") = py::none())
      .def_static("generate_square_subsequent_mask",
                  [](int64_t sz, std::optional<Device> device, std::optional<DType> dtype) {
                    const Tensor mask =
                        Transformer::generate_square_subsequent_mask(sz, dtype.value_or(default_dtype()));
                    return device ? to(mask, *device) : mask;
                  }, py::arg("sz"), py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def_readonly("d_model", &Transformer::d_model)
      .def_readonly("nhead", &Transformer::nhead)
      .def_readonly("batch_first", &Transformer::batch_first);
}

}  // namespace mf::python
