// cumsum: inclusive prefix sums along a dim (or suffix sums, the "reverse"
// form its backward uses). Floats accumulate in double, 16-bit floats in
// float and integers in wrapping 64-bit, like PyTorch's CPU kernel.
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/elementwise.h"
#include "ops/kernels/cpu/loops.h"
#include "ops/reduce_common.h"

namespace mf {

using namespace reduce_detail;

namespace {

template <typename T>
using cumsum_acc_t = std::conditional_t<std::is_same_v<T, float>, double, sum_acc_t<T>>;

struct LineGeometry {
  Shape sizes, in_strides, out_strides;  // the dims other than `dim`, merged
};

LineGeometry line_geometry(const Tensor& x, const Tensor& out, int64_t dim) {
  LineGeometry g;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim || x.sizes()[size_t(d)] == 1) continue;
    const int64_t size = x.sizes()[size_t(d)], is = x.strides()[size_t(d)], os = out.strides()[size_t(d)];
    if (!g.sizes.empty() && g.in_strides.back() == is * size && g.out_strides.back() == os * size) {
      g.sizes.back() *= size;
      g.in_strides.back() = is;
      g.out_strides.back() = os;
      continue;
    }
    g.sizes.push_back(size);
    g.in_strides.push_back(is);
    g.out_strides.push_back(os);
  }
  return g;
}

template <typename T>
void cumsum_typed(const Tensor& x, Tensor& out, int64_t dim, bool reverse) {
  using Acc = cumsum_acc_t<T>;
  const LineGeometry g = line_geometry(x, out, dim);
  const int64_t n = x.sizes()[size_t(dim)], s = x.strides()[size_t(dim)], so = out.strides()[size_t(dim)];
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const int64_t lines = x.numel() / n;
  // Position k of a line in walking order.
  auto at = [&](int64_t k) { return reverse ? n - 1 - k : k; };

  int64_t lane = -1;
  for (int64_t d = 0; d < int64_t(g.sizes.size()); ++d)
    if (std::abs(g.in_strides[size_t(d)]) < std::abs(s) &&
        (lane < 0 || std::abs(g.in_strides[size_t(d)]) < std::abs(g.in_strides[size_t(lane)])))
      lane = d;

  if (lane < 0) {
    cpu::IndexWalker in_walk(g.sizes, g.in_strides), out_walk(g.sizes, g.out_strides);
    parallel_for(0, lines, std::max<int64_t>(1, kGrainSize / n), [&](int64_t b, int64_t e) {
      cpu::IndexWalker in = in_walk, ow = out_walk;
      in.seek(b);
      ow.seek(b);
      for (int64_t l = b; l < e; ++l, in.next(), ow.next()) {
        const T* p = xp + in.offset;
        T* q = op + ow.offset;
        Acc acc = Acc(0);
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = at(k);
          acc += cpu::to_acc<Acc>(p[i * s]);
          q[i * so] = from_acc<T>(acc);
        }
      }
    });
    return;
  }

  // A block of W neighbouring lines (along dim `lane`; whole rows up to 1024
  // lines, read sequentially) advances together.
  const int64_t lane_size = g.sizes[size_t(lane)], ls = g.in_strides[size_t(lane)], los = g.out_strides[size_t(lane)];
  const int64_t W = std::min<int64_t>(lane_size, 1024);
  Shape sz, ist, ost;
  for (int64_t d = 0; d < int64_t(g.sizes.size()); ++d) {
    if (d == lane) continue;
    sz.push_back(g.sizes[size_t(d)]);
    ist.push_back(g.in_strides[size_t(d)]);
    ost.push_back(g.out_strides[size_t(d)]);
  }
  const cpu::IndexWalker in_walk(sz, ist), out_walk(sz, ost);
  const int64_t blocks = (lane_size + W - 1) / W;
  const int64_t units = lines / lane_size * blocks;
  parallel_for(0, units, std::max<int64_t>(1, kGrainSize / (n * std::min(W, lane_size))), [&](int64_t b, int64_t e) {
    cpu::IndexWalker in = in_walk, ow = out_walk;
    in.seek(b / blocks);
    ow.seek(b / blocks);
    std::vector<Acc> acc(static_cast<size_t>(W));
    for (int64_t u = b; u < e; ++u) {
      if (u != b && u % blocks == 0) in.next(), ow.next();
      const int64_t first = (u % blocks) * W, w = std::min(W, lane_size - first);
      const T* p = xp + in.offset + first * ls;
      T* q = op + ow.offset + first * los;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = at(k);
        const T* row = p + i * s;
        T* orow = q + i * so;
        for (int64_t j = 0; j < w; ++j) {
          acc[size_t(j)] += cpu::to_acc<Acc>(row[j * ls]);
          orow[j * los] = from_acc<T>(acc[size_t(j)]);
        }
      }
    }
  });
}

void cumsum_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  if (in[0].numel() == 0) return;
  Tensor x = in[0].dim() == 0 ? make_view(in[0], {1}, {1}, in[0].storage_offset()) : in[0];
  Tensor o = out[0].dim() == 0 ? make_view(out[0], {1}, {1}, 0) : out[0];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), "cumsum");
  if (int64_t(line_geometry(x, o, dim).sizes.size()) > cpu::kMaxReduceDims) {
    Tensor copy = make_empty(x.sizes(), x.dtype(), x.device());
    cpu::copy_cast(copy, x);
    x = copy;
  }
  dispatch_dtype(x.dtype(), [&]<typename T>() { cumsum_typed<T>(x, o, dim, attrs.get_bool("reverse")); });
}

MF_REGISTER_OP(OpDef{
    .name = "cumsum",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      wrap_dim(attrs.get_int("dim"), in[0].dim(), "cumsum");
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = cumsum_kernel,
    .backward = [](const BackwardContext& ctx) {
      // d/dx_j of sum_i g_i * prefix_i(x) is the suffix sum of g from j.
      static const OpDef& op = dispatch::op("cumsum");
      return TensorList{dispatch::apply_one(
          op, {ctx.grad_outputs[0]},
          {{"dim", ctx.attrs.get_int("dim")}, {"reverse", !ctx.attrs.get_bool("reverse")}})};
    },
    .sbp = sbp::independent_of_attr("dim"),
});

}  // namespace

Tensor cumsum(const Tensor& t, int64_t dim, std::optional<DType> dtype) {
  static const OpDef& op = dispatch::op("cumsum");
  Tensor x = to(t, dtype.value_or(is_floating(t.dtype()) ? t.dtype() : DType::Int64));
  return dispatch::apply_one(op, {x}, {{"dim", dim}, {"reverse", false}});
}

}  // namespace mf
