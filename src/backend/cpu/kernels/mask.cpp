// The CPU kernels of nonzero, masked_select and masked_select_backward
// (Note [Data-dependent shapes] in src/ops/mask.cpp): each chunk of the
// input writes its non-zeros at the place the chunk counts give it.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels/index_kernels.h"
#include "meshflow/op_def.h"
#include "meshflow/parallel.h"
#include "ops/mask_common.h"

namespace mf::cpu {
namespace {

using mask_detail::Chunks;
using mask_detail::count_chunks;
using mask_detail::is_nonzero;

// Calls fn(chunk range, output position) for each chunk, in parallel.
template <typename F>
void for_each_chunk(const Chunks& c, int64_t n, const F& fn) {
  parallel_for(0, c.count(), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) fn(k * c.size, std::min(n, (k + 1) * c.size), c.starts[size_t(k)]);
  });
}

void check_total(const Chunks& c, int64_t expected, const char* op) {
  MF_CHECK(c.total == expected, Error, op, ": the input changed between shape inference and the kernel");
}

}  // namespace

MF_REGISTER_KERNEL("nonzero", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor& t = in[0];
  const Chunks c = count_chunks(t, "nonzero");
  check_total(c, out[0].sizes()[0], "nonzero");
  const int64_t nd = t.dim();
  int64_t* op = out[0].numel() ? out[0].data<int64_t>() : nullptr;
  StridedWalk<1> walk(t.sizes(), {t.strides()});
  dispatch_dtype(t.dtype(), [&]<typename T>() {
    const T* p = static_cast<const T*>(t.data_ptr());
    for_each_chunk(c, t.numel(), [&](int64_t begin, int64_t end, int64_t row) {
      int64_t flat = begin;
      walk.runs(begin, end, {0}, [&](const auto& o, const auto& s, int64_t m) {
        for (int64_t i = 0; i < m; ++i, ++flat) {
          if (!is_nonzero(p[o[0] + i * s[0]])) continue;
          int64_t rem = flat;
          for (int64_t d = nd - 1; d >= 0; --d) {
            op[row * nd + d] = rem % t.sizes()[size_t(d)];
            rem /= t.sizes()[size_t(d)];
          }
          ++row;
        }
      });
    });
  });
});
// the elements of x where mask is true, row-major.
MF_REGISTER_KERNEL("masked_select", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &x = in[0], &mask = in[1];
  const Chunks c = count_chunks(mask, "masked_select");
  check_total(c, out[0].numel(), "masked_select");
  StridedWalk<2> walk(x.sizes(), {x.strides(), mask.strides()});
  const bool* mp = static_cast<const bool*>(mask.data_ptr());
  dispatch_itemsize(x.element_size(), [&]<typename E>() {
    const E* xp = static_cast<const E*>(x.data_ptr());
    E* op = static_cast<E*>(out[0].data_ptr());
    for_each_chunk(c, x.numel(), [&](int64_t begin, int64_t end, int64_t pos) {
      walk.runs(begin, end, {0, 0}, [&](const auto& o, const auto& s, int64_t m) {
        for (int64_t i = 0; i < m; ++i)
          if (mp[o[1] + i * s[1]]) op[pos++] = xp[o[0] + i * s[0]];
      });
    });
  });
});
// zeros of the mask's shape with grad's values, in order, where mask is true.
MF_REGISTER_KERNEL("masked_select_backward", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &grad = in[0], &mask = in[1];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  std::memset(y.data_ptr(), 0, size_t(y.numel()) * y.element_size());  // zero bits are 0 in every dtype
  const Chunks c = count_chunks(mask, "masked_select_backward");
  check_total(c, grad.numel(), "masked_select_backward");
  StridedWalk<2> walk(mask.sizes(), {contiguous_strides(mask.sizes()), mask.strides()});
  const bool* mp = static_cast<const bool*>(mask.data_ptr());
  const int64_t gs = grad.dim() ? grad.strides()[0] : 1;
  dispatch_itemsize(y.element_size(), [&]<typename E>() {
    const E* gp = static_cast<const E*>(grad.data_ptr());
    E* yp = static_cast<E*>(y.data_ptr());
    for_each_chunk(c, y.numel(), [&](int64_t begin, int64_t end, int64_t pos) {
      walk.runs(begin, end, {0, 0}, [&](const auto& o, const auto& s, int64_t m) {
        for (int64_t i = 0; i < m; ++i)
          if (mp[o[1] + i * s[1]]) yp[o[0] + i * s[0]] = gp[gs * pos++];
      });
    });
  });
});

}  // namespace mf::cpu
