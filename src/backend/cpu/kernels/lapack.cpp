// The CPU kernels of torch.linalg's decompositions on LAPACK (OpenBLAS's;
// CMakeLists.txt, Note [One OpenBLAS]), set for the ops of
// src/ops/linalg_lu.cpp and linalg_spectral.cpp. Inputs are float32 or
// float64 batches of matrices (..., m, n) of any strides; outputs are
// contiguous.
//
// Note [LAPACK batches]: LAPACK factors one column-major matrix at a time
// with 32-bit (LP64) integer sizes. Every kernel here copies each matrix of
// a batch, read through its strides (broadcast batch dims too), into a
// column-major buffer, runs the LAPACK routine on it and copies the
// result out row-major; the copies are O(n^2) against the routines' O(n^3).
// The buffers, LAPACK's workspaces and the infos are the kernel's scratch
// (Note [Kernel scratch]): one slot of buffers per thread, measured by the
// kernel itself (Note [Measured kernels]).
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
#include "backend/cpu/kernels/dense_scratch.h"
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
  throw TypeError(mf::detail::concat(op, ": expected float32 or float64, got ", dtype_name(dtype)));
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

// The elements of a rows x cols column-major buffer, checked against
// LAPACK's int (its routines index the whole array with it).
int64_t column_major_elements(int64_t rows, int64_t cols, const char* op) {
  return lapack_int(checked_mul(leading(rows), std::max<int64_t>(cols, 1), op, "matrix elements"), op,
                    "matrix elements");
}

// A thread's buffers, carved from one slot of the kernel's scratch: add()
// lists a piece (its byte offset in the slot), at() finds it in a slot.
class SlotPieces {
 public:
  explicit SlotPieces(const char* op) : layout_(op) {}
  template <typename E>
  int64_t add(int64_t elements) {
    const int64_t at = layout_.next();
    layout_.add_bytes(checked_mul(std::max<int64_t>(elements, 1), int64_t(sizeof(E)), "lapack", "buffer bytes"));
    return at;
  }
  int64_t bytes() const { return layout_.bytes(); }
  template <typename E>
  static E* at(const Tensor& slot, int64_t offset) {
    return reinterpret_cast<E*>(static_cast<char*>(slot.data_ptr()) + offset);
  }

 private:
  ScratchLayout layout_;
};

// The per-thread slots of `pieces` for count matrices of about
// elements_per_matrix each: one per thread, fewer where the batch is small
// (chunks of about kGrainSize elements).
std::vector<Tensor> matrix_slots(int64_t count, int64_t elements_per_matrix, const SlotPieces& pieces,
                                 Workspace& ws) {
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(elements_per_matrix, 1));
  const int64_t want = std::min<int64_t>(get_num_threads(), (count + grain - 1) / grain);
  return ws.take_slots(want, {pieces.bytes()}, DType::UInt8);
}

// Each matrix's info, in the scratch.
int* take_infos(int64_t count, Workspace& ws) {
  return static_cast<int*>(ws.take({count}, DType::Int32).data_ptr());
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

// The first failing matrix as LinAlgError (Note [LAPACK batches]).
void check(const int* infos, int64_t count, bool batched, const char* op, std::string (*describe)(int)) {
  linalg_errors::check_infos(infos, size_t(count), batched, op, describe);
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

// LU-factors every matrix of a, then calls finish(i, lu, ipiv, info, extra)
// with matrix i's factors (column-major, leading dimension max(n, 1)) and
// extra_elements more of T in the thread's slot. Measuring, it only takes.
template <typename T, typename Finish>
void for_each_lu(const Tensor& a, const char* op, int64_t extra_elements, Workspace& ws, const Finish& finish) {
  const int64_t n = a.size(-1);
  const int ni = lapack_int(n, op, "the matrix size");
  const int64_t count = shape_numel(batch_of(a, 2));
  SlotPieces pieces(op);
  const int64_t lu_at = pieces.add<T>(column_major_elements(n, n, op)), ipiv_at = pieces.add<int>(n);
  const int64_t extra_at = pieces.add<T>(extra_elements);
  const std::vector<Tensor> slots = matrix_slots(count, n * n, pieces, ws);
  if (ws.measuring()) return;
  const Matrices<T> in(a, batch_of(a, 2));
  for_each_slot(count, int64_t(slots.size()), [&](int64_t slot, int64_t i) {
    T* lu = SlotPieces::at<T>(slots[size_t(slot)], lu_at);
    int* ipiv = SlotPieces::at<int>(slots[size_t(slot)], ipiv_at);
    in.gather(i, lu, leading(n));
    int info = 0;
    if (n > 0) getrf(ni, ni, lu, int(leading(n)), ipiv, &info);
    finish(i, lu, ipiv, info, SlotPieces::at<T>(slots[size_t(slot)], extra_at));
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
void lu_det(const Tensor& a, Tensor& det, Workspace& ws) {
  dispatch_lapack(a.dtype(), "linalg.det", [&]<typename T>() {
    const int64_t n = a.size(-1);
    T* out = static_cast<T*>(det.data_ptr());
    for_each_lu<T>(a, "linalg.det", 0, ws, [&](int64_t i, const T* lu, const int* ipiv, int, T*) {
      T product = T(permutation_sign(ipiv, n));
      for (int64_t k = 0; k < n; ++k) product *= lu[k + k * leading(n)];
      out[i] = product;
    });
  });
}

// sign (...) and log|det| (...); a singular matrix gives sign 0 and -inf.
void lu_slogdet(const Tensor& a, Tensor& sign, Tensor& logabsdet, Workspace& ws) {
  dispatch_lapack(a.dtype(), "linalg.slogdet", [&]<typename T>() {
    const int64_t n = a.size(-1);
    T* sign_out = static_cast<T*>(sign.data_ptr());
    T* log_out = static_cast<T*>(logabsdet.data_ptr());
    for_each_lu<T>(a, "linalg.slogdet", 0, ws, [&](int64_t i, const T* lu, const int* ipiv, int, T*) {
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
void lu_inverse(const Tensor& a, Tensor& out, Workspace& ws) {
  const char* op = "linalg.inv";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), ld = leading(n), count = shape_numel(batch_of(a, 2));
    T* dst = static_cast<T*>(out.data_ptr());
    int* infos = take_infos(count, ws);
    const int64_t elements = column_major_elements(n, n, op);
    for_each_lu<T>(a, op, elements, ws, [&](int64_t i, const T* lu, const int* ipiv, int info, T* x) {
      if (info > 0) {
        infos[i] = info;
        return;
      }
      std::fill(x, x + elements, T(0));  // the identity, solved in place
      for (int64_t k = 0; k < n; ++k) x[k + k * ld] = T(1);
      int solve_info = 0;
      if (n > 0) getrs(int(n), int(n), lu, int(ld), ipiv, x, int(ld), &solve_info);
      infos[i] = solve_info;
      scatter_row_major(x, ld, n, n, dst + i * n * n);
    });
    if (!ws.measuring()) check(infos, count, a.dim() > 2, op, linalg_errors::singular_inverse);
  });
}

// X with a X = b for a (..., n, n) and b (..., n, k) whose batch dims
// broadcast to out's; LinAlgError for a singular a.
void lu_solve(const Tensor& a, const Tensor& b, Tensor& out, Workspace& ws) {
  const char* op = "linalg.solve";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), k = b.size(-1), ld = leading(n);
    const Shape batch = batch_of(out, 2);
    const int64_t count = shape_numel(batch);
    const int ni = lapack_int(n, op, "the matrix size"), ki = lapack_int(k, op, "the number of right-hand sides");
    T* dst = static_cast<T*>(out.data_ptr());
    int* infos = take_infos(count, ws);
    SlotPieces pieces(op);
    const int64_t lu_at = pieces.add<T>(column_major_elements(n, n, op));
    const int64_t x_at = pieces.add<T>(column_major_elements(n, k, op)), ipiv_at = pieces.add<int>(n);
    const std::vector<Tensor> slots = matrix_slots(count, n * (n + k), pieces, ws);
    if (ws.measuring()) return;
    const Matrices<T> lhs(a, batch), rhs(b, batch);
    for_each_slot(count, int64_t(slots.size()), [&](int64_t slot, int64_t i) {
      T* lu = SlotPieces::at<T>(slots[size_t(slot)], lu_at);
      T* x = SlotPieces::at<T>(slots[size_t(slot)], x_at);
      int* ipiv = SlotPieces::at<int>(slots[size_t(slot)], ipiv_at);
      int info = 0;
      lhs.gather(i, lu, ld);
      rhs.gather(i, x, ld);
      if (n > 0) getrf(ni, ni, lu, int(ld), ipiv, &info);
      if (info == 0 && n > 0 && k > 0) getrs(ni, ki, lu, int(ld), ipiv, x, int(ld), &info);
      infos[i] = info;
      scatter_row_major(x, ld, n, k, dst + i * n * k);
    });
    check(infos, count, out.dim() > 2, op, linalg_errors::singular_solve);
  });
}

// The Cholesky factor of the lower (or upper) triangle of a (potrf), the
// other triangle zero; LinAlgError when a is not positive-definite.
void cholesky(const Tensor& a, Tensor& out, bool upper, Workspace& ws) {
  const char* op = "linalg.cholesky";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), ld = leading(n), count = shape_numel(batch_of(a, 2));
    const int ni = lapack_int(n, op, "the matrix size");
    T* dst = static_cast<T*>(out.data_ptr());
    int* infos = take_infos(count, ws);
    SlotPieces pieces(op);
    const int64_t factor_at = pieces.add<T>(column_major_elements(n, n, op));
    const std::vector<Tensor> slots = matrix_slots(count, n * n, pieces, ws);
    if (ws.measuring()) return;
    const Matrices<T> in(a, batch_of(a, 2));
    for_each_slot(count, int64_t(slots.size()), [&](int64_t slot, int64_t i) {
      T* factor = SlotPieces::at<T>(slots[size_t(slot)], factor_at);
      in.gather(i, factor, ld);
      infos[i] = 0;
      if (n > 0) potrf(upper ? 'U' : 'L', ni, factor, int(ld), &infos[i]);
      T* o = dst + i * n * n;
      scatter_row_major(factor, ld, n, n, o);
      for (int64_t r = 0; r < n; ++r)  // the triangle potrf leaves as it was
        for (int64_t c = 0; c < n; ++c)
          if (upper ? c < r : c > r) o[r * n + c] = T(0);
    });
    check(infos, count, a.dim() > 2, op, linalg_errors::not_positive_definite);
  });
}

// Q and R of a (..., m, n) (geqrf, orgqr): Q is (..., m, q.size(-1)) with
// q.size(-1) k = min(m, n) or m; R is r's shape (k or m rows). With
// compute_q false, q is not written.
void qr(const Tensor& a, Tensor& q, Tensor& r, bool compute_q, Workspace& ws) {
  const char* op = "linalg.qr";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n), ld = leading(m);
    const int64_t q_cols = compute_q ? q.size(-1) : 0, r_rows = r.size(-2);
    const int64_t cols = std::max(n, q_cols);  // orgqr builds Q in place
    const int64_t count = shape_numel(batch_of(a, 2));
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
    SlotPieces pieces(op);
    const int64_t h_elements = column_major_elements(m, cols, op);
    const int64_t h_at = pieces.add<T>(h_elements), tau_at = pieces.add<T>(k), work_at = pieces.add<T>(lwork);
    const std::vector<Tensor> slots = matrix_slots(count, m * cols, pieces, ws);
    if (ws.measuring()) return;
    const Matrices<T> in(a, batch_of(a, 2));
    for_each_slot(count, int64_t(slots.size()), [&](int64_t slot, int64_t i) {
      T* h = SlotPieces::at<T>(slots[size_t(slot)], h_at);
      T* tau = SlotPieces::at<T>(slots[size_t(slot)], tau_at);
      T* work = SlotPieces::at<T>(slots[size_t(slot)], work_at);
      std::fill(h, h + h_elements, T(0));
      in.gather(i, h, ld);
      int info = 0;
      if (k > 0) geqrf(mi, ni, h, int(ld), tau, work, lwork, &info);
      T* ro = r_out + i * r_rows * n;
      for (int64_t row = 0; row < r_rows; ++row)
        for (int64_t c = 0; c < n; ++c) ro[row * n + c] = c >= row ? h[row + c * ld] : T(0);
      if (!compute_q) return;
      // k = 0 leaves Q as the identity's first columns (orgqr would too).
      if (k > 0) {
        orgqr(mi, int(q_cols), int(k), h, int(ld), tau, work, lwork, &info);
      } else {
        std::fill(h, h + h_elements, T(0));
        for (int64_t d = 0; d < std::min(m, q_cols); ++d) h[d + d * ld] = T(1);
      }
      scatter_row_major(h, ld, m, q_cols, q_out + i * m * q_cols);
    });
  });
}

// Singular values s (..., k) descending, and with compute_uv u (..., m, m or
// k) and vh (..., n or k, n), full or reduced by their shapes (gesdd).
// LinAlgError for NaN input (which gesdd refuses) or no convergence.
void svd(const Tensor& a, Tensor& u, Tensor& s, Tensor& vh, bool compute_uv, Workspace& ws) {
  const char* op = "linalg.svd";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n), ld = leading(m);
    const int64_t u_cols = compute_uv ? u.size(-1) : 0, vh_rows = compute_uv ? vh.size(-2) : 0;
    const bool full = compute_uv && u_cols == m && vh_rows == n;
    const char jobz = !compute_uv ? 'N' : full ? 'A' : 'S';
    const int64_t count = shape_numel(batch_of(a, 2));
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
    int* infos = take_infos(count, ws);
    SlotPieces pieces(op);
    const int64_t u_elements = column_major_elements(m, u_cols, op);
    const int64_t vt_elements = column_major_elements(vh_rows, n, op);
    const int64_t h_at = pieces.add<T>(column_major_elements(m, n, op)), work_at = pieces.add<T>(lwork);
    const int64_t u_at = pieces.add<T>(u_elements), vt_at = pieces.add<T>(vt_elements);
    const int64_t iwork_at = pieces.add<int>(iwork_length);
    const std::vector<Tensor> slots = matrix_slots(count, m * n, pieces, ws);
    if (ws.measuring()) return;
    const Matrices<T> in(a, batch_of(a, 2));
    for_each_slot(count, int64_t(slots.size()), [&](int64_t slot, int64_t i) {
      T* h = SlotPieces::at<T>(slots[size_t(slot)], h_at);
      T* work = SlotPieces::at<T>(slots[size_t(slot)], work_at);
      T* u_buf = SlotPieces::at<T>(slots[size_t(slot)], u_at);
      T* vt_buf = SlotPieces::at<T>(slots[size_t(slot)], vt_at);
      int* iwork = SlotPieces::at<int>(slots[size_t(slot)], iwork_at);
      infos[i] = 0;
      in.gather(i, h, ld);
      if (!all_finite(h, m, n, ld)) {  // Note [Non-finite input to gesdd]
        infos[i] = kNonFinite;
        return;
      }
      if (k > 0) {
        gesdd(jobz, mi, ni, h, int(ld), s_out + i * k, u_buf, ldu, vt_buf, ldvt, work, lwork, iwork, &infos[i]);
      } else if (compute_uv) {  // no singular values: the full factors are identities
        std::fill(u_buf, u_buf + u_elements, T(0));
        std::fill(vt_buf, vt_buf + vt_elements, T(0));
        for (int64_t d = 0; d < std::min(m, u_cols); ++d) u_buf[d + d * ldu] = T(1);
        for (int64_t d = 0; d < std::min(n, vh_rows); ++d) vt_buf[d + d * ldvt] = T(1);
      }
      if (!compute_uv) return;
      scatter_row_major(u_buf, ldu, m, u_cols, u_out + i * m * u_cols);
      scatter_row_major(vt_buf, ldvt, vh_rows, n, vh_out + i * vh_rows * n);
    });
    check(infos, count, a.dim() > 2, op, linalg_errors::svd_failed);
  });
}

// Eigenvalues w (..., n) ascending of the symmetric matrix held in the lower
// (or upper) triangle of a, and with compute_v the eigenvectors as the
// columns of v (syevd); LinAlgError when LAPACK does not converge.
void eigh(const Tensor& a, Tensor& w, Tensor& v, bool upper, bool compute_v, Workspace& ws) {
  const char* op = "linalg.eigh";
  dispatch_lapack(a.dtype(), op, [&]<typename T>() {
    const int64_t n = a.size(-1), ld = leading(n);
    const char jobz = compute_v ? 'V' : 'N', uplo = upper ? 'U' : 'L';
    const int64_t count = shape_numel(batch_of(a, 2));
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
    int* infos = take_infos(count, ws);
    SlotPieces pieces(op);
    const int64_t h_at = pieces.add<T>(column_major_elements(n, n, op)), work_at = pieces.add<T>(lwork);
    const int64_t iwork_at = pieces.add<int>(liwork);
    const std::vector<Tensor> slots = matrix_slots(count, n * n, pieces, ws);
    if (ws.measuring()) return;
    const Matrices<T> in(a, batch_of(a, 2));
    for_each_slot(count, int64_t(slots.size()), [&](int64_t slot, int64_t i) {
      T* h = SlotPieces::at<T>(slots[size_t(slot)], h_at);
      infos[i] = 0;
      in.gather(i, h, ld);
      if (n > 0)
        syevd(jobz, uplo, ni, h, int(ld), w_out + i * n, SlotPieces::at<T>(slots[size_t(slot)], work_at), lwork,
              SlotPieces::at<int>(slots[size_t(slot)], iwork_at), liwork, &infos[i]);
      if (compute_v) scatter_row_major(h, ld, n, n, v_out + i * n * n);
    });
    check(infos, count, a.dim() > 2, op, linalg_errors::eigh_failed);
  });
}

// The ops' CPU kernels (src/ops/linalg_lu.cpp, linalg_spectral.cpp hold the
// schemas and the backward), over a Workspace.
void det_kernel(const TensorList& in, TensorList& out, const Attrs&, Workspace& ws) { lu_det(in[0], out[0], ws); }
void slogdet_kernel(const TensorList& in, TensorList& out, const Attrs&, Workspace& ws) {
  lu_slogdet(in[0], out[0], out[1], ws);
}
void inv_kernel(const TensorList& in, TensorList& out, const Attrs&, Workspace& ws) {
  lu_inverse(in[0], out[0], ws);
}
void solve_kernel(const TensorList& in, TensorList& out, const Attrs&, Workspace& ws) {
  lu_solve(in[0], in[1], out[0], ws);
}
void cholesky_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  cholesky(in[0], out[0], attrs.get_bool("upper"), ws);
}
void qr_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  qr(in[0], out[0], out[1], attrs.get_string("mode") != "r", ws);  // the mode was checked by inference
}
void svd_kernel(const TensorList& in, TensorList& out, const Attrs&, Workspace& ws) {
  svd(in[0], out[0], out[1], out[2], true, ws);
}
void svdvals_kernel(const TensorList& in, TensorList& out, const Attrs&, Workspace& ws) {
  Tensor no_u, no_vh;
  svd(in[0], no_u, out[0], no_vh, false, ws);
}
void eigh_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  eigh(in[0], out[0], out[1], attrs.get_bool("upper"), true, ws);
}
void eigvalsh_kernel(const TensorList& in, TensorList& out, const Attrs& attrs, Workspace& ws) {
  Tensor no_v;
  eigh(in[0], out[0], no_v, attrs.get_bool("upper"), false, ws);
}

template <MeasuredKernel K>
void set(const char* op) {
  OpRegistry::instance().set_kernel(op, DeviceType::CPU, run_measured<K>, measure<K>);
}

[[maybe_unused]] const bool kRegistered = [] {
  set<det_kernel>("linalg_det");
  set<slogdet_kernel>("linalg_slogdet");
  set<inv_kernel>("linalg_inv");
  set<solve_kernel>("linalg_solve");
  set<cholesky_kernel>("linalg_cholesky");
  set<qr_kernel>("linalg_qr");
  set<svd_kernel>("linalg_svd");
  set<svdvals_kernel>("linalg_svdvals");
  set<eigh_kernel>("linalg_eigh");
  set<eigvalsh_kernel>("linalg_eigvalsh");
  return true;
}();

}  // namespace
}  // namespace mf::cpu
