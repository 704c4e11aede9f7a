// The CPU kernels of sort and topk (src/ops/sort.cpp): each line along dim
// is sorted as (value, position) pairs, NaN above every number and ties in
// input order, so results are deterministic.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels/index_kernels.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

template <typename A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

// Strict orders with NaN as the largest value and ties broken by position.
template <typename A>
struct Before {
  bool descending;
  bool operator()(const std::pair<A, int64_t>& l, const std::pair<A, int64_t>& r) const {
    const A a = l.first, b = r.first;
    const bool a_nan = is_nan(a), b_nan = is_nan(b);
    if (a_nan || b_nan) {
      if (a_nan != b_nan) return descending ? a_nan : b_nan;
    } else if (a != b) {
      return descending ? a > b : a < b;
    }
    return l.second < r.second;
  }
};

// Runs fn(line, buffer) over every line of x along dim: buffer holds the
// line's (value, position) pairs; fn orders the first `keep` of them, which
// are written to values and indices.
template <typename Order>
void for_each_sorted_line(const Tensor& x, Tensor& values, Tensor& indices, int64_t dim, int64_t keep,
                          const Order& order) {
  const int64_t n = x.sizes()[size_t(dim)];
  if (values.numel() == 0 || n == 0) return;
  StridedWalk<3> lines(with_size(x.sizes(), dim, 1), {x.strides(), values.strides(), indices.strides()});
  const int64_t xs = x.strides()[size_t(dim)], vs = values.strides()[size_t(dim)], is = indices.strides()[size_t(dim)];
  int64_t* ip = indices.data<int64_t>();
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    using A = acc_type<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* vp = static_cast<T*>(values.data_ptr());
    parallel_for(0, lines.numel(), std::max<int64_t>(1, kGrainSize / n), [&](int64_t b, int64_t e) {
      std::vector<std::pair<A, int64_t>> buf(static_cast<size_t>(n));
      lines.runs(b, e, {0, 0, 0}, [&](const auto& o, const auto& s, int64_t m) {
        for (int64_t i = 0; i < m; ++i) {
          const T* xl = xp + o[0] + i * s[0];
          for (int64_t j = 0; j < n; ++j) buf[size_t(j)] = {A(xl[j * xs]), j};
          order(buf);
          T* vl = vp + o[1] + i * s[1];
          int64_t* il = ip + o[2] + i * s[2];
          for (int64_t j = 0; j < keep; ++j) {
            vl[j * vs] = xl[buf[size_t(j)].second * xs];
            il[j * is] = buf[size_t(j)].second;
          }
        }
      });
    });
  });
}

}  // namespace

MF_REGISTER_KERNEL("sort", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "sort");
  const bool descending = attrs.get_bool("descending");
  for_each_sorted_line(in[0], out[0], out[1], dim, in[0].sizes()[size_t(dim)], [&](auto& buf) {
    using A = typename std::decay_t<decltype(buf)>::value_type::first_type;
    std::sort(buf.begin(), buf.end(), Before<A>{descending});
  });
});
MF_REGISTER_KERNEL("topk", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "topk");
  const int64_t k = attrs.get_int("k");
  const bool largest = attrs.get_bool("largest"), sorted = attrs.get_bool("sorted");
  for_each_sorted_line(in[0], out[0], out[1], dim, k, [&](auto& buf) {
    using A = typename std::decay_t<decltype(buf)>::value_type::first_type;
    std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), Before<A>{largest});
    // Unsorted results come in input order.
    if (!sorted)
      std::sort(buf.begin(), buf.begin() + k, [](const auto& l, const auto& r) { return l.second < r.second; });
  });
});

}  // namespace mf::cpu
