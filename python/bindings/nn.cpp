// meshflow._C._nn: the ops of meshflow.nn.functional (include/meshflow/ops/
// nn.h, conv.h, resample.h and the activations of elementwise.h) with the
// signatures of torch.nn.functional.
#include "bindings.h"
#include "meshflow/nn/pointwise_layers.h"

namespace mf::python {

bool is_int_arg(py::handle v) { return PyIndex_Check(v.ptr()) && !PyBool_Check(v.ptr()); }

Shape sizes_arg(py::handle value, const char* op, const char* arg) {
  if (is_int_arg(value)) return {value.cast<int64_t>()};
  MF_CHECK(py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value), TypeError, op, ": ", arg,
           " must be an int or a sequence of ints, got ", public_type_name(value.ptr()));
  Shape out;
  for (py::handle v : value) {
    MF_CHECK(is_int_arg(v), TypeError, op, ": ", arg, " must be an int or a sequence of ints, got an element of type ",
             public_type_name(v.ptr()));
    out.push_back(v.cast<int64_t>());
  }
  return out;
}

OptionalSizes optional_sizes_arg(py::handle value, const char* op) {
  if (is_int_arg(value)) return {value.cast<int64_t>()};
  MF_CHECK(py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value), TypeError, op,
           ": output_size must be an int or a sequence of ints or None, got ", public_type_name(value.ptr()));
  OptionalSizes out;
  for (py::handle v : value) {
    MF_CHECK(v.is_none() || is_int_arg(v), TypeError, op,
             ": output_size must be an int or a sequence of ints or None, got an element of type ",
             public_type_name(v.ptr()));
    out.push_back(v.is_none() ? std::nullopt : std::optional<int64_t>(v.cast<int64_t>()));
  }
  return out;
}

namespace {

// Arguments torch.nn.functional still accepts for old code; meshflow only
// takes their modern replacement.
void check_unset(py::handle value, const char* op, const char* name, const char* instead) {
  MF_CHECK(value.is_none(), ValueError, op, ": ", name, " is not supported; use ", instead);
}

// PyTorch's implicit softmax dim for code that passes none.
int64_t softmax_dim(const Tensor& t, std::optional<int64_t> dim) {
  if (dim) return *dim;
  const int64_t n = t.dim();
  return (n == 0 || n == 1 || n == 3) ? 0 : 1;
}

Tensor cast_if(const Tensor& t, std::optional<DType> dtype) { return dtype ? to(t, *dtype) : t; }

// conv2d / conv3d padding: sizes, 'valid' (no padding) or 'same'.
template <typename Args>
Args conv_args(py::handle stride, py::handle padding, py::handle dilation, int64_t groups, const char* op) {
  Args a;
  a.stride = sizes_arg(stride, op, "stride");
  a.dilation = sizes_arg(dilation, op, "dilation");
  a.groups = groups;
  if (py::isinstance<py::str>(padding)) {
    const auto mode = padding.cast<std::string>();
    MF_CHECK(mode == "same" || mode == "valid", ValueError, op, ": padding must be an int, a tuple, 'valid' or "
             "'same', got '", mode, "'");
    a.padding = {0};
    a.padding_same = mode == "same";
  } else {
    a.padding = sizes_arg(padding, op, "padding");
  }
  return a;
}

ConvTransposeArgs conv_transpose_args(py::handle stride, py::handle padding, py::handle output_padding,
                                      int64_t groups, py::handle dilation, const char* op) {
  return {.stride = sizes_arg(stride, op, "stride"), .padding = sizes_arg(padding, op, "padding"),
          .output_padding = sizes_arg(output_padding, op, "output_padding"), .groups = groups,
          .dilation = sizes_arg(dilation, op, "dilation")};
}

// max_pool3d / avg_pool3d arguments; stride None (or empty): kernel_size.
Pool3dArgs pool3d_args(py::handle kernel, py::handle stride, py::handle padding, py::handle dilation, bool ceil_mode,
                       bool count_include_pad, const char* op) {
  Pool3dArgs a;
  a.kernel_size = sizes_arg(kernel, op, "kernel_size");
  if (!stride.is_none()) a.stride = sizes_arg(stride, op, "stride");
  a.padding = sizes_arg(padding, op, "padding");
  a.dilation = sizes_arg(dilation, op, "dilation");
  a.ceil_mode = ceil_mode;
  a.count_include_pad = count_include_pad;
  return a;
}

// A 1-d size argument: an int or a sequence of one int (PyTorch's _single).
int64_t single(py::handle value, const char* op, const char* arg) {
  const Shape sizes = sizes_arg(value, op, arg);
  MF_CHECK(sizes.size() == 1, ValueError, op, ": ", arg, " must be an int or a sequence of one int, got ",
           sizes.size(), " values");
  return sizes[0];
}

Conv1dArgs conv1d_args(py::handle stride, py::handle padding, py::handle dilation, int64_t groups, const char* op) {
  Conv1dArgs a{.stride = single(stride, op, "stride"), .dilation = single(dilation, op, "dilation"),
               .groups = groups};
  if (py::isinstance<py::str>(padding)) {
    const std::string mode = py::str(padding);
    MF_CHECK(mode == "same" || mode == "valid", ValueError, op, ": padding must be 'same', 'valid' or ints, got '",
             mode, "'");
    a.padding_same = mode == "same";
  } else {
    a.padding = single(padding, op, "padding");
  }
  return a;
}

Pool1dArgs pool1d_args(py::handle kernel, py::handle stride, py::handle padding, py::handle dilation,
                       bool ceil_mode, bool count_include_pad, const char* op) {
  Pool1dArgs a{.kernel_size = single(kernel, op, "kernel_size"), .stride = std::nullopt,
               .padding = single(padding, op, "padding"),
               .dilation = single(dilation, op, "dilation"), .ceil_mode = ceil_mode,
               .count_include_pad = count_include_pad};
  if (!stride.is_none() && !(py::isinstance<py::sequence>(stride) && py::len(stride) == 0))
    a.stride = single(stride, op, "stride");
  return a;
}

Pool2dArgs pool_args(const PairArg& kernel, const std::optional<PairArg>& stride, const PairArg& padding,
                     const PairArg& dilation, bool ceil_mode, bool count_include_pad) {
  return {.kernel_size = kernel.values, .stride = stride ? stride->values : Shape{}, .padding = padding.values,
          .dilation = dilation.values, .ceil_mode = ceil_mode, .count_include_pad = count_include_pad};
}

// torch.nn.functional's `inplace=True` for ops without an in-place kernel:
// f runs on a copy (which its backward may save) and the result is written
// back into the input.
template <typename F>
Tensor maybe_inplace(Tensor input, bool inplace, F f) {
  if (!inplace) return f(input);
  return copy_(input, f(clone(input)));
}

}  // namespace

void init_nn(py::module_& parent) {
  py::module_ m = parent.def_submodule("_nn", "torch.nn.functional-style ops");
  m.def("relu", [](Tensor t, bool inplace) { return inplace ? relu_(t) : relu(t); }, py::arg("input"),
        py::arg("inplace") = false);
  m.def("relu_", [](Tensor t) { return relu_(t); }, py::arg("input"));
  m.def("gelu", &gelu, py::arg("input"), py::arg("approximate") = "none");
  m.def("silu", [](const Tensor& t, bool inplace) {
    return maybe_inplace(t, inplace, [](const Tensor& x) { return silu(x); });
  }, py::arg("input"), py::arg("inplace") = false);
  m.def("leaky_relu", [](const Tensor& t, double slope, bool inplace) {
    return maybe_inplace(t, inplace, [slope](const Tensor& x) { return leaky_relu(x, slope); });
  }, py::arg("input"), py::arg("negative_slope") = 0.01, py::arg("inplace") = false);
  m.def("elu", [](const Tensor& t, double alpha, bool inplace) {
    return maybe_inplace(t, inplace, [alpha](const Tensor& x) { return elu(x, alpha); });
  }, py::arg("input"), py::arg("alpha") = 1.0, py::arg("inplace") = false);
  m.def("softplus", &softplus, py::arg("input"), py::arg("beta") = 1.0, py::arg("threshold") = 20.0);
  m.def("sigmoid", &sigmoid, py::arg("input"));
  m.def("tanh", &tanh, py::arg("input"));

  m.def("softmax", [](const Tensor& t, std::optional<int64_t> dim, int stacklevel, std::optional<DType> dtype) {
    return softmax(cast_if(t, dtype), softmax_dim(t, dim));
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("_stacklevel") = 3, py::arg("dtype") = py::none());
  m.def("log_softmax", [](const Tensor& t, std::optional<int64_t> dim, int stacklevel, std::optional<DType> dtype) {
    return log_softmax(cast_if(t, dtype), softmax_dim(t, dim));
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("_stacklevel") = 3, py::arg("dtype") = py::none());
  m.def("layer_norm", [](const Tensor& x, const DimsArg& shape, const Tensor& weight, const Tensor& bias, double eps) {
    return layer_norm(x, shape.dims, weight, bias, eps);
  }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("eps") = 1e-5);
  m.def("batch_norm", &batch_norm, py::arg("input"), py::arg("running_mean"), py::arg("running_var"),
        py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::arg("training") = false,
        py::arg("momentum") = 0.1, py::arg("eps") = 1e-5);
  m.def("group_norm", &group_norm, py::arg("input"), py::arg("num_groups"), py::arg("weight") = py::none(),
        py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  m.def("embedding", [](const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx,
                        py::handle max_norm, double norm_type, bool scale_grad_by_freq, bool sparse) {
    check_unset(max_norm, "embedding", "max_norm", "a renormalised weight");
    MF_CHECK(!scale_grad_by_freq && !sparse, ValueError,
             "embedding: scale_grad_by_freq and sparse gradients are not supported");
    return embedding(input, weight, padding_idx);
  }, py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none(), py::arg("max_norm") = py::none(),
        py::arg("norm_type") = 2.0, py::arg("scale_grad_by_freq") = false, py::arg("sparse") = false);
  m.def("bilinear", &bilinear, py::arg("input1"), py::arg("input2"), py::arg("weight"), py::arg("bias") = py::none());
  m.def("embedding_bag", [](const Tensor& input, const Tensor& weight, const Tensor& offsets, py::handle max_norm,
                            double norm_type, bool scale_grad_by_freq, const std::string& mode, bool sparse,
                            const Tensor& per_sample_weights, bool include_last_offset,
                            std::optional<int64_t> padding_idx) {
    check_unset(max_norm, "embedding_bag", "max_norm", "a renormalised weight");
    MF_CHECK(!scale_grad_by_freq && !sparse, ValueError,
             "embedding_bag: scale_grad_by_freq and sparse gradients are not supported");
    return embedding_bag(input, weight, offsets, mode, per_sample_weights, include_last_offset, padding_idx);
  }, py::arg("input"), py::arg("weight"), py::arg("offsets") = py::none(), py::arg("max_norm") = py::none(),
        py::arg("norm_type") = 2, py::arg("scale_grad_by_freq") = false, py::arg("mode") = "mean",
        py::arg("sparse") = false, py::arg("per_sample_weights") = py::none(), py::arg("include_last_offset") = false,
        py::arg("padding_idx") = py::none());
  m.def("dropout", [](Tensor x, double p, bool training, bool inplace) {
    return maybe_inplace(x, inplace, [p, training](const Tensor& input) { return dropout(input, p, training); });
  }, py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true, py::arg("inplace") = false);

  m.def("cross_entropy", [](const Tensor& input, const Tensor& target, const Tensor& weight, py::handle size_average,
                            int64_t ignore_index, py::handle reduce, const std::string& reduction,
                            double label_smoothing) {
    check_unset(size_average, "cross_entropy", "size_average", "reduction=");
    check_unset(reduce, "cross_entropy", "reduce", "reduction=");
    return cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing);
  }, py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("size_average") = py::none(),
        py::arg("ignore_index") = -100, py::arg("reduce") = py::none(), py::arg("reduction") = "mean",
        py::arg("label_smoothing") = 0.0);
  m.def("nll_loss", [](const Tensor& input, const Tensor& target, const Tensor& weight, py::handle size_average,
                       int64_t ignore_index, py::handle reduce, const std::string& reduction) {
    check_unset(size_average, "nll_loss", "size_average", "reduction=");
    check_unset(reduce, "nll_loss", "reduce", "reduction=");
    return nll_loss(input, target, weight, ignore_index, reduction);
  }, py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("size_average") = py::none(),
        py::arg("ignore_index") = -100, py::arg("reduce") = py::none(), py::arg("reduction") = "mean");
  for (auto [name, f] : std::initializer_list<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&,
                                                                              const std::string&)>>{
           {"l1_loss", [](const Tensor& i, const Tensor& t, const std::string& r) { return l1_loss(i, t, r); }}})
    m.def(name, [name, f](const Tensor& input, const Tensor& target, py::handle size_average, py::handle reduce,
                          const std::string& reduction) {
      check_unset(size_average, name, "size_average", "reduction=");
      check_unset(reduce, name, "reduce", "reduction=");
      return f(input, target, reduction);
    }, py::arg("input"), py::arg("target"), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
          py::arg("reduction") = "mean");
  m.def("smooth_l1_loss", [](const Tensor& input, const Tensor& target, py::handle size_average, py::handle reduce,
                             const std::string& reduction, double beta) {
    check_unset(size_average, "smooth_l1_loss", "size_average", "reduction=");
    check_unset(reduce, "smooth_l1_loss", "reduce", "reduction=");
    return smooth_l1_loss(input, target, reduction, beta);
  }, py::arg("input"), py::arg("target"), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
        py::arg("reduction") = "mean", py::arg("beta") = 1.0);
  m.def("binary_cross_entropy", [](const Tensor& input, const Tensor& target, const Tensor& weight,
                                   py::handle size_average, py::handle reduce, const std::string& reduction) {
    check_unset(size_average, "binary_cross_entropy", "size_average", "reduction=");
    check_unset(reduce, "binary_cross_entropy", "reduce", "reduction=");
    return binary_cross_entropy(input, target, weight, reduction);
  }, py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("size_average") = py::none(),
        py::arg("reduce") = py::none(), py::arg("reduction") = "mean");
  m.def("kl_div", [](const Tensor& input, const Tensor& target, py::handle size_average, py::handle reduce,
                     const std::string& reduction, bool log_target) {
    check_unset(size_average, "kl_div", "size_average", "reduction=");
    check_unset(reduce, "kl_div", "reduce", "reduction=");
    return kl_div(input, target, reduction, log_target);
  }, py::arg("input"), py::arg("target"), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
        py::arg("reduction") = "mean", py::arg("log_target") = false);
  m.def("huber_loss", &huber_loss, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean",
        py::arg("delta") = 1.0);
  m.def("hardtanh", [](Tensor input, Scalar min_val, Scalar max_val, bool inplace) {
    if (!inplace) return hardtanh(input, min_val, max_val);
    MF_CHECK(min_val.to_double() <= max_val.to_double(), ValueError, "hardtanh: min_val must not exceed max_val");
    return clamp_(input, min_val, max_val);
  }, py::arg("input"), py::arg("min_val") = -1.0, py::arg("max_val") = 1.0, py::arg("inplace") = false);
  m.def("relu6", [](Tensor input, bool inplace) { return inplace ? clamp_(input, 0, 6) : relu6(input); },
        py::arg("input"), py::arg("inplace") = false);
  m.def("normalize", [](const Tensor& input, double p, int64_t dim, double eps, py::handle out) {
    if (!out.is_none()) throw py::type_error("normalize: out= is not supported");
    return normalize(input, p, dim, eps);
  }, py::arg("input"), py::arg("p") = 2.0, py::arg("dim") = 1, py::arg("eps") = 1e-12, py::arg("out") = py::none());
  m.def("cosine_similarity", &cosine_similarity, py::arg("x1"), py::arg("x2"), py::arg("dim") = 1,
        py::arg("eps") = 1e-8);
  m.def("glu", &glu, py::arg("input"), py::arg("dim") = -1);
  m.def("mse_loss", [](const Tensor& input, const Tensor& target, py::handle size_average, py::handle reduce,
                       const std::string& reduction) {
    check_unset(size_average, "mse_loss", "size_average", "reduction=");
    check_unset(reduce, "mse_loss", "reduce", "reduction=");
    return mse_loss(input, target, reduction);
  }, py::arg("input"), py::arg("target"), py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
        py::arg("reduction") = "mean");
  m.def("binary_cross_entropy_with_logits", [](const Tensor& input, const Tensor& target, const Tensor& weight,
                                               py::handle size_average, py::handle reduce,
                                               const std::string& reduction, const Tensor& pos_weight) {
    check_unset(size_average, "binary_cross_entropy_with_logits", "size_average", "reduction=");
    check_unset(reduce, "binary_cross_entropy_with_logits", "reduce", "reduction=");
    return binary_cross_entropy_with_logits(input, target, weight, pos_weight, reduction);
  }, py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("size_average") = py::none(),
        py::arg("reduce") = py::none(), py::arg("reduction") = "mean", py::arg("pos_weight") = py::none());

  m.def("scaled_dot_product_attention", &scaled_dot_product_attention, py::arg("query"), py::arg("key"),
        py::arg("value"), py::arg("attn_mask") = py::none(), py::arg("dropout_p") = 0.0,
        py::arg("is_causal") = false, py::kw_only(), py::arg("scale") = py::none());

  m.def("conv2d", [](const Tensor& x, const Tensor& weight, const Tensor& bias, py::handle stride,
                     py::handle padding, py::handle dilation, int64_t groups) {
    return conv2d(x, weight, bias, conv_args<Conv2dArgs>(stride, padding, dilation, groups, "conv2d"));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1);
  m.def("conv3d", [](const Tensor& x, const Tensor& weight, const Tensor& bias, py::handle stride,
                     py::handle padding, py::handle dilation, int64_t groups) {
    return conv3d(x, weight, bias, conv_args<ConvArgs>(stride, padding, dilation, groups, "conv3d"));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1);
  using ConvTransposeFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const ConvTransposeArgs&);
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, ConvTransposeFn>>{
           {"conv_transpose1d", &conv_transpose1d}, {"conv_transpose2d", &conv_transpose2d},
           {"conv_transpose3d", &conv_transpose3d}})
    m.def(name, [name, fn](const Tensor& x, const Tensor& weight, const Tensor& bias, py::handle stride,
                           py::handle padding, py::handle output_padding, int64_t groups, py::handle dilation) {
      return fn(x, weight, bias, conv_transpose_args(stride, padding, output_padding, groups, dilation, name));
    }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
          py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1, py::arg("dilation") = 1);
  m.def("max_pool2d", [](const Tensor& x, const PairArg& kernel, const std::optional<PairArg>& stride,
                         const PairArg& padding, const PairArg& dilation, bool ceil_mode,
                         bool return_indices) -> py::object {
    Pool2dArgs args = pool_args(kernel, stride, padding, dilation, ceil_mode, true);
    if (return_indices) return to_tuple(max_pool2d_with_indices(x, args));
    return py::cast(max_pool2d(x, args));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("ceil_mode") = false, py::arg("return_indices") = false);
  m.def("max_pool2d_with_indices", [](const Tensor& x, const PairArg& kernel, const std::optional<PairArg>& stride,
                                      const PairArg& padding, const PairArg& dilation, bool ceil_mode,
                                      bool return_indices) {
    return to_tuple(max_pool2d_with_indices(x, pool_args(kernel, stride, padding, dilation, ceil_mode, true)));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("ceil_mode") = false, py::arg("return_indices") = true);
  m.def("avg_pool2d", [](const Tensor& x, const PairArg& kernel, const std::optional<PairArg>& stride,
                         const PairArg& padding, bool ceil_mode, bool count_include_pad, py::handle divisor_override) {
    check_unset(divisor_override, "avg_pool2d", "divisor_override", "a division of the result");
    return avg_pool2d(x, pool_args(kernel, stride, padding, PairArg{{1, 1}}, ceil_mode, count_include_pad));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("ceil_mode") = false, py::arg("count_include_pad") = true, py::arg("divisor_override") = py::none());
  m.def("adaptive_avg_pool2d", [](const Tensor& x, const PairArg& output_size) {
    return adaptive_avg_pool2d(x, output_size.values);
  }, py::arg("input"), py::arg("output_size"));
  m.def("adaptive_max_pool2d", [](const Tensor& x, py::handle output_size, bool return_indices) -> py::object {
    TensorList out = adaptive_max_pool2d_with_indices(x, optional_sizes_arg(output_size, "adaptive_max_pool2d"));
    return return_indices ? py::object(to_tuple(out)) : py::cast(out[0]);
  }, py::arg("input"), py::arg("output_size"), py::arg("return_indices") = false);
  m.def("adaptive_max_pool2d_with_indices", [](const Tensor& x, py::handle output_size, bool return_indices) {
    return to_tuple(adaptive_max_pool2d_with_indices(x, optional_sizes_arg(output_size, "adaptive_max_pool2d")));
  }, py::arg("input"), py::arg("output_size"), py::arg("return_indices") = false);
  m.def("adaptive_max_pool1d", [](const Tensor& x, py::handle output_size, bool return_indices) -> py::object {
    TensorList out = adaptive_max_pool1d_with_indices(x, single(output_size, "adaptive_max_pool1d", "output_size"));
    return return_indices ? py::object(to_tuple(out)) : py::cast(out[0]);
  }, py::arg("input"), py::arg("output_size"), py::arg("return_indices") = false);
  m.def("adaptive_max_pool1d_with_indices", [](const Tensor& x, py::handle output_size, bool return_indices) {
    return to_tuple(adaptive_max_pool1d_with_indices(x, single(output_size, "adaptive_max_pool1d", "output_size")));
  }, py::arg("input"), py::arg("output_size"), py::arg("return_indices") = false);
  m.def("max_pool3d", [](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding,
                         py::handle dilation, bool ceil_mode, bool return_indices) -> py::object {
    const Pool3dArgs args = pool3d_args(kernel, stride, padding, dilation, ceil_mode, true, "max_pool3d");
    if (return_indices) return to_tuple(max_pool3d_with_indices(x, args));
    return py::cast(max_pool3d(x, args));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("ceil_mode") = false, py::arg("return_indices") = false);
  m.def("max_pool3d_with_indices", [](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding,
                                      py::handle dilation, bool ceil_mode, bool return_indices) {
    return to_tuple(max_pool3d_with_indices(
        x, pool3d_args(kernel, stride, padding, dilation, ceil_mode, true, "max_pool3d")));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("ceil_mode") = false, py::arg("return_indices") = false);
  m.def("avg_pool3d", [](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding, bool ceil_mode,
                         bool count_include_pad, py::handle divisor_override) {
    check_unset(divisor_override, "avg_pool3d", "divisor_override", "a division of the result");
    return avg_pool3d(x, pool3d_args(kernel, stride, padding, py::int_(1), ceil_mode, count_include_pad,
                                     "avg_pool3d"));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("ceil_mode") = false, py::arg("count_include_pad") = true, py::arg("divisor_override") = py::none());
  m.def("adaptive_avg_pool3d", [](const Tensor& x, py::handle output_size) {
    return adaptive_avg_pool3d(x, optional_sizes_arg(output_size, "adaptive_avg_pool3d"));
  }, py::arg("input"), py::arg("output_size"));
  m.def("conv1d", [](const Tensor& x, const Tensor& weight, const Tensor& bias, py::handle stride,
                     py::handle padding, py::handle dilation, int64_t groups) {
    return conv1d(x, weight, bias, conv1d_args(stride, padding, dilation, groups, "conv1d"));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1);
  m.def("max_pool1d", [](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding,
                         py::handle dilation, bool ceil_mode, bool return_indices) {
    MF_CHECK(!return_indices, ValueError, "max_pool1d: return_indices=True is not supported");
    return max_pool1d(x, pool1d_args(kernel, stride, padding, dilation, ceil_mode, true, "max_pool1d"));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("ceil_mode") = false, py::arg("return_indices") = false);
  m.def("avg_pool1d", [](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding, bool ceil_mode,
                         bool count_include_pad) {
    return avg_pool1d(x, pool1d_args(kernel, stride, padding, py::int_(1), ceil_mode, count_include_pad,
                                     "avg_pool1d"));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("ceil_mode") = false, py::arg("count_include_pad") = true);
  m.def("adaptive_avg_pool1d", [](const Tensor& x, py::handle output_size) {
    return adaptive_avg_pool1d(x, single(output_size, "adaptive_avg_pool1d", "output_size"));
  }, py::arg("input"), py::arg("output_size"));
  m.def("prelu", &prelu, py::arg("input"), py::arg("weight"));
  for (int64_t d : {1, 2, 3}) {
    m.def(("dropout" + std::to_string(d) + "d").c_str(), [d](Tensor x, double p, bool training, bool inplace) {
      return maybe_inplace(x, inplace, [&](const Tensor& input) { return channel_dropout(input, p, training, d); });
    }, py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true, py::arg("inplace") = false);
  }
  m.def("instance_norm", [](const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& weight, const Tensor& bias, bool use_input_stats, double momentum,
                            double eps) {
    return instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, momentum, eps);
  }, py::arg("input"), py::arg("running_mean") = py::none(), py::arg("running_var") = py::none(),
        py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::arg("use_input_stats") = true,
        py::arg("momentum") = 0.1, py::arg("eps") = 1e-5);
  m.def("pixel_shuffle", &pixel_shuffle, py::arg("input"), py::arg("upscale_factor"));
  m.def("pixel_unshuffle", &pixel_unshuffle, py::arg("input"), py::arg("downscale_factor"));
  m.def("mish", [](Tensor x, bool inplace) {
    return maybe_inplace(x, inplace, [](const Tensor& input) { return mish(input); });
  }, py::arg("input"), py::arg("inplace") = false);
  for (auto [name, f] : std::initializer_list<std::pair<const char*, Tensor (*)(const Tensor&)>>{
           {"hardsigmoid", &hardsigmoid}, {"hardswish", &hardswish}, {"selu", &selu}}) {
    m.def(name, [f = f](Tensor x, bool inplace) { return maybe_inplace(x, inplace, f); }, py::arg("input"),
          py::arg("inplace") = false);
  }
  m.def("celu", [](Tensor x, double alpha, bool inplace) {
    return maybe_inplace(x, inplace, [alpha](const Tensor& input) { return celu(input, alpha); });
  }, py::arg("input"), py::arg("alpha") = 1.0, py::arg("inplace") = false);
  m.def("threshold", [](Tensor x, double threshold_, double value, bool inplace) {
    return maybe_inplace(x, inplace, [=](const Tensor& input) { return threshold(input, threshold_, value); });
  }, py::arg("input"), py::arg("threshold"), py::arg("value"), py::arg("inplace") = false);
  m.def("softsign", &softsign, py::arg("input"));
  m.def("tanhshrink", &tanhshrink, py::arg("input"));
  m.def("logsigmoid", &logsigmoid, py::arg("input"));
  m.def("softshrink", &softshrink, py::arg("input"), py::arg("lambd") = 0.5);
  m.def("hardshrink", &hardshrink, py::arg("input"), py::arg("lambd") = 0.5);
  m.def("softmin", [](const Tensor& x, std::optional<int64_t> dim, int, std::optional<DType> dtype) {
    return softmin(cast_if(x, dtype), dim.value_or(mf::nn::implicit_softmax_dim(x.dim())));
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("_stacklevel") = 3, py::arg("dtype") = py::none());
  m.def("linear", &linear, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  m.def("pad", py::overload_cast<const Tensor&, const Shape&, const std::string&, std::optional<double>>(&pad),
        py::arg("input"), py::arg("pad"), py::arg("mode") = "constant", py::arg("value") = py::none());
  m.def("interpolate", [](const Tensor& x, decltype(InterpolateOptions::size) size,
                          decltype(InterpolateOptions::scale_factor) scale_factor, const std::string& mode,
                          std::optional<bool> align_corners, std::optional<bool> recompute_scale_factor,
                          bool antialias) {
    return interpolate(x, {.size = std::move(size), .scale_factor = std::move(scale_factor), .mode = mode,
                           .align_corners = align_corners, .recompute_scale_factor = recompute_scale_factor,
                           .antialias = antialias});
  }, py::arg("input"), py::arg("size") = py::none(), py::arg("scale_factor") = py::none(),
        py::arg("mode") = "nearest", py::arg("align_corners") = py::none(),
        py::arg("recompute_scale_factor") = py::none(), py::arg("antialias") = false);
  m.def("one_hot", &one_hot, py::arg("tensor"), py::arg("num_classes") = -1);

  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(parent.attr("Tensor"));
  cls.def("softmax", [](const Tensor& t, int64_t dim, std::optional<DType> dtype) {
        return softmax(cast_if(t, dtype), dim);
      }, py::arg("dim"), py::arg("dtype") = py::none())
      .def("log_softmax", [](const Tensor& t, int64_t dim, std::optional<DType> dtype) {
        return log_softmax(cast_if(t, dtype), dim);
      }, py::arg("dim"), py::arg("dtype") = py::none());
}

}  // namespace mf::python
