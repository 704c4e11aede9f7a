// embedding: rows of a (num_embeddings, dim) table picked by integer
// indices; its backward adds gradient rows back into a zero table.
// embedding_bag: sums, means or maxima of bags of rows, as a composite.
// CPU kernels: backend/cpu/kernels/embedding.cpp.
#include "meshflow/checked_size.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/functional.h"
#include "meshflow/ops/nn.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

// SBP rules: each index looks up its own row, so a split of the indices
// splits the output; a weight split along the embedding dim splits the
// output's last dim. Backward: split indices give a partial weight
// gradient, a split embedding dim a split one.
std::vector<SbpSignature> embedding_sbp(const TensorList& in, const std::vector<Shape>&, const Attrs&, int64_t) {
  const int64_t nd = in[1].dim();
  std::vector<SbpSignature> sigs;
  for (int64_t d = 0; d < nd; ++d) sigs.push_back({{Sbp::broadcast(), Sbp::split(d)}, {Sbp::split(d)}});
  sigs.push_back({{Sbp::split(1), Sbp::broadcast()}, {Sbp::split(nd)}});
  return sigs;
}

std::vector<SbpSignature> embedding_backward_sbp(const TensorList& in, const std::vector<Shape>&, const Attrs&,
                                                 int64_t) {
  const int64_t nd = in[1].dim();
  std::vector<SbpSignature> sigs;
  for (int64_t d = 0; d < nd; ++d) sigs.push_back({{Sbp::split(d), Sbp::split(d)}, {Sbp::partial_sum()}});
  sigs.push_back({{Sbp::split(nd), Sbp::broadcast()}, {Sbp::split(1)}});
  return sigs;
}

MF_REGISTER_OP(OpDef{
    .name = "embedding",
    .inputs = {"weight", "indices"},
    .infer = [](const TensorList& in, const Attrs&) {
      Shape shape = in[1].sizes();
      shape.push_back(in[0].sizes()[1]);
      return std::vector<TensorMeta>{{shape, in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("embedding_backward");
      TensorList grads(2);
      if (ctx.needs_input_grad[0])
        grads[0] = dispatch::apply_one(op, {ctx.grad_outputs[0], ctx.inputs[1]},
                                       {{"num_weights", ctx.input_metas[0].sizes[0]},
                                        {"padding_idx", ctx.attrs.get_int("padding_idx")}});
      return grads;
    },
    .save_inputs = 0b10,
    .sbp = embedding_sbp,
});

MF_REGISTER_OP(OpDef{
    .name = "embedding_backward",
    .inputs = {"grad", "indices"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Tensor& g = in[0];
      MF_CHECK(is_floating(g.dtype()), TypeError, "embedding_backward: expected a floating-point gradient, got ",
               dtype_name(g.dtype()));
      return std::vector<TensorMeta>{{{attrs.get_int("num_weights"), g.sizes().back()}, g.dtype(), g.device()}};
    },
    // Linear in grad: the derivative w.r.t. grad gathers the incoming
    // gradient's rows, zero for padding_idx.
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("embedding");
      TensorList grads(2);
      if (!ctx.needs_input_grad[0]) return grads;
      const Tensor& indices = ctx.inputs[1];
      grads[0] = dispatch::apply_one(op, {ctx.grad_outputs[0], indices}, {{"padding_idx", int64_t(-1)}});
      const int64_t padding = ctx.attrs.get_int("padding_idx");
      if (padding >= 0) grads[0] = mul(grads[0], unsqueeze(ne(indices, Scalar(padding)), -1));
      return grads;
    },
    .save_inputs = 0b10,
    .sbp = embedding_backward_sbp,
});

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  static const OpDef& op = dispatch::op("embedding");
  MF_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, TypeError,
           "embedding: expected indices of dtype int64 or int32, got ", dtype_name(indices.dtype()));
  MF_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be 2-d (num_embeddings, embedding_dim), got shape ",
           shape_str(weight.sizes()));
  const int64_t rows = weight.sizes()[0];
  int64_t padding = -1;
  if (padding_idx) {
    MF_CHECK(*padding_idx < rows && *padding_idx >= -rows, ValueError, "embedding: padding_idx (", *padding_idx,
             ") must be within num_embeddings (", rows, ")");
    padding = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  return dispatch::apply_one(op, {weight, indices}, {{"padding_idx", padding}});
}

// --- embedding_bag ---------------------------------------------------------------------
// Note [embedding_bag as a composite]: the bags are sums, means or maxima
// of embedding rows, so embedding_bag is the embedding op followed by a
// segment reduction into (bags + 1, dim): row i goes to its bag's row
// (from the offsets: a cumulative sum of marks at each bag's start), and a
// row that is padding_idx or lies past include_last_offset's end goes to
// the extra last row, which is dropped. Sums and means are index_adds,
// maxima a scatter_reduce; every piece has its own backward, so the
// gradient reaches the weight (never its padding row) and
// per_sample_weights.

namespace {

// Bag of every flat position: (N,) int64, in [0, bags], on the input's
// device; bags is the dropped row. 1-d offsets are checked on the host
// (a copy from a device waits for it, as PyTorch's checks do).
Tensor bag_ids_of(const Tensor& input, const Tensor& offsets, bool include_last_offset, int64_t& bags) {
  const char* name = "embedding_bag";
  if (input.dim() == 2) {
    MF_CHECK(!offsets.defined(), ValueError, name,
             ": if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed length "
             "sequences. However, found offsets of shape ", shape_str(offsets.sizes()));
    bags = input.size(0);
    const int64_t n = input.size(1), rows = checked_mul(bags, n, name, "the number of indices");
    return n == 0 ? zeros({0}, TensorOptions{.dtype = kInt64, .device = input.device()})
                  : div(arange(rows, kInt64, input.device()), Scalar(n), "floor");
  }
  MF_CHECK(input.dim() == 1, ValueError, name, ": input has to be 1D or 2D Tensor, but got Tensor of dimension ",
           input.dim());
  MF_CHECK(offsets.defined() && offsets.dim() == 1, ValueError, name, ": offsets has to be a 1D Tensor but got ",
           offsets.defined() ? shape_str(offsets.sizes()) : std::string("None"));
  MF_CHECK(is_integral(offsets.dtype()) && offsets.dtype() != kBool, TypeError, name,
           ": expected offsets of an integer dtype, got ", dtype_name(offsets.dtype()));
  const int64_t n = input.size(0);
  const Tensor starts = contiguous(to(to(offsets.detach(), Device()), kInt64));
  const int64_t count = starts.numel();
  MF_CHECK(!include_last_offset || count >= 1, ValueError, name,
           ": include_last_offset needs at least one offset (the end of the last bag)");
  bags = include_last_offset ? count - 1 : count;
  const int64_t* p = starts.numel() ? starts.data<int64_t>() : nullptr;
  for (int64_t i = 0; i < count; ++i) {
    MF_CHECK(i > 0 || p[0] == 0, ValueError, name, ": offsets[0] has to be 0, i.e., the first sequence in the "
             "mini-batch has to start from position 0. However, got ", p[0]);
    MF_CHECK(i == 0 || p[i] >= p[i - 1], ValueError, name, ": offsets must be non-decreasing, got offsets[", i - 1,
             "] = ", p[i - 1], " and offsets[", i, "] = ", p[i]);
    MF_CHECK(p[i] <= n, IndexError, name, ": offsets[", i, "] (", p[i], ") can not be greater than input's length (",
             n, ")");
  }
  if (n == 0) return zeros({0}, TensorOptions{.dtype = kInt64, .device = input.device()});
  // A mark at every bag start (and at include_last_offset's end: later rows
  // go to the dropped row), summed: the bag of each position.
  Tensor marks = index_add(zeros({n + 1}, TensorOptions{.dtype = kInt64}), 0, starts, ones({count}, TensorOptions{.dtype = kInt64}));
  return to(sub(narrow(cumsum(marks, 0), 0, 0, n), Scalar(1)), input.device());
}

}  // namespace

Tensor embedding_bag(const Tensor& input, const Tensor& weight, const Tensor& offsets, const std::string& mode,
                     const Tensor& per_sample_weights, bool include_last_offset, std::optional<int64_t> padding_idx) {
  const char* name = "embedding_bag";
  MF_CHECK(input.defined() && weight.defined(), ValueError, name, ": input and weight must be given");
  MF_CHECK(input.dtype() == kInt64 || input.dtype() == kInt32, TypeError, name,
           ": expected input of dtype int64 or int32, got ", dtype_name(input.dtype()));
  MF_CHECK(weight.dim() == 2, ShapeError, name, ": weight must be 2-d (num_embeddings, embedding_dim), got shape ",
           shape_str(weight.sizes()));
  MF_CHECK(mode == "sum" || mode == "mean" || mode == "max", ValueError, name,
           ": mode has to be one of sum, mean or max, got ", mode);
  if (per_sample_weights.defined()) {
    MF_CHECK(mode == "sum", ValueError, name, ": per_sample_weights was not None. per_sample_weights is only "
             "supported for mode='sum' (got mode='", mode, "')");
    MF_CHECK(per_sample_weights.sizes() == input.sizes(), ShapeError, name,
             ": per_sample_weights must have the input's shape ", shape_str(input.sizes()), ", got ",
             shape_str(per_sample_weights.sizes()));
    MF_CHECK(per_sample_weights.dtype() == weight.dtype(), TypeError, name,
             ": per_sample_weights must have the weight's dtype ", dtype_name(weight.dtype()), ", got ",
             dtype_name(per_sample_weights.dtype()));
  }
  const int64_t rows = weight.size(0), dim = weight.size(1);
  int64_t bags = 0;
  const Tensor flat = reshape(input, {-1});
  Tensor ids = bag_ids_of(input, offsets, include_last_offset, bags);
  if (padding_idx) {
    MF_CHECK(*padding_idx < rows && *padding_idx >= -rows, ValueError, name, ": padding_idx (", *padding_idx,
             ") must be within num_embeddings (", rows, ")");
    const int64_t padding = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
    ids = where(eq(flat, Scalar(padding)), Scalar(bags), ids);
  }
  Tensor values = embedding(flat, weight);  // (N, dim)
  if (per_sample_weights.defined()) values = mul(values, unsqueeze(reshape(per_sample_weights, {-1}), -1));
  const TensorOptions options{.dtype = weight.dtype(), .device = weight.device()};
  const Tensor empty_bags = zeros({checked_add(bags, 1, name, "the number of bags"), dim}, options);
  Tensor out;
  if (mode == "max") {
    out = scatter_reduce(empty_bags, 0, expand(unsqueeze(ids, -1), {ids.numel(), dim}), values, "amax", false);
  } else {
    out = index_add(empty_bags, 0, ids, values);
    if (mode == "mean") {
      Tensor counts = index_add(zeros({bags + 1}, options), 0, ids, ones({ids.numel()}, options));
      out = div(out, unsqueeze(clamp_min(counts, Scalar(1)), -1));
    }
  }
  return narrow(out, 0, 0, bags);
}

}  // namespace mf
