#include "backend/common/gemm_plan.h"

#include <algorithm>

namespace mf {

Offsets batch_offsets(const Tensor& t, const Shape& batch) {
  const int64_t nb = int64_t(batch.size()), tb = t.dim() - 2;
  Shape strides(size_t(nb), 0);
  for (int64_t i = 0; i < tb; ++i)
    if (t.sizes()[size_t(i)] != 1) strides[size_t(nb - tb + i)] = t.strides()[size_t(i)];
  const int64_t count = shape_numel(batch);
  Offsets offsets(static_cast<size_t>(count));
  Shape index(size_t(nb), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    offsets[size_t(i)] = offset;
    for (int64_t d = nb - 1; d >= 0; --d) {
      offset += strides[size_t(d)];
      if (++index[size_t(d)] < batch[size_t(d)]) break;
      offset -= strides[size_t(d)] * batch[size_t(d)];
      index[size_t(d)] = 0;
    }
  }
  return offsets;
}

namespace {

// t's matrices (rows, cols) as a column-major operand (Note [BLAS plans]).
// A size-1 dim's stride is free, so it never rules a layout out.
BlasOperand operand(const Tensor& t, const Shape& batch, void (*copy_cast)(Tensor&, const Tensor&)) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t rs = rows == 1 ? std::max<int64_t>(cols, 1) : t.stride(-2);
  const int64_t cs = cols == 1 ? std::max<int64_t>(rows, 1) : t.stride(-1);
  BlasOperand op;
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) {
    op.tensor = t, op.transposed = false, op.ld = rs;
  } else if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) {
    op.tensor = t, op.transposed = true, op.ld = cs;
  } else {
    op.tensor = make_empty(t.sizes(), t.dtype(), t.device());
    copy_cast(op.tensor, t);
    op.transposed = false, op.ld = std::max<int64_t>(cols, 1);
  }
  op.offsets = batch_offsets(op.tensor, batch);
  return op;
}

// The even step of offsets, if they have one.
bool even_step(const Offsets& offsets, int64_t& step) {
  step = offsets.size() > 1 ? offsets[1] - offsets[0] : 0;
  for (size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] - offsets[i - 1] != step) return false;
  return true;
}

}  // namespace

GemmPlan plan_gemm(const Tensor& a, const Tensor& b, const Tensor& out,
                   void (*copy_cast)(Tensor& dst, const Tensor& src)) {
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  GemmPlan plan;
  plan.n = out.size(-2), plan.m = out.size(-1), plan.k = a.size(-1);
  plan.a = operand(a, batch, copy_cast);
  plan.b = operand(b, batch, copy_cast);
  plan.count = shape_numel(batch);
  plan.strided = even_step(plan.a.offsets, plan.stride_a) && even_step(plan.b.offsets, plan.stride_b);
  return plan;
}

}  // namespace mf
