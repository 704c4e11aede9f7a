// The iteration space of an elementwise loop over broadcast, strided
// operands, computed on the host from the tensors' metadata: byte strides
// per operand, with dims merged where every operand is contiguous across
// them. Every backend's elementwise loops start from it (the CPU's
// cpu::elementwise, the CUDA launcher).
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "meshflow/host_device.h"
#include "meshflow/tensor.h"

namespace mf {

// The type a kernel reads and writes a tensor's elements as: bool as
// uint8_t (GCC does not vectorise loads of bool, and the bytes are the same).
template <typename T>
using kernel_type = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

// Byte strides of t broadcast to `shape` (0 where t is broadcast).
inline Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  const int64_t nd = int64_t(shape.size()), td = t.dim();
  Shape out(nd, 0);
  const int64_t item = int64_t(t.element_size());
  for (int64_t i = 0; i < td; ++i) {
    int64_t od = nd - td + i;
    if (t.sizes()[i] != 1) out[od] = t.strides()[i] * item;
  }
  return out;
}

// N operands sharing one iteration shape, with dims merged where all
// operands are contiguous across them.
template <size_t N>
struct StridedOperands {
  Shape sizes;                         // after coalescing, at least 1 dim
  std::array<Shape, N> strides;        // byte strides per operand
  std::array<char*, N> data;

  void coalesce() {
    if (sizes.empty()) {
      sizes.push_back(1);
      for (auto& s : strides) s.push_back(0);
      return;
    }
    Shape new_sizes{sizes[0]};
    std::array<Shape, N> new_strides;
    for (size_t k = 0; k < N; ++k) new_strides[k] = {strides[k][0]};
    for (size_t d = 1; d < sizes.size(); ++d) {
      if (sizes[d] == 1) continue;  // contributes nothing to any address
      if (new_sizes.back() == 1) {
        new_sizes.back() = sizes[d];
        for (size_t k = 0; k < N; ++k) new_strides[k].back() = strides[k][d];
        continue;
      }
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        mergeable = mergeable && new_strides[k].back() == strides[k][d] * sizes[d];
      if (mergeable) {
        new_sizes.back() *= sizes[d];
        for (size_t k = 0; k < N; ++k) new_strides[k].back() = strides[k][d];
      } else {
        new_sizes.push_back(sizes[d]);
        for (size_t k = 0; k < N; ++k) new_strides[k].push_back(strides[k][d]);
      }
    }
    sizes = std::move(new_sizes);
    strides = std::move(new_strides);
  }
};

template <size_t N>
StridedOperands<N> make_operands(Tensor& out, const std::array<const Tensor*, N - 1>& ins) {
  StridedOperands<N> ops;
  // Operands that are all contiguous and of out's shape are one flat run:
  // the common case needs neither per-dim strides nor coalescing.
  bool flat = out.is_contiguous() && out.numel() > 0;
  for (size_t k = 1; flat && k < N; ++k) flat = ins[k - 1]->is_contiguous() && ins[k - 1]->sizes() == out.sizes();
  if (flat) {
    ops.sizes.assign(1, out.numel());
    ops.strides[0].assign(1, int64_t(itemsize(out.dtype())));
    ops.data[0] = static_cast<char*>(out.data_ptr());
    for (size_t k = 1; k < N; ++k) {
      ops.strides[k].assign(1, int64_t(itemsize(ins[k - 1]->dtype())));
      ops.data[k] = static_cast<char*>(ins[k - 1]->data_ptr());
    }
    return ops;
  }
  ops.sizes = out.sizes();
  ops.strides[0] = broadcast_byte_strides(out, ops.sizes);
  ops.data[0] = static_cast<char*>(out.data_ptr());
  for (size_t k = 1; k < N; ++k) {
    ops.strides[k] = broadcast_byte_strides(*ins[k - 1], ops.sizes);
    ops.data[k] = static_cast<char*>(ins[k - 1]->data_ptr());
  }
  ops.coalesce();
  return ops;
}

// The iteration space of N operands in a fixed-size form that a device
// kernel takes by value (backends without the CPU's run loops: CUDA).
// offsets(i, out) gives the byte offset of each operand's element at linear
// index i of the coalesced shape.
inline constexpr int kMaxLoopDims = 16;

template <size_t N>
struct LoopGeometry {
  int nd = 0;
  int64_t sizes[kMaxLoopDims] = {};
  int64_t strides[N][kMaxLoopDims] = {};  // bytes
  char* data[N] = {};

  MF_FORCE_INLINE MF_HOST_DEVICE void offsets(int64_t i, int64_t* offset) const {
    for (size_t k = 0; k < N; ++k) offset[k] = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t index = i % sizes[d];
      i /= sizes[d];
      for (size_t k = 0; k < N; ++k) offset[k] += index * strides[k][d];
    }
  }
};

// out = f(in...) at the byte offsets `offset` of g's operands: what one
// device thread does for one element.
template <typename Out, typename... In, typename F, size_t... I>
MF_FORCE_INLINE MF_HOST_DEVICE void apply_at(const LoopGeometry<sizeof...(In) + 1>& g, const int64_t* offset,
                                             const F& f, std::index_sequence<I...>) {
  *reinterpret_cast<Out*>(g.data[0] + offset[0]) =
      Out(f(*reinterpret_cast<const In*>(g.data[I + 1] + offset[I + 1])...));
}

// Whether ops is one flat run of contiguous elements of the given sizes.
template <size_t N>
bool is_flat(const StridedOperands<N>& ops, const std::array<int64_t, N>& item_sizes) {
  if (ops.sizes.size() != 1) return false;
  for (size_t k = 0; k < N; ++k)
    if (ops.strides[k][0] != item_sizes[k]) return false;
  return true;
}

template <size_t N>
LoopGeometry<N> loop_geometry(const StridedOperands<N>& ops, const char* what) {
  MF_CHECK(ops.sizes.size() <= size_t(kMaxLoopDims), Error, what, ": ", ops.sizes.size(),
           " dims after merging contiguous ones; at most ", kMaxLoopDims, " are supported");
  LoopGeometry<N> g;
  g.nd = int(ops.sizes.size());
  for (int d = 0; d < g.nd; ++d) {
    g.sizes[d] = ops.sizes[size_t(d)];
    for (size_t k = 0; k < N; ++k) g.strides[k][d] = ops.strides[k][size_t(d)];
  }
  for (size_t k = 0; k < N; ++k) g.data[k] = ops.data[k];
  return g;
}

}  // namespace mf
