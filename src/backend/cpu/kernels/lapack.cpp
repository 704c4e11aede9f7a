// The CPU kernels of torch.linalg's decompositions on LAPACK (OpenBLAS's;
// CMakeLists.txt, Note [One OpenBLAS]), set for the ops of
// src/ops/linalg_lu.cpp and linalg_spectral.cpp. Inputs are float32 or
// float64 batches of matrices (..., m, n) of any strides; outputs are
// contiguous.
//
// Note [LAPACK batches]: LAPACK factors one column-major matrix at a time
// with 32-bit (LP64) integer sizes. Every kernel here copies each matrix of
// a batch, read through its strides (broadcast batch dims too), into a
// column-major scratch buffer, runs the LAPACK routine on it and copies the
// result out row-major; the copies are O(n^2) against the routines' O(n^3).
// Every size handed to LAPACK (rows, columns, leading dimensions, the
// elements of a buffer, workspace lengths) is checked to fit its int first.
// Matrices run in parallel over the batch (OpenBLAS then runs each routine
// on one thread; a single large matrix gets OpenBLAS's threads instead).
// LAPACK reports failures in `info`: each matrix's info is kept and, after
// the loop, the first failing matrix in batch order is reported as
// LinAlgError, "(Batch element i): " naming it for batched inputs as
// PyTorch does, so the error does not depend on the thread count.
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "meshflow/op_def.h"
#include "meshflow/parallel.h"
#include "backend/common/linalg_errors.h"
#include "backend/cpu/kernels/gemm.h"

// Fortran LAPACK (reference LAPACK 3.x signatures); character arguments
// carry gfortran's hidden length arguments at the end.
extern "C" {
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* lda, const int* ipiv,
             float* b, const int* ldb, int* info, size_t trans_len);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, size_t trans_len);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t uplo_len);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uplo_len);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork,
             int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
             const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info,
             size_t jobz_len);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t jobz_len);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
}

namespace mf::cpu {
namespace {

// --- the routines by element type -------------------------------------------------------

void getrf(int m, int n, float* a, int lda, int* ipiv, int* info) { sgetrf_(&m, &n, a, &lda, ipiv, info); }
void getrf(int m, int n, double* a, int lda, int* ipiv, int* info) { dgetrf_(&m, &n, a, &lda, ipiv, info); }
void getrs(int n, int nrhs, const float* a, int lda, const int* ipiv, float* b, int ldb, int* info) {
  sgetrs_("N", &n, &nrhs, a, &lda, ipiv, b, &ldb, info, 1);
}
void getrs(int n, int nrhs, const double* a, int lda, const int* ipiv, double* b, int ldb, int* info) {
  dgetrs_("N", &n, &nrhs, a, &lda, ipiv, b, &ldb, info, 1);
}
void potrf(char uplo, int n, float* a, int lda, int* info) { spotrf_(&uplo, &n, a, &lda, info, 1); }
void potrf(char uplo, int n, double* a, int lda, int* info) { dpotrf_(&uplo, &n, a, &lda, info, 1); }
void geqrf(int m, int n, float* a, int lda, float* tau, float* work, int lwork, int* info) {
  sgeqrf_(&m, &n, a, &lda, tau, work, &lwork, info);
}
void geqrf(int m, int n, double* a, int lda, double* tau, double* work, int lwork, int* info) {
  dgeqrf_(&m, &n, a, &lda, tau, work, &lwork, info);
}
void orgqr(int m, int n, int k, float* a, int lda, const float* tau, float* work, int lwork, int* info) {
  sorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, info);
}
void orgqr(int m, int n, int k, double* a, int lda, const double* tau, double* work, int lwork, int* info) {
  dorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, info);
}
void gesdd(char jobz, int m, int n, float* a, int lda, float* s, float* u, int ldu, float* vt, int ldvt, float* work,
           int lwork, int* iwork, int* info) {
  sgesdd_(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}
void gesdd(char jobz, int m, int n, double* a, int lda, double* s, double* u, int ldu, double* vt, int ldvt,
           double* work, int lwork, int* iwork, int* info) {
  dgesdd_(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}
void syevd(char jobz, char uplo, int n, float* a, int lda, float* w, float* work, int lwork, int* iwork, int liwork,
           int* info) {
  ssyevd_(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, info, 1, 1);
}
void syevd(char jobz, char uplo, int n, double* a, int lda, double* w, double* work, int lwork, int* iwork,
           int liwork, int* info) {
  dsyevd_(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, info, 1, 1);
}

template <typename F>
void dispatch_lapack(DType dtype, const char* op, F&& fn) {
  if (dtype == DType::Float32) return fn.template operator()<float>();
  if (dtype == DType::Float64) return fn.template operator()<double>();
  throw TypeError(detail::concat(op, ": expected float32 or float64, got ", dtype_name(dtype)));
}

// --- sizes and batches ------------------------------------------------------------------

// v as LAPACK's int; what names the quantity.
int lapack_int(int64_t v, const char* op, const char* what) {
  MF_CHECK(v >= 0 && v <= INT_MAX, ValueError, op, ": ", what, " (", v,
           ") does not fit LAPACK's 32-bit integers; the matrices are too large");
  return int(v);
}

// A leading dimension of at least 1 (LAPACK requires lda >= max(1, rows)).
int64_t leading(int64_t rows) { return std::max<int64_t>(rows, 1); }

// A buffer of rows x cols column-major elements, its size checked against
// LAPACK's int (its routines index the whole array with it).
template <typename T>
std::vector<T> column_major_buffer(int64_t rows, int64_t cols, const char* op) {
  lapack_int(checked_mul(leading(rows), std::max<int64_t>(cols, 1), op, "matrix elements"), op, "matrix elements");
  return std::vector<T>(size_t(leading(rows) * std::max<int64_t>(cols, 1)));
}

// LAPACK's workspace answer (a float holding an int) as a length.
template <typename T>
int workspace_length(T query, const char* op) {
  const double v = std::ceil(double(query));
  return lapack_int(v > double(INT_MAX) ? int64_t(INT_MAX) + 1 : std::max<int64_t>(int64_t(v), 1), op,
                    "the workspace length");
}

// The matrices of t, read through their strides.
template <typename T>
struct Matrices {
  const T* base;
  Offsets offsets;  // element offset of each matrix of the batch
  int64_t rows, cols, row_stride, col_stride;

  Matrices(const Tensor& t, const Shape& batch)
      : base(static_cast<const T*>(t.data_ptr())), offsets(batch_offsets(t, batch)), rows(t.size(-2)),
        cols(t.size(-1)), row_stride(t.stride(-2)), col_stride(t.stride(-1)) {}

  // Matrix i into dst, column-major with leading dimension ld.
  void gather(int64_t i, T* dst, int64_t ld) const {
    const T* src = base + offsets[size_t(i)];
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < rows; ++r) dst[r + c * ld] = src[r * row_stride + c * col_stride];
  }
};

// Column-major (rows, cols) with leading dimension ld into the row-major
// contiguous dst.
template <typename T>
void scatter_row_major(const T* src, int64_t ld, int64_t rows, int64_t cols, T* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[r + c * ld];
}

Shape batch_of(const Tensor& t, int64_t core_dims) { return Shape(t.sizes().begin(), t.sizes().end() - core_dims); }

// Runs fn(first, last) over the batch in parallel, chunks of at least one
// matrix and of about kGrainSize elements.
template <typename F>
void for_each_matrix(int64_t count, int64_t elements_per_matrix, const F& fn) {
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(elements_per_matrix, 1));
  parallel_for(0, count, grain, fn);
}

// The first failing matrix as LinAlgError (Note [LAPACK batches]).
void check(const std::vector<int>& infos, bool batched, const char* op, std::string (*describe)(int)) {
  linalg_errors::check_infos(infos.data(), infos.size(), batched, op, describe);
}

// Note [Non-finite input to gesdd]: gesdd refuses a NaN (info -4), but an
// inf makes it pass an infinite scale to lascl, whose xerbla either prints
// (OpenBLAS's) or, when NumPy is loaded and its xerbla_ wins the symbol,
// sets a Python exception from a worker thread; other inf inputs run
// without end. So svd checks its input first and refuses any NaN or inf
// with PyTorch's message for NaN.
using linalg_errors::kNonFinite;  // an info no LAPACK routine returns

template <typename T>
bool all_finite(const T* a, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r)
      if (!std::isfinite(a[r + c * ld])) return false;
  return true;
}

// --- LU -----------------------------------------------------------------------------------

// LU-factors every matrix of a, then calls finish(i, lu, ipiv) with matrix
// i's factors (column-major, leading dimension max(n, 1)).
template <typename T, typename Finish>
void for_each_lu(const Tensor& a, const char* op, const Finish& finish) {
  const int64_t n = a.size(-1);
  const Shape batch = batch_of(a, 2);
  const Matrices<T> in(a, batch);
  const int ni = lapack_int(n, op, "the matrix size");
  const int64_t count = int64_t(in.offsets.size());
  for_each_matrix(count, n * n, [&](int64_t first, int64_t last) {
    std::vector<T> lu = column_major_buffer<T>(n, n, op);
    std::vector<int> ipiv(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (int64_t i = first; i < last; ++i) {
      in.gather(i, lu.data(), leading(n));
      int info = 0;
      if (n > 0) getrf(ni, ni, lu.data(), int(leading(n)), ipiv.data(), &info);
      finish(i, lu.data(), ipiv.data(), info);
    }
  });
}

// (-1)^(row swaps) of an LU factorisation of order n.
double permutation_sign(const int* ipiv, int64_t n) {
  double sign = 1.0;
  for (int64_t i = 0; i < n; ++i)
    if (ipiv[i] != int(i + 1)) sign = -sign;
  return sign;
}

// --- the kernels ---------------------------------------------------------------------------

// det (...) of a (..., n, n) through its LU factorisation (getrf).
void lu_det(const Tensor& a, Tensor& det) {
  dispatch_lapack(a.dtype(), "linalg.det", [&]<typename T>() {
    const int64_t n = a.size(-1);
    T* out = static_cast<T*>(det.data_ptr());
    for_each_lu<T>(a, "linalg.det", [&](int64_t i, const T* lu, const int* ipiv, int) {
      T product = T(permutation_sign(ipiv, n));
      for (int64_t k = 0; k < n; ++k) product *= lu[k + k * leading(n)];
      out[i] = product;
    });
  });
}

// sign (...) and log|det| (...); a singular matrix gives sign 0 and -inf.
void lu_slogdet(const Tensor& a, Tensor& sign, Tensor& logabsdet) {
  dispatch_lapack(a.dtype(), "linalg.slogdet", [&]<typename T>() {
    const int64_t n = a.size(-1);
    T* sign_out = static_cast<T*>(sign.data_ptr());
    T* log_out = static_cast<T*>(logabsdet.data_ptr());
    for_each_lu<T>(a, "linalg.slogdet", [&](int64_t i, const T* lu, const int* ipiv, int) {
      T s = T(permutation_sign(ipiv, n)), log_abs = 0;
      for (int64_t k = 0; k < n; ++k) {
        const T u = lu[k + k * leading(n)];
        if (std::isnan(u)) s = u;
        else if (u < 0) s = -s;
        else if (u == 0) s = 0;
        log_abs += std::log(std::abs(u));
      }
      sign_out[i] = s;
      log_out[i] = log_abs;
    });
  });
}

// a^-1 (getrf, getrs on the identity); LinAlgError for a singular matrix.
void lu_inverse(const Tensor& a, Tensor& out) {
  const char* op = "linalg.inv";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), ld = leading(n);
    T* dst = static_cast<T*>(out.data_ptr());
    std::vector<int> infos(size_t(shape_numel(batch_of(a, 2))), 0);
    for_each_lu<T>(a, op, [&](int64_t i, const T* lu, const int* ipiv, int info) {
      if (info > 0) {
        infos[size_t(i)] = info;
        return;
      }
      std::vector<T> x = column_major_buffer<T>(n, n, op);  // the identity, solved in place
      for (int64_t k = 0; k < n; ++k) x[size_t(k + k * ld)] = T(1);
      int solve_info = 0;
      if (n > 0) getrs(int(n), int(n), lu, int(ld), ipiv, x.data(), int(ld), &solve_info);
      infos[size_t(i)] = solve_info;
      scatter_row_major(x.data(), ld, n, n, dst + i * n * n);
    });
    check(infos, a.dim() > 2, op, linalg_errors::singular_inverse);
  });
}

// X with a X = b for a (..., n, n) and b (..., n, k) whose batch dims
// broadcast to out's; LinAlgError for a singular a.
void lu_solve(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "linalg.solve";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), k = b.size(-1), ld = leading(n);
    const Shape batch = batch_of(out, 2);
    const Matrices<T> lhs(a, batch), rhs(b, batch);
    const int ni = lapack_int(n, op, "the matrix size"), ki = lapack_int(k, op, "the number of right-hand sides");
    T* dst = static_cast<T*>(out.data_ptr());
    std::vector<int> infos(lhs.offsets.size(), 0);
    for_each_matrix(int64_t(infos.size()), n * (n + k), [&](int64_t first, int64_t last) {
      std::vector<T> lu = column_major_buffer<T>(n, n, op), x = column_major_buffer<T>(n, k, op);
      std::vector<int> ipiv(static_cast<size_t>(std::max<int64_t>(n, 1)));
      for (int64_t i = first; i < last; ++i) {
        int info = 0;
        lhs.gather(i, lu.data(), ld);
        rhs.gather(i, x.data(), ld);
        if (n > 0) getrf(ni, ni, lu.data(), int(ld), ipiv.data(), &info);
        if (info == 0 && n > 0 && k > 0) getrs(ni, ki, lu.data(), int(ld), ipiv.data(), x.data(), int(ld), &info);
        infos[size_t(i)] = info;
        scatter_row_major(x.data(), ld, n, k, dst + i * n * k);
      }
    });
    check(infos, out.dim() > 2, op, linalg_errors::singular_solve);
  });
}

// The Cholesky factor of the lower (or upper) triangle of a (potrf), the
// other triangle zero; LinAlgError when a is not positive-definite.
void cholesky(const Tensor& a, Tensor& out, bool upper) {
  const char* op = "linalg.cholesky";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), ld = leading(n);
    const Matrices<T> in(a, batch_of(a, 2));
    const int ni = lapack_int(n, op, "the matrix size");
    T* dst = static_cast<T*>(out.data_ptr());
    std::vector<int> infos(in.offsets.size(), 0);
    for_each_matrix(int64_t(infos.size()), n * n, [&](int64_t first, int64_t last) {
      std::vector<T> factor = column_major_buffer<T>(n, n, op);
      for (int64_t i = first; i < last; ++i) {
        in.gather(i, factor.data(), ld);
        if (n > 0) potrf(upper ? 'U' : 'L', ni, factor.data(), int(ld), &infos[size_t(i)]);
        T* o = dst + i * n * n;
        scatter_row_major(factor.data(), ld, n, n, o);
        for (int64_t r = 0; r < n; ++r)  // the triangle potrf leaves as it was
          for (int64_t c = 0; c < n; ++c)
            if (upper ? c < r : c > r) o[r * n + c] = T(0);
      }
    });
    check(infos, a.dim() > 2, op, linalg_errors::not_positive_definite);
  });
}

// Q and R of a (..., m, n) (geqrf, orgqr): Q is (..., m, q.size(-1)) with
// q.size(-1) k = min(m, n) or m; R is r's shape (k or m rows). With
// compute_q false, q is not written.
void qr(const Tensor& a, Tensor& q, Tensor& r, bool compute_q) {
  const char* op = "linalg.qr";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n), ld = leading(m);
    const int64_t q_cols = compute_q ? q.size(-1) : 0, r_rows = r.size(-2);
    const int64_t cols = std::max(n, q_cols);  // orgqr builds Q in place
    const Matrices<T> in(a, batch_of(a, 2));
    const int mi = lapack_int(m, op, "the number of rows"), ni = lapack_int(n, op, "the number of columns");
    // Workspace lengths, asked once for these sizes.
    int lwork = 1;
    if (k > 0) {
      T query = 0, tau_query = 0;
      int info = 0;
      geqrf(mi, ni, &tau_query, int(ld), &tau_query, &query, -1, &info);
      lwork = std::max(lwork, workspace_length(query, op));
      if (compute_q) {
        orgqr(mi, int(q_cols), int(k), &tau_query, int(ld), &tau_query, &query, -1, &info);
        lwork = std::max(lwork, workspace_length(query, op));
      }
    }
    T* q_out = compute_q ? static_cast<T*>(q.data_ptr()) : nullptr;
    T* r_out = static_cast<T*>(r.data_ptr());
    for_each_matrix(int64_t(in.offsets.size()), m * cols, [&](int64_t first, int64_t last) {
      std::vector<T> h = column_major_buffer<T>(m, cols, op), tau(static_cast<size_t>(std::max<int64_t>(k, 1))),
                     work(static_cast<size_t>(lwork));
      for (int64_t i = first; i < last; ++i) {
        std::fill(h.begin(), h.end(), T(0));
        in.gather(i, h.data(), ld);
        int info = 0;
        if (k > 0) geqrf(mi, ni, h.data(), int(ld), tau.data(), work.data(), lwork, &info);
        T* ro = r_out + i * r_rows * n;
        for (int64_t row = 0; row < r_rows; ++row)
          for (int64_t c = 0; c < n; ++c) ro[row * n + c] = c >= row ? h[size_t(row + c * ld)] : T(0);
        if (!compute_q) continue;
        // k = 0 leaves Q as the identity's first columns (orgqr would too).
        if (k > 0) {
          orgqr(mi, int(q_cols), int(k), h.data(), int(ld), tau.data(), work.data(), lwork, &info);
        } else {
          std::fill(h.begin(), h.end(), T(0));
          for (int64_t d = 0; d < std::min(m, q_cols); ++d) h[size_t(d + d * ld)] = T(1);
        }
        scatter_row_major(h.data(), ld, m, q_cols, q_out + i * m * q_cols);
      }
    });
  });
}

// Singular values s (..., k) descending, and with compute_uv u (..., m, m or
// k) and vh (..., n or k, n), full or reduced by their shapes (gesdd).
// LinAlgError for NaN input (which gesdd refuses) or no convergence.
void svd(const Tensor& a, Tensor& u, Tensor& s, Tensor& vh, bool compute_uv) {
  const char* op = "linalg.svd";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n), ld = leading(m);
    const int64_t u_cols = compute_uv ? u.size(-1) : 0, vh_rows = compute_uv ? vh.size(-2) : 0;
    const bool full = compute_uv && u_cols == m && vh_rows == n;
    const char jobz = !compute_uv ? 'N' : full ? 'A' : 'S';
    const Matrices<T> in(a, batch_of(a, 2));
    const int mi = lapack_int(m, op, "the number of rows"), ni = lapack_int(n, op, "the number of columns");
    const int ldu = int(leading(m)), ldvt = int(leading(vh_rows));
    int lwork = 1;
    if (k > 0) {
      T query = 0, scratch = 0;
      int iwork = 0, info = 0;
      gesdd(jobz, mi, ni, &scratch, int(ld), &scratch, &scratch, ldu, &scratch, ldvt, &query, -1, &iwork, &info);
      lwork = workspace_length(query, op);
    }
    const int64_t iwork_length = checked_mul(8, std::max<int64_t>(k, 1), op, "the integer workspace");
    lapack_int(iwork_length, op, "the integer workspace");
    T* s_out = static_cast<T*>(s.data_ptr());
    T* u_out = compute_uv ? static_cast<T*>(u.data_ptr()) : nullptr;
    T* vh_out = compute_uv ? static_cast<T*>(vh.data_ptr()) : nullptr;
    std::vector<int> infos(in.offsets.size(), 0);
    for_each_matrix(int64_t(infos.size()), m * n, [&](int64_t first, int64_t last) {
      std::vector<T> h = column_major_buffer<T>(m, n, op), work(static_cast<size_t>(lwork));
      std::vector<T> u_buf = column_major_buffer<T>(m, u_cols, op), vt_buf = column_major_buffer<T>(vh_rows, n, op);
      std::vector<int> iwork(static_cast<size_t>(iwork_length));
      for (int64_t i = first; i < last; ++i) {
        in.gather(i, h.data(), ld);
        if (!all_finite(h.data(), m, n, ld)) {  // Note [Non-finite input to gesdd]
          infos[size_t(i)] = kNonFinite;
          continue;
        }
        if (k > 0) {
          gesdd(jobz, mi, ni, h.data(), int(ld), s_out + i * k, u_buf.data(), ldu, vt_buf.data(), ldvt, work.data(),
                lwork, iwork.data(), &infos[size_t(i)]);
        } else if (compute_uv) {  // no singular values: the full factors are identities
          std::fill(u_buf.begin(), u_buf.end(), T(0));
          std::fill(vt_buf.begin(), vt_buf.end(), T(0));
          for (int64_t d = 0; d < std::min(m, u_cols); ++d) u_buf[size_t(d + d * ldu)] = T(1);
          for (int64_t d = 0; d < std::min(n, vh_rows); ++d) vt_buf[size_t(d + d * ldvt)] = T(1);
        }
        if (!compute_uv) continue;
        scatter_row_major(u_buf.data(), ldu, m, u_cols, u_out + i * m * u_cols);
        scatter_row_major(vt_buf.data(), ldvt, vh_rows, n, vh_out + i * vh_rows * n);
      }
    });
    check(infos, a.dim() > 2, op, linalg_errors::svd_failed);
  });
}

// Eigenvalues w (..., n) ascending of the symmetric matrix held in the lower
// (or upper) triangle of a, and with compute_v the eigenvectors as the
// columns of v (syevd); LinAlgError when LAPACK does not converge.
void eigh(const Tensor& a, Tensor& w, Tensor& v, bool upper, bool compute_v) {
  const char* op = "linalg.eigh";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), ld = leading(n);
    const char jobz = compute_v ? 'V' : 'N', uplo = upper ? 'U' : 'L';
    const Matrices<T> in(a, batch_of(a, 2));
    const int ni = lapack_int(n, op, "the matrix size");
    int lwork = 1, liwork = 1;
    if (n > 0) {
      T query = 0, scratch = 0;
      int iquery = 0, info = 0;
      syevd(jobz, uplo, ni, &scratch, int(ld), &scratch, &query, -1, &iquery, -1, &info);
      lwork = workspace_length(query, op);
      liwork = std::max(iquery, 1);
    }
    T* w_out = static_cast<T*>(w.data_ptr());
    T* v_out = compute_v ? static_cast<T*>(v.data_ptr()) : nullptr;
    std::vector<int> infos(in.offsets.size(), 0);
    for_each_matrix(int64_t(infos.size()), n * n, [&](int64_t first, int64_t last) {
      std::vector<T> h = column_major_buffer<T>(n, n, op), work(static_cast<size_t>(lwork));
      std::vector<int> iwork(static_cast<size_t>(liwork));
      for (int64_t i = first; i < last; ++i) {
        in.gather(i, h.data(), ld);
        if (n > 0) syevd(jobz, uplo, ni, h.data(), int(ld), w_out + i * n, work.data(), lwork, iwork.data(), liwork,
                         &infos[size_t(i)]);
        if (compute_v) scatter_row_major(h.data(), ld, n, n, v_out + i * n * n);
      }
    });
    check(infos, a.dim() > 2, op, linalg_errors::eigh_failed);
  });
}

// The ops' CPU kernels (src/ops/linalg_lu.cpp, linalg_spectral.cpp hold the
// schemas and the backward).
[[maybe_unused]] const bool kRegistered = [] {
  OpRegistry& r = OpRegistry::instance();
  constexpr DeviceType kCpu = DeviceType::CPU;
  r.set_kernel("linalg_det", kCpu, [](const TensorList& in, TensorList& out, const Attrs&) { lu_det(in[0], out[0]); });
  r.set_kernel("linalg_slogdet", kCpu, [](const TensorList& in, TensorList& out, const Attrs&) {
    lu_slogdet(in[0], out[0], out[1]);
  });
  r.set_kernel("linalg_inv", kCpu, [](const TensorList& in, TensorList& out, const Attrs&) {
    lu_inverse(in[0], out[0]);
  });
  r.set_kernel("linalg_solve", kCpu, [](const TensorList& in, TensorList& out, const Attrs&) {
    lu_solve(in[0], in[1], out[0]);
  });
  r.set_kernel("linalg_cholesky", kCpu, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    cholesky(in[0], out[0], attrs.get_bool("upper"));
  });
  r.set_kernel("linalg_qr", kCpu, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    qr(in[0], out[0], out[1], attrs.get_string("mode") != "r");  // the mode was checked by inference
  });
  r.set_kernel("linalg_svd", kCpu, [](const TensorList& in, TensorList& out, const Attrs&) {
    svd(in[0], out[0], out[1], out[2], true);
  });
  r.set_kernel("linalg_svdvals", kCpu, [](const TensorList& in, TensorList& out, const Attrs&) {
    Tensor no_u, no_vh;
    svd(in[0], no_u, out[0], no_vh, false);
  });
  r.set_kernel("linalg_eigh", kCpu, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    eigh(in[0], out[0], out[1], attrs.get_bool("upper"), true);
  });
  r.set_kernel("linalg_eigvalsh", kCpu, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    Tensor no_v;
    eigh(in[0], out[0], no_v, attrs.get_bool("upper"), false);
  });
  return true;
}();

}  // namespace
}  // namespace mf::cpu
