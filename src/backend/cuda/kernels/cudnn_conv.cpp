// Note [cuDNN convolutions]
// The CUDA kernels of the convolution ops (conv2d/3d, conv2d/3d_backward,
// conv_transpose2d/3d) run cuDNN's convolutions where cuDNN opens and can
// express the convolution, and the direct kernels of Note [Device
// convolutions] (conv.cu) elsewhere:
// - the dtype is float16, bfloat16, float32 or float64;
// - every size fits cuDNN's int dims and every tensor has at most 2^31 - 1
//   elements;
// - the output size is the one cuDNN computes with the same padding before
//   and after the input. A convolution whose padding after differs
//   (padding='same' with an odd total, a transposed convolution's
//   output_padding) qualifies when it gives that same size: the windows
//   start at the same positions, and the zeros either side are never read
//   differently.
// A transposed convolution is the backward-data pass of the convolution
// whose adjoint it is (Note [Transposed convolution]). Bias adds and bias
// gradients are the direct kernels' (one pass over the output).
//
// Precision: float32 convolutions use FMA math only (no TF32), as the GEMM
// does; float16/bfloat16 ones use the tensor cores with float accumulation;
// float64 computes in double. The algorithm is the first of cuDNN's
// heuristic ranking (cudnnGet*Algorithm_v7) that supports the convolution,
// keeps to that math, needs at most 1 GiB of workspace, and is deterministic
// where such an algorithm exists, so that training runs repeat bit for bit.
//
// The workspace, and packed copies of operands that are not contiguous or
// not 16-byte aligned, are the kernel's scratch (Note [Kernel scratch]): the ScratchFn and the kernel
// find the same plan (descriptors, algorithm, workspace size), cached per
// device, dtype, pass, sizes and parameters for the life of the process.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/common/scratch.h"
#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/cudnn_api.h"
#include "meshflow/op_def.h"
#include "ops/conv_common.h"

namespace mf::cuda {

// conv.cu
void direct_conv_forward(const TensorList& in, TensorList& out, const Attrs& attrs);
void direct_conv_backward(const TensorList& in, TensorList& out, const Attrs& attrs);
void direct_conv_transpose(const TensorList& in, TensorList& out, const Attrs& attrs);
void add_channel_bias(Tensor& y, const Tensor& bias);
// elementwise.cu
void copy_cast(Tensor& dst, const Tensor& src);

namespace {

enum class Pass : int64_t { Forward, BackwardData, BackwardFilter };

constexpr size_t kMaxWorkspace = size_t(1) << 30;

// One convolution x (N, C, ...) -> y (N, O, ...) by w (O, C / groups, ...),
// all contiguous, and the algorithm of one pass over it.
struct Plan {
  cudnnTensorDescriptor_t x{}, y{};
  cudnnFilterDescriptor_t w{};
  cudnnConvolutionDescriptor_t conv{};
  int algo = 0;
  size_t workspace = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    const CudnnApi& api = cudnn();
    if (x) (void)api.destroy_tensor(x);
    if (y) (void)api.destroy_tensor(y);
    if (w) (void)api.destroy_filter(w);
    if (conv) (void)api.destroy_conv(conv);
  }
};

cudnnDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    default: return CUDNN_DATA_FLOAT;
  }
}

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

bool fits_int(const Shape& sizes) {
  int64_t numel = 1;
  for (int64_t s : sizes) {
    if (s <= 0 || s > kIntMax) return false;
    numel *= s;  // each factor <= numel <= kIntMax: no overflow
    if (numel > kIntMax) return false;
  }
  return true;
}

std::vector<int> ints(const Shape& sizes) { return std::vector<int>(sizes.begin(), sizes.end()); }

std::vector<int> contiguous_ints(const Shape& sizes) { return ints(contiguous_strides(sizes)); }

// Picks the algorithm of a pass from cuDNN's ranking (Note [cuDNN
// convolutions]); false when none qualifies.
template <typename Perf>
bool choose(const Perf* perf, int count, DType dtype, Plan& plan) {
  auto qualifies = [&](const Perf& r) {
    return r.status == CUDNN_STATUS_SUCCESS && r.memory <= kMaxWorkspace &&
           (dtype != DType::Float32 || r.mathType == CUDNN_FMA_MATH);
  };
  for (bool deterministic : {true, false})
    for (int i = 0; i < count; ++i)
      if (qualifies(perf[i]) && (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC)) {
        plan.algo = int(perf[i].algo);
        check_cudnn(cudnn().set_math_type(plan.conv, perf[i].mathType), "cudnnSetConvolutionMathType");
        return true;
      }
  return false;
}

std::unique_ptr<Plan> make_plan(Pass pass, int device, DType dtype, const Shape& x, const Shape& w, const Shape& y,
                                const cpu::ConvParams& p) {
  const CudnnApi& api = cudnn();
  cudnnHandle_t handle = cudnn_handle(device);
  auto plan = std::make_unique<Plan>();
  const cudnnDataType_t type = data_type(dtype);
  const int nd = int(x.size()), spatial = nd - 2;
  check_cudnn(api.create_tensor(&plan->x), "cudnnCreateTensorDescriptor");
  check_cudnn(api.create_tensor(&plan->y), "cudnnCreateTensorDescriptor");
  check_cudnn(api.create_filter(&plan->w), "cudnnCreateFilterDescriptor");
  check_cudnn(api.create_conv(&plan->conv), "cudnnCreateConvolutionDescriptor");
  check_cudnn(api.set_tensor(plan->x, type, nd, ints(x).data(), contiguous_ints(x).data()),
              "cudnnSetTensorNdDescriptor");
  check_cudnn(api.set_tensor(plan->y, type, nd, ints(y).data(), contiguous_ints(y).data()),
              "cudnnSetTensorNdDescriptor");
  check_cudnn(api.set_filter(plan->w, type, CUDNN_TENSOR_NCHW, nd, ints(w).data()), "cudnnSetFilterNdDescriptor");
  std::vector<int> pad, stride, dilation;
  for (int d = 0; d < spatial; ++d) {
    const int at = 3 - spatial + d;
    pad.push_back(int(p.padding[at]));
    stride.push_back(int(p.stride[at]));
    dilation.push_back(int(p.dilation[at]));
  }
  check_cudnn(api.set_conv(plan->conv, spatial, pad.data(), stride.data(), dilation.data(), CUDNN_CROSS_CORRELATION,
                           dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
              "cudnnSetConvolutionNdDescriptor");
  check_cudnn(api.set_group_count(plan->conv, int(p.groups)), "cudnnSetConvolutionGroupCount");
  const cudnnMathType_t math = dtype == DType::Float32   ? CUDNN_FMA_MATH
                               : dtype == DType::Float64 ? CUDNN_DEFAULT_MATH
                                                         : CUDNN_TENSOR_OP_MATH;
  check_cudnn(api.set_math_type(plan->conv, math), "cudnnSetConvolutionMathType");
  // cuDNN must agree with meshflow's output size (plan_of checked the
  // arithmetic; this checks the descriptors say the same).
  std::vector<int> out(static_cast<size_t>(nd));
  check_cudnn(api.forward_output_dim(plan->conv, plan->x, plan->w, nd, out.data()),
              "cudnnGetConvolutionNdForwardOutputDim");
  MF_CHECK(out == ints(y), Error, "conv: cuDNN computes another output size than the op's (internal error)");
  constexpr int kMaxAlgorithms = 16;
  int count = 0;
  switch (pass) {
    case Pass::Forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgorithms];
      check_cudnn(api.forward_algorithms(handle, plan->x, plan->w, plan->conv, plan->y, kMaxAlgorithms, &count, perf),
                  "cudnnGetConvolutionForwardAlgorithm_v7");
      if (!choose(perf, count, dtype, *plan)) return nullptr;
      check_cudnn(api.forward_workspace(handle, plan->x, plan->w, plan->conv, plan->y,
                                        cudnnConvolutionFwdAlgo_t(plan->algo), &plan->workspace),
                  "cudnnGetConvolutionForwardWorkspaceSize");
      break;
    }
    case Pass::BackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgorithms];
      check_cudnn(api.backward_data_algorithms(handle, plan->w, plan->y, plan->conv, plan->x, kMaxAlgorithms, &count,
                                               perf),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      if (!choose(perf, count, dtype, *plan)) return nullptr;
      check_cudnn(api.backward_data_workspace(handle, plan->w, plan->y, plan->conv, plan->x,
                                              cudnnConvolutionBwdDataAlgo_t(plan->algo), &plan->workspace),
                  "cudnnGetConvolutionBackwardDataWorkspaceSize");
      break;
    }
    case Pass::BackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgorithms];
      check_cudnn(api.backward_filter_algorithms(handle, plan->x, plan->y, plan->conv, plan->w, kMaxAlgorithms,
                                                 &count, perf),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      if (!choose(perf, count, dtype, *plan)) return nullptr;
      check_cudnn(api.backward_filter_workspace(handle, plan->x, plan->y, plan->conv, plan->w,
                                                cudnnConvolutionBwdFilterAlgo_t(plan->algo), &plan->workspace),
                  "cudnnGetConvolutionBackwardFilterWorkspaceSize");
      break;
    }
  }
  return plan;
}

// The plan of a pass over the convolution x -> y by w with parameters p,
// or nullptr where cuDNN does not run it (Note [cuDNN convolutions]).
const Plan* plan_of(Pass pass, const Device& device, DType dtype, const Shape& x, const Shape& w, const Shape& y,
                    const cpu::ConvParams& p) {
  if (!is_floating(dtype) || !fits_int(x) || !fits_int(w) || !fits_int(y) || p.groups > kIntMax ||
      !cudnn_available())
    return nullptr;
  const size_t spatial = x.size() - 2;
  for (size_t d = 0; d < spatial; ++d) {
    const size_t at = 3 - spatial + d;
    if (p.padding[at] > kIntMax || p.stride[at] > kIntMax || p.dilation[at] > kIntMax) return nullptr;
    // Each term fits int, so none of this overflows int64.
    const int64_t span = x[2 + d] + 2 * p.padding[at] - p.dilation[at] * (w[2 + d] - 1) - 1;
    if (span < 0 || span / p.stride[at] + 1 != y[2 + d]) return nullptr;
  }
  std::vector<int64_t> key{int64_t(pass), device.index(), int64_t(dtype), p.groups};
  for (const Shape* s : {&x, &w, &y}) key.insert(key.end(), s->begin(), s->end());
  for (size_t at = 3 - spatial; at < 3; ++at) {
    key.push_back(p.padding[at]);
    key.push_back(p.stride[at]);
    key.push_back(p.dilation[at]);
  }
  static std::mutex mutex;
  // Never destroyed: plans live as long as the process (and cuDNN).
  static auto& plans = *new std::map<std::vector<int64_t>, std::unique_ptr<Plan>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(std::move(key), make_plan(pass, device.index(), dtype, x, w, y, p)).first;
  return it->second.get();
}

// cuDNN reads operands packed, from 16-byte aligned addresses (its
// vectorised and tensor-core kernels need them; the caching allocator's
// blocks are aligned, a view starting inside one may not be).
bool needs_copy(const Tensor& t) {
  return !t.is_contiguous() || (t.storage_offset() * int64_t(t.element_size())) % 16 != 0;
}

ScratchLayout& add_operand(ScratchLayout& layout, const Tensor& t) {
  if (needs_copy(t)) layout.add(t.sizes(), t.dtype());
  return layout;
}

// t, or a packed copy of it in the scratch (sized by add_operand).
Tensor dense(const Tensor& t, Scratch& taken) {
  if (!needs_copy(t)) return t;
  Tensor c = taken.take(t.sizes(), t.dtype());
  copy_cast(c, t);
  return c;
}

Tensor workspace(const Plan& plan, Scratch& taken) { return taken.take({int64_t(plan.workspace)}, DType::UInt8); }

// alpha = 1 and beta = 0 in the type cuDNN scales by (double for float64).
struct Scale {
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool wide;
  explicit Scale(DType dtype) : wide(dtype == DType::Float64) {}
  const void* one() const { return wide ? static_cast<const void*>(&one64) : &one32; }
  const void* zero() const { return wide ? static_cast<const void*>(&zero64) : &zero32; }
};

void* data(const Tensor& t) { return t.data_ptr(); }

void check_output(const Tensor& t) {
  MF_CHECK(!needs_copy(t), Error, "conv: expected a contiguous, 16-byte aligned output (internal error)");
}

// y = conv(x, w): the forward pass.
void run_forward(const Plan& plan, const Tensor& x, const Tensor& w, Tensor& y, Tensor& space) {
  check_output(y);
  const Scale s(y.dtype());
  check_cudnn(cudnn().forward(cudnn_handle(y.device().index()), s.one(), plan.x, data(x), plan.w, data(w),
                              plan.conv, cudnnConvolutionFwdAlgo_t(plan.algo), data(space), plan.workspace,
                              s.zero(), plan.y, data(y)),
              "cudnnConvolutionForward");
}

// gx = the adjoint of conv(., w) applied to gy: the backward-data pass.
void run_backward_data(const Plan& plan, const Tensor& gy, const Tensor& w, Tensor& gx, Tensor& space) {
  check_output(gx);
  const Scale s(gx.dtype());
  check_cudnn(cudnn().backward_data(cudnn_handle(gx.device().index()), s.one(), plan.w, data(w), plan.y, data(gy),
                                    plan.conv, cudnnConvolutionBwdDataAlgo_t(plan.algo), data(space), plan.workspace,
                                    s.zero(), plan.x, data(gx)),
              "cudnnConvolutionBackwardData");
}

void run_backward_filter(const Plan& plan, const Tensor& gy, const Tensor& x, Tensor& gw, Tensor& space) {
  check_output(gw);
  const Scale s(gw.dtype());
  check_cudnn(cudnn().backward_filter(cudnn_handle(gw.device().index()), s.one(), plan.x, data(x), plan.y, data(gy),
                                      plan.conv, cudnnConvolutionBwdFilterAlgo_t(plan.algo), data(space),
                                      plan.workspace, s.zero(), plan.w, data(gw)),
              "cudnnConvolutionBackwardFilter");
}

// --- conv2d/3d and conv_transpose2d/3d: inputs (x, w, bias), output y ---
// One cuDNN pass, then the bias: the forward pass, or for a transposed
// convolution the backward-data pass of the convolution y-shape -> x-shape.

template <bool kTransposed>
const Plan* single_plan(const TensorList& in, const Shape& y, const Attrs& attrs) {
  if constexpr (kTransposed)
    return plan_of(Pass::BackwardData, in[0].device(), in[0].dtype(), y, in[1].sizes(), in[0].sizes(),
                   conv_detail::params_of(conv_detail::adjoint_conv_attrs(attrs, "conv_transpose")));
  else
    return plan_of(Pass::Forward, in[0].device(), in[0].dtype(), in[0].sizes(), in[1].sizes(), y,
                   conv_detail::params_of(attrs));
}

template <bool kTransposed>
void single_pass(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const Plan* plan = y.numel() == 0 ? nullptr : single_plan<kTransposed>(in, y.sizes(), attrs);
  if (!plan) return kTransposed ? direct_conv_transpose(in, out, attrs) : direct_conv_forward(in, out, attrs);
  Scratch taken(out);
  const Tensor x = dense(in[0], taken), w = dense(in[1], taken);
  Tensor space = workspace(*plan, taken);
  if constexpr (kTransposed) run_backward_data(*plan, x, w, y, space);
  else run_forward(*plan, x, w, y, space);
  if (in[2].defined()) add_channel_bias(y, in[2]);
}

template <bool kTransposed>
int64_t single_pass_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const Plan* plan = single_plan<kTransposed>(in, out[0].sizes, attrs);
  if (!plan) return 0;
  ScratchLayout layout("conv");
  add_operand(layout, in[0]);
  add_operand(layout, in[1]);
  return layout.add_bytes(int64_t(plan->workspace)).bytes();
}

// --- conv2d_backward / conv3d_backward: inputs (gy, x, w), outputs (gx, gw, gb) by output_mask ---

struct BackwardPlans {
  const Plan* data = nullptr;    // when gx is asked for
  const Plan* filter = nullptr;  // when gw is asked for
  bool usable = false;           // cuDNN runs every pass asked for
  size_t workspace() const {
    return std::max(data ? data->workspace : 0, filter ? filter->workspace : 0);
  }
};

BackwardPlans backward_plans(const TensorList& in, const Attrs& attrs) {
  const Tensor &gy = in[0], &x = in[1], &w = in[2];
  const Shape& mask = attrs.get_shape("output_mask");
  BackwardPlans plans;
  if (gy.numel() == 0 || (!mask[0] && !mask[1])) return plans;
  const cpu::ConvParams p = conv_detail::params_of(attrs);
  if (mask[0]) plans.data = plan_of(Pass::BackwardData, gy.device(), gy.dtype(), x.sizes(), w.sizes(), gy.sizes(), p);
  if (mask[1])
    plans.filter = plan_of(Pass::BackwardFilter, gy.device(), gy.dtype(), x.sizes(), w.sizes(), gy.sizes(), p);
  plans.usable = (!mask[0] || plans.data) && (!mask[1] || plans.filter);
  return plans;
}

void backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const BackwardPlans plans = backward_plans(in, attrs);
  if (!plans.usable) return direct_conv_backward(in, out, attrs);
  const Shape& mask = attrs.get_shape("output_mask");
  Scratch taken(out);
  const Tensor gy = dense(in[0], taken);
  const Tensor x = mask[1] ? dense(in[1], taken) : Tensor();
  const Tensor w = mask[0] ? dense(in[2], taken) : Tensor();
  Tensor space = taken.take({int64_t(plans.workspace())}, DType::UInt8);
  if (mask[0]) run_backward_data(*plans.data, gy, w, out[0], space);
  if (mask[1]) run_backward_filter(*plans.filter, gy, x, out[1], space);
  if (mask[2]) {
    Attrs bias_only = attrs;
    bias_only.set("output_mask", Shape{0, 0, 1});
    direct_conv_backward(in, out, bias_only);
  }
}

int64_t backward_scratch(const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
  const BackwardPlans plans = backward_plans(in, attrs);
  if (!plans.usable) return 0;
  const Shape& mask = attrs.get_shape("output_mask");
  ScratchLayout layout("conv_backward");
  add_operand(layout, in[0]);
  if (mask[1]) add_operand(layout, in[1]);
  if (mask[0]) add_operand(layout, in[2]);
  return layout.add_bytes(int64_t(plans.workspace())).bytes();
}

[[maybe_unused]] const bool kRegistered = [] {
  auto& registry = OpRegistry::instance();
  for (const char* op : {"conv2d", "conv3d"})
    registry.set_kernel(op, DeviceType::CUDA, single_pass<false>, single_pass_scratch<false>);
  for (const char* op : {"conv2d_backward", "conv3d_backward"})
    registry.set_kernel(op, DeviceType::CUDA, backward, backward_scratch);
  for (const char* op : {"conv_transpose2d", "conv_transpose3d"})
    registry.set_kernel(op, DeviceType::CUDA, single_pass<true>, single_pass_scratch<true>);
  return true;
}();

}  // namespace
}  // namespace mf::cuda
