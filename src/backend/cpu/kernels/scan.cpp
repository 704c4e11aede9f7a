// The CPU kernels of cumsum and cumprod (src/ops/cumsum.cpp), and of
// cumprod's gradient. Floats accumulate in double, 16-bit floats in float
// and integers in wrapping 64-bit, like PyTorch's CPU kernels.
#include <vector>

#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/loops.h"
#include "backend/cpu/kernels/reduce.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"

namespace mf::cpu {
namespace {

using reduce_ops::from_acc;
using reduce_ops::sum_acc_t;

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

template <typename T, bool kProduct>
void scan_typed(const Tensor& x, Tensor& out, int64_t dim, bool reverse) {
  using Acc = cumsum_acc_t<T>;
  const Acc identity = kProduct ? Acc(1) : Acc(0);
  auto combine = [](Acc a, Acc v) { return kProduct ? Acc(a * v) : Acc(a + v); };
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
    IndexWalker in_walk(g.sizes, g.in_strides), out_walk(g.sizes, g.out_strides);
    parallel_for(0, lines, std::max<int64_t>(1, kGrainSize / n), [&](int64_t b, int64_t e) {
      IndexWalker in = in_walk, ow = out_walk;
      in.seek(b);
      ow.seek(b);
      for (int64_t l = b; l < e; ++l, in.next(), ow.next()) {
        const T* p = xp + in.offset;
        T* q = op + ow.offset;
        Acc acc = identity;
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = at(k);
          acc = combine(acc, to_acc<Acc>(p[i * s]));
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
  const IndexWalker in_walk(sz, ist), out_walk(sz, ost);
  const int64_t blocks = (lane_size + W - 1) / W;
  const int64_t units = lines / lane_size * blocks;
  parallel_for(0, units, std::max<int64_t>(1, kGrainSize / (n * std::min(W, lane_size))), [&](int64_t b, int64_t e) {
    IndexWalker in = in_walk, ow = out_walk;
    in.seek(b / blocks);
    ow.seek(b / blocks);
    std::vector<Acc> acc(static_cast<size_t>(W));
    for (int64_t u = b; u < e; ++u) {
      if (u != b && u % blocks == 0) in.next(), ow.next();
      const int64_t first = (u % blocks) * W, w = std::min(W, lane_size - first);
      const T* p = xp + in.offset + first * ls;
      T* q = op + ow.offset + first * los;
      std::fill(acc.begin(), acc.end(), identity);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = at(k);
        const T* row = p + i * s;
        T* orow = q + i * so;
        for (int64_t j = 0; j < w; ++j) {
          acc[size_t(j)] = combine(acc[size_t(j)], to_acc<Acc>(row[j * ls]));
          orow[j * los] = from_acc<T>(acc[size_t(j)]);
        }
      }
    }
  });
}

// Whether the lines of x (not 0-d) into out have more merged dims than the
// walk takes: x is then copied contiguous first, into the scratch.
bool needs_dense_copy(const Tensor& x, const Tensor& out, const Attrs& attrs, const char* op) {
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), op);
  return int64_t(line_geometry(x, out, dim).sizes.size()) > kMaxReduceDims;
}

template <bool kProduct>
int64_t scan_scratch(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const char* op = kProduct ? "cumprod" : "cumsum";
  if (in[0].numel() == 0 || in[0].dim() == 0) return 0;
  if (!needs_dense_copy(in[0], make_meta(out[0].sizes, out[0].dtype, out[0].device), attrs, op)) return 0;
  return ScratchLayout(op).add(in[0].sizes(), in[0].dtype()).bytes();
}

template <bool kProduct>
void scan_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const char* op = kProduct ? "cumprod" : "cumsum";
  if (in[0].numel() == 0) return;
  Tensor x = in[0].dim() == 0 ? make_view(in[0], {1}, {1}, in[0].storage_offset()) : in[0];
  Tensor o = out[0].dim() == 0 ? make_view(out[0], {1}, {1}, 0) : out[0];
  const int64_t dim = wrap_dim(attrs.get_int("dim"), x.dim(), op);
  if (needs_dense_copy(x, o, attrs, op)) {
    Scratch taken(out);
    Tensor copy = taken.take(x.sizes(), x.dtype());
    copy_cast(copy, x);
    x = copy;
  }
  const bool reverse = !kProduct && attrs.get_bool("reverse");
  dispatch_dtype(x.dtype(), [&]<typename T>() { scan_typed<T, kProduct>(x, o, dim, reverse); });
}

}  // namespace

MF_REGISTER_KERNEL("cumsum", DeviceType::CPU, scan_kernel<false>, scan_scratch<false>);
MF_REGISTER_KERNEL("cumprod", DeviceType::CPU, scan_kernel<true>, scan_scratch<true>);
// (x_0 ... x_{i-1}) * S_i per row (src/ops/cumsum.cpp), without dividing by
// x (so zeros in the input are exact). In double for floats.
MF_REGISTER_KERNEL("cumprod_backward", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs&) {
  const int64_t n = in[1].size(-1), rows = n ? in[1].numel() / n : 0;
  Scratch taken(out);  // rows of n, whatever layout the caller passed
  const Tensor gin = dense(in[0], taken), xin = dense(in[1], taken);
  MF_CHECK(out[0].is_contiguous(), Error, "cumprod_backward: expected a contiguous output");
  dispatch_floating(in[1].dtype(), "cumprod_backward", [&]<typename T>() {
    using Acc = cumsum_acc_t<T>;
    const T* g = static_cast<const T*>(gin.data_ptr());
    const T* x = static_cast<const T*>(xin.data_ptr());
    T* o = static_cast<T*>(out[0].data_ptr());
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      std::vector<Acc> suffix(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        const T* gr = g + r * n;
        const T* xr = x + r * n;
        Acc s = Acc(0);
        for (int64_t i = n - 1; i >= 0; --i) {
          s = (i == n - 1 ? Acc(0) : Acc(xr[i + 1]) * s) + Acc(gr[i]);
          suffix[size_t(i)] = s;
        }
        Acc prefix = Acc(1);
        for (int64_t i = 0; i < n; ++i) {
          o[r * n + i] = T(prefix * suffix[size_t(i)]);
          prefix *= Acc(xr[i]);
        }
      }
    });
  });
}, dense_inputs_scratch("cumprod_backward", {0, 1}));

}  // namespace mf::cpu
