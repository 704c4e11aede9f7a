// Automatic mixed precision, eager part: the autocast layer of dispatch.
//
// Note [Autocast]
// Inside an autocast region of a device type (AutocastGuard, or
// `with mf.autocast("cpu")` in Python), dispatch::apply looks at the op's
// AutocastPolicy (OpDef::autocast) before running it:
//   LowPrecision  float32 inputs of that device type are cast to the region's
//                 dtype (bfloat16 or float16): matmul, addmm, conv2d;
//   Fp32          bfloat16/float16 inputs are cast to float32: losses, prod;
//   Follow        nothing; the op runs in the dtype its inputs have (binary
//                 ops promote, so bfloat16 + float32 gives float32).
// float64 and non-floating inputs are never cast. The casts are the ordinary
// "cast" op, so autograd records them and gradients reach float32 parameters
// as float32. The lists follow PyTorch 1.13's CPU autocast (docs/amp.md).
//
// Casts of float32 leaves that require grad (parameters) to the region's
// dtype are cached for the outermost region and dropped when it ends, so a
// weight used by several ops is cast once per region; a cached cast is
// redone when the weight was written in place since.
//
// Composite functions whose dispatched op sees a view of the caller's tensor
// (linear transposes its weight) cast their operands first with
// autocast::cast_for, which applies the same policy and cache.
//
// Autocast state is per thread. The autograd engine runs backward with
// autocast off: backward ops run in the dtypes their forward ops ran in.
#pragma once

#include <optional>

#include "meshflow/op_def.h"

namespace mf {

namespace autocast {

namespace detail {
// True while autocast is enabled for any device type on this thread; the one
// check dispatch makes when autocast is off.
extern thread_local bool any_enabled;
}  // namespace detail

inline bool any_enabled() { return detail::any_enabled; }
bool is_enabled(DeviceType device);
void set_enabled(DeviceType device, bool enabled);
// The region's low-precision dtype (default bfloat16 on CPU, float16 on CUDA).
DType get_dtype(DeviceType device);
// dtype must be bfloat16 or float16 (TypeError otherwise).
void set_dtype(DeviceType device, DType dtype);
bool is_cache_enabled();
void set_cache_enabled(bool enabled);
// Region nesting; leaving the outermost region clears the cache.
int increment_nesting();
int decrement_nesting();
void clear_cache();
// Number of cached casts (for tests).
size_t cache_size();

// The device type called name ("cpu", "cuda"); others throw ValueError.
DeviceType parse_device_type(std::string_view name);
// The default low-precision dtype of a device type's regions.
DType default_dtype(DeviceType device);

// The autocast layer: inputs as op runs them in the current regions.
TensorList cast_inputs(const OpDef& op, const TensorList& inputs);
// One input as op would run it; composite functions use it to cast an
// operand before taking a view of it.
Tensor cast_for(const OpDef& op, const Tensor& input);

}  // namespace autocast

// RAII autocast region: `AutocastGuard region(DeviceType::CPU, kBFloat16);`
// enabled = false switches autocast off inside an enclosing region. The
// previous state is restored on destruction; leaving the outermost region
// clears the cast cache.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device = DeviceType::CPU, std::optional<DType> dtype = std::nullopt,
                         bool enabled = true, bool cache_enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
};

}  // namespace mf
