// The direct convolutions of backend/common/conv_kernels.h over cuda::Loops
// (Note [Device convolutions]): what conv.cpp runs where cuDNN cannot
// (Note [cuDNN convolutions]), and its channel bias add.
#include "backend/common/conv_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf::cuda {

void direct_conv_forward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  conv_kernels::forward<Loops>(in, out, attrs);
}
void direct_conv_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  conv_kernels::backward<Loops>(in, out, attrs);
}
void direct_conv_transpose(const TensorList& in, TensorList& out, const Attrs& attrs) {
  conv_kernels::transpose_forward<Loops>(in, out, attrs);
}

namespace {

// y (contiguous (N, O, spatial...)) += bias[o] at channel o.
template <typename M, typename T>
struct AddChannelBias {
  const T* bias;
  int64_t bias_stride, channels, inner;  // inner: the spatial positions per channel
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    using A = acc_type<T>;
    T* y = reinterpret_cast<T*>(data[0] + off[0]);
    const int64_t o = off[0] / int64_t(sizeof(T)) / inner % channels;
    *y = T(M::template to_acc<A>(*y) + M::template to_acc<A>(bias[o * bias_stride]));
  }
};

}  // namespace

void add_channel_bias(Tensor& y, const Tensor& bias) {
  if (y.numel() == 0) return;
  const int64_t channels = y.sizes()[1], inner = y.numel() / y.sizes()[0] / channels;
  dispatch_floating(y.dtype(), "conv", [&]<typename T>() {
    conv_kernels::over<Loops>(y,
                              AddChannelBias<Loops::Math, T>{static_cast<const T*>(bias.data_ptr()),
                                                             bias.strides()[0], channels, inner},
                              "conv");
  });
}

}  // namespace mf::cuda
