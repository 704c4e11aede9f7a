// Sorting along a dim: sort (stable), argsort, topk. NaN orders above every
// number, as in PyTorch; equal values keep their input order, so results are
// deterministic. Backward scatters the gradient to the returned indices.
#include <cmath>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "backend/cpu/kernels/index_kernels.h"

namespace mf {
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

Shape with_size(Shape s, int64_t dim, int64_t size) {
  s[size_t(dim)] = size;
  return s;
}

// Runs fn(line, buffer) over every line of x along dim: buffer holds the
// line's (value, position) pairs; fn orders the first `keep` of them, which
// are written to values and indices.
template <typename Order>
void for_each_sorted_line(const Tensor& x, Tensor& values, Tensor& indices, int64_t dim, int64_t keep,
                          const Order& order) {
  const int64_t n = x.sizes()[size_t(dim)];
  if (values.numel() == 0 || n == 0) return;
  cpu::StridedWalk<3> lines(with_size(x.sizes(), dim, 1), {x.strides(), values.strides(), indices.strides()});
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

// Gradient of values taken at `indices` along dim from a tensor of `sizes`.
Tensor scatter_to_indices(const BackwardContext& ctx) {
  const auto& m = ctx.input_metas[0];
  return scatter(zeros(m.sizes, {.dtype = ctx.grad_outputs[0].dtype(), .device = m.device}), ctx.attrs.get_int("dim"),
                 ctx.outputs[1], ctx.grad_outputs[0]);
}

MF_REGISTER_OP(OpDef{
    .name = "sort",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      wrap_dim(attrs.get_int("dim"), in[0].dim(), "sort");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()},
                                     {in[0].sizes(), DType::Int64, in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "sort");
      const bool descending = attrs.get_bool("descending");
      for_each_sorted_line(in[0], out[0], out[1], dim, in[0].sizes()[size_t(dim)], [&](auto& buf) {
        using A = typename std::decay_t<decltype(buf)>::value_type::first_type;
        std::sort(buf.begin(), buf.end(), Before<A>{descending});
      });
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{scatter_to_indices(ctx)}; },
    .save_outputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

MF_REGISTER_OP(OpDef{
    .name = "topk",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "topk");
      const int64_t k = attrs.get_int("k"), n = in[0].sizes()[size_t(dim)];
      MF_CHECK(k >= 0 && k <= n, IndexError, "topk: selected index k (", k, ") is out of range for dimension ", dim,
               " of size ", n);
      Shape size = with_size(in[0].sizes(), dim, k);
      return std::vector<TensorMeta>{{size, in[0].dtype(), in[0].device()}, {size, DType::Int64, in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
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
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{scatter_to_indices(ctx)}; },
    .save_outputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

ValuesIndices as_pair(TensorList outs) { return {std::move(outs[0]), std::move(outs[1])}; }

}  // namespace

ValuesIndices sort(const Tensor& t, int64_t dim, bool descending) {
  static const OpDef& op = dispatch::op("sort");
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "sort");
    auto r = as_pair(dispatch::apply(op, {reshape(t, {1})}, {{"dim", 0}, {"descending", descending}}));
    return {reshape(r.values, {}), reshape(r.indices, {})};
  }
  return as_pair(dispatch::apply(op, {t}, {{"dim", wrap_dim(dim, t.dim(), "sort")}, {"descending", descending}}));
}

Tensor argsort(const Tensor& t, int64_t dim, bool descending) { return sort(t, dim, descending).indices; }

ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
  static const OpDef& op = dispatch::op("topk");
  Attrs attrs{{"k", k}, {"dim", 0}, {"largest", largest}, {"sorted", sorted}};
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "topk");
    auto r = as_pair(dispatch::apply(op, {reshape(t, {1})}, attrs));
    if (k == 0) return r;
    return {reshape(r.values, {}), reshape(r.indices, {})};
  }
  attrs.set("dim", wrap_dim(dim, t.dim(), "topk"));
  return as_pair(dispatch::apply(op, {t}, attrs));
}

}  // namespace mf
