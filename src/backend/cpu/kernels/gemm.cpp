// Note [Strided GEMM]: BLAS takes a matrix either as stored (row stride ld,
// column stride 1) or transposed (row stride 1, column stride ld), so a
// transposed view or a row-sliced matrix goes to sgemm/dgemm without a copy;
// only operands with neither unit stride (e.g. a[:, ::2]) are copied. Batch
// dims are walked by offset, and a broadcast batch dim is an offset step of
// 0, so broadcasting never materialises a copy either. The same layouts go
// to oneDNN's matmul for the 16-bit types and large float32 products.
#include "backend/cpu/kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "meshflow/cpu_blas.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/loops.h"
#include "backend/cpu/kernels/mkl.h"
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

// t itself when BLAS can read its matrices, else a contiguous copy in ws.
// (A contiguous t is always readable, so dense() copies exactly the others.)
Tensor blas_operand(const Tensor& t, Workspace& ws) { return layout_of(t) ? t : dense(t, ws); }

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

// a and b: operands BLAS can read (blas_operand).
template <typename T>
void blas_matmul(const Tensor& a, const Tensor& b, Tensor& out, T alpha, T beta) {
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

// a and b contiguous; acc: per-thread rows of m int64 accumulators.
template <typename T>
void integer_matmul(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha_s, Scalar beta_s,
                    const std::vector<Tensor>& acc_rows) {
  // Products accumulate in int64: wrapping to T at the end gives the same
  // bits as PyTorch's accumulation in T, without signed-overflow UB.
  const int64_t n = out.size(-2), m = out.size(-1), k = a.size(-1);
  const Shape batch = batch_shape_of(out);
  const Offsets a_off = batch_offsets(a, batch), b_off = batch_offsets(b, batch);
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  T* cp = static_cast<T*>(out.data_ptr());
  const int64_t alpha = alpha_s.to_int(), beta = beta_s.to_int();
  const int64_t rows = int64_t(a_off.size()) * n;
  for_each_slot(rows, int64_t(acc_rows.size()), [&](int64_t slot, int64_t r) {
    int64_t* acc = static_cast<int64_t*>(acc_rows[size_t(slot)].data_ptr());
    const int64_t bi = r / n, i = r % n;
    const T* arow = ap + a_off[size_t(bi)] + i * k;
    const T* bmat = bp + b_off[size_t(bi)];
    std::fill(acc, acc + m, 0);
    for (int64_t p = 0; p < k; ++p) {
      const int64_t av = int64_t(arow[p]);
      const T* brow = bmat + p * m;
      for (int64_t j = 0; j < m; ++j) acc[j] += av * int64_t(brow[j]);
    }
    T* crow = cp + r * m;
    for (int64_t j = 0; j < m; ++j) {
      const uint64_t scaled = uint64_t(alpha) * uint64_t(acc[j]);
      const uint64_t old = beta == 0 ? 0 : uint64_t(beta) * uint64_t(int64_t(crow[j]));
      crow[j] = T(int64_t(scaled + old));
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

struct OnednnProduct {
  dnnl::memory::desc a, b, c;
  MatmulPrimitive p;
};

// oneDNN's primitive for out = beta * out + alpha * a @ b (a and b
// BLAS-readable), from the cache; its primitive is null when oneDNN has no
// implementation for these types on this CPU.
OnednnProduct onednn_product(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  static onednn::PrimitiveCache<MatmulPrimitive> cache;
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
  return {a_desc, b_desc, c_desc, p};
}

// Runs the product on oneDNN, its scratchpad from ws; false where oneDNN
// has no implementation.
bool onednn_matmul(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta, Workspace& ws) {
  const OnednnProduct d = onednn_product(a, b, out, alpha, beta);
  if (!d.p.primitive) return false;
  onednn::execute(*d.p.primitive, d.p.scratchpad,
                  {{DNNL_ARG_SRC, onednn::memory_of(d.a, a)},
                   {DNNL_ARG_WEIGHTS, onednn::memory_of(d.b, b)},
                   {DNNL_ARG_DST, onednn::memory_of(d.c, out)}},
                  ws);
  return true;
}

// The 16-bit types where oneDNN cannot: compute in float32 copies in ws,
// round once.
void float32_matmul(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha, Scalar beta, Workspace& ws) {
  Tensor a32 = ws.take(a.sizes(), DType::Float32), b32 = ws.take(b.sizes(), DType::Float32);
  Tensor out32 = ws.take(out.sizes(), DType::Float32);
  if (ws.measuring()) return;
  copy_cast(a32, a);
  copy_cast(b32, b);
  if (beta.to_double() != 0.0) copy_cast(out32, out);
  blas_matmul<float>(a32, b32, out32, float(alpha.to_double()), float(beta.to_double()));
  copy_cast(out, out32);
}

// --- oneMKL (Note [oneMKL at run time] in mkl.cpp) ---------------------------------------

// The batch offsets as one stride, when they are an arithmetic series that
// MKL's strided batch call can take.
std::optional<int> uniform_stride(const Offsets& offsets) {
  if (offsets.size() < 2) return 0;
  const int64_t step = offsets[1] - offsets[0];
  if (step <= 0 || step > INT_MAX) return std::nullopt;
  for (size_t i = 2; i < offsets.size(); ++i)
    if (offsets[i] - offsets[i - 1] != step) return std::nullopt;
  return int(step);
}

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// A product's operands as MKL's CBLAS calls read them (Note [Strided GEMM]).
struct MklProduct {
  Tensor a, b;
  int64_t n, m, k;
  Layout la, lb;
  int ta, tb;
  Offsets a_off, b_off;
};

// a and b BLAS-readable.
MklProduct mkl_product(const Tensor& a, const Tensor& b, const Tensor& out) {
  MklProduct p{a, b, out.size(-2), out.size(-1), a.size(-1), {}, {}, 0, 0, {}, {}};
  MF_CHECK(p.n <= INT_MAX && p.m <= INT_MAX && p.k <= INT_MAX, ValueError, "matmul: matrix sizes (", p.n, ", ", p.k,
           ") @ (", p.k, ", ", p.m, ") exceed the BLAS int range");
  p.la = *layout_of(p.a);
  p.lb = *layout_of(p.b);
  p.ta = p.la.transposed ? kTrans : kNoTrans;
  p.tb = p.lb.transposed ? kTrans : kNoTrans;
  p.a_off = batch_offsets(p.a, batch_shape_of(out));
  p.b_off = batch_offsets(p.b, batch_shape_of(out));
  return p;
}

void mkl_sgemm(const mkl::Library& mkl, const Tensor& a_in, const Tensor& b_in, Tensor& out, float alpha,
               float beta) {
  const MklProduct p = mkl_product(a_in, b_in, out);
  const auto* ap = static_cast<const float*>(p.a.data_ptr());
  const auto* bp = static_cast<const float*>(p.b.data_ptr());
  auto* cp = static_cast<float*>(out.data_ptr());
  const int64_t count = int64_t(p.a_off.size());
  const auto sa = uniform_stride(p.a_off), sb = uniform_stride(p.b_off);
  if (count > 1 && count <= INT_MAX && sa && sb && p.n * p.m <= INT_MAX) {  // one call: int sizes
    mkl.sgemm_batch_strided(kRowMajor, p.ta, p.tb, int(p.n), int(p.m), int(p.k), alpha, ap + p.a_off[0],
                            int(p.la.ld), *sa, bp + p.b_off[0], int(p.lb.ld), *sb, beta, cp, int(p.m), int(p.n * p.m),
                            int(count));
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    mkl.sgemm(kRowMajor, p.ta, p.tb, int(p.n), int(p.m), int(p.k), alpha, ap + p.a_off[size_t(i)], int(p.la.ld),
              bp + p.b_off[size_t(i)], int(p.lb.ld), beta, cp + i * p.n * p.m, int(p.m));
}

// bfloat16 products accumulate into a float32 copy of the output in ws,
// which is rounded to bfloat16 once (MKL has no bfloat16 output).
void mkl_bf16_gemm(const mkl::Library& mkl, const Tensor& a_in, const Tensor& b_in, Tensor& out, float alpha,
                   float beta, Workspace& ws) {
  Tensor acc = ws.take(out.sizes(), DType::Float32);
  if (ws.measuring()) return;
  const MklProduct p = mkl_product(a_in, b_in, out);
  if (beta != 0.0f) copy_cast(acc, out);
  const auto* ap = static_cast<const uint16_t*>(p.a.data_ptr());
  const auto* bp = static_cast<const uint16_t*>(p.b.data_ptr());
  auto* cp = static_cast<float*>(acc.data_ptr());
  for (size_t i = 0; i < p.a_off.size(); ++i)
    mkl.gemm_bf16bf16f32(kRowMajor, p.ta, p.tb, int(p.n), int(p.m), int(p.k), alpha, ap + p.a_off[i], int(p.la.ld),
                         bp + p.b_off[i], int(p.lb.ld), beta, cp + int64_t(i) * p.n * p.m, int(p.m));
  copy_cast(out, acc);
}

// --- Choosing the library ------------------------------------------------------------------

// Note [Choosing a GEMM library]: no one library is fastest for every
// product here (bench/README.md, "GEMM libraries"). On an Intel Xeon with
// AMX, oneDNN 2.6's float32 matmul runs some wide products at 40% of
// OpenBLAS's and oneMKL's rate (4096x768 @ 768x3072: 105 against 250 and
// 280 GFLOP/s), oneMKL's bfloat16 GEMM beats oneDNN's by 15-45% on products
// with a long inner dim and loses by up to 2x on short ones, and OpenBLAS
// wins the small float32 products. So under BlasLibrary::Auto the first
// product of each shape key (dtype, batch, n, m, k, the operands'
// transposition, threads) of at least kTuneMinWork multiply-adds runs on
// every library that handles its dtype (a warm-up, then one timed run), and the
// fastest serves that key from then on (as cuDNN's benchmark mode picks
// convolution algorithms). The measuring runs write the output itself, so
// they need no memory; products with beta != 0 read their output and are
// not measured (they use a key's choice once there is one), nor are
// products inside a parallel region, whose timings would mean nothing.
// Smaller products, and those not measured, use the rule measured before
// this one: float32 on oneDNN from kOnednnMinWork multiply-adds with both
// output dims above 1 (its call costs about 10 us more than sgemm's, which
// loses on small products), else OpenBLAS; 16-bit types on oneDNN.
// Libraries round differently, so a product's last bits depend on the
// choice; set_preferred_blas_library fixes one.
constexpr int64_t kOnednnMinWork = int64_t(1) << 22;
constexpr int64_t kTuneMinWork = int64_t(1) << 22;
constexpr size_t kMaxChoices = 4096;

BlasLibrary default_library(const Tensor& a, const Tensor& out) {
  if (out.dtype() != DType::Float32) return BlasLibrary::OneDNN;
  const int64_t n = out.size(-2), m = out.size(-1);
  return n > 1 && m > 1 && out.numel() * a.size(-1) >= kOnednnMinWork ? BlasLibrary::OneDNN : BlasLibrary::OpenBLAS;
}

// Runs the product on `library` (a and b BLAS-readable), what it needs
// beyond the operands taken from ws and given back after; false where it
// does not handle the dtype. Measuring, it only takes.
bool run_on(BlasLibrary library, const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha, Scalar beta,
            Workspace& ws) {
  const Workspace::Turn turn(ws);
  const DType dtype = out.dtype();
  switch (library) {
    case BlasLibrary::OpenBLAS:
      if (dtype != DType::Float32) return false;
      if (!ws.measuring()) blas_matmul<float>(a, b, out, float(alpha.to_double()), float(beta.to_double()));
      return true;
    case BlasLibrary::OneDNN:
      return onednn_matmul(a, b, out, alpha.to_double(), beta.to_double(), ws);
    case BlasLibrary::MKL: {
      const mkl::Library* mkl = mkl::library();
      if (!mkl) return false;
      if (dtype == DType::Float32) {
        if (!ws.measuring()) mkl_sgemm(*mkl, a, b, out, float(alpha.to_double()), float(beta.to_double()));
      } else if (dtype == DType::BFloat16) {
        mkl_bf16_gemm(*mkl, a, b, out, float(alpha.to_double()), float(beta.to_double()), ws);
      } else {
        return false;
      }
      return true;
    }
    case BlasLibrary::Auto: break;
  }
  return false;
}

struct ChoiceKey {
  DType dtype;
  int64_t batch, n, m, k;
  bool a_transposed, b_transposed;
  int threads;
  bool operator==(const ChoiceKey&) const = default;
};

struct ChoiceKeyHash {
  size_t operator()(const ChoiceKey& key) const {
    size_t h = size_t(key.dtype);
    for (int64_t v : {key.batch, key.n, key.m, key.k, int64_t(key.a_transposed), int64_t(key.b_transposed),
                      int64_t(key.threads)})
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h;
  }
};

struct Choices {
  std::mutex mutex;
  std::unordered_map<ChoiceKey, BlasChoice, ChoiceKeyHash> map;
  std::atomic<BlasLibrary> preferred{BlasLibrary::Auto};
};

Choices& choices() {
  static Choices c;
  return c;
}

// A matrix operand's transposition as BLAS would read it (a strided copy
// reads as stored).
bool reads_transposed(const Tensor& t) {
  const auto layout = layout_of(t);
  return layout && layout->transposed;
}

std::vector<BlasLibrary> candidates(DType dtype) {
  std::vector<BlasLibrary> list;
  if (dtype == DType::Float32) list.push_back(BlasLibrary::OpenBLAS);
  list.push_back(BlasLibrary::OneDNN);
  if ((dtype == DType::Float32 || dtype == DType::BFloat16) && mkl::library()) list.push_back(BlasLibrary::MKL);
  return list;
}

// The library for this product under Auto, measuring the candidates when
// the key is new (see the Note). Returns Auto when the product was already
// computed into out by the measuring runs' last, fastest candidate.
// The library a product runs on under Auto without measuring: the key's
// choice or the rule's; nullopt when the product's key is new and would be
// measured.
std::optional<BlasLibrary> known_choice(const Tensor& a, const Tensor& b, const Tensor& out, Scalar beta) {
  const int64_t n = out.size(-2), m = out.size(-1), k = a.size(-1);
  const BlasLibrary fallback = default_library(a, out);
  if (n <= 1 || m <= 1 || out.numel() * k < kTuneMinWork) return fallback;
  const ChoiceKey key{out.dtype(), out.numel() / (n * m), n, m, k, reads_transposed(a), reads_transposed(b),
                      get_num_threads()};
  Choices& state = choices();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (auto it = state.map.find(key); it != state.map.end()) return it->second.library;
    if (state.map.size() >= kMaxChoices) return fallback;
  }
  if (candidates(out.dtype()).size() < 2 || beta.to_double() != 0.0 || omp_in_parallel()) return fallback;
  return std::nullopt;
}

// The bytes `library` takes beyond the operands for this product (its own
// pieces, from an aligned start); nullopt where it does not handle the
// dtype.
std::optional<int64_t> pieces_on(BlasLibrary library, const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha,
                                 Scalar beta) {
  ScratchLayout pieces("matmul");
  Workspace own(pieces);
  if (!run_on(library, a, b, out, alpha, beta, own)) return std::nullopt;
  return pieces.bytes();
}

// The bytes of the 16-bit types' float32 fallback.
int64_t float32_pieces(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha, Scalar beta) {
  ScratchLayout pieces("matmul");
  Workspace own(pieces);
  float32_matmul(a, b, out, alpha, beta, own);
  return pieces.bytes();
}

BlasLibrary choose(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha, Scalar beta, Workspace& ws) {
  if (const std::optional<BlasLibrary> known = known_choice(a, b, out, beta)) return *known;
  const int64_t n = out.size(-2), m = out.size(-1), k = a.size(-1);
  const BlasLibrary fallback = default_library(a, out);
  const ChoiceKey key{out.dtype(), out.numel() / (n * m), n, m, k, reads_transposed(a), reads_transposed(b),
                      get_num_threads()};
  Choices& state = choices();
  const std::vector<BlasLibrary> list = candidates(out.dtype());
  BlasChoice choice{key.dtype, key.batch, n, m, k, key.a_transposed, key.b_transposed, key.threads, fallback, {}};
  double best = 0;
  BlasLibrary last = BlasLibrary::Auto;
  for (BlasLibrary library : list) {
    // A plan made when this key's choice was known may not hold every
    // candidate's pieces: those candidates are not measured.
    const std::optional<int64_t> needs = pieces_on(library, a, b, out, alpha, beta);
    if (!needs || !ws.fits(*needs)) continue;
    if (!run_on(library, a, b, out, alpha, beta, ws)) continue;  // the first run warms the library up
    const auto start = std::chrono::steady_clock::now();
    run_on(library, a, b, out, alpha, beta, ws);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    choice.seconds.emplace_back(library, seconds);
    if (choice.seconds.size() == 1 || seconds < best) {
      best = seconds;
      choice.library = library;
    }
    last = library;
  }
  if (choice.seconds.empty()) return fallback;
  const BlasLibrary chosen = choice.library;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.map.try_emplace(key, std::move(choice));
  }
  return chosen == last ? BlasLibrary::Auto : chosen;
}

}  // namespace

const char* blas_library_name(BlasLibrary library) {
  switch (library) {
    case BlasLibrary::Auto: return "auto";
    case BlasLibrary::OpenBLAS: return "openblas";
    case BlasLibrary::OneDNN: return "onednn";
    case BlasLibrary::MKL: return "mkl";
  }
  return "?";
}

BlasLibrary parse_blas_library(std::string_view name) {
  for (BlasLibrary library : {BlasLibrary::Auto, BlasLibrary::OpenBLAS, BlasLibrary::OneDNN, BlasLibrary::MKL})
    if (name == blas_library_name(library)) return library;
  if (name == "mkldnn") return BlasLibrary::OneDNN;
  throw ValueError("preferred_blas_library: expected one of 'auto', 'openblas', 'onednn' ('mkldnn') or 'mkl', got '" +
                   std::string(name) + "'");
}

void set_preferred_blas_library(BlasLibrary library) {
  MF_CHECK(library != BlasLibrary::MKL || mkl::library(), ValueError,
           "preferred_blas_library: oneMKL is not available here (tools/install_deps.sh installs it); looked in:\n",
           mkl::search_report());
  choices().preferred.store(library);
}

BlasLibrary preferred_blas_library() { return choices().preferred.load(); }

bool mkl_available() { return mkl::library() != nullptr; }

std::string mkl_version() {
  const mkl::Library* mkl = mkl::library();
  return mkl ? mkl->version : std::string();
}

std::string mkl_search_report() { return mkl::search_report(); }

std::vector<BlasChoice> blas_choices() {
  Choices& state = choices();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::vector<BlasChoice> list;
  for (const auto& [key, choice] : state.map) list.push_back(choice);
  return list;
}

void clear_blas_choices() {
  Choices& state = choices();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.map.clear();
}

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

// Note [GEMM scratch]: what a product needs beyond its output, taken from
// the kernel's scratch: copies of operands BLAS cannot read as they are
// laid out, then the chosen library's own pieces (oneDNN's scratchpad,
// MKL's float32 accumulator for bfloat16, the float32 copies of the 16-bit
// fallback), given back after each run. Which library runs is measured on
// the first product of a shape (Note [Choosing a GEMM library]), so the
// ScratchFn reserves the most any candidate takes.
void matmul(const Tensor& a_in, const Tensor& b_in, Tensor& out, Scalar alpha, Scalar beta, Workspace& ws) {
  if (out.numel() == 0) return;
  if (a_in.size(-1) == 0) {
    if (!ws.measuring()) scale_output(out, beta);
    return;
  }
  if (is_integral(out.dtype())) {
    const Tensor a = dense(a_in, ws), b = dense(b_in, ws);
    const std::vector<Tensor> acc_rows = ws.take_slots(get_num_threads(), {out.size(-1)}, DType::Int64);
    if (ws.measuring()) return;
    dispatch_dtype(out.dtype(), [&]<typename T>() {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
        integer_matmul<T>(a, b, out, alpha, beta, acc_rows);
    });
    return;
  }
  MF_CHECK(out.dtype() != DType::Bool, TypeError, "matmul: not supported for bool tensors");
  const Tensor a = blas_operand(a_in, ws), b = blas_operand(b_in, ws);
  if (out.dtype() == DType::Float64) {
    if (!ws.measuring()) blas_matmul<double>(a, b, out, alpha.to_double(), beta.to_double());
    return;
  }
  if (ws.measuring()) {  // what the library that will run takes, or the most any candidate takes
    BlasLibrary library = choices().preferred.load();
    const std::optional<BlasLibrary> known =
        library == BlasLibrary::Auto ? known_choice(a, b, out, beta) : std::optional<BlasLibrary>(library);
    int64_t most = 0;
    auto runs_on = [&](BlasLibrary l) {
      const std::optional<int64_t> needs = pieces_on(l, a, b, out, alpha, beta);
      most = std::max(most, needs.value_or(0));
      return needs.has_value();
    };
    bool fallback = out.dtype() != DType::Float32;
    if (known) {  // as below: the library, else the rule's, else float32
      if (runs_on(*known) || runs_on(default_library(a, out))) fallback = false;
    } else {
      for (BlasLibrary l : candidates(out.dtype())) runs_on(l);
    }
    if (fallback) most = std::max(most, float32_pieces(a, b, out, alpha, beta));
    ws.take({most}, DType::UInt8);
    return;
  }
  BlasLibrary library = choices().preferred.load();
  if (library == BlasLibrary::Auto) library = choose(a, b, out, alpha, beta, ws);
  if (library == BlasLibrary::Auto) return;  // choose() left the product in out
  if (run_on(library, a, b, out, alpha, beta, ws)) return;
  if (run_on(default_library(a, out), a, b, out, alpha, beta, ws)) return;
  const Workspace::Turn turn(ws);
  float32_matmul(a, b, out, alpha, beta, ws);  // 16-bit types oneDNN cannot run on this CPU
}

namespace {

// The matrix product ops (src/ops/matmul.cpp).
void matmul_kernel(const TensorList& in, TensorList& out, const Attrs&, Workspace& ws) {
  matmul(in[0], in[1], out[0], 1, 0, ws);
}

// beta * t + alpha * (a @ b): out starts as t broadcast, unless beta is 0.
void addmm_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  const Scalar beta = attrs.get_scalar("beta");
  if (beta.to_double() != 0.0 && !ws.measuring()) copy_cast(out[0], in[0]);
  matmul(in[1], in[2], out[0], attrs.get_scalar("alpha"), beta, ws);
}

}  // namespace

MF_REGISTER_KERNEL("matmul", DeviceType::CPU, run_measured<matmul_kernel>, measure<matmul_kernel>);
MF_REGISTER_KERNEL("addmm", DeviceType::CPU, run_measured<addmm_kernel>, measure<addmm_kernel>);

}  // namespace mf::cpu
