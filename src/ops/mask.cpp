// Ops whose output size is the number of true (non-zero) elements:
// nonzero and masked_select (with its gradient, masked_select_backward).
//
// Note [Data-dependent shapes]: infer counts the non-zeros to size the
// output, so these ops need data (they refuse traced tensors); on a device
// it counts with a reduction there and reads the count back. The CPU kernels
// (backend/cpu/kernels/mask.cpp) count again per chunk (count_chunks); the
// prefix sums of the chunk counts give each chunk its place in the output,
// so chunks are written in parallel and the result keeps row-major order.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "backend/cpu/kernels/index_kernels.h"
#include "ops/mask_common.h"

namespace mf {

using mask_detail::Chunks;
using mask_detail::count_chunks;
using mask_detail::is_nonzero;

namespace {

using cpu::StridedWalk;

// Note [Expanded counts]: the non-zeros of a tensor with expanded (stride 0)
// dims are those of one copy times the number of copies, counted without
// walking every element: shape inference (total_only) of nonzero over
// zeros((), ...).expand(2**62) is immediate, and the kernel walks the copies
// only once their output has been allocated.
struct OneCopy {
  Tensor view;  // t with each expanded dim cut to size 1
  int64_t copies = 1;
};

OneCopy one_copy(const Tensor& t, const char* op) {
  Shape sizes = t.sizes();
  int64_t copies = 1;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && sizes[size_t(d)] > 1) {
      copies = checked_mul(copies, sizes[size_t(d)], op, "the number of elements");
      sizes[size_t(d)] = 1;
    }
  return {make_view(t, sizes, t.strides(), t.storage_offset()), copies};
}

Chunks count_expanded(const Tensor& t, const char* op) {
  const OneCopy one = one_copy(t, op);
  Chunks c;
  c.total = checked_mul(count_chunks(one.view, op).total, one.copies, op, "the number of non-zeros");
  return c;
}

// The non-zeros of a tensor on a device other than the CPU: a reduction
// there (over one copy of expanded dims), read back once. Its kernels (Note
// [Device mask kernels] in src/backend/common/mask_kernels.h) then place
// each chunk themselves.
int64_t count_on_device(const Tensor& t, const char* op) {
  const OneCopy one = one_copy(t.detach(), op);
  const Tensor flags = one.view.dtype() == DType::Bool ? one.view : ne(one.view, Scalar(0));
  return checked_mul(sum(flags).item<int64_t>(), one.copies, op, "the number of non-zeros");
}

}  // namespace

Chunks mask_detail::count_chunks(const Tensor& t, const char* op, bool total_only) {
  MF_CHECK(t.storage()->has_data(), Error, op,
           " is not traceable in graph mode: its output shape depends on the input's values");
  if (!t.device().is_cpu()) {
    MF_CHECK(total_only, Error, op, ": the CPU kernel got a tensor on ", t.device().str());
    Chunks c;
    c.total = count_on_device(t, op);
    return c;
  }
  if (total_only || t.numel() > (int64_t(1) << 20))
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.stride(d) == 0 && t.size(d) > 1) {
        Chunks c = count_expanded(t, op);
        if (total_only || c.total == 0) return c;
        break;
      }
  Chunks c;
  const int64_t n = t.numel();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), n / kGrainSize));
  c.size = std::max<int64_t>(1, (n + chunks - 1) / chunks);
  std::vector<int64_t> counts(size_t(chunks), 0);
  StridedWalk<1> walk(t.sizes(), {t.strides()});
  dispatch_dtype(t.dtype(), [&]<typename T>() {
    const T* p = static_cast<const T*>(t.data_ptr());
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        int64_t count = 0;
        walk.runs(k * c.size, std::min(n, (k + 1) * c.size), {0}, [&](const auto& o, const auto& s, int64_t m) {
          for (int64_t i = 0; i < m; ++i) count += is_nonzero(p[o[0] + i * s[0]]);
        });
        counts[size_t(k)] = count;
      }
    });
  });
  c.starts.resize(counts.size());
  for (size_t k = 0; k < counts.size(); ++k) {
    c.starts[k] = c.total;
    c.total += counts[k];
  }
  return c;
}

namespace {

MF_REGISTER_OP(OpDef{
    .name = "nonzero",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{
          {{count_chunks(in[0], "nonzero", true).total, in[0].dim()}, DType::Int64, in[0].device()}};
    },
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
    .shape_depends_on_data = true,
});

void check_mask(const char* op, const Tensor& x, const Tensor& mask) {
  MF_CHECK(mask.dtype() == DType::Bool, TypeError, op, ": expected a bool mask, got ", dtype_name(mask.dtype()));
  MF_CHECK(x.sizes() == mask.sizes(), ShapeError, op, ": the op takes a mask of the input's shape ",
           shape_str(x.sizes()), ", got ", shape_str(mask.sizes()), " (the functional form broadcasts)");
}

Tensor masked_select_backward(const Tensor& grad, const Tensor& mask);

// masked_select(x, mask): the elements of x where mask is true, row-major.
MF_REGISTER_OP(OpDef{
    .name = "masked_select",
    .inputs = {"input", "mask"},
    .infer = [](const TensorList& in, const Attrs&) {
      check_mask("masked_select", in[0], in[1]);
      return std::vector<TensorMeta>{{{count_chunks(in[1], "masked_select", true).total}, in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{masked_select_backward(ctx.grad_outputs[0], ctx.inputs[1]), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::broadcast_only(),
    .shape_depends_on_data = true,
});

// Zeros of the mask's shape with grad's values, in order, where mask is true.
MF_REGISTER_OP(OpDef{
    .name = "masked_select_backward",
    .inputs = {"grad", "mask"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[1].dtype() == DType::Bool, TypeError, "masked_select_backward: expected a bool mask");
      MF_CHECK(in[0].dim() == 1 && in[0].numel() == count_chunks(in[1], "masked_select_backward", true).total, ShapeError,
               "masked_select_backward: grad of shape ", shape_str(in[0].sizes()),
               " does not match the number of true elements of the mask");
      return std::vector<TensorMeta>{{in[1].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("masked_select");
      return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0], ctx.inputs[1]}), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::broadcast_only(),
    .shape_depends_on_data = true,
});

Tensor masked_select_backward(const Tensor& grad, const Tensor& mask) {
  static const OpDef& op = dispatch::op("masked_select_backward");
  return dispatch::apply_one(op, {grad, mask});
}

}  // namespace

Tensor masked_select(const Tensor& t, const Tensor& mask) {
  MF_CHECK(mask.dtype() == DType::Bool, TypeError, "masked_select: expected a bool mask, got ",
           dtype_name(mask.dtype()));
  const Shape shape = broadcast_shapes(t.sizes(), mask.sizes(), "masked_select");
  static const OpDef& op = dispatch::op("masked_select");
  return dispatch::apply_one(op, {expand(t, shape), expand(mask.detach(), shape)});
}

Tensor nonzero(const Tensor& t) {
  static const OpDef& op = dispatch::op("nonzero");
  return dispatch::apply_one(op, {t});
}

}  // namespace mf
