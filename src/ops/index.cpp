// Indexing along one dim: index_select, index_add, gather, scatter,
// scatter_add, scatter_reduce.
#include <cstring>
#include <limits>
#include <vector>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"
#include "backend/cpu/kernels/index_kernels.h"

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

// Throws IndexError naming the first index outside [0, size).
void check_indices(const Tensor& index, int64_t dim, int64_t size, const char* name) {
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
}

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
  check_indices(index, dim, size, name);
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

// --- scatter_reduce ---------------------------------------------------------------------
// Note [scatter_reduce]: y = self, then every src element is combined into
// y at its index with `reduce` (sum, prod, mean, amax, amin). Without
// include_self, an element that receives any src value starts from the
// reduction's identity instead of self; mean divides by the number of
// values combined (self counting once when included; integers floor). NaN
// wins amax and amin, as in PyTorch. Lines along dim run on one thread, in
// order, so the result does not depend on the thread count.

enum class Reduce { Sum, Prod, Mean, Amax, Amin };

Reduce reduce_of(const std::string& r) {
  if (r == "sum") return Reduce::Sum;
  if (r == "prod") return Reduce::Prod;
  if (r == "mean") return Reduce::Mean;
  if (r == "amax") return Reduce::Amax;
  if (r == "amin") return Reduce::Amin;
  MF_CHECK(false, ValueError, "scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got ",
           r);
  return Reduce::Sum;
}

template <typename T>
T combine(Reduce r, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return r == Reduce::Prod || r == Reduce::Amin ? (a && b) : (a || b);
  } else {
    using A = acc_type<T>;
    const A x = A(a), y = A(b);
    switch (r) {
      case Reduce::Prod: return T(x * y);
      case Reduce::Amax: return (y != y || y > x) ? b : a;  // NaN in b wins; NaN in a stays
      case Reduce::Amin: return (y != y || y < x) ? b : a;
      default:
        if constexpr (std::is_integral_v<T>) return T(uint64_t(int64_t(a)) + uint64_t(int64_t(b)));  // wraps
        else return T(x + y);
    }
  }
}

template <typename T>
T identity_of(Reduce r) {
  if (r == Reduce::Prod) return T(1);
  if (r != Reduce::Amax && r != Reduce::Amin) return T(0);
  const bool low = r == Reduce::Amax;
  if constexpr (std::is_integral_v<T>) {
    return low ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  } else {  // float, double, Half, BFloat16
    const double inf = std::numeric_limits<double>::infinity();
    return T(low ? -inf : inf);
  }
}

void scatter_reduce_into(Tensor& y, const Tensor& self, const Tensor& index, const Tensor& src, int64_t dim,
                         Reduce reduce, bool include_self) {
  check_indices(index, dim, y.sizes()[size_t(dim)], "scatter_reduce");
  cpu::copy_cast(y, self);
  if (index.numel() == 0) return;
  const int64_t* ip = index.data<int64_t>();
  const int64_t line = index.sizes()[size_t(dim)];
  const int64_t index_step = index.strides()[size_t(dim)], out_step = y.strides()[size_t(dim)];
  const int64_t src_step = src.strides()[size_t(dim)];
  StridedWalk<3> lines(with_size(index.sizes(), dim, 1), {index.strides(), strides_without(y, dim), src.strides()});
  const int64_t grain = std::max<int64_t>(1, kGrainSize / line);
  // Visits every (output element, src element) pair, line by line.
  auto each = [&](auto&& visit) {
    parallel_for(0, lines.numel(), grain, [&](int64_t b, int64_t e) {
      lines.runs(b, e, {0, 0, 0}, [&](const auto& o, const auto& s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k < line; ++k)
            visit(o[1] + i * s[1] + ip[o[0] + i * s[0] + k * index_step] * out_step, o[2] + i * s[2] + k * src_step);
      });
    });
  };
  // How many src values each output element receives (y is the op's own
  // contiguous output, so its offsets index this vector).
  std::vector<int64_t> counts;
  if (reduce == Reduce::Mean || !include_self) {
    counts.assign(size_t(y.numel()), 0);
    each([&](int64_t at, int64_t) { ++counts[size_t(at)]; });
  }
  dispatch_dtype(y.dtype(), [&]<typename T>() {
    T* yp = static_cast<T*>(y.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    if (!include_self) {
      const T start = identity_of<T>(reduce);
      for (size_t at = 0; at < counts.size(); ++at)
        if (counts[at] > 0) yp[at] = start;
    }
    each([&](int64_t at, int64_t from) { yp[at] = combine(reduce, yp[at], sp[from]); });
    if (reduce != Reduce::Mean) return;
    if constexpr (!std::is_same_v<T, bool>) {
      for (size_t at = 0; at < counts.size(); ++at) {
        const int64_t n = counts[at] + (include_self ? 1 : 0);
        if (counts[at] == 0 || n == 1) continue;
        if constexpr (std::is_integral_v<T>) {
          const int64_t v = int64_t(yp[at]);
          yp[at] = T(v / n - ((v % n != 0) && ((v < 0) != (n < 0)) ? 1 : 0));  // floor division
        } else {
          yp[at] = T(acc_type<T>(yp[at]) / acc_type<T>(n));
        }
      }
    }
  });
}

// PyTorch's scatter_reduce backward, written with ops.
TensorList scatter_reduce_backward(const BackwardContext& ctx) {
  const Tensor& grad = ctx.grad_outputs[0];
  const Tensor &self = ctx.inputs[0], &index = ctx.inputs[1], &src = ctx.inputs[2], &result = ctx.outputs[0];
  const int64_t dim = ctx.attrs.get_int("dim");
  const Reduce reduce = reduce_of(ctx.attrs.get_string("reduce"));
  const bool include_self = ctx.attrs.get_bool("include_self");
  Tensor grad_self, grad_src;
  switch (reduce) {
    case Reduce::Sum:
      grad_self = grad;
      grad_src = gather(grad, dim, index);
      break;
    case Reduce::Mean: {
      Tensor n = include_self ? ones_like(grad) : zeros_like(grad);
      n = scatter_add(n, dim, index, ones_like(src));
      n = masked_fill(n, eq(n, Scalar(0)), Scalar(1));
      grad_self = div(grad, n);
      grad_src = div(gather(grad, dim, index), gather(n, dim, index));
      break;
    }
    case Reduce::Prod: {
      // Zeros are masked so that a single zero's gradient is the product of
      // the others (Note [scatter_reduce]); two or more zeros give 0.
      const Tensor masked_self = masked_fill(self, eq(self, Scalar(0)), Scalar(1));
      const Tensor masked_self_result = scatter_reduce(masked_self, dim, index, src, "prod", include_self);
      grad_self = div(mul(grad, masked_self_result), masked_self);
      const Tensor src_zero = eq(src, Scalar(0));
      const Tensor zeros_at =
          gather(scatter_add(zeros_like(self), dim, index, to(src_zero, self.dtype())), dim, index);
      const Tensor single_zero = logical_and(src_zero, eq(zeros_at, Scalar(1)));
      const Tensor masked_src_result =
          scatter_reduce(self, dim, index, masked_fill(src, single_zero, Scalar(1)), "prod", include_self);
      grad_src = where(single_zero, gather(mul(grad, masked_src_result), dim, index),
                       div(gather(mul(grad, result), dim, index), masked_fill(src, src_zero, Scalar(1))));
      break;
    }
    default: {  // amax, amin: the gradient is shared equally by the values equal to the result
      const Tensor value = gather(result, dim, index);
      const Tensor self_is_result = to(eq(self, result), self.dtype());
      const Tensor src_is_result = to(eq(src, value), self.dtype());
      const Tensor shared = div(grad, scatter_add(self_is_result, dim, index, src_is_result));
      grad_self = mul(self_is_result, shared);
      grad_src = mul(src_is_result, gather(shared, dim, index));
      break;
    }
  }
  if (!include_self) grad_self = scatter(grad_self, dim, index, Scalar(0));
  return {ctx.needs_input_grad[0] ? grad_self : Tensor(), Tensor(), ctx.needs_input_grad[2] ? grad_src : Tensor()};
}

MF_REGISTER_OP(OpDef{
    .name = "scatter_reduce",
    .inputs = {"self", "index", "src"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Reduce r = reduce_of(attrs.get_string("reduce"));
      MF_CHECK(r != Reduce::Mean || in[0].dtype() != kBool, TypeError,
               "scatter_reduce: reduce='mean' is not implemented for bool tensors");
      return infer_scatter("scatter_reduce", in, attrs);
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const int64_t dim = wrap_dim(attrs.get_int("dim"), out[0].dim(), "scatter_reduce");
      scatter_reduce_into(out[0], in[0], in[1], in[2], dim, reduce_of(attrs.get_string("reduce")),
                          attrs.get_bool("include_self"));
    },
    .backward = scatter_reduce_backward,
    .save_inputs = 0b111,
    .save_outputs = 0b1,
    .sbp = sbp::broadcast_only(),
});

}  // namespace

Tensor scatter_reduce(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self) {
  reduce_of(reduce);
  Tensor idx = as_index(index, "scatter_reduce");
  static const OpDef& op = dispatch::op("scatter_reduce");
  const int64_t d = wrap_dim(dim, t.dim(), "scatter_reduce");
  Attrs attrs{{"dim", d}, {"reduce", reduce}, {"include_self", include_self}};
  const bool zero_d = t.dim() == 0 || idx.dim() == 0 || src.dim() == 0;
  if (!zero_d) return dispatch::apply_one(op, {t, idx, src}, attrs);
  MF_CHECK(t.dim() <= 1 && idx.dim() <= 1 && src.dim() <= 1, ShapeError,
           "scatter_reduce: index tensor must have the same number of dimensions as the input tensor (", idx.dim(),
           " vs ", t.dim(), ")");
  attrs.set("dim", 0);
  Tensor out = dispatch::apply_one(op, {as_1d(t), as_1d(idx), as_1d(src)}, attrs);
  return t.dim() == 0 ? reshape(out, {}) : out;
}

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
