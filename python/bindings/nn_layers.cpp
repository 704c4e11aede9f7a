// The layers, losses and containers of meshflow.nn with torch.nn's
// constructor signatures.
#include <algorithm>

#include "nn_modules.h"

namespace mf::python {
namespace {

using namespace nn;  // NOLINT: every class bound here lives in mf::nn

Shape pair_of(const PairArg& p, const char* layer, const char* arg) {
  MF_CHECK(p.values.size() == 2, ValueError, layer, ": ", arg, " must be an int or a pair of ints, got ",
           p.values.size(), " values");
  return p.values;
}

Pool2dArgs pool_args(const PairArg& kernel, const std::optional<PairArg>& stride, const PairArg& padding,
                     const char* layer) {
  Pool2dArgs args;
  args.kernel_size = pair_of(kernel, layer, "kernel_size");
  if (stride) args.stride = pair_of(*stride, layer, "stride");
  args.padding = pair_of(padding, layer, "padding");
  return args;
}

void check_reduction_args(py::handle size_average, py::handle reduce, const char* loss) {
  MF_CHECK(size_average.is_none() && reduce.is_none(), ValueError, loss,
           ": size_average and reduce are deprecated; use reduction='mean', 'sum' or 'none'");
}

// Children of a container from Python objects.
void append_child(Module& parent, const std::string& name, py::handle child, const char* container) {
  MF_CHECK(py::isinstance<Module>(child), TypeError, container, ": ", py::str(py::type::handle_of(child)),
           " is not a Module subclass");
  parent.register_module(name, child.cast<ModulePtr>(), python_owner(child));
}

int64_t wrap_index(int64_t index, size_t size, const char* container) {
  int64_t n = int64_t(size);
  MF_CHECK(index >= -n && index < n, IndexError, container, ": index ", index, " is out of range");
  return index < 0 ? index + n : index;
}

// Rebuilds a numbered container from a list of Python modules (after
// insert/delete renumbering).
void renumber(Module& m, const std::vector<py::object>& modules, const char* container) {
  while (!m.own_children().empty()) m.unregister(m.own_children().back().name);
  for (size_t i = 0; i < modules.size(); ++i) append_child(m, std::to_string(i), modules[i], container);
}

std::vector<py::object> child_objects(const Module& m) {
  std::vector<py::object> out;
  for (const auto& c : m.own_children()) out.push_back(module_object(c));
  return out;
}

py::object child_iter(const Module& m) {
  py::list out;
  for (const auto& c : m.own_children()) out.append(module_object(c));
  return py::iter(out);
}

void bind_containers(py::module_& m) {
  layer<Sequential>(m, "Sequential", "Modules applied in order; built from modules or an OrderedDict.")
      .def(py::init([](py::args modules) {
        auto seq = std::make_shared<Sequential>();
        if (modules.size() == 1 && py::isinstance<py::dict>(modules[0])) {
          for (auto [k, v] : modules[0].cast<py::dict>()) append_child(*seq, py::str(k), v, "Sequential");
        } else {
          for (py::handle mod : modules) append_child(*seq, std::to_string(seq->size()), mod, "Sequential");
        }
        return seq;
      }))
      .def("forward", [](const Sequential& self, py::object input) {
        for (const auto& c : self.own_children()) input = module_object(c)(input);
        return input;
      }, py::arg("input"))
      .def("append", [](py::object self, py::handle module) {
        auto& seq = self.cast<Sequential&>();
        append_child(seq, std::to_string(seq.size()), module, "Sequential");
        return self;
      }, py::arg("module"))
      .def("__len__", &Sequential::size)
      .def("__iter__", [](const Sequential& self) { return child_iter(self); })
      .def("__getitem__", [](const Sequential& self, int64_t i) {
        return module_object(self.own_children()[size_t(wrap_index(i, self.size(), "Sequential"))]);
      })
      .def("__getitem__", [](const Sequential& self, py::slice slice) {
        size_t start, stop, step, length;
        if (!slice.compute(self.size(), &start, &stop, &step, &length)) throw py::error_already_set();
        auto out = std::make_shared<Sequential>();
        for (size_t i = 0; i < length; ++i) {
          const auto& c = self.own_children()[start + i * step];
          out->register_module(c.name, c.module, c.owner);
        }
        return out;
      });

  layer<ModuleList>(m, "ModuleList", "A list of modules whose parameters are registered.")
      .def(py::init([](py::handle modules) {
        auto list = std::make_shared<ModuleList>();
        if (!modules.is_none()) {
          for (py::handle mod : modules) append_child(*list, std::to_string(list->size()), mod, "ModuleList");
        }
        return list;
      }), py::arg("modules") = py::none())
      .def("append", [](py::object self, py::handle module) {
        auto& list = self.cast<ModuleList&>();
        append_child(list, std::to_string(list.size()), module, "ModuleList");
        return self;
      }, py::arg("module"))
      .def("extend", [](py::object self, py::iterable modules) {
        auto& list = self.cast<ModuleList&>();
        for (py::handle mod : modules) append_child(list, std::to_string(list.size()), mod, "ModuleList");
        return self;
      }, py::arg("modules"))
      .def("__iadd__", [](py::object self, py::iterable modules) { return self.attr("extend")(modules); })
      .def("insert", [](ModuleList& self, int64_t index, py::handle module) {
        auto mods = child_objects(self);
        int64_t n = int64_t(mods.size());
        int64_t at = std::clamp(index < 0 ? index + n : index, int64_t(0), n);
        mods.insert(mods.begin() + at, py::reinterpret_borrow<py::object>(module));
        renumber(self, mods, "ModuleList");
      }, py::arg("index"), py::arg("module"))
      .def("__len__", &ModuleList::size)
      .def("__iter__", [](const ModuleList& self) { return child_iter(self); })
      .def("__getitem__", [](const ModuleList& self, int64_t i) {
        return module_object(self.own_children()[size_t(wrap_index(i, self.size(), "ModuleList"))]);
      })
      .def("__getitem__", [](const ModuleList& self, py::slice slice) {
        size_t start, stop, step, length;
        if (!slice.compute(self.size(), &start, &stop, &step, &length)) throw py::error_already_set();
        auto out = std::make_shared<ModuleList>();
        for (size_t i = 0; i < length; ++i) {
          const auto& c = self.own_children()[start + i * step];
          out->push_back(c.module, c.owner);
        }
        return out;
      })
      .def("__setitem__", [](ModuleList& self, int64_t i, py::handle module) {
        append_child(self, std::to_string(wrap_index(i, self.size(), "ModuleList")), module, "ModuleList");
      })
      .def("__delitem__", [](ModuleList& self, int64_t i) {
        auto mods = child_objects(self);
        mods.erase(mods.begin() + wrap_index(i, mods.size(), "ModuleList"));
        renumber(self, mods, "ModuleList");
      });

  layer<ModuleDict>(m, "ModuleDict", "A dict of modules whose parameters are registered.")
      .def(py::init([](py::handle modules) {
        auto dict = std::make_shared<ModuleDict>();
        if (!modules.is_none()) {
          py::object items = py::hasattr(modules, "items") ? modules.attr("items")() : py::reinterpret_borrow<py::object>(modules);
          for (py::handle kv : items) {
            auto pair = kv.cast<py::tuple>();
            append_child(*dict, py::str(pair[0]), pair[1], "ModuleDict");
          }
        }
        return dict;
      }), py::arg("modules") = py::none())
      .def("__getitem__", [](const ModuleDict& self, const std::string& key) {
        if (!self.has_child(key)) throw py::key_error(key);
        return module_object(self.child_entry(key));
      })
      .def("__setitem__", [](ModuleDict& self, const std::string& key, py::handle module) {
        append_child(self, key, module, "ModuleDict");
      })
      .def("__delitem__", [](ModuleDict& self, const std::string& key) {
        if (!self.unregister(key)) throw py::key_error(key);
      })
      .def("__contains__", [](const ModuleDict& self, const std::string& key) { return self.has_child(key); })
      .def("__len__", [](const ModuleDict& self) { return self.own_children().size(); })
      .def("keys", [](const ModuleDict& self) {
        py::list out;
        for (const auto& c : self.own_children()) out.append(c.name);
        return out;
      })
      .def("__iter__", [](const ModuleDict& self) {
        py::list out;
        for (const auto& c : self.own_children()) out.append(c.name);
        return py::iter(out);
      })
      .def("values", [](const ModuleDict& self) { return py::list(child_iter(self)); })
      .def("items", [](const ModuleDict& self) {
        py::list out;
        for (const auto& c : self.own_children()) out.append(py::make_tuple(c.name, module_object(c)));
        return out;
      })
      .def("update", [](ModuleDict& self, py::handle modules) {
        for (py::handle kv : modules.attr("items")()) {
          auto pair = kv.cast<py::tuple>();
          append_child(self, py::str(pair[0]), pair[1], "ModuleDict");
        }
      }, py::arg("modules"));
}

// Upsample and its two fixed-mode forms; the padding layers.
void bind_resample_layers(py::module_& m) {
  using Size = UpsampleSize;
  using Scale = UpsampleScale;
  layer<Upsample>(m, "Upsample")
      .def(py::init([](Size size, Scale scale_factor, const std::string& mode, std::optional<bool> align_corners,
                       std::optional<bool> recompute_scale_factor) {
        return std::make_shared<Upsample>(InterpolateOptions{.size = std::move(size),
                                                             .scale_factor = std::move(scale_factor), .mode = mode,
                                                             .align_corners = align_corners,
                                                             .recompute_scale_factor = recompute_scale_factor});
      }), py::arg("size") = py::none(), py::arg("scale_factor") = py::none(), py::arg("mode") = "nearest",
          py::arg("align_corners") = py::none(), py::arg("recompute_scale_factor") = py::none())
      .def("forward", &Upsample::forward, py::arg("input"))
      .def_property_readonly("name", &Upsample::type_name)
      .def_property_readonly("size", [](const Upsample& u) -> py::object {
        if (!u.options.size) return py::none();
        return std::visit([](const auto& v) -> py::object {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Shape>) return py::tuple(py::cast(v));
          else return py::cast(v);
        }, *u.options.size);
      })
      .def_property_readonly("scale_factor", [](const Upsample& u) -> py::object {
        if (!u.options.scale_factor) return py::none();
        return std::visit([](const auto& v) -> py::object {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) return py::cast(v);
          else return py::tuple(py::cast(v));
        }, *u.options.scale_factor);
      })
      .def_property_readonly("mode", [](const Upsample& u) { return u.options.mode; })
      .def_property_readonly("align_corners", [](const Upsample& u) { return u.options.align_corners; })
      .def_property_readonly("recompute_scale_factor",
                             [](const Upsample& u) { return u.options.recompute_scale_factor; });
  sublayer<UpsamplingNearest2d, Upsample>(m, "UpsamplingNearest2d")
      .def(py::init<Size, Scale>(), py::arg("size") = py::none(), py::arg("scale_factor") = py::none());
  sublayer<UpsamplingBilinear2d, Upsample>(m, "UpsamplingBilinear2d")
      .def(py::init<Size, Scale>(), py::arg("size") = py::none(), py::arg("scale_factor") = py::none());

  layer<Pad>(m, "_Pad")
      .def("forward", &Pad::forward, py::arg("input"))
      .def_property_readonly("padding", [](const Pad& p) { return py::tuple(py::cast(p.padding)); });
  auto pad_layer = [&](auto tag, const char* name) {
    using M = typename decltype(tag)::type;
    return sublayer<M, Pad>(m, name).def(py::init<const PadArg&>(), py::arg("padding"));
  };
  pad_layer(std::type_identity<ReflectionPad1d>{}, "ReflectionPad1d");
  pad_layer(std::type_identity<ReflectionPad2d>{}, "ReflectionPad2d");
  pad_layer(std::type_identity<ReflectionPad3d>{}, "ReflectionPad3d");
  pad_layer(std::type_identity<ReplicationPad1d>{}, "ReplicationPad1d");
  pad_layer(std::type_identity<ReplicationPad2d>{}, "ReplicationPad2d");
  pad_layer(std::type_identity<ReplicationPad3d>{}, "ReplicationPad3d");
  pad_layer(std::type_identity<ZeroPad2d>{}, "ZeroPad2d").def_readonly("value", &Pad::value);
  auto constant_pad = [&](auto tag, const char* name) {
    using M = typename decltype(tag)::type;
    sublayer<M, Pad>(m, name)
        .def(py::init<const PadArg&, Scalar>(), py::arg("padding"), py::arg("value"))
        .def_readonly("value", &Pad::value);
  };
  constant_pad(std::type_identity<ConstantPad1d>{}, "ConstantPad1d");
  constant_pad(std::type_identity<ConstantPad2d>{}, "ConstantPad2d");
  constant_pad(std::type_identity<ConstantPad3d>{}, "ConstantPad3d");
}

void bind_layers(py::module_& m) {
  auto dev = py::arg("device") = py::none();
  auto dt = py::arg("dtype") = py::none();

  layer<Linear>(m, "Linear")
      .def(py::init([](int64_t in, int64_t out, bool bias, std::optional<Device> device, std::optional<DType> dtype) {
        return made(std::make_shared<Linear>(in, out, bias), device, dtype);
      }), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, dev, dt)
      .def("forward", py::overload_cast<const Tensor&>(&Linear::forward), py::arg("input"))
      .def("reset_parameters", &Linear::reset_parameters)
      .def_readonly("in_features", &Linear::in_features)
      .def_readonly("out_features", &Linear::out_features);

  layer<Conv2d>(m, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, const PairArg& kernel, const PairArg& stride, py::handle padding,
                       const PairArg& dilation, int64_t groups, bool bias, const std::string& padding_mode,
                       std::optional<Device> device, std::optional<DType> dtype) {
        MF_CHECK(padding_mode == "zeros", ValueError, "Conv2d: padding_mode '", padding_mode,
                 "' is not supported (only 'zeros')");
        Conv2dOptions o;
        Shape k = pair_of(kernel, "Conv2d", "kernel_size");
        o.stride = pair_of(stride, "Conv2d", "stride");
        o.dilation = pair_of(dilation, "Conv2d", "dilation");
        o.groups = groups;
        o.bias = bias;
        if (py::isinstance<py::str>(padding)) {
          o.padding_str = py::str(padding);
        } else {
          o.padding = pair_of(padding.cast<PairArg>(), "Conv2d", "padding");
        }
        return made(std::make_shared<Conv2d>(in, out, k, o), device, dtype);
      }), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
          py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true,
          py::arg("padding_mode") = "zeros", dev, dt)
      .def("forward", &Conv2d::forward, py::arg("input"))
      .def("reset_parameters", &Conv2d::reset_parameters)
      .def_readonly("in_channels", &Conv2d::in_channels)
      .def_readonly("out_channels", &Conv2d::out_channels)
      .def_property_readonly("kernel_size", [](const Conv2d& c) { return py::tuple(py::cast(c.kernel_size)); })
      .def_property_readonly("stride", [](const Conv2d& c) { return py::tuple(py::cast(c.options.stride)); })
      .def_property_readonly("padding", [](const Conv2d& c) -> py::object {
        if (!c.options.padding_str.empty()) return py::str(c.options.padding_str);
        return py::tuple(py::cast(c.options.padding));
      })
      .def_property_readonly("dilation", [](const Conv2d& c) { return py::tuple(py::cast(c.options.dilation)); })
      .def_property_readonly("groups", [](const Conv2d& c) { return c.options.groups; });

  auto bn_init = [](auto tag) {
    using M = typename decltype(tag)::type;
    return py::init([](int64_t n, double eps, std::optional<double> momentum, bool affine, bool track,
                       std::optional<Device> device, std::optional<DType> dtype) {
      return made(std::make_shared<M>(n, BatchNormOptions{eps, momentum, affine, track}), device, dtype);
    });
  };
  layer<BatchNorm>(m, "_BatchNorm")
      .def("forward", &BatchNorm::forward, py::arg("input"))
      .def("reset_parameters", &BatchNorm::reset_parameters)
      .def("reset_running_stats", &BatchNorm::reset_running_stats)
      .def_readonly("num_features", &BatchNorm::num_features)
      .def_property_readonly("eps", [](const BatchNorm& b) { return b.options.eps; })
      .def_property_readonly("momentum", [](const BatchNorm& b) { return b.options.momentum; })
      .def_property_readonly("affine", [](const BatchNorm& b) { return b.options.affine; })
      .def_property_readonly("track_running_stats", [](const BatchNorm& b) { return b.options.track_running_stats; });
  auto bn_args = [&](auto cls, auto tag) {
    cls.def(bn_init(tag), py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1,
            py::arg("affine") = true, py::arg("track_running_stats") = true, py::arg("device") = py::none(),
            py::arg("dtype") = py::none());
  };
  bn_args(sublayer<BatchNorm1d, BatchNorm>(m, "BatchNorm1d"),
          std::type_identity<BatchNorm1d>{});
  bn_args(sublayer<BatchNorm2d, BatchNorm>(m, "BatchNorm2d"),
          std::type_identity<BatchNorm2d>{});
  sublayer<SyncBatchNorm, BatchNorm>(m, "SyncBatchNorm")
      .def(py::init([](int64_t n, double eps, std::optional<double> momentum, bool affine, bool track,
                       py::handle process_group, std::optional<Device> device, std::optional<DType> dtype) {
        // A group of meshflow.distributed.new_group (a communicator): its world ranks.
        std::vector<int> ranks;
        if (!process_group.is_none()) ranks = process_group.attr("world_ranks")().cast<std::vector<int>>();
        return made(std::make_shared<SyncBatchNorm>(n, BatchNormOptions{eps, momentum, affine, track}, ranks), device,
                    dtype);
      }), py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true,
          py::arg("track_running_stats") = true, py::arg("process_group") = py::none(),
          py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", &SyncBatchNorm::forward, py::arg("input"));

  layer<LayerNorm>(m, "LayerNorm")
      .def(py::init([](const DimsArg& shape, double eps, bool affine, std::optional<Device> device,
                       std::optional<DType> dtype) {
        return made(std::make_shared<LayerNorm>(shape.dims, eps, affine), device, dtype);
      }), py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true, dev, dt)
      .def("forward", &LayerNorm::forward, py::arg("input"))
      .def_property_readonly("normalized_shape", [](const LayerNorm& l) { return py::tuple(py::cast(l.normalized_shape)); })
      .def_readonly("eps", &LayerNorm::eps)
      .def_readonly("elementwise_affine", &LayerNorm::elementwise_affine);

  layer<GroupNorm>(m, "GroupNorm")
      .def(py::init([](int64_t groups, int64_t channels, double eps, bool affine, std::optional<Device> device,
                       std::optional<DType> dtype) {
        return made(std::make_shared<GroupNorm>(groups, channels, eps, affine), device, dtype);
      }), py::arg("num_groups"), py::arg("num_channels"), py::arg("eps") = 1e-5, py::arg("affine") = true, dev, dt)
      .def("forward", &GroupNorm::forward, py::arg("input"))
      .def_readonly("num_groups", &GroupNorm::num_groups)
      .def_readonly("num_channels", &GroupNorm::num_channels)
      .def_readonly("eps", &GroupNorm::eps);

  layer<Embedding>(m, "Embedding")
      .def(py::init([](int64_t n, int64_t dim, std::optional<int64_t> padding_idx, std::optional<Device> device,
                       std::optional<DType> dtype) {
        return made(std::make_shared<Embedding>(n, dim, padding_idx), device, dtype);
      }), py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx") = py::none(), dev, dt)
      .def("forward", &Embedding::forward, py::arg("input"))
      .def_readonly("num_embeddings", &Embedding::num_embeddings)
      .def_readonly("embedding_dim", &Embedding::embedding_dim)
      .def_readonly("padding_idx", &Embedding::padding_idx);
  layer<Bilinear>(m, "Bilinear")
      .def(py::init([](int64_t in1, int64_t in2, int64_t out, bool bias, std::optional<Device> device,
                       std::optional<DType> dtype) {
        return made(std::make_shared<Bilinear>(in1, in2, out, bias), device, dtype);
      }), py::arg("in1_features"), py::arg("in2_features"), py::arg("out_features"), py::arg("bias") = true,
          py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&Bilinear::forward), py::arg("input1"),
           py::arg("input2"))
      .def("reset_parameters", &Bilinear::reset_parameters)
      .def_readonly("in1_features", &Bilinear::in1_features)
      .def_readonly("in2_features", &Bilinear::in2_features)
      .def_readonly("out_features", &Bilinear::out_features);
  layer<EmbeddingBag>(m, "EmbeddingBag")
      .def(py::init([](int64_t n, int64_t dim, py::handle max_norm, double norm_type, bool scale_grad_by_freq,
                       const std::string& mode, bool sparse, const Tensor& weight, bool include_last_offset,
                       std::optional<int64_t> padding_idx, std::optional<Device> device, std::optional<DType> dtype) {
        MF_CHECK(max_norm.is_none() && !scale_grad_by_freq && !sparse, ValueError,
                 "EmbeddingBag: max_norm, scale_grad_by_freq and sparse gradients are not supported");
        auto bag = std::make_shared<EmbeddingBag>(n, dim, mode, include_last_offset, padding_idx);
        if (weight.defined()) {
          MF_CHECK(weight.sizes() == Shape({n, dim}), ShapeError, "EmbeddingBag: _weight must have shape ",
                   shape_str({n, dim}), ", got ", shape_str(weight.sizes()));
          bag->register_parameter("weight", weight.detach());
        }
        return made(bag, device, dtype);
      }), py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("max_norm") = py::none(),
          py::arg("norm_type") = 2.0, py::arg("scale_grad_by_freq") = false, py::arg("mode") = "mean",
          py::arg("sparse") = false, py::arg("_weight") = py::none(), py::arg("include_last_offset") = false,
          py::arg("padding_idx") = py::none(), py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", py::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&EmbeddingBag::forward),
           py::arg("input"), py::arg("offsets") = py::none(), py::arg("per_sample_weights") = py::none())
      .def_readonly("num_embeddings", &EmbeddingBag::num_embeddings)
      .def_readonly("embedding_dim", &EmbeddingBag::embedding_dim)
      .def_readonly("mode", &EmbeddingBag::mode)
      .def_readonly("include_last_offset", &EmbeddingBag::include_last_offset)
      .def_readonly("padding_idx", &EmbeddingBag::padding_idx);

  layer<Dropout>(m, "Dropout")
      .def(py::init([](double p, bool) { return std::make_shared<Dropout>(p); }), py::arg("p") = 0.5,
           py::arg("inplace") = false)
      .def("forward", &Dropout::forward, py::arg("input"))
      .def_readonly("p", &Dropout::p);

  layer<ReLU>(m, "ReLU")
      .def(py::init([](bool) { return std::make_shared<ReLU>(); }), py::arg("inplace") = false)
      .def("forward", &ReLU::forward, py::arg("input"));
  layer<GELU>(m, "GELU")
      .def(py::init<std::string>(), py::arg("approximate") = "none")
      .def("forward", &GELU::forward, py::arg("input"));
  layer<SiLU>(m, "SiLU")
      .def(py::init([](bool) { return std::make_shared<SiLU>(); }), py::arg("inplace") = false)
      .def("forward", &SiLU::forward, py::arg("input"));
  layer<Tanh>(m, "Tanh").def(py::init<>()).def("forward", &Tanh::forward, py::arg("input"));
  layer<Sigmoid>(m, "Sigmoid").def(py::init<>()).def("forward", &Sigmoid::forward, py::arg("input"));
  layer<Hardtanh>(m, "Hardtanh")
      .def(py::init([](double min_val, double max_val, bool inplace) {
        return std::make_shared<Hardtanh>(min_val, max_val, inplace);
      }), py::arg("min_val") = -1.0, py::arg("max_val") = 1.0, py::arg("inplace") = false)
      .def("forward", &Hardtanh::forward, py::arg("input"))
      .def_readonly("min_val", &Hardtanh::min_val)
      .def_readonly("max_val", &Hardtanh::max_val)
      .def_readonly("inplace", &Hardtanh::inplace);
  sublayer<ReLU6, Hardtanh>(m, "ReLU6")
      .def(py::init<bool>(), py::arg("inplace") = false);
  layer<GLU>(m, "GLU")
      .def(py::init<int64_t>(), py::arg("dim") = -1)
      .def("forward", &GLU::forward, py::arg("input"))
      .def_readonly("dim", &GLU::dim);
  layer<LeakyReLU>(m, "LeakyReLU")
      .def(py::init([](double slope, bool) { return std::make_shared<LeakyReLU>(slope); }),
           py::arg("negative_slope") = 0.01, py::arg("inplace") = false)
      .def("forward", &LeakyReLU::forward, py::arg("input"));
  layer<Softmax>(m, "Softmax")
      .def(py::init<int64_t>(), py::arg("dim"))
      .def("forward", &Softmax::forward, py::arg("input"));
  layer<LogSoftmax>(m, "LogSoftmax")
      .def(py::init<int64_t>(), py::arg("dim"))
      .def("forward", &LogSoftmax::forward, py::arg("input"));
  layer<Flatten>(m, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1)
      .def("forward", &Flatten::forward, py::arg("input"));
  layer<Identity>(m, "Identity")
      .def(py::init([](py::args, py::kwargs) { return std::make_shared<Identity>(); }))
      .def("forward", &Identity::forward, py::arg("input"));

  layer<MaxPool2d>(m, "MaxPool2d")
      .def(py::init([](const PairArg& kernel, const std::optional<PairArg>& stride, const PairArg& padding,
                       const PairArg& dilation, bool return_indices, bool ceil_mode) {
        MF_CHECK(!return_indices, ValueError,
                 "MaxPool2d: return_indices=True is not supported by the module; use "
                 "nn.functional.max_pool2d_with_indices");
        Pool2dArgs args = pool_args(kernel, stride, padding, "MaxPool2d");
        args.dilation = pair_of(dilation, "MaxPool2d", "dilation");
        args.ceil_mode = ceil_mode;
        return std::make_shared<MaxPool2d>(args);
      }), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
          py::arg("return_indices") = false, py::arg("ceil_mode") = false)
      .def("forward", &MaxPool2d::forward, py::arg("input"));
  layer<AvgPool2d>(m, "AvgPool2d")
      .def(py::init([](const PairArg& kernel, const std::optional<PairArg>& stride, const PairArg& padding,
                       bool ceil_mode, bool count_include_pad, py::handle divisor_override) {
        MF_CHECK(divisor_override.is_none(), ValueError, "AvgPool2d: divisor_override is not supported");
        Pool2dArgs args = pool_args(kernel, stride, padding, "AvgPool2d");
        args.ceil_mode = ceil_mode;
        args.count_include_pad = count_include_pad;
        return std::make_shared<AvgPool2d>(args);
      }), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
          py::arg("ceil_mode") = false, py::arg("count_include_pad") = true, py::arg("divisor_override") = py::none())
      .def("forward", &AvgPool2d::forward, py::arg("input"));
  layer<AdaptiveAvgPool2d>(m, "AdaptiveAvgPool2d")
      .def(py::init([](const PairArg& size) {
        return std::make_shared<AdaptiveAvgPool2d>(pair_of(size, "AdaptiveAvgPool2d", "output_size"));
      }), py::arg("output_size"))
      .def("forward", &AdaptiveAvgPool2d::forward, py::arg("input"));
}

void bind_attention(py::module_& m) {
  layer<MultiheadAttention>(m, "MultiheadAttention")
      .def(py::init([](int64_t embed_dim, int64_t num_heads, double dropout, bool bias, bool add_bias_kv,
                       bool add_zero_attn, std::optional<int64_t> kdim, std::optional<int64_t> vdim, bool batch_first,
                       std::optional<Device> device, std::optional<DType> dtype) {
        MF_CHECK(!add_bias_kv && !add_zero_attn, ValueError,
                 "MultiheadAttention: add_bias_kv and add_zero_attn are not supported");
        MF_CHECK(kdim.value_or(embed_dim) == embed_dim && vdim.value_or(embed_dim) == embed_dim, ValueError,
                 "MultiheadAttention: kdim and vdim other than embed_dim are not supported");
        return made(std::make_shared<MultiheadAttention>(embed_dim, num_heads, dropout, bias, batch_first), device,
                    dtype);
      }), py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0, py::arg("bias") = true,
          py::arg("add_bias_kv") = false, py::arg("add_zero_attn") = false, py::arg("kdim") = py::none(),
          py::arg("vdim") = py::none(), py::arg("batch_first") = false, py::arg("device") = py::none(),
          py::arg("dtype") = py::none())
      .def("forward", [](MultiheadAttention& self, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& key_padding_mask, bool need_weights, const Tensor& attn_mask,
                         bool average_attn_weights) {
        auto [out, weights] = self.forward(q, k, v, key_padding_mask, need_weights, attn_mask, average_attn_weights);
        return py::make_tuple(out, weights);
      }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("key_padding_mask") = py::none(),
          py::arg("need_weights") = true, py::arg("attn_mask") = py::none(), py::arg("average_attn_weights") = true)
      .def_readonly("embed_dim", &MultiheadAttention::embed_dim)
      .def_readonly("num_heads", &MultiheadAttention::num_heads)
      .def_readonly("batch_first", &MultiheadAttention::batch_first);
}

void bind_losses(py::module_& m) {
  layer<CrossEntropyLoss>(m, "CrossEntropyLoss")
      .def(py::init([](const Tensor& weight, py::handle size_average, int64_t ignore_index, py::handle reduce,
                       const std::string& reduction, double label_smoothing) {
        check_reduction_args(size_average, reduce, "CrossEntropyLoss");
        return std::make_shared<CrossEntropyLoss>(weight, ignore_index, reduction, label_smoothing);
      }), py::arg("weight") = py::none(), py::arg("size_average") = py::none(), py::arg("ignore_index") = -100,
          py::arg("reduce") = py::none(), py::arg("reduction") = "mean", py::arg("label_smoothing") = 0.0)
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&CrossEntropyLoss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("ignore_index", &CrossEntropyLoss::ignore_index)
      .def_readonly("reduction", &CrossEntropyLoss::reduction)
      .def_readonly("label_smoothing", &CrossEntropyLoss::label_smoothing);
  layer<NLLLoss>(m, "NLLLoss")
      .def(py::init([](const Tensor& weight, py::handle size_average, int64_t ignore_index, py::handle reduce,
                       const std::string& reduction) {
        check_reduction_args(size_average, reduce, "NLLLoss");
        return std::make_shared<NLLLoss>(weight, ignore_index, reduction);
      }), py::arg("weight") = py::none(), py::arg("size_average") = py::none(), py::arg("ignore_index") = -100,
          py::arg("reduce") = py::none(), py::arg("reduction") = "mean")
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&NLLLoss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &NLLLoss::reduction);
  layer<MSELoss>(m, "MSELoss")
      .def(py::init([](py::handle size_average, py::handle reduce, const std::string& reduction) {
        check_reduction_args(size_average, reduce, "MSELoss");
        return std::make_shared<MSELoss>(reduction);
      }), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(), py::arg("reduction") = "mean")
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&MSELoss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &MSELoss::reduction);
  layer<L1Loss>(m, "L1Loss")
      .def(py::init([](py::handle size_average, py::handle reduce, const std::string& reduction) {
        check_reduction_args(size_average, reduce, "L1Loss");
        return std::make_shared<L1Loss>(reduction);
      }), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(), py::arg("reduction") = "mean")
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&L1Loss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &L1Loss::reduction);
  layer<SmoothL1Loss>(m, "SmoothL1Loss")
      .def(py::init([](py::handle size_average, py::handle reduce, const std::string& reduction, double beta) {
        check_reduction_args(size_average, reduce, "SmoothL1Loss");
        return std::make_shared<SmoothL1Loss>(reduction, beta);
      }), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(), py::arg("reduction") = "mean",
          py::arg("beta") = 1.0)
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&SmoothL1Loss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &SmoothL1Loss::reduction)
      .def_readonly("beta", &SmoothL1Loss::beta);
  layer<HuberLoss>(m, "HuberLoss")
      .def(py::init<std::string, double>(), py::arg("reduction") = "mean", py::arg("delta") = 1.0)
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&HuberLoss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &HuberLoss::reduction)
      .def_readonly("delta", &HuberLoss::delta);
  layer<PointwiseLayer>(m, "_PointwiseLayer")
      .def("forward", &PointwiseLayer::forward, py::arg("input"))
      .def_readonly("inplace", &PointwiseLayer::inplace);
  sublayer<Hardswish, PointwiseLayer>(m, "Hardswish").def(py::init<bool>(), py::arg("inplace") = false);
  sublayer<Hardsigmoid, PointwiseLayer>(m, "Hardsigmoid").def(py::init<bool>(), py::arg("inplace") = false);
  sublayer<SELU, PointwiseLayer>(m, "SELU").def(py::init<bool>(), py::arg("inplace") = false);
  sublayer<CELU, PointwiseLayer>(m, "CELU")
      .def(py::init<double, bool>(), py::arg("alpha") = 1.0, py::arg("inplace") = false)
      .def_readonly("alpha", &CELU::alpha);
  sublayer<Softsign, PointwiseLayer>(m, "Softsign").def(py::init<>());
  sublayer<Tanhshrink, PointwiseLayer>(m, "Tanhshrink").def(py::init<>());
  sublayer<LogSigmoid, PointwiseLayer>(m, "LogSigmoid").def(py::init<>());
  sublayer<Threshold, PointwiseLayer>(m, "Threshold")
      .def(py::init<double, double, bool>(), py::arg("threshold"), py::arg("value"), py::arg("inplace") = false)
      .def_readonly("threshold", &Threshold::threshold)
      .def_readonly("value", &Threshold::value);
  sublayer<Shrink, PointwiseLayer>(m, "_Shrink").def_readonly("lambd", &Shrink::lambd);
  sublayer<Softshrink, Shrink>(m, "Softshrink").def(py::init<double>(), py::arg("lambd") = 0.5);
  sublayer<Hardshrink, Shrink>(m, "Hardshrink").def(py::init<double>(), py::arg("lambd") = 0.5);
  layer<Softmin>(m, "Softmin")
      .def(py::init<std::optional<int64_t>>(), py::arg("dim") = py::none())
      .def("forward", &Softmin::forward, py::arg("input"))
      .def_readonly("dim", &Softmin::dim);
  layer<Softmax2d>(m, "Softmax2d").def(py::init<>()).def("forward", &Softmax2d::forward, py::arg("input"));
  layer<Mish>(m, "Mish")
      .def(py::init<bool>(), py::arg("inplace") = false)
      .def("forward", &Mish::forward, py::arg("input"))
      .def_readonly("inplace", &Mish::inplace);
  layer<ELU>(m, "ELU")
      .def(py::init<double, bool>(), py::arg("alpha") = 1.0, py::arg("inplace") = false)
      .def("forward", &ELU::forward, py::arg("input"))
      .def_readonly("alpha", &ELU::alpha)
      .def_readonly("inplace", &ELU::inplace);
  layer<Softplus>(m, "Softplus")
      .def(py::init<double, double>(), py::arg("beta") = 1.0, py::arg("threshold") = 20.0)
      .def("forward", &Softplus::forward, py::arg("input"))
      .def_readonly("beta", &Softplus::beta)
      .def_readonly("threshold", &Softplus::threshold);
  layer<Unflatten>(m, "Unflatten")
      .def(py::init<int64_t, Shape>(), py::arg("dim"), py::arg("unflattened_size"))
      .def("forward", &Unflatten::forward, py::arg("input"))
      .def_readonly("dim", &Unflatten::dim)
      .def_property_readonly("unflattened_size", [](const Unflatten& u) { return py::tuple(py::cast(u.unflattened_size)); });
  layer<PixelShuffle>(m, "PixelShuffle")
      .def(py::init([](int64_t r) { return std::make_shared<PixelShuffle>(r); }), py::arg("upscale_factor"))
      .def("forward", &PixelShuffle::forward, py::arg("input"))
      .def_readonly("upscale_factor", &PixelShuffle::factor);
  sublayer<PixelUnshuffle, PixelShuffle>(m, "PixelUnshuffle")
      .def(py::init<int64_t>(), py::arg("downscale_factor"))
      .def_readonly("downscale_factor", &PixelShuffle::factor);
  auto one_int = [](py::handle v, const char* layer, const char* arg) -> int64_t {
    if (PyLong_Check(v.ptr())) return v.cast<int64_t>();
    MF_CHECK(py::isinstance<py::sequence>(v) && py::len(v) == 1, ValueError, layer, ": ", arg,
             " must be an int or a sequence of one int");
    return py::reinterpret_borrow<py::sequence>(v)[0].cast<int64_t>();
  };
  layer<Conv1d>(m, "Conv1d")
      .def(py::init([one_int](int64_t in, int64_t out, py::handle kernel, py::handle stride, py::handle padding,
                              py::handle dilation, int64_t groups, bool bias, const std::string& padding_mode,
                              std::optional<Device> device, std::optional<DType> dtype) {
        MF_CHECK(padding_mode == "zeros", ValueError, "Conv1d: padding_mode '", padding_mode,
                 "' is not supported (only 'zeros')");
        Conv1dArgs a{.stride = one_int(stride, "Conv1d", "stride"), .dilation = one_int(dilation, "Conv1d", "dilation"),
                     .groups = groups};
        if (py::isinstance<py::str>(padding)) {
          const std::string mode = py::str(padding);
          MF_CHECK(mode == "same" || mode == "valid", ValueError, "Conv1d: padding must be 'same', 'valid' or ints, "
                   "got '", mode, "'");
          a.padding_same = mode == "same";
        } else {
          a.padding = one_int(padding, "Conv1d", "padding");
        }
        return made(std::make_shared<Conv1d>(in, out, one_int(kernel, "Conv1d", "kernel_size"), a, bias), device,
                    dtype);
      }), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
          py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true,
          py::arg("padding_mode") = "zeros", py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def("forward", &Conv1d::forward, py::arg("input"))
      .def("reset_parameters", &Conv1d::reset_parameters)
      .def_readonly("in_channels", &Conv1d::in_channels)
      .def_readonly("out_channels", &Conv1d::out_channels)
      .def_property_readonly("kernel_size", [](const Conv1d& c) { return py::make_tuple(c.kernel_size); })
      .def_property_readonly("stride", [](const Conv1d& c) { return py::make_tuple(c.args.stride); })
      .def_property_readonly("padding", [](const Conv1d& c) -> py::object {
        if (c.args.padding_same) return py::str("same");
        return py::make_tuple(c.args.padding);
      })
      .def_property_readonly("dilation", [](const Conv1d& c) { return py::make_tuple(c.args.dilation); })
      .def_property_readonly("groups", [](const Conv1d& c) { return c.args.groups; });
  layer<Pool1d>(m, "_Pool1d").def("forward", &Pool1d::forward, py::arg("input"));
  sublayer<MaxPool1d, Pool1d>(m, "MaxPool1d")
      .def(py::init([one_int](py::handle k, py::handle stride, py::handle padding, py::handle dilation,
                              bool return_indices, bool ceil_mode) {
        MF_CHECK(!return_indices, ValueError, "MaxPool1d: return_indices=True is not supported");
        Pool1dArgs a{.kernel_size = one_int(k, "MaxPool1d", "kernel_size"), .stride = std::nullopt,
                     .padding = one_int(padding, "MaxPool1d", "padding"),
                     .dilation = one_int(dilation, "MaxPool1d", "dilation"), .ceil_mode = ceil_mode};
        if (!stride.is_none()) a.stride = one_int(stride, "MaxPool1d", "stride");
        return std::make_shared<MaxPool1d>(a);
      }), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
          py::arg("return_indices") = false, py::arg("ceil_mode") = false);
  sublayer<AvgPool1d, Pool1d>(m, "AvgPool1d")
      .def(py::init([one_int](py::handle k, py::handle stride, py::handle padding, bool ceil_mode,
                              bool count_include_pad) {
        Pool1dArgs a{.kernel_size = one_int(k, "AvgPool1d", "kernel_size"), .stride = std::nullopt,
                     .padding = one_int(padding, "AvgPool1d", "padding"), .ceil_mode = ceil_mode,
                     .count_include_pad = count_include_pad};
        if (!stride.is_none()) a.stride = one_int(stride, "AvgPool1d", "stride");
        return std::make_shared<AvgPool1d>(a);
      }), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("ceil_mode") = false,
          py::arg("count_include_pad") = true);
  layer<AdaptiveAvgPool1d>(m, "AdaptiveAvgPool1d")
      .def(py::init([one_int](py::handle size) {
        return std::make_shared<AdaptiveAvgPool1d>(one_int(size, "AdaptiveAvgPool1d", "output_size"));
      }), py::arg("output_size"))
      .def("forward", &AdaptiveAvgPool1d::forward, py::arg("input"))
      .def_readonly("output_size", &AdaptiveAvgPool1d::output_size);
  layer<PReLU>(m, "PReLU")
      .def(py::init([](int64_t n, double init, std::optional<Device> device, std::optional<DType> dtype) {
        return made(std::make_shared<PReLU>(n, init), device, dtype);
      }), py::arg("num_parameters") = 1, py::arg("init") = 0.25, py::arg("device") = py::none(),
          py::arg("dtype") = py::none())
      .def("forward", &PReLU::forward, py::arg("input"))
      .def_readonly("num_parameters", &PReLU::num_parameters);
  layer<ChannelDropout>(m, "_ChannelDropout").def("forward", &ChannelDropout::forward, py::arg("input"));
  layer<InstanceNorm>(m, "_InstanceNorm").def("forward", &InstanceNorm::forward, py::arg("input"));
  auto dropout_nd = [&](auto tag, const char* name) {
    using M = typename decltype(tag)::type;
    sublayer<M, ChannelDropout>(m, name)
        .def(py::init<double, bool>(), py::arg("p") = 0.5, py::arg("inplace") = false)
        .def_readonly("p", &ChannelDropout::p)
        .def_readonly("inplace", &ChannelDropout::inplace);
  };
  dropout_nd(std::type_identity<Dropout1d>{}, "Dropout1d");
  dropout_nd(std::type_identity<Dropout2d>{}, "Dropout2d");
  dropout_nd(std::type_identity<Dropout3d>{}, "Dropout3d");
  auto instance_norm_nd = [&](auto tag, const char* name) {
    using M = typename decltype(tag)::type;
    sublayer<M, InstanceNorm>(m, name)
        .def(py::init([](int64_t num_features, double eps, double momentum, bool affine, bool track,
                         std::optional<Device> device, std::optional<DType> dtype) {
          return made(std::make_shared<M>(num_features, eps, momentum, affine, track), device, dtype);
        }), py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = false,
            py::arg("track_running_stats") = false, py::arg("device") = py::none(), py::arg("dtype") = py::none())
        .def_readonly("num_features", &InstanceNorm::num_features)
        .def_readonly("eps", &InstanceNorm::eps)
        .def_readonly("momentum", &InstanceNorm::momentum)
        .def_readonly("affine", &InstanceNorm::affine)
        .def_readonly("track_running_stats", &InstanceNorm::track_running_stats);
  };
  instance_norm_nd(std::type_identity<InstanceNorm1d>{}, "InstanceNorm1d");
  instance_norm_nd(std::type_identity<InstanceNorm2d>{}, "InstanceNorm2d");
  layer<BCELoss>(m, "BCELoss")
      .def(py::init([](const Tensor& weight, py::handle size_average, py::handle reduce, const std::string& reduction) {
        check_reduction_args(size_average, reduce, "BCELoss");
        return std::make_shared<BCELoss>(weight, reduction);
      }), py::arg("weight") = py::none(), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
          py::arg("reduction") = "mean")
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&BCELoss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &BCELoss::reduction);
  layer<KLDivLoss>(m, "KLDivLoss")
      .def(py::init([](py::handle size_average, py::handle reduce, const std::string& reduction, bool log_target) {
        check_reduction_args(size_average, reduce, "KLDivLoss");
        return std::make_shared<KLDivLoss>(reduction, log_target);
      }), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(), py::arg("reduction") = "mean",
          py::arg("log_target") = false)
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&KLDivLoss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &KLDivLoss::reduction)
      .def_readonly("log_target", &KLDivLoss::log_target);
  layer<CosineSimilarity>(m, "CosineSimilarity")
      .def(py::init<int64_t, double>(), py::arg("dim") = 1, py::arg("eps") = 1e-8)
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&CosineSimilarity::forward), py::arg("x1"),
           py::arg("x2"))
      .def_readonly("dim", &CosineSimilarity::dim)
      .def_readonly("eps", &CosineSimilarity::eps);
  layer<BCEWithLogitsLoss>(m, "BCEWithLogitsLoss")
      .def(py::init([](const Tensor& weight, py::handle size_average, py::handle reduce, const std::string& reduction,
                       const Tensor& pos_weight) {
        check_reduction_args(size_average, reduce, "BCEWithLogitsLoss");
        return std::make_shared<BCEWithLogitsLoss>(weight, reduction, pos_weight);
      }), py::arg("weight") = py::none(), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
          py::arg("reduction") = "mean", py::arg("pos_weight") = py::none())
      .def("forward", py::overload_cast<const Tensor&, const Tensor&>(&BCEWithLogitsLoss::forward), py::arg("input"),
           py::arg("target"))
      .def_readonly("reduction", &BCEWithLogitsLoss::reduction);
}

}  // namespace

void init_nn_layers(py::module_& m) {
  bind_containers(m);
  bind_layers(m);
  bind_resample_layers(m);
  bind_attention(m);
  bind_losses(m);
  bind_conv_layers(m);
}

}  // namespace mf::python
