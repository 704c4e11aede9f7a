// OpDef: the one definition of an op family member: schema, shape/dtype
// inference, backward written with ops, and kernels per device type. Every
// op file under src/ops/ registers its OpDefs with MF_REGISTER_OP; each
// backend folder registers its kernels for them with MF_REGISTER_KERNEL (the
// CPU's in src/backend/cpu/kernels/). The dispatcher (dispatch.h) is the one
// door they all go through.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshflow/autograd.h"
#include "meshflow/distributed/placement.h"
#include "meshflow/tensor.h"

namespace mf {

// One attribute value. Integers of any width become int64_t and floats
// double, so `Attrs{{"dim", 1}, {"eps", 1e-5}}` needs no casts.
class AttrValue {
 public:
  using Variant = std::variant<bool, int64_t, double, Shape, DType, std::string, Scalar, Device>;
  AttrValue(bool v) : v_(v) {}                               // NOLINT
  AttrValue(int v) : v_(int64_t(v)) {}                       // NOLINT
  AttrValue(long v) : v_(int64_t(v)) {}                      // NOLINT
  AttrValue(long long v) : v_(int64_t(v)) {}                 // NOLINT
  AttrValue(unsigned long v) : v_(int64_t(v)) {}             // NOLINT
  AttrValue(float v) : v_(double(v)) {}                      // NOLINT
  AttrValue(double v) : v_(v) {}                             // NOLINT
  AttrValue(Shape v) : v_(std::move(v)) {}                   // NOLINT
  AttrValue(std::initializer_list<int64_t> v) : v_(Shape(v)) {}  // NOLINT
  AttrValue(DType v) : v_(v) {}                              // NOLINT
  AttrValue(std::string v) : v_(std::move(v)) {}             // NOLINT
  AttrValue(const char* v) : v_(std::string(v)) {}           // NOLINT
  AttrValue(Scalar v) : v_(v) {}                             // NOLINT
  AttrValue(Device v) : v_(v) {}                             // NOLINT
  const Variant& value() const { return v_; }
  std::string str() const;

 private:
  Variant v_;
};

// Named attributes of one op call.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}
  Attrs& set(std::string key, AttrValue value);
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters; a missing key or another type throws mf::Error.
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // accepts an int attr too
  bool get_bool(std::string_view key) const;
  const Shape& get_shape(std::string_view key) const;
  DType get_dtype(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  Scalar get_scalar(std::string_view key) const;
  Device get_device(std::string_view key) const;
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  std::string str() const;  // "dim=1, keepdim=false"

 private:
  const AttrValue* find(std::string_view key) const;
  const AttrValue& at(std::string_view key) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

// What an op's backward sees. inputs/outputs hold only what the op asked to
// save (OpDef::save_inputs / save_outputs); the others are undefined.
struct BackwardContext {
  const Attrs& attrs;
  TensorList inputs;
  TensorList outputs;
  // Gradients of the forward outputs; floating outputs that received no
  // gradient are zero-filled, integer outputs stay undefined.
  TensorList grad_outputs;
  const std::vector<TensorMeta>& input_metas;
  std::vector<bool> needs_input_grad;
  // Whether output i received a gradient (false where grad_outputs[i] is
  // the zero fill): formulas that divide, such as svd's, skip those terms
  // as PyTorch does for undefined gradients.
  std::vector<bool> received_grad;
};

using InferFn = std::function<std::vector<TensorMeta>(const TensorList& inputs, const Attrs& attrs)>;
// Writes outputs (allocated by the dispatcher from infer, contiguous unless
// the op runs in place) from inputs. Inputs may be non-contiguous.
using KernelFn = std::function<void(const TensorList& inputs, TensorList& outputs, const Attrs& attrs)>;
// Note [Kernel scratch]
// Kernels are leaves: they never allocate through the dispatcher. A kernel
// that needs working memory beyond its outputs (partial sums, a copy of a
// matrix to factor, per-chunk offsets) registers a ScratchFn with it: the
// bytes one call needs, computed from the call's inputs (which may carry no
// data: graph mode asks while planning), the outputs' metadata and the
// attrs. The caller then appends one more output, a UInt8 tensor of that
// many bytes on the kernel's device, and the kernel carves it
// (backend/common/scratch.h). Eager calls take it from the device's caching
// allocator and drop it after the call; a graph places it in its arena for
// the one step (plan_memory), so the memory plan covers all of a step's
// memory. A ScratchFn belongs to one device's kernel: the CPU and CUDA
// kernels of an op may need different scratch.
using ScratchFn =
    std::function<int64_t(const TensorList& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs)>;
// For view ops: outputs that alias inputs[0]'s storage.
using ViewFn = std::function<TensorList(const TensorList& inputs, const Attrs& attrs)>;
// Returns one gradient per forward input (undefined: none).
using BackwardFn = std::function<TensorList(const BackwardContext& ctx)>;

// What the autocast layer of dispatch does with an op's floating inputs
// inside an autocast region (Note [Autocast] in autocast.h).
enum class AutocastPolicy : uint8_t {
  Follow,        // nothing: the op runs in its inputs' (promoted) dtype
  LowPrecision,  // float32 inputs are cast to the region's 16-bit dtype
  Fp32,          // 16-bit floating inputs are cast to float32
};

// One way to run an op on one mesh axis of a global placement: the Sbp of
// each input and of each output (Note [SBP signatures] in
// meshflow/distributed/sbp_rules.h).
struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
};
// The signatures of an op for metadata stand-ins of its global inputs, its
// global output shapes, and `parts` ranks on the mesh axis.
using SbpRuleFn = std::function<std::vector<SbpSignature>(const TensorList& inputs, const std::vector<Shape>& outputs,
                                                          const Attrs& attrs, int64_t parts)>;
// The floating-point operations of a call on whole tensors (metadata
// stand-ins of the inputs, the output shapes).
using FlopsFn = std::function<double(const TensorList& inputs, const std::vector<Shape>& outputs, const Attrs& attrs)>;

// Which calibrated rate prices an op's FLOPs (CostModel in
// meshflow/distributed/auto_parallel.h): a GEMM's, a convolution's or an
// attention's (each a fraction of the GEMM rate of the call's dtype).
enum class FlopsKind : uint8_t { Gemm, Convolution, Attention };

struct OpDef {
  std::string name;
  // Input names, for error messages; their count is the op's arity unless
  // variadic is set.
  std::vector<std::string> inputs;
  bool variadic = false;
  InferFn infer;
  // Exactly one of view and a CPU kernel registered by the backend
  // (kernels[CPU], MF_REGISTER_KERNEL in src/backend/cpu/kernels/) is set.
  ViewFn view;
  BackwardFn backward;
  // false: outputs never require grad (comparisons, argmax, integer results).
  bool differentiable = true;
  // Bit i set: backward reads forward input (or output) i.
  uint32_t save_inputs = 0;
  uint32_t save_outputs = 0;
  // The kernel accepts outputs[0] aliasing inputs[0] with any strides, so
  // the op has an in-place form (add_, mul_, ...).
  bool inplace = false;
  // Bit i set: the kernel writes input i too (the optimizer updates write
  // their state and step count); an in-place call writes input 0 in any
  // case. Dispatch bumps the version of every written input, the global
  // interpreter boxes each back to its own layout, and graph passes treat
  // each as written by the node (Node::writes_input).
  uint32_t mutates = 0;
  AutocastPolicy autocast = AutocastPolicy::Follow;
  // Output element i is the same function of the inputs' elements at i
  // (broadcast to the output's shape) and of the attrs, for every i: a
  // kernel may run on any block of the elements. Graph fusion and
  // rematerialisation take their ops from this trait (Note [Elementwise
  // fusion] in graph/fusion.h); an elementwise op without an sbp rule of
  // its own gets sbp::elementwise().
  bool elementwise = false;
  // The op's SBP signatures (meshflow/distributed/sbp_rules.h); required
  // for every op with inputs.
  SbpRuleFn sbp;
  // An attr holding output 0's shape (view's "size", a backward's
  // "input_sizes"): on a shard the op gets the shard's shape there.
  std::string output_shape_attr;
  // The output shapes depend on the input values (nonzero, masked_select):
  // infer needs inputs with data.
  bool shape_depends_on_data = false;
  // A collective: the kernel exchanges data with other ranks (boxing's
  // comm_* ops, Note [Communication ops] in src/distributed/comm_ops.h).
  // Every rank must run the collectives of a program in the same order, so
  // graph passes never remove, merge, fold or reorder such a node, and the
  // executor may run it on its communication thread. Collectives work on
  // local tensors only and have no SBP rule.
  bool collective = false;
  // The op's arithmetic, for cost models (Note [Auto parallel] in
  // meshflow/distributed/auto_parallel.h): set on compute-bound ops
  // (GEMMs, convolutions, attention); unset, a call costs the bytes it
  // reads and writes.
  FlopsFn flops;
  FlopsKind flops_kind = FlopsKind::Gemm;

  // Filled by the registry from the backend folders' set_kernel calls:
  // kernels[device type], and the scratch of those that need some (Note
  // [Kernel scratch]).
  std::array<KernelFn, kNumDeviceTypes> kernels;
  std::array<ScratchFn, kNumDeviceTypes> scratch;

  // Whether a call writes input i: input 0 of an in-place call, and the
  // inputs of mutates.
  bool writes_input(size_t i, bool inplace_call) const {
    return (inplace_call && i == 0) || (i < 32 && ((mutates >> i) & 1u));
  }
};

class OpRegistry {
 public:
  static OpRegistry& instance();
  // Registers op; a duplicate name throws.
  void add(OpDef op);
  // Registers the kernel of a device type for an op (a backend folder calls
  // this for the ops it implements, MF_REGISTER_KERNEL). An op not yet
  // registered gets it when it is; validate() refuses a kernel whose op
  // never came. scratch: the kernel's working memory (Note [Kernel
  // scratch]), unset for a kernel that needs none.
  void set_kernel(std::string_view op, DeviceType device, KernelFn kernel, ScratchFn scratch = {});
  // The op called name; throws mf::Error listing close names if absent.
  const OpDef& get(std::string_view name);
  const OpDef* find(std::string_view name);
  std::vector<const OpDef*> all();
  // Checks that every op is complete: infer, a view or CPU kernel, a
  // backward unless declared non-differentiable, SBP rules unless it has no
  // inputs or is a collective, and a mutates mask within its inputs.
  // Throws on the first gap. Returns, per device type, the names of the ops
  // with no kernel there (sorted; view ops run on every device).
  std::array<std::vector<std::string>, kNumDeviceTypes> validate() const;

 private:
  OpRegistry() = default;
  std::vector<std::unique_ptr<OpDef>> ops_;
  struct PendingKernel {
    std::string op;
    DeviceType device;
    KernelFn kernel;
    ScratchFn scratch;
  };
  std::vector<PendingKernel> pending_;
};

struct OpRegistrar {
  explicit OpRegistrar(OpDef op) { OpRegistry::instance().add(std::move(op)); }
};

struct KernelRegistrar {
  KernelRegistrar(std::string_view op, DeviceType device, KernelFn kernel, ScratchFn scratch = {}) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel), std::move(scratch));
  }
};

}  // namespace mf

#define MF_OP_CONCAT_INNER(a, b) a##b
#define MF_OP_CONCAT(a, b) MF_OP_CONCAT_INNER(a, b)
// MF_REGISTER_OP(OpDef{.name = "add", ...});
#define MF_REGISTER_OP(...) \
  static ::mf::OpRegistrar MF_OP_CONCAT(mf_op_registrar_, __COUNTER__)(__VA_ARGS__)
// MF_REGISTER_KERNEL("sgd_update", DeviceType::CPU, kernel[, scratch]): a
// backend folder's kernel of an op defined elsewhere (in any order).
#define MF_REGISTER_KERNEL(op, device, ...) \
  static ::mf::KernelRegistrar MF_OP_CONCAT(mf_kernel_registrar_, __COUNTER__)(op, device, __VA_ARGS__)
