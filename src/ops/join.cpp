// Joining and splitting: cat, stack, split, chunk, unbind. Splits are views
// (narrow/select); cat copies, and its backward narrows the gradient.
// cat's CPU kernel: backend/cpu/kernels/cat.cpp.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "ops/join_common.h"

namespace mf {
namespace {

using join_detail::first_kept;
using join_detail::is_skipped;

std::vector<TensorMeta> infer_cat(const TensorList& in, const Attrs& attrs) {
  MF_CHECK(!in.empty(), ValueError, "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < in.size(); ++i)
    MF_CHECK(in[i].dtype() == in[0].dtype(), TypeError, "cat: the op takes tensors of one dtype, got ",
             dtype_name(in[0].dtype()), " and ", dtype_name(in[i].dtype()), " (tensor ", i,
             "); the functional cat promotes");
  const Tensor* ref = first_kept(in);
  if (!ref) return {{{0}, in[0].dtype(), in[0].device()}};
  const int64_t dim = wrap_dim(attrs.get_int("dim"), ref->dim(), "cat");
  Shape out = ref->sizes();
  out[size_t(dim)] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    if (is_skipped(t)) continue;
    MF_CHECK(t.dim() == ref->dim(), ShapeError, "cat: tensors must have the same number of dimensions: got ",
             ref->dim(), " and ", t.dim(), " (tensor number ", i, " in the list)");
    for (int64_t d = 0; d < t.dim(); ++d)
      MF_CHECK(d == dim || t.sizes()[size_t(d)] == ref->sizes()[size_t(d)], ShapeError,
               "cat: sizes of tensors must match except in dimension ", dim, ". Expected size ",
               ref->sizes()[size_t(d)], " but got size ", t.sizes()[size_t(d)], " for tensor number ", i,
               " in the list");
    out[size_t(dim)] = checked_add(out[size_t(dim)], t.sizes()[size_t(dim)], "cat", "the concatenated size");
  }
  return {{out, in[0].dtype(), in[0].device()}};
}

MF_REGISTER_OP(OpDef{
    .name = "cat",
    .inputs = {"tensors"},
    .variadic = true,
    .infer = infer_cat,
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const auto& metas = ctx.input_metas;
      TensorList grads(metas.size());
      int64_t ref_dim = -1;
      for (const auto& m : metas)
        if (!(m.sizes.size() == 1 && m.sizes[0] == 0)) {
          ref_dim = int64_t(m.sizes.size());
          break;
        }
      int64_t offset = 0;
      for (size_t i = 0; i < metas.size(); ++i) {
        const Shape& s = metas[i].sizes;
        if (s.size() == 1 && s[0] == 0) {
          if (ctx.needs_input_grad[i]) grads[i] = zeros({0}, {.dtype = g.dtype(), .device = g.device()});
          continue;
        }
        const int64_t dim = wrap_dim(ctx.attrs.get_int("dim"), ref_dim, "cat");
        const int64_t len = s[size_t(dim)];
        if (ctx.needs_input_grad[i]) grads[i] = narrow(g, dim, offset, len);
        offset += len;
      }
      return grads;
    },
    .sbp = sbp::independent_of_attr("dim"),
});

}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim) {
  MF_CHECK(!tensors.empty(), ValueError, "cat: expected a non-empty list of tensors");
  DType dtype = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    MF_CHECK(tensors[i].defined(), Error, "cat: tensor number ", i, " in the list is undefined");
    MF_CHECK(tensors[i].dim() > 0, ShapeError, "cat: zero-dimensional tensor (at position ", i,
             ") cannot be concatenated");
    dtype = promote_types(dtype, tensors[i].dtype());
  }
  TensorList in;
  in.reserve(tensors.size());
  for (const auto& t : tensors) in.push_back(to(t, dtype));
  static const OpDef& op = dispatch::op("cat");
  return dispatch::apply_one(op, in, {{"dim", dim}});
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  MF_CHECK(!tensors.empty(), ValueError, "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    MF_CHECK(tensors[i].sizes() == tensors[0].sizes(), ShapeError, "stack: expects each tensor to be equal size, but got ",
             shape_str(tensors[0].sizes()), " at entry 0 and ", shape_str(tensors[i].sizes()), " at entry ", i);
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  TensorList parts;
  parts.reserve(tensors.size());
  for (const auto& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

// Note [Many views]: split, chunk and unbind return one view per part, and
// each view is a TensorImpl with sizes and strides of its own (a Python
// wrapper adds more). A count whose metadata alone exceeds the memory this
// process may use (the machine's, or a lower address-space limit) is refused
// as an allocation of that size would be, before any view is made, rather
// than filling memory one view at a time.
constexpr int64_t kViewBytes = 256;

void check_view_count(const char* op, int64_t count) {
  check_host_memory(op, double(count) * double(kViewBytes), "of view metadata");
}

TensorList split(const Tensor& t, int64_t split_size, int64_t dim) {
  MF_CHECK(t.dim() > 0, ShapeError, "split: expects at least a 1-dimensional tensor");
  MF_CHECK(split_size >= 0, ValueError, "split: split_size must be non-negative, got ", split_size);
  const int64_t d = wrap_dim(dim, t.dim(), "split");
  const int64_t n = t.sizes()[size_t(d)];
  MF_CHECK(split_size > 0 || n == 0, ValueError, "split: split_size can only be 0 if dimension size is 0, but got ",
           "dimension size of ", n);
  if (n == 0) return {t};
  check_view_count("split", n / split_size + (n % split_size != 0 ? 1 : 0));
  TensorList out;
  for (int64_t start = 0; start < n; start += split_size) out.push_back(narrow(t, d, start, std::min(split_size, n - start)));
  return out;
}

TensorList split(const Tensor& t, const Shape& split_sizes, int64_t dim) {
  MF_CHECK(t.dim() > 0, ShapeError, "split: expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "split");
  const int64_t n = t.sizes()[size_t(d)];
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    MF_CHECK(s >= 0, ValueError, "split: split_sizes must be non-negative, got ", shape_str(split_sizes));
    total = checked_add(total, s, "split", "the sum of split_sizes");
  }
  MF_CHECK(total == n, ShapeError, "split: split_sizes ", shape_str(split_sizes), " must sum exactly to ", n,
           " (the input tensor's size at dimension ", d, ")");
  TensorList out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(narrow(t, d, start, s));
    start += s;
  }
  return out;
}

TensorList chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  MF_CHECK(t.dim() > 0, ShapeError, "chunk: expects at least a 1-dimensional tensor");
  MF_CHECK(chunks > 0, ValueError, "chunk: chunks must be greater than 0, got ", chunks);
  const int64_t d = wrap_dim(dim, t.dim(), "chunk");
  const int64_t n = t.sizes()[size_t(d)];
  // An empty dim gives `chunks` empty views, as in PyTorch (Note [Many views]).
  if (n == 0) {
    check_view_count("chunk", chunks);
    return split(t, Shape(size_t(chunks), 0), d);
  }
  return split(t, n / chunks + (n % chunks != 0 ? 1 : 0), d);
}

TensorList unbind(const Tensor& t, int64_t dim) {
  MF_CHECK(t.dim() > 0, IndexError, "unbind: dimension specified as ", dim, " but tensor has no dimensions");
  const int64_t d = wrap_dim(dim, t.dim(), "unbind");
  check_view_count("unbind", t.sizes()[size_t(d)]);
  TensorList out;
  for (int64_t i = 0; i < t.sizes()[size_t(d)]; ++i) out.push_back(select(t, d, i));
  return out;
}

}  // namespace mf
