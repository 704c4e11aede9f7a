// Sum-like reductions: sum, mean, sum_to.
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/parallel.h"
#include "ops/reduce_common.h"

namespace mf {

using namespace reduce_detail;

namespace {

// Sum of n contiguous values with 8 independent accumulators (vectorises
// without reassociation flags).
template <typename T, typename Acc>
Acc sum_run(const T* x, int64_t n) {
  Acc acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += Acc(x[i + k]);
  for (; i < n; ++i) acc[0] += Acc(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename T>
using sum_acc_t = std::conditional_t<is_floating_type_v<T>, acc_type<T>, int64_t>;

std::vector<TensorMeta> infer_sum(const TensorList& in, const Attrs& attrs) {
  Shape dims = normalize_dims(attrs.get_shape("dims"), in[0].dim(), "sum");
  return {{reduced_shape(in[0].sizes(), dims, attrs.get_bool("keepdim")), attrs.get_dtype("dtype"), in[0].device()}};
}

void sum_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Shape dims = normalize_dims(attrs.get_shape("dims"), in[0].dim(), "sum");
  int64_t outer, inner;
  Tensor x = as_outer_inner(in[0], dims, outer, inner);
  Tensor src = to(x, out[0].dtype());
  dispatch_numeric(out[0].dtype(), "sum", [&]<typename T>() {
    using Acc = sum_acc_t<T>;
    const T* xp = static_cast<const T*>(src.data_ptr());
    T* op = static_cast<T*>(out[0].data_ptr());
    if (outer == 1) {
      // One output: split the run over threads, then combine.
      int nt = get_num_threads();
      std::vector<Acc> partial(size_t(nt), Acc(0));
      int64_t chunk = (inner + nt - 1) / nt;
      parallel_for(0, nt, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t lo = t * chunk, hi = std::min(inner, lo + chunk);
          if (lo < hi) partial[size_t(t)] = sum_run<T, Acc>(xp + lo, hi - lo);
        }
      });
      Acc total = 0;
      for (Acc p : partial) total += p;
      op[0] = T(total);
      return;
    }
    parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(inner, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) op[o] = T(sum_run<T, Acc>(xp + o * inner, inner));
                 });
  });
}

MF_REGISTER_OP(OpDef{
    .name = "sum",
    .inputs = {"input"},
    .infer = infer_sum,
    .cpu_kernel = sum_kernel,
    .backward = [](const BackwardContext& ctx) {
      const auto& m = ctx.input_metas[0];
      Shape dims = normalize_dims(ctx.attrs.get_shape("dims"), int64_t(m.sizes.size()), "sum");
      return TensorList{expand_reduced_grad(ctx.grad_outputs[0], m.sizes, dims, ctx.attrs.get_bool("keepdim"))};
    },
});

}  // namespace

Tensor sum(const Tensor& t, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  static const OpDef& op = dispatch::op("sum");
  DType out = dtype.value_or(is_floating(t.dtype()) ? t.dtype() : DType::Int64);
  return dispatch::apply_one(op, {t}, {{"dims", dims}, {"keepdim", keepdim}, {"dtype", out}});
}

Tensor mean(const Tensor& t, const Shape& dims, bool keepdim) {
  MF_CHECK(is_floating(t.dtype()), TypeError, "mean: could not infer output dtype; input dtype must be ",
           "floating point, got ", dtype_name(t.dtype()));
  Shape nd = normalize_dims(dims, t.dim(), "mean");
  int64_t count = 1;
  for (int64_t d : nd) count *= t.sizes()[d];
  return div(sum(t, dims, keepdim), Scalar(double(count)));
}

Tensor sum_to(const Tensor& t, const Shape& size) {
  if (t.sizes() == size) return t;
  const int64_t lead = t.dim() - int64_t(size.size());
  MF_CHECK(lead >= 0, ShapeError, "sum_to: cannot sum shape ", shape_str(t.sizes()), " to ", shape_str(size));
  Shape dims;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < lead) dims.push_back(d);
    else if (size[d - lead] == 1 && t.sizes()[d] != 1) dims.push_back(d);
    else
      MF_CHECK(size[d - lead] == t.sizes()[d], ShapeError, "sum_to: cannot sum shape ", shape_str(t.sizes()),
               " to ", shape_str(size));
  }
  if (dims.empty()) return reshape(t, size);
  return reshape(sum(t, dims, true), size);
}

}  // namespace mf
