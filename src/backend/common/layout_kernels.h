// Note [Layout kernels]
// Ops whose output is a fill and copies between views (slice_backward, pad,
// flip, roll, tril/triu, diagonal_backward, and cat's general case), written once over a
// backend's loops L: every element moves through the elementwise table's
// copy_cast<L> and fill<L>, so the ops run on any device whose loops read
// strided (and negatively strided) views. The ops' schemas, inference and
// backward live in src/ops/ (view.cpp, rearrange.cpp, join.cpp,
// strided_view.cpp).
#pragma once

#include <algorithm>

#include "backend/common/elementwise_kernels.h"

namespace mf::layout_kernels {

using elementwise_kernels::copy_cast;
using elementwise_kernels::fill;

// Element i of a contiguous (..., rows, cols) tensor kept by tril (lower) or
// triu, else 0 (zero bits are 0 in every dtype).
template <typename T>
struct TriangleMask {
  const T* y;
  int64_t rows, cols, diagonal;
  bool upper;
  MF_FORCE_INLINE MF_HOST_DEVICE T operator()(int64_t i) const {
    const int64_t r = (i / cols) % rows, c = i % cols;
    const bool keep = upper ? c - r >= diagonal : c - r <= diagonal;
    return keep ? y[i] : T(0);
  }
};

// The view of the diagonal `offset` of dims (dim1, dim2) of t, appended as the last dim.
inline Tensor diagonal_view(const Tensor& t, int64_t offset, int64_t dim1, int64_t dim2) {
  const int64_t n1 = t.sizes()[size_t(dim1)], n2 = t.sizes()[size_t(dim2)];
  const int64_t s1 = t.strides()[size_t(dim1)], s2 = t.strides()[size_t(dim2)];
  // An offset beyond the matrix leaves an empty diagonal (tested first, so
  // that no huge offset is ever added to a size).
  const int64_t length = offset >= 0 ? (offset < n2 ? std::min(n1, n2 - offset) : 0)
                                     : (offset > -n1 ? std::min(n1 + offset, n2) : 0);
  int64_t start = t.storage_offset();
  if (length > 0) start += offset >= 0 ? offset * s2 : -offset * s1;
  Shape sizes, strides;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d == dim1 || d == dim2) continue;
    sizes.push_back(t.sizes()[size_t(d)]);
    strides.push_back(t.strides()[size_t(d)]);
  }
  sizes.push_back(length);
  strides.push_back(s1 + s2);
  return make_view(t, sizes, strides, start);
}

template <typename L>
void slice_backward(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& o = out[0];
  const int64_t dim = attrs.get_int("dim"), start = attrs.get_int("start"), step = attrs.get_int("step");
  fill<L>(o, Scalar(0));
  Shape stride = o.strides();
  if (in[0].sizes()[size_t(dim)] > 1) stride[size_t(dim)] = checked_mul(stride[size_t(dim)], step, "slice_backward", "the stride");
  Tensor dst = make_view(o, in[0].sizes(), stride, start * o.strides()[size_t(dim)]);
  copy_cast<L>(dst, in[0]);
}

template <typename L>
void flip(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Shape strides = x.strides();
  int64_t offset = x.storage_offset();
  for (int64_t d : attrs.get_shape("dims")) {
    const int64_t n = x.sizes()[size_t(d)];
    if (n > 0) offset += (n - 1) * strides[size_t(d)];
    strides[size_t(d)] = -strides[size_t(d)];
  }
  // A view with negative strides, only ever read by this copy.
  copy_cast<L>(out[0], make_view(x, x.sizes(), strides, offset));
}

// out[(i + shift) mod n] = in[i] along each rolled dim: 2^k block copies.
template <typename L>
void roll(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  const Shape& dims = attrs.get_shape("dims");
  const Shape& shifts = attrs.get_shape("shifts");
  const size_t k = dims.size();
  for (uint64_t mask = 0; mask < (uint64_t(1) << k); ++mask) {
    Shape sizes = x.sizes();
    int64_t src_off = x.storage_offset(), dst_off = y.storage_offset();
    bool empty = false;
    for (size_t j = 0; j < k; ++j) {
      const size_t d = size_t(dims[j]);
      const int64_t n = x.sizes()[d], s = shifts[j];
      // Block 0 moves in[0, n - s) to out[s, n); block 1 moves in[n - s, n) to out[0, s).
      const bool second = (mask >> j) & 1;
      sizes[d] = second ? s : n - s;
      src_off += (second ? n - s : 0) * x.strides()[d];
      dst_off += (second ? 0 : s) * y.strides()[d];
      empty = empty || sizes[d] == 0;
    }
    if (empty) continue;
    Tensor dst = make_view(y, sizes, y.strides(), dst_off);
    copy_cast<L>(dst, make_view(x, sizes, x.strides(), src_off));
  }
}

// Constant padding (negative pads crop): the value everywhere, then the
// region both tensors share, out[max(lo, 0) ...] = in[max(-lo, 0) ...].
template <typename L>
void pad(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const Shape& pads = attrs.get_shape("pad");
  fill<L>(y, attrs.get_scalar("value"));
  Shape sizes = x.sizes();
  int64_t src_off = x.storage_offset(), dst_off = y.storage_offset();
  const size_t nd = sizes.size();
  for (size_t p = 0; p < pads.size() / 2; ++p) {
    const size_t d = nd - 1 - p;
    const int64_t lo = pads[2 * p];
    sizes[d] = std::max<int64_t>(0, std::min(x.sizes()[d] + std::min<int64_t>(lo, 0), y.sizes()[d] - std::max<int64_t>(lo, 0)));
    src_off += std::max<int64_t>(-lo, 0) * x.strides()[d];
    dst_off += std::max<int64_t>(lo, 0) * y.strides()[d];
  }
  if (shape_numel(sizes) == 0) return;
  Tensor dst = make_view(y, sizes, y.strides(), dst_off);
  copy_cast<L>(dst, make_view(x, sizes, x.strides(), src_off));
}

// tril / triu: the input copied into the (contiguous) output, then the
// output's elements outside the triangle zeroed in place.
template <typename L>
void triangle(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  copy_cast<L>(y, in[0]);
  if (y.numel() == 0) return;
  const int64_t rows = y.sizes()[size_t(y.dim() - 2)], cols = y.sizes()[size_t(y.dim() - 1)];
  dispatch_dtype(y.dtype(), [&]<typename T>() {
    using K = kernel_type<T>;
    L::template run_indexed<K>(y, TriangleMask<K>{static_cast<const K*>(y.data_ptr()), rows, cols,
                                                  attrs.get_int("diagonal"), attrs.get_bool("upper")});
  });
}

// cat: each input copied into its slice of the output (PyTorch's rule:
// 1-d inputs of size 0 are skipped).
template <typename L>
void cat(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; };
  const auto ref = std::find_if(in.begin(), in.end(), [&](const Tensor& t) { return !skipped(t); });
  if (y.numel() == 0 || ref == in.end()) return;
  const int64_t dim = wrap_dim(attrs.get_int("dim"), ref->dim(), "cat");
  int64_t offset = 0;
  for (const auto& t : in) {
    if (skipped(t)) continue;
    Tensor part = make_view(y, t.sizes(), y.strides(), y.storage_offset() + offset * y.strides()[size_t(dim)]);
    copy_cast<L>(part, t);
    offset += t.sizes()[size_t(dim)];
  }
}

// diagonal's gradient: zeros of the input's shape with the diagonal set from grad.
template <typename L>
void diagonal_backward(const TensorList& in, TensorList& out, const Attrs& a) {
  Tensor& o = out[0];
  fill<L>(o, Scalar(0));
  Tensor diag = diagonal_view(o, a.get_int("offset"), a.get_int("dim1"), a.get_int("dim2"));
  MF_CHECK(diag.sizes() == in[0].sizes(), ShapeError, "diagonal_backward: grad of shape ", shape_str(in[0].sizes()),
           " does not fit the diagonal of shape ", shape_str(diag.sizes()));
  copy_cast<L>(diag, in[0]);
}

// `with_cat`: the CPU has a cat of its own (join.cpp: whole rows by memcpy).
template <typename L>
void register_all(DeviceType device, bool with_cat) {
  auto set = [device](const char* op, KernelFn kernel) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel));
  };
  set("slice_backward", slice_backward<L>);
  set("flip", flip<L>);
  set("roll", roll<L>);
  set("pad", pad<L>);
  set("triangle", triangle<L>);
  set("diagonal_backward", diagonal_backward<L>);
  if (with_cat) set("cat", cat<L>);
}

}  // namespace mf::layout_kernels
