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

// t's matrices (rows, cols) as a column-major operand (Note [BLAS plans]):
// 0 row-major, 1 column-major (transposed), -1 neither (copied dense). A
// size-1 dim's stride is free, so it never rules a layout out.
int blas_layout(const Tensor& t, int64_t& ld) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t rs = rows == 1 ? std::max<int64_t>(cols, 1) : t.stride(-2);
  const int64_t cs = cols == 1 ? std::max<int64_t>(rows, 1) : t.stride(-1);
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) return ld = rs, 0;
  if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) return ld = cs, 1;
  return -1;
}

BlasOperand operand(const Tensor& t, const Shape& batch, void (*copy_cast)(Tensor&, const Tensor&), Scratch& taken) {
  BlasOperand op;
  const int layout = blas_layout(t, op.ld);
  if (layout >= 0) {
    op.tensor = t, op.transposed = layout == 1;
  } else {
    op.tensor = taken.take(t.sizes(), t.dtype());
    copy_cast(op.tensor, t);
    op.transposed = false, op.ld = std::max<int64_t>(t.size(-1), 1);
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

int64_t gemm_scratch_bytes(const Tensor& a, const Tensor& b) {
  ScratchLayout layout("matmul");
  int64_t ld = 0;
  for (const Tensor* t : {&a, &b})
    if (blas_layout(*t, ld) < 0) layout.add(t->sizes(), t->dtype());
  return layout.bytes();
}

GemmPlan plan_gemm(const Tensor& a, const Tensor& b, const Tensor& out,
                   void (*copy_cast)(Tensor& dst, const Tensor& src), Scratch& taken) {
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  GemmPlan plan;
  plan.n = out.size(-2), plan.m = out.size(-1), plan.k = a.size(-1);
  plan.a = operand(a, batch, copy_cast, taken);
  plan.b = operand(b, batch, copy_cast, taken);
  plan.count = shape_numel(batch);
  plan.strided = even_step(plan.a.offsets, plan.stride_a) && even_step(plan.b.offsets, plan.stride_b);
  return plan;
}

}  // namespace mf
