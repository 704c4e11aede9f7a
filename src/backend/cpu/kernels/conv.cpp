// The convolution ops' CPU kernels (src/ops/conv.cpp, conv_transpose.cpp):
// conv2d/3d, their *_backward and conv_transpose2d/3d, on the kernels of
// conv.h (conv_onednn.cpp, conv_im2col.cpp, conv_depthwise.cpp).
#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/dense_scratch.h"

#include <string>

#include "meshflow/op_def.h"
#include "ops/conv_common.h"

namespace mf::cpu {
namespace {

using conv_detail::adjoint_conv_attrs;
using conv_detail::params_of;

// The three kernels over a Workspace (Note [Measured kernels]): outputs
// are the kernel's, or stand-ins without data while measuring.
void conv_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  conv_forward(in[0], in[1], in[2], out[0], params_of(attrs), ws);
}

// outputs (grad_x, grad_w, grad_bias), those not in output_mask empty.
void conv_backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  const Shape& mask = attrs.get_shape("output_mask");
  conv_backward(in[0], in[1], in[2], mask[0] ? &out[0] : nullptr, mask[1] ? &out[1] : nullptr,
                mask[2] ? &out[2] : nullptr, params_of(attrs), ws);
}

// Note [Transposed convolution] in src/ops/conv_transpose.cpp: the adjoint
// of the convolution with adjoint_conv_attrs.
void conv_transpose_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  conv_transpose_forward(in[0], in[1], in[2], out[0], params_of(adjoint_conv_attrs(attrs, "")), ws);
}

[[maybe_unused]] const bool kRegistered = [] {
  OpRegistry& r = OpRegistry::instance();
  constexpr DeviceType kCpu = DeviceType::CPU;
  for (const std::string spatial : {"2d", "3d"}) {
    r.set_kernel("conv" + spatial, kCpu, run_measured<conv_kernel>, measure<conv_kernel>);
    r.set_kernel("conv" + spatial + "_backward", kCpu, run_measured<conv_backward_kernel>,
                 measure<conv_backward_kernel>);
    r.set_kernel("conv_transpose" + spatial, kCpu, run_measured<conv_transpose_kernel>,
                 measure<conv_transpose_kernel>);
  }
  return true;
}();

}  // namespace
}  // namespace mf::cpu
