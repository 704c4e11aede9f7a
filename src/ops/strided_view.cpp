// Views with computed strides: as_strided and diagonal. The CPU kernel of
// as_strided_backward: backend/cpu/kernels/index_kernels.cpp.
#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"
#include "backend/common/index_kernels.h"
#include "backend/common/layout_kernels.h"

namespace mf {
namespace {

// --- diagonal ------------------------------------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "diagonal",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& a) {
      Tensor v = layout_kernels::diagonal_view(in[0], a.get_int("offset"), a.get_int("dim1"), a.get_int("dim2"));
      return std::vector<TensorMeta>{{v.sizes(), in[0].dtype(), in[0].device()}};
    },
    .view = [](const TensorList& in, const Attrs& a) {
      return TensorList{layout_kernels::diagonal_view(in[0], a.get_int("offset"), a.get_int("dim1"), a.get_int("dim2"))};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("diagonal_backward");
      Attrs attrs = ctx.attrs;
      attrs.set("input_sizes", ctx.input_metas[0].sizes);
      return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0]}, attrs)};
    },
    .sbp = sbp::broadcast_only(),
});

// Zeros of input_sizes with the diagonal set from grad.
MF_REGISTER_OP(OpDef{
    .name = "diagonal_backward",
    .inputs = {"grad"},
    .infer = [](const TensorList& in, const Attrs& a) {
      return std::vector<TensorMeta>{{a.get_shape("input_sizes"), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Attrs& a = ctx.attrs;
      return TensorList{diagonal(ctx.grad_outputs[0], a.get_int("offset"), a.get_int("dim1"), a.get_int("dim2"))};
    },
    .sbp = sbp::broadcast_only(),
});

// --- as_strided ------------------------------------------------------------------------------

// Note [as_strided gradient]: as_strided reads storage positions, so its
// gradient goes through storage: the gradient (laid out by the output's
// geometry) is summed into a buffer over the storage positions, and the
// input's gradient is read back from the buffer by the input's geometry.
// Where the input itself reads one position more than once (an expanded
// input), the sum is split evenly between those elements. The op is
// written for any pair of geometries ("src" scattered, "dst" gathered) and
// a choice of which one's repeats divide; its adjoint is the same op with
// the geometries swapped, so double backward needs no other op.
using Geometry = index_kernels::StorageGeometry;

Geometry geometry(const Attrs& a, const std::string& prefix) { return Geometry::of(a, prefix); }

void set_geometry(Attrs& a, const std::string& prefix, const Geometry& g) {
  a.set(prefix + "_size", g.size);
  a.set(prefix + "_stride", g.stride);
  a.set(prefix + "_offset", g.offset);
}

Tensor as_strided_scatter_gather(const Tensor& grad, const Geometry& src, const Geometry& dst, bool divide_by_dst) {
  static const OpDef& op = dispatch::op("as_strided_backward");
  Attrs attrs;
  set_geometry(attrs, "src", src);
  set_geometry(attrs, "dst", dst);
  attrs.set("divide_by_dst", divide_by_dst);
  return dispatch::apply_one(op, {grad}, attrs);
}

MF_REGISTER_OP(OpDef{
    .name = "as_strided_backward",
    .inputs = {"grad"},
    .infer = [](const TensorList& in, const Attrs& a) {
      MF_CHECK(in[0].sizes() == a.get_shape("src_size"), ShapeError, "as_strided_backward: grad of shape ",
               shape_str(in[0].sizes()), " does not match ", shape_str(a.get_shape("src_size")));
      return std::vector<TensorMeta>{{a.get_shape("dst_size"), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      const Attrs& a = ctx.attrs;
      return TensorList{as_strided_scatter_gather(ctx.grad_outputs[0], geometry(a, "dst"), geometry(a, "src"),
                                                  !a.get_bool("divide_by_dst"))};
    },
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "as_strided",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& a) {
      return std::vector<TensorMeta>{{a.get_shape("size"), in[0].dtype(), in[0].device()}};
    },
    .view = [](const TensorList& in, const Attrs& a) {
      return TensorList{make_view(in[0], a.get_shape("size"), a.get_shape("stride"), a.get_int("storage_offset"))};
    },
    .backward = [](const BackwardContext& ctx) {
      const Attrs& a = ctx.attrs;
      Geometry out{a.get_shape("size"), a.get_shape("stride"), a.get_int("storage_offset")};
      Geometry input{ctx.input_metas[0].sizes, a.get_shape("input_strides"), a.get_int("input_offset")};
      return TensorList{as_strided_scatter_gather(ctx.grad_outputs[0], out, input, true)};
    },
    .sbp = sbp::broadcast_only(),
});

}  // namespace

Tensor as_strided(const Tensor& t, const Shape& size, const Shape& stride, std::optional<int64_t> storage_offset) {
  MF_CHECK(size.size() == stride.size(), ShapeError, "as_strided: mismatch in length of strides ", shape_str(stride),
           " and shape ", shape_str(size));
  const int64_t offset = storage_offset.value_or(t.storage_offset());
  MF_CHECK(offset >= 0, ValueError, "as_strided: storage offset must be non-negative, got ", offset);
  int64_t last = offset;
  for (size_t d = 0; d < size.size(); ++d) {
    MF_CHECK(size[d] >= 0, ValueError, "as_strided: sizes must be non-negative, got ", shape_str(size));
    MF_CHECK(stride[d] >= 0, ValueError, "as_strided: negative strides are not supported, got ", shape_str(stride));
    if (size[d] > 0)
      last = checked_add(last, checked_mul(size[d] - 1, stride[d], "as_strided", "the storage size needed"),
                         "as_strided", "the storage size needed");
  }
  const int64_t storage_elements = int64_t(t.storage()->nbytes() / t.element_size());
  MF_CHECK(shape_numel(size) == 0 || last < storage_elements, ShapeError, "as_strided: sizes ", shape_str(size),
           ", strides ", shape_str(stride), " and storage offset ", offset, " need a storage of ", last + 1,
           " elements, but the storage has ", storage_elements);
  static const OpDef& op = dispatch::op("as_strided");
  return dispatch::apply_one(op, {t}, {{"size", size}, {"stride", stride}, {"storage_offset", offset},
                                       {"input_strides", t.strides()}, {"input_offset", t.storage_offset()}});
}

Tensor diagonal(const Tensor& t, int64_t offset, int64_t dim1, int64_t dim2) {
  MF_CHECK(t.dim() >= 2, ShapeError, "diagonal: the input must have at least 2 dimensions, got ", t.dim());
  const int64_t d1 = wrap_dim(dim1, t.dim(), "diagonal"), d2 = wrap_dim(dim2, t.dim(), "diagonal");
  MF_CHECK(d1 != d2, ValueError, "diagonal: dimensions cannot be identical ", dim1, ", ", dim2);
  static const OpDef& op = dispatch::op("diagonal");
  return dispatch::apply_one(op, {t}, {{"offset", offset}, {"dim1", d1}, {"dim2", d2}});
}

}  // namespace mf
