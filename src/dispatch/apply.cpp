// dispatch::apply: the one door. See Note [Dispatch layers] in dispatch.h.
#include "meshflow/dispatch.h"

#include "autograd/op_node.h"
#include "distributed/global_interpreter.h"
#include "meshflow/autocast.h"
#include "meshflow/backend.h"
#include "meshflow/graph/trace.h"
#include "meshflow/ops/shape.h"
#include "meshflow/profiler.h"

namespace mf::dispatch {

const OpDef& op(std::string_view name) { return OpRegistry::instance().get(name); }

std::vector<TensorMeta> infer(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  std::vector<TensorMeta> metas = op.infer(inputs, attrs);
  for (const TensorMeta& m : metas) checked_nbytes(m.sizes, m.dtype, op.name);
  return metas;
}

namespace {

void check_inputs(const OpDef& op, const TensorList& inputs) {
  MF_CHECK(op.variadic || inputs.size() == op.inputs.size(), Error, op.name, ": expected ",
           op.inputs.size(), " inputs, got ", inputs.size());
  const Tensor* first = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    if (!first) {
      first = &inputs[i];
      continue;
    }
    MF_CHECK(inputs[i].device() == first->device(), Error, op.name,
             ": expected all tensors on the same device, got ", first->device(), " and ",
             inputs[i].device(), " (input ", i, ")");
  }
}

bool needs_grad(const OpDef& op, const TensorList& inputs) {
  if (!op.differentiable || !GradMode::is_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool has_data(const TensorList& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && !t.storage()->has_data()) return false;
  return true;
}

Device pick_device(const TensorList& inputs, const std::vector<TensorMeta>& metas) {
  for (const auto& t : inputs)
    if (t.defined()) return t.device();
  return metas.empty() ? Device() : metas[0].device;
}

// An op without a kernel for `device`: first whether the device can be used
// at all (its backend built, a device present), then the op.
[[noreturn]] void throw_no_kernel(const OpDef& op, Device device) {
  if (!device.is_cpu()) check_device(device, op.name.c_str());
  throw Error(detail::concat(op.name, ": no kernel for device ", device, " (meshflow.ops.coverage() lists the ops ",
                             "each device lacks)"));
}

// Runs the kernel with the scratch it asks for, from the device's caching
// allocator for this call alone (Note [Kernel scratch]).
void run_kernel(const OpDef& op, const KernelFn& kernel, Device device, const TensorList& inputs,
                TensorList& outputs, const std::vector<TensorMeta>& metas, const Attrs& attrs) {
  const ScratchFn& scratch = op.scratch[size_t(device.type())];
  if (!scratch) return kernel(inputs, outputs, attrs);
  const int64_t bytes = scratch(inputs, metas, attrs);
  // On the CPU an empty buffer (most calls of the reductions, which take
  // scratch only for pathological layouts) is the same tensor every time.
  static const Tensor no_cpu_scratch = make_empty({0}, DType::UInt8);
  outputs.push_back(bytes == 0 && device.is_cpu() ? no_cpu_scratch : make_empty({bytes}, DType::UInt8, device));
  kernel(inputs, outputs, attrs);
  outputs.pop_back();
}

// The local eager interpreter: runs the kernel of the inputs' device (or
// the view function), or only infers metadata for traced tensors.
TensorList interpret(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  if (op.view) {
    TensorList outs = op.view(inputs, attrs);
    for (auto& t : outs) t.impl()->set_is_view(true);
    return outs;
  }
  std::vector<TensorMeta> metas = infer(op, inputs, attrs);
  TensorList outputs;
  outputs.reserve(metas.size());
  if (!has_data(inputs)) {
    for (const auto& m : metas) outputs.push_back(make_meta(m.sizes, m.dtype, m.device));
    return outputs;
  }
  Device device = pick_device(inputs, metas);
  const KernelFn& kernel = op.kernels[size_t(device.type())];
  if (!kernel) [[unlikely]]
    throw_no_kernel(op, device);
  for (const auto& m : metas) outputs.push_back(make_empty(m.sizes, m.dtype, m.device));
  run_kernel(op, kernel, device, inputs, outputs, metas, attrs);
  return outputs;
}

// The inputs an op's kernel wrote besides an in-place call's input 0
// (OpDef::mutates) get a new version.
void bump_written(const OpDef& op, const TensorList& inputs) {
  for (uint32_t bits = op.mutates, i = 0; bits != 0 && i < inputs.size(); bits >>= 1, ++i)
    if ((bits & 1u) && inputs[i].defined()) inputs[i].bump_version();
}

bool any_global(const TensorList& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.is_global()) return true;
  return false;
}

thread_local CallRecorder* recorder = nullptr;

void record_call(const OpDef& op, const TensorList& inputs, const Attrs& attrs, bool inplace) {
  if (any_global(inputs)) return;
  CallRecorder* r = recorder;
  recorder = nullptr;  // the copies below are not calls of the program
  RecordedCall call{&op, {}, attrs, inplace};
  {
    NoGradGuard no_grad;
    for (const Tensor& t : inputs)
      call.inputs.push_back(t.defined() && t.storage()->has_data() ? clone(t.detach()) : t);
  }
  recorder = r;
  r->calls.push_back(std::move(call));
}

}  // namespace

// An op span's input shapes (Note [Profiler]).
static void record_input_shapes(profiler::Span& span, const TensorList& inputs) {
  for (const Tensor& t : inputs)
    span.event().shapes.push_back(t.defined() ? std::vector<int64_t>(t.sizes().begin(), t.sizes().end())
                                              : std::vector<int64_t>{});
}

CallRecorder::CallRecorder() : prev_(recorder) { recorder = this; }
CallRecorder::~CallRecorder() { recorder = prev_; }

namespace {

// The layers below autocast: autograd, then the lazy, global or local
// interpreter.
TensorList apply_below_autocast(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  check_inputs(op, inputs);
  if (recorder) record_call(op, inputs, attrs, false);
  // A global op is interpreted globally whether or not a trace is active:
  // while tracing, its boxing and local op reach the tracer as local ops
  // (Note [Tracing global ops] in graph/trace.h).
  TensorList outputs;
  graph::Tracer* tracer = graph::current_tracer();
  if (any_global(inputs)) {
    if (tracer) tracer->enter_global(op, inputs);
    outputs = distributed::interpret_global(op, inputs, attrs);
    if (tracer) tracer->leave_global(outputs);
  } else if (tracer) {
    outputs = tracer->record(op, inputs, attrs);
  } else {
    outputs = interpret(op, inputs, attrs);
  }
  bump_written(op, inputs);
  if (needs_grad(op, inputs)) {
    auto node = std::make_shared<OpNode>(op, attrs);
    node->record_inputs(inputs);
    node->record_outputs(outputs);
  }
  return outputs;
}

}  // namespace

TensorList apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  profiler::Span span("op", op.name.c_str());
  if (span.on() && profiler::record_shapes()) [[unlikely]]
    record_input_shapes(span, inputs);
  if (autocast::any_enabled() && op.autocast != AutocastPolicy::Follow) [[unlikely]] {
    TensorList cast = autocast::cast_inputs(op, inputs);
    return apply_below_autocast(op, cast, attrs);
  }
  return apply_below_autocast(op, inputs, attrs);
}

Tensor apply_one(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  TensorList outs = apply(op, inputs, attrs);
  MF_CHECK(outs.size() == 1, Error, "internal: ", op.name, " returned ", outs.size(), " outputs, expected 1");
  return std::move(outs[0]);
}

Tensor apply_inplace(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  profiler::Span span("op", [&] { return op.name + "_"; }, 0);
  if (span.on() && profiler::record_shapes()) [[unlikely]]
    record_input_shapes(span, inputs);
  check_inputs(op, inputs);
  MF_CHECK(op.inplace, Error, op.name, ": has no in-place form");
  MF_CHECK(!inputs.empty() && inputs[0].defined(), Error, op.name, "_: the tensor to write is undefined");
  if (recorder) record_call(op, inputs, attrs, true);
  const Tensor& self = inputs[0];
  const bool grad = needs_grad(op, inputs);
  const bool global = any_global(inputs);
  // As PyTorch: a write through a view whose elements share memory (an
  // expanded dim, stride 0) would race and give an order-dependent result.
  if (!self.is_global() && self.numel() > 1)
    for (int64_t d = 0; d < self.dim(); ++d)
      MF_CHECK(self.stride(d) != 0 || self.size(d) <= 1, ValueError, op.name,
               "_: unsupported operation: more than one element of the written-to tensor refers to a single "
               "memory location (dim ", d, " has stride 0). Please clone() the tensor before performing the "
               "operation.");
  if (grad) {
    MF_CHECK(!(self.is_leaf() && self.requires_grad()), Error, op.name,
             "_: a leaf tensor that requires grad is being used in an in-place operation");
    MF_CHECK(!self.impl()->is_view(), Error, op.name,
             "_: in-place operations on views are not differentiable in meshflow yet; use the out-of-place ",
             op.name, " (or clone() the view first)");
  }
  // Global inputs are checked at their global shapes.
  TensorList checked = inputs;
  if (global) {
    for (Tensor& t : checked)
      if (t.defined() && t.is_global()) t = make_meta(t.shape(), t.dtype(), t.device());
  }
  std::vector<TensorMeta> metas = infer(op, checked, attrs);
  MF_CHECK(metas.size() == 1 && metas[0].sizes == self.sizes(), ShapeError, op.name,
           "_: output with shape ", shape_str(self.sizes()), " doesn't match the broadcast shape ",
           shape_str(metas.empty() ? Shape{} : metas[0].sizes));
  MF_CHECK(metas[0].dtype == self.dtype(), TypeError, op.name, "_: result type ", dtype_name(metas[0].dtype),
           " can't be cast to the desired output type ", dtype_name(self.dtype()));

  std::shared_ptr<OpNode> node;
  if (grad) {
    node = std::make_shared<OpNode>(op, attrs);
    // Backward must see self as it was before the write.
    Tensor old_self = (op.save_inputs & 1u) ? clone(self.detach()) : Tensor();
    node->record_inputs(inputs, old_self);
  }
  graph::Tracer* tracer = graph::current_tracer();
  if (global) {
    if (tracer) tracer->enter_global(op, inputs);
    distributed::interpret_global_inplace(op, inputs, attrs);
    if (tracer) tracer->leave_global({self});
  } else if (tracer) {
    tracer->record_inplace(op, inputs, attrs);
  } else if (has_data(inputs)) {
    const KernelFn& kernel = op.kernels[size_t(self.device().type())];
    if (!kernel) [[unlikely]]
      throw_no_kernel(op, self.device());
    TensorList outputs{self};
    run_kernel(op, kernel, self.device(), inputs, outputs, {TensorMeta{self.sizes(), self.dtype(), self.device()}},
               attrs);
  }
  self.bump_version();
  bump_written(op, inputs);
  if (node) node->record_outputs({self});
  return self;
}

}  // namespace mf::dispatch
