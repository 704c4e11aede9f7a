// Note [Strided GEMM]: BLAS takes a matrix either as stored (row stride ld,
// column stride 1) or transposed (row stride 1, column stride ld), so a
// transposed view or a row-sliced matrix goes to sgemm/dgemm without a copy;
// only operands with neither unit stride (e.g. a[:, ::2]) are copied. Batch
// dims are walked by offset, and a broadcast batch dim is an offset step of
// 0, so broadcasting never materialises a copy either. The same layouts go
// to oneDNN's matmul for the 16-bit types and large float32 products.
#include "backend/cpu/kernels/gemm.h"

#include <cblas.h>

#include <climits>
#include <cstring>
#include <optional>

#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/loops.h"
#include "backend/cpu/kernels/onednn.h"

namespace mf::cpu {
namespace {

// How BLAS reads a (rows, cols) matrix; see Note [Strided GEMM].
struct Layout {
  bool transposed;
  int64_t ld;
};

std::optional<Layout> blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const int64_t min_rows = std::max<int64_t>(rows, 1), min_cols = std::max<int64_t>(cols, 1);
  if (col_stride == 1 || cols == 1) {
    int64_t ld = rows == 1 ? min_cols : row_stride;
    if (ld >= min_cols && ld <= INT_MAX) return Layout{false, ld};
  }
  if (row_stride == 1 || rows == 1) {
    int64_t ld = cols == 1 ? min_rows : col_stride;
    if (ld >= min_rows && ld <= INT_MAX) return Layout{true, ld};
  }
  return std::nullopt;
}

std::optional<Layout> layout_of(const Tensor& t) {
  const int64_t d = t.dim();
  return blas_layout(t.sizes()[d - 2], t.sizes()[d - 1], t.strides()[d - 2], t.strides()[d - 1]);
}

// t itself when BLAS can read its matrices, else a contiguous copy.
Tensor blas_operand(const Tensor& t) { return layout_of(t) ? t : contiguous(t.detach()); }

Shape batch_shape_of(const Tensor& out) { return Shape(out.sizes().begin(), out.sizes().end() - 2); }

// out = beta * out for every element (beta == 0 writes zeros, ignoring NaN).
void scale_output(Tensor& out, Scalar beta) {
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    using A = acc_type<T>;
    const bool zero = beta.to_double() == 0.0;
    const A b = beta.to<A>();
    T* p = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel(), kGrainSize, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) p[i] = zero ? T(A(0)) : T(A(p[i]) * b);
    });
  });
}

// --- float32 / float64: OpenBLAS ----------------------------------------------------------

template <typename T>
void blas_gemm(const Layout& la, const Layout& lb, int64_t n, int64_t m, int64_t k, T alpha, const T* a,
               const T* b, T beta, T* c) {
  const auto ta = la.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = lb.transposed ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, int(n), int(m), int(k), alpha, a, int(la.ld), b, int(lb.ld), beta, c, int(m));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, int(n), int(m), int(k), alpha, a, int(la.ld), b, int(lb.ld), beta, c, int(m));
}

template <typename T>
void blas_gemv(bool transposed, int64_t rows, int64_t cols, T alpha, const T* a, int64_t lda, const T* x,
               int64_t incx, T beta, T* y) {
  const auto trans = transposed ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemv(CblasRowMajor, trans, int(rows), int(cols), alpha, a, int(lda), x, int(incx), beta, y, 1);
  else
    cblas_dgemv(CblasRowMajor, trans, int(rows), int(cols), alpha, a, int(lda), x, int(incx), beta, y, 1);
}

// One product c (n, m) = beta * c + alpha * a (n, k) @ b (k, m).
template <typename T>
void blas_matmul_one(const Layout& la, const Layout& lb, int64_t n, int64_t m, int64_t k, int64_t a_col_stride,
                     int64_t b_row_stride, T alpha, const T* a, const T* b, T beta, T* c) {
  if (m == 1 && b_row_stride > 0 && b_row_stride <= INT_MAX) {
    // c = A x with x the column of b.
    if (la.transposed) blas_gemv<T>(true, k, n, alpha, a, la.ld, b, b_row_stride, beta, c);
    else blas_gemv<T>(false, n, k, alpha, a, la.ld, b, b_row_stride, beta, c);
  } else if (n == 1 && a_col_stride > 0 && a_col_stride <= INT_MAX) {
    // c^T = B^T x with x the row of a.
    if (lb.transposed) blas_gemv<T>(false, m, k, alpha, b, lb.ld, a, a_col_stride, beta, c);
    else blas_gemv<T>(true, k, m, alpha, b, lb.ld, a, a_col_stride, beta, c);
  } else {
    blas_gemm<T>(la, lb, n, m, k, alpha, a, b, beta, c);
  }
}

// Products of at most this many multiply-adds run one per thread when the
// batch can keep every thread busy; larger ones use OpenBLAS's threads.
constexpr int64_t kSmallGemm = int64_t(1) << 24;

template <typename T>
void blas_matmul(const Tensor& a_in, const Tensor& b_in, Tensor& out, T alpha, T beta) {
  Tensor a = blas_operand(a_in), b = blas_operand(b_in);
  const int64_t n = out.size(-2), m = out.size(-1), k = a.size(-1);
  MF_CHECK(n <= INT_MAX && m <= INT_MAX && k <= INT_MAX, ValueError, "matmul: matrix sizes (", n, ", ", k, ") @ (",
           k, ", ", m, ") exceed the BLAS int range");
  const Layout la = *layout_of(a), lb = *layout_of(b);
  const Shape batch = batch_shape_of(out);
  const Offsets a_off = batch_offsets(a, batch), b_off = batch_offsets(b, batch);
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  T* cp = static_cast<T*>(out.data_ptr());
  const int64_t count = int64_t(a_off.size()), a_cs = a.stride(-1), b_rs = b.stride(-2);
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      blas_matmul_one<T>(la, lb, n, m, k, a_cs, b_rs, alpha, ap + a_off[size_t(i)], bp + b_off[size_t(i)], beta,
                         cp + i * n * m);
  };
  if (count > 1 && count >= get_num_threads() && n * m * k <= kSmallGemm) parallel_for(0, count, 1, run);
  else run(0, count);
}

// --- integers: a plain loop -------------------------------------------------------------------

template <typename T>
void integer_matmul(const Tensor& a_in, const Tensor& b_in, Tensor& out, Scalar alpha_s, Scalar beta_s) {
  // Products accumulate in int64: wrapping to T at the end gives the same
  // bits as PyTorch's accumulation in T, without signed-overflow UB.
  Tensor a = contiguous(a_in.detach()), b = contiguous(b_in.detach());
  const int64_t n = out.size(-2), m = out.size(-1), k = a.size(-1);
  const Shape batch = batch_shape_of(out);
  const Offsets a_off = batch_offsets(a, batch), b_off = batch_offsets(b, batch);
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  T* cp = static_cast<T*>(out.data_ptr());
  const int64_t alpha = alpha_s.to_int(), beta = beta_s.to_int();
  const int64_t rows = int64_t(a_off.size()) * n;
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(k * m, 1)), [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> acc(static_cast<size_t>(m));
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t bi = r / n, i = r % n;
      const T* arow = ap + a_off[size_t(bi)] + i * k;
      const T* bmat = bp + b_off[size_t(bi)];
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t p = 0; p < k; ++p) {
        const int64_t av = int64_t(arow[p]);
        const T* brow = bmat + p * m;
        for (int64_t j = 0; j < m; ++j) acc[size_t(j)] += av * int64_t(brow[j]);
      }
      T* crow = cp + r * m;
      for (int64_t j = 0; j < m; ++j) {
        const uint64_t scaled = uint64_t(alpha) * uint64_t(acc[size_t(j)]);
        const uint64_t old = beta == 0 ? 0 : uint64_t(beta) * uint64_t(int64_t(crow[j]));
        crow[j] = T(int64_t(scaled + old));
      }
    }
  });
}

// --- bfloat16 / float16, and large float32 products: oneDNN ------------------------------

// t's matrices as a descriptor of `ndims` dims: missing leading dims and
// broadcast (stride 0) batch dims become size 1, oneDNN's broadcast.
dnnl::memory::desc matmul_desc(const Tensor& t, int64_t ndims) {
  const int64_t lead = ndims - t.dim();
  Shape sizes(size_t(ndims), 1), strides(size_t(ndims), 0);
  for (int64_t d = 0; d < t.dim(); ++d) {
    sizes[size_t(lead + d)] = t.sizes()[size_t(d)];
    strides[size_t(lead + d)] = t.strides()[size_t(d)];
    if (d < t.dim() - 2 && strides[size_t(lead + d)] == 0) sizes[size_t(lead + d)] = 1;
  }
  return onednn::plain_desc(make_view(t, sizes, strides, t.storage_offset()));
}

struct MatmulPrimitive {
  std::shared_ptr<dnnl::matmul> primitive;  // null: oneDNN has no implementation
  dnnl::memory::desc scratchpad;
};

void append_desc_key(std::vector<int64_t>& key, const dnnl::memory::desc& desc) {
  for (int64_t v : desc.dims()) key.push_back(v);
  const auto& strides = desc.data.format_desc.blocking.strides;
  for (int i = 0; i < desc.data.ndims; ++i) key.push_back(strides[i]);
}

// Runs out = beta * out + alpha * a @ b on oneDNN; false when oneDNN has no
// implementation for these types on this CPU.
bool onednn_matmul(const Tensor& a_in, const Tensor& b_in, Tensor& out, double alpha, double beta) {
  static onednn::PrimitiveCache<MatmulPrimitive> cache;
  Tensor a = blas_operand(a_in), b = blas_operand(b_in);
  const int64_t ndims = out.dim();
  dnnl::memory::desc a_desc = matmul_desc(a, ndims), b_desc = matmul_desc(b, ndims);
  dnnl::memory::desc c_desc = onednn::dense_desc(out.sizes(), out.dtype());
  std::vector<int64_t> key{int64_t(out.dtype()), ndims};
  append_desc_key(key, a_desc);
  append_desc_key(key, b_desc);
  for (int64_t v : out.sizes()) key.push_back(v);
  int64_t alpha_bits, beta_bits;
  std::memcpy(&alpha_bits, &alpha, 8);
  std::memcpy(&beta_bits, &beta, 8);
  key.push_back(alpha_bits);
  key.push_back(beta_bits);
  MatmulPrimitive p = cache.get(key, [&] {
    dnnl::primitive_attr attr = onednn::default_attr();
    if (alpha != 1.0) attr.set_output_scales(0, {float(alpha)});
    if (beta != 0.0) {
      dnnl::post_ops ops;
      ops.append_sum(float(beta));
      attr.set_post_ops(ops);
    }
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr, onednn::engine());
      return MatmulPrimitive{std::make_shared<dnnl::matmul>(pd), pd.scratchpad_desc()};
    } catch (const dnnl::error&) {
      return MatmulPrimitive{};
    }
  });
  if (!p.primitive) return false;
  onednn::execute(*p.primitive, p.scratchpad,
                  {{DNNL_ARG_SRC, onednn::memory_of(a_desc, a)},
                   {DNNL_ARG_WEIGHTS, onednn::memory_of(b_desc, b)},
                   {DNNL_ARG_DST, onednn::memory_of(c_desc, out)}});
  return true;
}

// The 16-bit types where oneDNN cannot: compute in float32, round once.
void float32_matmul(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha, Scalar beta) {
  Tensor a32 = make_empty(a.sizes(), DType::Float32), b32 = make_empty(b.sizes(), DType::Float32);
  Tensor out32 = make_empty(out.sizes(), DType::Float32);
  copy_cast(a32, a);
  copy_cast(b32, b);
  if (beta.to_double() != 0.0) copy_cast(out32, out);
  blas_matmul<float>(a32, b32, out32, float(alpha.to_double()), float(beta.to_double()));
  copy_cast(out, out32);
}

// Note [oneDNN for float32 GEMMs]: oneDNN's float32 matmul (its brgemm
// kernels) runs the products of training steps 10-20% faster than
// OpenBLAS's sgemm on the AVX-512 machines here (the 2-d products of a GPT
// or MLP step, and 15-20% on batched attention products, where OpenBLAS
// makes one call per matrix), partly because it writes the output
// directly where sgemm with beta = 0 first zero-fills it. Its call costs
// about 10 us more, which loses on small products, and matrix-vector
// shapes stay with BLAS's gemv: products of at least kOnednnMinWork
// multiply-adds with both output dims above 1 go to oneDNN.
constexpr int64_t kOnednnMinWork = int64_t(1) << 22;

bool prefers_onednn(const Tensor& a, const Tensor& out) {
  const int64_t n = out.size(-2), m = out.size(-1);
  return n > 1 && m > 1 && out.numel() * a.size(-1) >= kOnednnMinWork;
}

}  // namespace

template <typename T>
void gemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  const auto tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tra, trb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c,
                int(ldc));
  else
    cblas_dgemm(CblasRowMajor, tra, trb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c,
                int(ldc));
}
template void gemm_rows<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                               int64_t, float, float*, int64_t);
template void gemm_rows<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                const double*, int64_t, double, double*, int64_t);

void matmul(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha, Scalar beta) {
  if (out.numel() == 0) return;
  if (a.size(-1) == 0) {
    scale_output(out, beta);
    return;
  }
  switch (out.dtype()) {
    case DType::Float32:
      if (prefers_onednn(a, out) && onednn_matmul(a, b, out, alpha.to_double(), beta.to_double())) return;
      blas_matmul<float>(a, b, out, float(alpha.to_double()), float(beta.to_double()));
      return;
    case DType::Float64:
      blas_matmul<double>(a, b, out, alpha.to_double(), beta.to_double());
      return;
    case DType::BFloat16:
    case DType::Float16:
      if (!onednn_matmul(a, b, out, alpha.to_double(), beta.to_double())) float32_matmul(a, b, out, alpha, beta);
      return;
    case DType::Bool:
      throw TypeError("matmul: not supported for bool tensors");
    default:
      dispatch_dtype(out.dtype(), [&]<typename T>() {
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) integer_matmul<T>(a, b, out, alpha, beta);
      });
  }
}

}  // namespace mf::cpu
