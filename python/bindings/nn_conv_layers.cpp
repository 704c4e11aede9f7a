// Conv3d, ConvTranspose1d/2d/3d, AdaptiveMaxPool1d/2d, MaxPool3d, AvgPool3d
// and AdaptiveAvgPool3d with torch.nn's constructor signatures.
#include "nn_modules.h"

namespace mf::python {
namespace {

using namespace nn;  // NOLINT: every class bound here lives in mf::nn

py::tuple tuple_of(const Shape& s) { return py::tuple(py::cast(s)); }

// The attributes every convolution layer has (torch's _ConvNd).
template <typename M, typename Cls>
void conv_attributes(Cls& cls) {
  cls.def("reset_parameters", &ConvNd::reset_parameters)
      .def_property_readonly("in_channels", [](const M& c) { return c.in_channels; })
      .def_property_readonly("out_channels", [](const M& c) { return c.out_channels; })
      .def_property_readonly("kernel_size", [](const M& c) { return tuple_of(c.kernel_size); })
      .def_property_readonly("stride", [](const M& c) { return tuple_of(c.options.stride); })
      .def_property_readonly("padding", [](const M& c) -> py::object {
        if (!c.options.padding_str.empty()) return py::str(c.options.padding_str);
        return tuple_of(c.options.padding);
      })
      .def_property_readonly("dilation", [](const M& c) { return tuple_of(c.options.dilation); })
      .def_property_readonly("output_padding", [](const M& c) { return tuple_of(c.options.output_padding); })
      .def_property_readonly("groups", [](const M& c) { return c.options.groups; })
      .def_property_readonly("transposed", [](const M& c) { return c.transposed; })
      .def_property_readonly("padding_mode", [](const M&) { return "zeros"; });
}

void check_padding_mode(const std::string& mode, const char* layer) {
  MF_CHECK(mode == "zeros", ValueError, layer, ": padding_mode '", mode, "' is not supported (only 'zeros')");
}

template <typename M>
void bind_conv_transpose(py::module_& m, const char* name) {
  auto cls = layer<M>(m, name);
  cls.def(py::init([name](int64_t in, int64_t out, py::handle kernel, py::handle stride, py::handle padding,
                          py::handle output_padding, int64_t groups, bool bias, py::handle dilation,
                          const std::string& padding_mode, std::optional<Device> device, std::optional<DType> dtype) {
        check_padding_mode(padding_mode, name);
        ConvOptions o;
        o.stride = sizes_arg(stride, name, "stride");
        o.padding = sizes_arg(padding, name, "padding");
        o.output_padding = sizes_arg(output_padding, name, "output_padding");
        o.dilation = sizes_arg(dilation, name, "dilation");
        o.groups = groups;
        o.bias = bias;
        return made(std::make_shared<M>(in, out, sizes_arg(kernel, name, "kernel_size"), o), device, dtype);
      }), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1, py::arg("bias") = true,
      py::arg("dilation") = 1, py::arg("padding_mode") = "zeros", py::arg("device") = py::none(),
      py::arg("dtype") = py::none())
      .def("forward", [name](M& self, const Tensor& x, py::handle output_size) {
        if (output_size.is_none()) return self.forward(x, std::nullopt);
        return self.forward(x, sizes_arg(output_size, name, "output_size"));
      }, py::arg("input"), py::arg("output_size") = py::none());
  conv_attributes<M>(cls);
}

template <typename M>
void bind_adaptive_max_pool(py::module_& m, const char* name) {
  layer<M>(m, name)
      .def(py::init([name](py::handle size, bool return_indices) {
        return std::make_shared<M>(optional_sizes_arg(size, name), return_indices, is_int_arg(size));
      }), py::arg("output_size"), py::arg("return_indices") = false)
      .def("forward", [](M& self, const Tensor& x) -> py::object {
        if (!self.return_indices) return py::cast(self.forward(x));
        return to_tuple(self.forward_with_indices(x));
      }, py::arg("input"))
      .def_property_readonly("output_size", [](const M& p) -> py::object {
        if (p.int_size) return py::cast(*p.output_size[0]);
        return py::tuple(py::cast(p.output_size));
      })
      .def_readonly("return_indices", &AdaptiveMaxPool::return_indices);
}

// A pooling layer's size attribute as given: an int or a tuple.
py::object size_attribute(const Shape& v) { return v.size() == 1 ? py::cast(v[0]) : py::object(tuple_of(v)); }

void bind_pool3d(py::module_& m) {
  layer<Pool3d>(m, "_Pool3d")
      .def("forward", [](Pool3d& self, const Tensor& x) -> py::object {
        if (!self.return_indices) return py::cast(self.forward(x));
        return to_tuple(self.forward_with_indices(x));
      }, py::arg("input"))
      .def_property_readonly("kernel_size", [](const Pool3d& p) { return size_attribute(p.args.kernel_size); })
      .def_property_readonly("stride", [](const Pool3d& p) {
        return size_attribute(p.args.stride.empty() ? p.args.kernel_size : p.args.stride);
      })
      .def_property_readonly("padding", [](const Pool3d& p) { return size_attribute(p.args.padding); })
      .def_property_readonly("ceil_mode", [](const Pool3d& p) { return p.args.ceil_mode; });
  sublayer<MaxPool3d, Pool3d>(m, "MaxPool3d")
      .def(py::init([](py::handle kernel, py::handle stride, py::handle padding, py::handle dilation,
                       bool return_indices, bool ceil_mode) {
        Pool3dArgs a;
        a.kernel_size = sizes_arg(kernel, "MaxPool3d", "kernel_size");
        if (!stride.is_none()) a.stride = sizes_arg(stride, "MaxPool3d", "stride");
        a.padding = sizes_arg(padding, "MaxPool3d", "padding");
        a.dilation = sizes_arg(dilation, "MaxPool3d", "dilation");
        a.ceil_mode = ceil_mode;
        return std::make_shared<MaxPool3d>(a, return_indices);
      }), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
      py::arg("return_indices") = false, py::arg("ceil_mode") = false)
      .def_property_readonly("dilation", [](const Pool3d& p) { return size_attribute(p.args.dilation); })
      .def_readonly("return_indices", &Pool3d::return_indices);
  sublayer<AvgPool3d, Pool3d>(m, "AvgPool3d")
      .def(py::init([](py::handle kernel, py::handle stride, py::handle padding, bool ceil_mode,
                       bool count_include_pad, py::handle divisor_override) {
        MF_CHECK(divisor_override.is_none(), ValueError, "AvgPool3d: divisor_override is not supported");
        Pool3dArgs a;
        a.kernel_size = sizes_arg(kernel, "AvgPool3d", "kernel_size");
        if (!stride.is_none()) a.stride = sizes_arg(stride, "AvgPool3d", "stride");
        a.padding = sizes_arg(padding, "AvgPool3d", "padding");
        a.ceil_mode = ceil_mode;
        a.count_include_pad = count_include_pad;
        return std::make_shared<AvgPool3d>(a);
      }), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
      py::arg("ceil_mode") = false, py::arg("count_include_pad") = true, py::arg("divisor_override") = py::none())
      .def_property_readonly("count_include_pad", [](const Pool3d& p) { return p.args.count_include_pad; });
  layer<AdaptiveAvgPool3d>(m, "AdaptiveAvgPool3d")
      .def(py::init([](py::handle size) {
        return std::make_shared<AdaptiveAvgPool3d>(optional_sizes_arg(size, "AdaptiveAvgPool3d"), is_int_arg(size));
      }), py::arg("output_size"))
      .def("forward", [](AdaptiveAvgPool3d& self, const Tensor& x) { return self.forward(x); }, py::arg("input"))
      .def_property_readonly("output_size", [](const AdaptiveAvgPool3d& p) -> py::object {
        if (p.int_size) return py::cast(*p.output_size[0]);
        return py::tuple(py::cast(p.output_size));
      });
}

}  // namespace

void bind_conv_layers(py::module_& m) {
  auto conv3d = layer<Conv3d>(m, "Conv3d");
  conv3d.def(py::init([](int64_t in, int64_t out, py::handle kernel, py::handle stride, py::handle padding,
                         py::handle dilation, int64_t groups, bool bias, const std::string& padding_mode,
                         std::optional<Device> device, std::optional<DType> dtype) {
          check_padding_mode(padding_mode, "Conv3d");
          ConvOptions o;
          o.stride = sizes_arg(stride, "Conv3d", "stride");
          o.dilation = sizes_arg(dilation, "Conv3d", "dilation");
          o.groups = groups;
          o.bias = bias;
          if (py::isinstance<py::str>(padding)) o.padding_str = py::str(padding);
          else o.padding = sizes_arg(padding, "Conv3d", "padding");
          return made(std::make_shared<Conv3d>(in, out, sizes_arg(kernel, "Conv3d", "kernel_size"), o), device,
                      dtype);
        }), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true,
        py::arg("padding_mode") = "zeros", py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", [](Conv3d& self, const Tensor& x) { return self.forward(x); }, py::arg("input"));
  conv_attributes<Conv3d>(conv3d);
  bind_conv_transpose<ConvTranspose1d>(m, "ConvTranspose1d");
  bind_conv_transpose<ConvTranspose2d>(m, "ConvTranspose2d");
  bind_conv_transpose<ConvTranspose3d>(m, "ConvTranspose3d");
  bind_adaptive_max_pool<AdaptiveMaxPool1d>(m, "AdaptiveMaxPool1d");
  bind_adaptive_max_pool<AdaptiveMaxPool2d>(m, "AdaptiveMaxPool2d");
  bind_pool3d(m);
}

}  // namespace mf::python
