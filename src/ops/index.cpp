// Indexing along one dim: index_select, index_add, gather, scatter,
// scatter_add.
#include <cstring>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "ops/kernels/cpu/index_kernels.h"

namespace mf {
namespace {

using cpu::StridedWalk;

Tensor as_index(const Tensor& index, const char* op) {
  MF_CHECK(index.defined(), Error, op, ": index is undefined");
  MF_CHECK(is_integral(index.dtype()), TypeError, op, ": expected an integer index tensor, got ",
           dtype_name(index.dtype()));
  return to(index.detach(), DType::Int64);
}

Shape with_size(Shape s, int64_t dim, int64_t size) {
  s[size_t(dim)] = size;
  return s;
}

// --- index_select / index_add -----------------------------------------------------

MF_REGISTER_OP(OpDef{
    .name = "index_select",
    .inputs = {"input", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      MF_CHECK(in[1].dim() == 1 && in[1].dtype() == DType::Int64, ShapeError,
               "index_select: the op takes a 1-d int64 index");
      int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "index_select");
      MF_CHECK(in[0].dim() > 0, ShapeError, "index_select: the op takes a tensor with at least 1 dim");
      return std::vector<TensorMeta>{{with_size(in[0].sizes(), dim, in[1].numel()), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const Tensor& x = in[0];
      int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), "index_select");
      auto offsets = cpu::row_offsets({in[1]}, {x.sizes()[size_t(dim)]}, {x.strides()[size_t(dim)]}, {dim}, false,
                                      "index_select");
      cpu::gather_rows(x, dim, 1, offsets, out[0]);
    },
    .backward = [](const BackwardContext& ctx) {
      const auto& m = ctx.input_metas[0];
      int64_t dim = ctx.attrs.get_int("dim");
      return TensorList{index_add(zeros(m.sizes, {.dtype = m.dtype, .device = m.device}), dim, ctx.inputs[1],
                                  ctx.grad_outputs[0]),
                        Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

MF_REGISTER_OP(OpDef{
    .name = "index_add",
    .inputs = {"self", "index", "source"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Tensor &self = in[0], &index = in[1], &src = in[2];
      MF_CHECK(index.dim() == 1 && index.dtype() == DType::Int64, ShapeError, "index_add: the op takes a 1-d int64 index");
      MF_CHECK(self.dim() > 0, ShapeError, "index_add: the op takes a tensor with at least 1 dim");
      int64_t dim = wrap_dim(attrs.get_int("dim"), self.dim(), "index_add");
      MF_CHECK(src.dtype() == self.dtype(), TypeError, "index_add: self (", dtype_name(self.dtype()), ") and source (",
               dtype_name(src.dtype()), ") must have the same dtype");
      Shape want = with_size(self.sizes(), dim, index.numel());
      MF_CHECK(src.sizes() == want, ShapeError, "index_add: source of shape ", shape_str(src.sizes()),
               " must have shape ", shape_str(want), " (self's shape with dim ", dim, " set to the index length)");
      return std::vector<TensorMeta>{{self.sizes(), self.dtype(), self.device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      Tensor& y = out[0];
      int64_t dim = wrap_dim(attrs.get_int("dim"), y.dim(), "index_add");
      auto offsets = cpu::row_offsets({in[1]}, {y.sizes()[size_t(dim)]}, {y.strides()[size_t(dim)]}, {dim}, false,
                                      "index_add");
      cpu::copy_cast(y, in[0]);
      cpu::put_rows(y, dim, 1, offsets, {in[1].numel()}, in[2], true);
    },
    .backward = [](const BackwardContext& ctx) {
      TensorList grads(3);
      const Tensor& g = ctx.grad_outputs[0];
      if (ctx.needs_input_grad[0]) grads[0] = g;
      if (ctx.needs_input_grad[2]) grads[2] = index_select(g, ctx.attrs.get_int("dim"), ctx.inputs[1]);
      return grads;
    },
    .save_inputs = 0b010,
    .sbp = sbp::broadcast_only(),
});

// 0-d tensors index like 1-d tensors of one element.
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? reshape(t, {1}) : t; }

// --- gather / scatter ---------------------------------------------------------------

// gather/scatter shape rules: index has t's number of dims, and
// index.size(d) <= t.size(d) for d != dim (<= src.size(d) for every d).
void check_scatter_gather(const char* op, const Tensor& t, int64_t dim, const Tensor& index, const Tensor* src) {
  MF_CHECK(index.dtype() == DType::Int64, TypeError, op, ": expected an int64 index, got ", dtype_name(index.dtype()));
  MF_CHECK(index.dim() == t.dim(), ShapeError, op, ": index tensor must have the same number of dimensions as the ",
           "input tensor (", index.dim(), " vs ", t.dim(), ")");
  if (src)
    MF_CHECK(src->dim() == index.dim(), ShapeError, op, ": index tensor must have the same number of dimensions as ",
             "the src tensor (", index.dim(), " vs ", src->dim(), ")");
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t n = index.sizes()[size_t(d)];
    MF_CHECK(d == dim || n <= t.sizes()[size_t(d)], ShapeError, op, ": size of index ", shape_str(index.sizes()),
             " exceeds the input size ", shape_str(t.sizes()), " at dimension ", d, " (other than dim ", dim, ")");
    if (src)
      MF_CHECK(n <= src->sizes()[size_t(d)], ShapeError, op, ": size of index ", shape_str(index.sizes()),
               " exceeds the source size ", shape_str(src->sizes()), " at dimension ", d);
  }
  if (src)
    MF_CHECK(src->dtype() == t.dtype(), TypeError, op, ": self (", dtype_name(t.dtype()), ") and src (",
             dtype_name(src->dtype()), ") must have the same dtype");
}

Shape strides_without(const Tensor& t, int64_t dim) { return with_size(t.strides(), dim, 0); }

MF_REGISTER_OP(OpDef{
    .name = "gather",
    .inputs = {"input", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), "gather");
      check_scatter_gather("gather", in[0], dim, in[1], nullptr);
      return std::vector<TensorMeta>{{in[1].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const Tensor &x = in[0], &index = in[1];
      const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), "gather");
      const int64_t size = x.sizes()[size_t(dim)], stride = x.strides()[size_t(dim)];
      StridedWalk<3> walk(index.sizes(), {out[0].strides(), index.strides(), strides_without(x, dim)});
      const int64_t* ip = index.data_ptr() ? index.data<int64_t>() : nullptr;
      cpu::dispatch_itemsize(x.element_size(), [&]<typename E>() {
        const E* xp = static_cast<const E*>(x.data_ptr());
        E* op = static_cast<E*>(out[0].data_ptr());
        parallel_for(0, walk.numel(), kGrainSize, [&](int64_t b, int64_t e) {
          walk.runs(b, e, {0, 0, 0}, [&](const auto& o, const auto& s, int64_t n) {
            const int64_t* il = ip + o[1];
            const E* xl = xp + o[2];
            E* ol = op + o[0];
            auto check = [&](int64_t v) {
              if (uint64_t(v) >= uint64_t(size)) [[unlikely]]
                cpu::throw_index_out_of_range("gather", v, dim, size);
            };
            if (s[0] == 1 && s[1] == 1) {  // contiguous output and index (cross entropy's case)
              for (int64_t i = 0; i < n; ++i) check(il[i]);
              for (int64_t i = 0; i < n; ++i) ol[i] = xl[i * s[2] + il[i] * stride];
              return;
            }
            for (int64_t i = 0; i < n; ++i) {
              const int64_t v = il[i * s[1]];
              check(v);
              ol[i * s[0]] = xl[i * s[2] + v * stride];
            }
          });
        });
      });
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("gather_backward");
      return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0], ctx.inputs[1]},
                                            {{"dim", ctx.attrs.get_int("dim")}, {"input_sizes", ctx.input_metas[0].sizes}}),
                        Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
});

enum class ScatterMode { Copy, Add, Fill };

// y = base (zeros when base is null), then y[... index[i] ...] = src[i] (+=
// for Add; fill for Fill). Every index is checked before the first write.
// Lines along dim run on one thread, in order, so repeated indices never
// race and the last write wins.
void scatter_into(Tensor& y, const Tensor* base, const Tensor& full_index, const Tensor* src, int64_t dim,
                  ScatterMode mode, Scalar fill, const char* name) {
  const int64_t size = y.sizes()[size_t(dim)];
  // An index (and src) expanded along dim (stride 0) writes one element
  // `repeats` times: once for a copy or fill, its value times repeats for an
  // add (only for huge repeats, where iterating could never finish; smaller
  // ones add one by one, in PyTorch's order).
  Tensor index = full_index;
  int64_t repeats = 1;
  if (index.dim() > 0 && index.strides()[size_t(dim)] == 0 && index.sizes()[size_t(dim)] > 1 &&
      (!src || src->strides()[size_t(dim)] == 0) &&
      (mode != ScatterMode::Add || index.sizes()[size_t(dim)] > (int64_t(1) << 20))) {
    repeats = index.sizes()[size_t(dim)];
    index = make_view(index, with_size(index.sizes(), dim, 1), index.strides(), index.storage_offset());
  }
  const int64_t* ip = index.numel() ? index.data<int64_t>() : nullptr;
  StridedWalk<1> all(index.sizes(), {index.strides()});
  parallel_for(0, all.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    all.runs(b, e, {0}, [&](const auto& o, const auto& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = ip[o[0] + i * s[0]];
        if (v < 0 || v >= size) [[unlikely]]
          cpu::throw_index_out_of_range(name, v, dim, size);
      }
    });
  });
  if (base) {
    cpu::copy_cast(y, *base);
  } else if (y.numel() > 0) {
    char* p = static_cast<char*>(y.data_ptr());  // zero bits are 0 in every dtype
    const int64_t bytes = y.numel() * int64_t(y.element_size());
    parallel_for(0, bytes, 1 << 20, [&](int64_t b, int64_t e) { std::memset(p + b, 0, size_t(e - b)); });
  }
  if (index.numel() == 0) return;
  const int64_t line = index.sizes()[size_t(dim)];
  const int64_t index_step = index.strides()[size_t(dim)], out_step = y.strides()[size_t(dim)];
  const int64_t src_step = src ? src->strides()[size_t(dim)] : 0;
  StridedWalk<3> lines(with_size(index.sizes(), dim, 1),
                       {index.strides(), strides_without(y, dim), src ? src->strides() : Shape(size_t(y.dim()), 0)});
  dispatch_dtype(y.dtype(), [&]<typename T>() {
    T* yp = static_cast<T*>(y.data_ptr());
    const T* sp = src ? static_cast<const T*>(src->data_ptr()) : nullptr;
    const T fill_value = fill.to<T>();
    parallel_for(0, lines.numel(), std::max<int64_t>(1, kGrainSize / line), [&](int64_t b, int64_t e) {
      lines.runs(b, e, {0, 0, 0}, [&](const auto& o, const auto& s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t* il = ip + o[0] + i * s[0];
          T* yl = yp + o[1] + i * s[1];
          for (int64_t k = 0; k < line; ++k) {
            T& dst = yl[il[k * index_step] * out_step];
            if (mode == ScatterMode::Fill) {
              dst = fill_value;
            } else {
              const T v = sp[o[2] + i * s[2] + k * src_step];
              if (mode == ScatterMode::Copy) dst = v;
              else if constexpr (std::is_same_v<T, bool>) dst = dst || v;
              else if constexpr (std::is_integral_v<T>)  // wraps, as repeated adds would
                dst = T(uint64_t(int64_t(dst)) + uint64_t(int64_t(v)) * uint64_t(repeats));
              else dst = T(acc_type<T>(dst) + acc_type<T>(v) * acc_type<T>(repeats));
            }
          }
        }
      });
    });
  });
}

KernelFn scatter_kernel(ScatterMode mode, const char* name) {
  return [mode, name](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const int64_t dim = wrap_dim(attrs.get_int("dim"), out[0].dim(), name);
    const Scalar fill = mode == ScatterMode::Fill ? attrs.get_scalar("value") : Scalar(0);
    scatter_into(out[0], &in[0], in[1], mode == ScatterMode::Fill ? nullptr : &in[2], dim, mode, fill, name);
  };
}

// The gradient of gather: zeros of the input's shape, grad added at index.
// (scatter_add into zeros, without reading a tensor of zeros.)
MF_REGISTER_OP(OpDef{
    .name = "gather_backward",
    .inputs = {"grad", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape& sizes = attrs.get_shape("input_sizes");
      Tensor input = make_meta(sizes, in[0].dtype(), in[0].device());
      const int64_t dim = wrap_dim(attrs.get_int("dim"), input.dim(), "gather_backward");
      check_scatter_gather("gather_backward", input, dim, in[1], &in[0]);
      return std::vector<TensorMeta>{{sizes, in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const int64_t dim = wrap_dim(attrs.get_int("dim"), out[0].dim(), "gather_backward");
      scatter_into(out[0], nullptr, in[1], &in[0], dim, ScatterMode::Add, Scalar(0), "gather_backward");
    },
    .backward = [](const BackwardContext& ctx) {
      return TensorList{gather(ctx.grad_outputs[0], ctx.attrs.get_int("dim"), ctx.inputs[1]), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::independent_of_attr("dim"),
    .output_shape_attr = "input_sizes",
});

// The gradient of src: grad gathered at index, zero where src is not read.
Tensor scatter_src_grad(const Tensor& grad, int64_t dim, const Tensor& index, const Shape& src_sizes) {
  Tensor g = gather(grad, dim, index);
  if (g.sizes() == src_sizes) return g;
  Shape pads;
  for (int64_t d = int64_t(src_sizes.size()) - 1; d >= 0; --d) {
    pads.push_back(0);
    pads.push_back(src_sizes[size_t(d)] - g.sizes()[size_t(d)]);
  }
  return pad(g, pads);
}

std::vector<TensorMeta> infer_scatter(const char* op, const TensorList& in, const Attrs& attrs) {
  int64_t dim = wrap_dim(attrs.get_int("dim"), in[0].dim(), op);
  check_scatter_gather(op, in[0], dim, in[1], in.size() > 2 ? &in[2] : nullptr);
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

MF_REGISTER_OP(OpDef{
    .name = "scatter",
    .inputs = {"self", "index", "src"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_scatter("scatter", in, attrs); },
    .cpu_kernel = scatter_kernel(ScatterMode::Copy, "scatter"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const int64_t dim = ctx.attrs.get_int("dim");
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = scatter(g, dim, ctx.inputs[1], Scalar(0));
      if (ctx.needs_input_grad[2]) grads[2] = scatter_src_grad(g, dim, ctx.inputs[1], ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b010,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "scatter_value",
    .inputs = {"self", "index"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_scatter("scatter", in, attrs); },
    .cpu_kernel = scatter_kernel(ScatterMode::Fill, "scatter"),
    .backward = [](const BackwardContext& ctx) {
      return TensorList{scatter(ctx.grad_outputs[0], ctx.attrs.get_int("dim"), ctx.inputs[1], Scalar(0)), Tensor()};
    },
    .save_inputs = 0b10,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "scatter_add",
    .inputs = {"self", "index", "src"},
    .infer = [](const TensorList& in, const Attrs& attrs) { return infer_scatter("scatter_add", in, attrs); },
    .cpu_kernel = scatter_kernel(ScatterMode::Add, "scatter_add"),
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      TensorList grads(3);
      if (ctx.needs_input_grad[0]) grads[0] = g;
      if (ctx.needs_input_grad[2])
        grads[2] = scatter_src_grad(g, ctx.attrs.get_int("dim"), ctx.inputs[1], ctx.input_metas[2].sizes);
      return grads;
    },
    .save_inputs = 0b010,
    .sbp = sbp::broadcast_only(),
});

}  // namespace

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  Tensor idx = as_index(index, "index_select");
  MF_CHECK(idx.dim() <= 1, ShapeError, "index_select: index is supposed to be a vector, got shape ",
           shape_str(idx.sizes()));
  static const OpDef& op = dispatch::op("index_select");
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "index_select");
    return reshape(dispatch::apply_one(op, {reshape(t, {1}), reshape(idx, {-1})}, {{"dim", 0}}), {});
  }
  return dispatch::apply_one(op, {t, reshape(idx, {-1})}, {{"dim", wrap_dim(dim, t.dim(), "index_select")}});
}

Tensor index_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, Scalar alpha) {
  Tensor idx = as_index(index, "index_add");
  MF_CHECK(idx.dim() <= 1, ShapeError, "index_add: index is supposed to be a vector, got shape ",
           shape_str(idx.sizes()));
  MF_CHECK(is_floating(t.dtype()) || !alpha.is_floating(), TypeError,
           "index_add: for integral input tensors, argument alpha must not be a floating point number");
  Tensor s = alpha.to_double() == 1.0 ? src : mul(src, alpha);
  static const OpDef& op = dispatch::op("index_add");
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "index_add");
    return reshape(dispatch::apply_one(op, {reshape(t, {1}), reshape(idx, {-1}), as_1d(s)}, {{"dim", 0}}), {});
  }
  return dispatch::apply_one(op, {t, reshape(idx, {-1}), s}, {{"dim", wrap_dim(dim, t.dim(), "index_add")}});
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& index) {
  Tensor idx = as_index(index, "gather");
  static const OpDef& op = dispatch::op("gather");
  int64_t d = wrap_dim(dim, t.dim(), "gather");
  if (t.dim() == 0 || idx.dim() == 0) {
    MF_CHECK(t.dim() <= 1 && idx.dim() <= 1, ShapeError, "gather: index tensor must have the same number of ",
             "dimensions as the input tensor (", idx.dim(), " vs ", t.dim(), ")");
    Tensor out = dispatch::apply_one(op, {as_1d(t), as_1d(idx)}, {{"dim", 0}});
    return idx.dim() == 0 ? reshape(out, {}) : out;
  }
  return dispatch::apply_one(op, {t, idx}, {{"dim", d}});
}

namespace {
Tensor scatter_like(const char* name, const Tensor& t, int64_t dim, const Tensor& index, const Tensor* src,
                    std::optional<Scalar> value) {
  Tensor idx = as_index(index, name);
  int64_t d = wrap_dim(dim, t.dim(), name);
  const OpDef& op = dispatch::op(value ? "scatter_value" : name);
  Attrs attrs{{"dim", d}};
  if (value) attrs.set("value", *value);
  const bool zero_d = t.dim() == 0 || idx.dim() == 0 || (src && src->dim() == 0);
  if (zero_d) {
    MF_CHECK(t.dim() <= 1 && idx.dim() <= 1 && (!src || src->dim() <= 1), ShapeError, name,
             ": index tensor must have the same number of dimensions as the input tensor (", idx.dim(), " vs ",
             t.dim(), ")");
    attrs.set("dim", 0);
  }
  TensorList in{zero_d ? as_1d(t) : t, zero_d ? as_1d(idx) : idx};
  if (src) in.push_back(zero_d ? as_1d(*src) : *src);
  Tensor out = dispatch::apply_one(op, in, attrs);
  return t.dim() == 0 ? reshape(out, {}) : out;
}
}  // namespace

Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_like("scatter", t, dim, index, &src, {});
}
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, Scalar value) {
  return scatter_like("scatter", t, dim, index, nullptr, value);
}
Tensor scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_like("scatter_add", t, dim, index, &src, {});
}

}  // namespace mf
