// Convolution entry points and the oneDNN path. Primitives are built with
// format `any`, so oneDNN picks its fastest (usually blocked) layouts;
// meshflow's NCHW tensors are reordered into and out of them, and a reorder
// is skipped when oneDNN's layout is the tensor's own. Primitives and
// reorders are cached per shape (Note [oneDNN primitive cache]).
#include <cstring>

#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/conv_internal.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/loops.h"
#include "backend/cpu/kernels/onednn.h"

namespace mf::cpu {
namespace {

using dnnl::memory;
namespace onednn = cpu::onednn;

// oneDNN's dims for weights: (G, O/G, C/G, [KD,] KH, KW) when grouped.
Shape weights_dims(const Shape& w, int64_t groups) {
  if (groups == 1) return w;
  Shape dims{groups, w[0] / groups};
  dims.insert(dims.end(), w.begin() + 1, w.end());
  return dims;
}

// A user tensor's memory for the weights, grouped as oneDNN expects.
memory weights_memory(const Tensor& w, int64_t groups) {
  if (groups == 1) return onednn::memory_of(w);
  Shape strides{w.stride(0) * (w.size(0) / groups)};
  for (int64_t d = 0; d < w.dim(); ++d) strides.push_back(w.stride(d));
  Tensor grouped = make_view(w, weights_dims(w.sizes(), groups), strides, w.storage_offset());
  return onednn::memory_of(grouped);
}

struct Problem {
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, padding_l, padding_r;
};

Problem problem_of(const Shape& x, const Shape& w, const Shape& y, DType dtype, const ConvParams& p) {
  const auto type = onednn::data_type(dtype);
  auto any = [&](const Shape& s) {
    return memory::desc(memory::dims(s.begin(), s.end()), type, memory::format_tag::any);
  };
  Problem out{any(x), any(weights_dims(w, p.groups)), any({w[0]}), any(y), {}, {}, {}, {}};
  for (int64_t d = 3 - p.spatial; d < 3; ++d) {
    out.strides.push_back(p.stride[d]);
    out.dilates.push_back(p.dilation[d] - 1);
    out.padding_l.push_back(p.padding[d]);
    out.padding_r.push_back(p.padding_end[d]);
  }
  return out;
}

std::vector<int64_t> problem_key(int kind, const Shape& x, const Shape& w, DType dtype, const ConvParams& p,
                                 bool bias) {
  std::vector<int64_t> key{kind, int64_t(dtype), bias};
  key.insert(key.end(), x.begin(), x.end());
  key.insert(key.end(), w.begin(), w.end());
  for (int i = 0; i < 3; ++i) key.insert(key.end(), {p.stride[i], p.padding[i], p.padding_end[i], p.dilation[i]});
  key.push_back(p.groups);
  return key;
}

template <typename Pd, typename Prim>
struct Entry {
  using Primitive = Prim;
  bool ok = false;  // false: oneDNN has no implementation
  Pd pd;
  Prim primitive;
};
using Forward = Entry<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>;
using BackwardData = Entry<dnnl::convolution_backward_data::primitive_desc, dnnl::convolution_backward_data>;
using BackwardWeights =
    Entry<dnnl::convolution_backward_weights::primitive_desc, dnnl::convolution_backward_weights>;

// Builds an entry, or a not-ok one when oneDNN rejects the problem.
template <typename E, typename Build>
E try_build(const Build& build) {
  try {
    auto pd = build();
    return E{true, pd, typename E::Primitive(pd)};
  } catch (const dnnl::error&) {
    return E{};
  }
}

Forward forward_entry(const Shape& x, const Shape& w, const Shape& y, DType dtype, const ConvParams& p, bool bias) {
  static onednn::PrimitiveCache<Forward> cache;
  return cache.get(problem_key(0, x, w, dtype, p, bias), [&] {
    return try_build<Forward>([&] {
      const Problem d = problem_of(x, w, y, dtype, p);
      const auto kind = dnnl::prop_kind::forward_training;
      const auto algo = dnnl::algorithm::convolution_direct;
      auto desc = bias ? dnnl::convolution_forward::desc(kind, algo, d.src, d.weights, d.bias, d.dst, d.strides,
                                                         d.dilates, d.padding_l, d.padding_r)
                       : dnnl::convolution_forward::desc(kind, algo, d.src, d.weights, d.dst, d.strides, d.dilates,
                                                         d.padding_l, d.padding_r);
      return dnnl::convolution_forward::primitive_desc(desc, onednn::default_attr(), onednn::engine());
    });
  });
}

BackwardData backward_data_entry(const Shape& x, const Shape& w, const Shape& y, DType dtype, const ConvParams& p,
                                 const Forward& hint) {
  static onednn::PrimitiveCache<BackwardData> cache;
  return cache.get(problem_key(1, x, w, dtype, p, false), [&] {
    return try_build<BackwardData>([&] {
      const Problem d = problem_of(x, w, y, dtype, p);
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
                                                 d.strides, d.dilates, d.padding_l, d.padding_r);
      return dnnl::convolution_backward_data::primitive_desc(desc, onednn::default_attr(), onednn::engine(),
                                                             hint.pd);
    });
  });
}

BackwardWeights backward_weights_entry(const Shape& x, const Shape& w, const Shape& y, DType dtype,
                                       const ConvParams& p, const Forward& hint) {
  static onednn::PrimitiveCache<BackwardWeights> cache;
  return cache.get(problem_key(2, x, w, dtype, p, false), [&] {
    return try_build<BackwardWeights>([&] {
      const Problem d = problem_of(x, w, y, dtype, p);
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
                                                    d.strides, d.dilates, d.padding_l, d.padding_r);
      return dnnl::convolution_backward_weights::primitive_desc(desc, onednn::default_attr(), onednn::engine(),
                                                                hint.pd);
    });
  });
}

// Runs prim writing `user` (a contiguous output): directly when oneDNN's
// layout `desc` is the user's, else into a piece of ws reordered afterwards.
template <typename Run>
void write_output(const memory& user, const memory::desc& desc, Workspace& ws, const Run& run) {
  if (user.get_desc() == desc) {
    run(user);
    return;
  }
  memory out = onednn::scratch_memory(desc, ws);
  run(out);
  onednn::reorder(out, user, ws);
}

// t, or a contiguous copy in ws when a dim is broadcast (oneDNN rejects
// stride 0).
Tensor without_zero_strides(const Tensor& t, Workspace& ws) {
  if (!t.defined()) return t;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) return dense(t, ws);
  return t;
}

bool onednn_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, Tensor& y, const ConvParams& p,
                    Workspace& ws) {
  const Forward e = forward_entry(x_in.sizes(), w_in.sizes(), y.sizes(), y.dtype(), p, bias_in.defined());
  if (!e.ok) return false;
  const Tensor x = without_zero_strides(x_in, ws), w = without_zero_strides(w_in, ws);
  const Tensor bias = without_zero_strides(bias_in, ws);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, onednn::in_layout(onednn::memory_of(x), e.pd.src_desc(), ws)},
      {DNNL_ARG_WEIGHTS, onednn::in_layout(weights_memory(w, p.groups), e.pd.weights_desc(), ws)}};
  if (bias.defined()) args[DNNL_ARG_BIAS] = onednn::in_layout(onednn::memory_of(bias), e.pd.bias_desc(), ws);
  write_output(onednn::memory_of(y), e.pd.dst_desc(), ws, [&](const memory& dst) {
    args[DNNL_ARG_DST] = dst;
    onednn::execute(e.primitive, e.pd.scratchpad_desc(), args, ws);
  });
  return true;
}

bool onednn_backward(const Tensor& gy_in, const Tensor& x_in, const Shape& x_shape, const Tensor& w_in, Tensor* gx,
                     Tensor* gw, const ConvParams& p, Workspace& ws) {
  const DType dtype = gy_in.dtype();
  const Forward hint = forward_entry(x_shape, w_in.sizes(), gy_in.sizes(), dtype, p, false);
  if (!hint.ok) return false;
  BackwardData data;
  BackwardWeights weights;
  if (gx && !(data = backward_data_entry(x_shape, w_in.sizes(), gy_in.sizes(), dtype, p, hint)).ok) return false;
  if (gw && !(weights = backward_weights_entry(x_shape, w_in.sizes(), gy_in.sizes(), dtype, p, hint)).ok)
    return false;
  const Tensor gy = without_zero_strides(gy_in, ws), x = without_zero_strides(x_in, ws);
  const Tensor w = without_zero_strides(w_in, ws);
  const memory user_gy = onednn::memory_of(gy);
  memory diff_dst;
  if (gx) {
    diff_dst = onednn::in_layout(user_gy, data.pd.diff_dst_desc(), ws);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, diff_dst},
        {DNNL_ARG_WEIGHTS, onednn::in_layout(weights_memory(w, p.groups), data.pd.weights_desc(), ws)}};
    write_output(onednn::memory_of(*gx), data.pd.diff_src_desc(), ws, [&](const memory& out) {
      args[DNNL_ARG_DIFF_SRC] = out;
      onednn::execute(data.primitive, data.pd.scratchpad_desc(), args, ws);
    });
  }
  if (gw) {
    // Both directions usually want diff_dst in the same layout: reorder once.
    if (!gx || diff_dst.get_desc() != weights.pd.diff_dst_desc())
      diff_dst = onednn::in_layout(user_gy, weights.pd.diff_dst_desc(), ws);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, diff_dst},
        {DNNL_ARG_SRC, onednn::in_layout(onednn::memory_of(x), weights.pd.src_desc(), ws)}};
    write_output(weights_memory(*gw, p.groups), weights.pd.diff_weights_desc(), ws, [&](const memory& out) {
      args[DNNL_ARG_DIFF_WEIGHTS] = out;
      onednn::execute(weights.primitive, weights.pd.scratchpad_desc(), args, ws);
    });
  }
  return true;
}

// Output sizes (pixels per channel) up to which the bfloat16 weight
// gradient runs as a GEMM rather than through oneDNN's convolution kernel.
constexpr int64_t kGemmWeightGradPixels = 256;

void fill_zero(Tensor& t) {
  if (t.numel() > 0) std::memset(t.data_ptr(), 0, size_t(t.numel()) * t.element_size());
}

// Elements per channel of an (N, C, spatial...) tensor.
int64_t pixels_of(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 2; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

// bias (O) as a view broadcast over y's shape (N, O, spatial...).
Tensor bias_view(const Tensor& bias, const Tensor& y) {
  Shape strides(size_t(y.dim()), 0);
  strides[1] = bias.stride(0);
  return make_view(bias, y.sizes(), strides, bias.storage_offset());
}

// grad_bias[o] = sum of grad_y over (n, spatial...).
void bias_grad(const Tensor& gy_in, Tensor& gb, Workspace& ws) {
  const Tensor gy = dense(gy_in, ws);
  if (ws.measuring()) return;
  const int64_t n = gy.size(0), o = gy.size(1), pixels = pixels_of(gy);
  dispatch_floating(gy.dtype(), "conv", [&]<typename T>() {
    const T* src = gy.data<T>();
    T* dst = gb.data<T>();
    parallel_for(0, o, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* plane = src + (i * o + c) * pixels;
          acc_type<T> part = 0;
          for (int64_t j = 0; j < pixels; ++j) part += acc_type<T>(plane[j]);
          acc += double(part);
        }
        dst[c] = T(acc_type<T>(acc));
      }
    });
  });
}

// y (N, O, spatial...) += bias (O), y contiguous.
void add_bias(Tensor& y, const Tensor& bias_in, Workspace& ws) {
  const Tensor bias = dense(bias_in, ws);
  if (ws.measuring()) return;
  const int64_t channels = y.size(1), pixels = pixels_of(y);
  dispatch_floating(y.dtype(), "conv", [&]<typename T>() {
    const T* b = bias.data<T>();
    T* dst = y.data<T>();
    parallel_for(0, y.size(0) * channels, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(pixels, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t plane = lo; plane < hi; ++plane) {
                     const acc_type<T> v = acc_type<T>(b[plane % channels]);
                     T* out = dst + plane * pixels;
                     for (int64_t i = 0; i < pixels; ++i) out[i] = T(acc_type<T>(out[i]) + v);
                   }
                 });
  });
}

// Input and weight gradients (grad_bias is separate): the bfloat16 weight
// gradient of small images as a GEMM, then oneDNN, then im2col.
void data_and_weight_grads(const Tensor& grad_y, const Tensor& x, const Shape& x_shape, const Tensor& w,
                           Tensor* grad_x, Tensor* grad_w, const ConvParams& p, Workspace& ws) {
  if (!grad_x && !grad_w) return;
  if (grad_y.numel() == 0 || shape_numel(x_shape) == 0 || w.numel() == 0) {
    if (ws.measuring()) return;
    if (grad_x) fill_zero(*grad_x);
    if (grad_w) fill_zero(*grad_w);
    return;
  }
  // Small images: the bfloat16 weight gradient as one GEMM (Note [bfloat16
  // weight gradient by GEMM] in conv_im2col.cpp).
  if (grad_w && grad_y.dtype() == DType::BFloat16 && pixels_of(grad_y) <= kGemmWeightGradPixels &&
      gemm_conv_weight_grad(grad_y, x, *grad_w, p, ws)) {
    grad_w = nullptr;
    if (!grad_x) return;
  }
  if (grad_y.dtype() != DType::Float64 && onednn_backward(grad_y, x, x_shape, w, grad_x, grad_w, p, ws)) return;
  im2col_conv_backward(grad_y, x, x_shape, w, grad_x, grad_w, p, ws);
}

}  // namespace

namespace {

// A 2-d input plane smaller than the kernel (the padding reaches across it).
bool plane_smaller_than_kernel(const Shape& x, const Tensor& w, const ConvParams& p) {
  return p.spatial == 2 && x.size() == 4 && w.dim() == 4 && (x[2] < w.size(2) || x[3] < w.size(3));
}

}  // namespace

void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p,
                  Workspace& ws) {
  if (y.numel() == 0) return;
  if (x.numel() == 0 || w.numel() == 0) {
    if (ws.measuring()) return;
    // No input channels: the output is the bias alone.
    if (bias.defined()) copy_cast(y, bias_view(bias, y));
    else fill_zero(y);
    return;
  }
  // Note [Depthwise convolution]: oneDNN's forward unless the dtype has
  // no oneDNN path or the padding reaches across the whole input.
  const bool pad_spans_input =
      p.spatial == 2 && x.dim() == 4 && (p.padding[1] >= x.size(2) || p.padding[2] >= x.size(3));
  if ((y.dtype() == DType::Float64 || pad_spans_input) && depthwise_conv_forward(x, w, bias, y, p, ws)) return;
  if (y.dtype() != DType::Float64 && onednn_forward(x, w, bias, y, p, ws)) return;
  im2col_conv_forward(x, w, bias, y, p, ws);
}

void conv_backward(const Tensor& grad_y, const Tensor& x, const Tensor& w, Tensor* grad_x, Tensor* grad_w,
                   Tensor* grad_bias, const ConvParams& p, Workspace& ws) {
  if (grad_bias) bias_grad(grad_y, *grad_bias, ws);
  const Shape x_shape = grad_x ? grad_x->sizes() : x.sizes();
  // Note [Depthwise convolution]: oneDNN's backward only for 3x3 kernels
  // on planes at least as large.
  const bool onednn_kernel = w.dim() == 4 && w.size(2) == 3 && w.size(3) == 3 &&
                             !plane_smaller_than_kernel(x_shape, w, p) && grad_y.dtype() != DType::Float64;
  if (!onednn_kernel && depthwise_conv_backward(grad_y, x, x_shape, w, grad_x, grad_w, p, ws)) return;
  data_and_weight_grads(grad_y, x, x_shape, w, grad_x, grad_w, p, ws);
}

void conv_transpose_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvParams& p,
                            Workspace& ws) {
  if (y.numel() == 0) return;
  data_and_weight_grads(x, Tensor(), y.sizes(), w, &y, nullptr, p, ws);
  if (bias.defined()) add_bias(y, bias, ws);
}

}  // namespace mf::cpu
