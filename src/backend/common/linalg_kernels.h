// The torch.linalg factorisations over a backend's walks L (Note [Device
// index kernels] in index_kernels.h): det, slogdet, inv, solve, cholesky,
// qr, svd, svdvals, eigh and eigvalsh. The CPU keeps its LAPACK kernels
// (backend/cpu/kernels/lapack.cpp); src/ops/linalg_lu.cpp and
// linalg_spectral.cpp have the schemas, the checks and the backward.
//
// Note [Device linear algebra]: one thread per matrix of the batch runs
// the textbook algorithm on it, in the dtype (float32 or float64):
//   - LU with partial pivoting (the largest magnitude in the column, the
//     first on ties, as getrf), eliminating the right-hand sides (the
//     identity for inv) alongside, then back substitution; det and slogdet
//     read the pivots' product and the swaps' parity;
//   - Cholesky by columns (potrf's recurrence), the upper factor as the
//     lower factor of the transpose;
//   - QR by Householder reflectors with LAPACK's conventions (dlarfg's
//     beta = -sign(alpha) * norm, tau = (beta - alpha) / beta), Q built
//     backwards from the identity as orgqr does, so Q and R match LAPACK's
//     up to rounding, signs included;
//   - eigh by cyclic two-sided Jacobi rotations on the symmetric matrix
//     read from the chosen triangle, the eigenvalues sorted ascending (a
//     NaN or inf in it gives NaN values and vectors, never a number);
//   - svd by one-sided (Hestenes) Jacobi on the taller orientation, the
//     singular values sorted descending; columns of U (rows of Vh) that no
//     singular value determines (rank deficiency, full_matrices) are
//     completed to an orthonormal basis by Gram-Schmidt on unit vectors.
// The Jacobi iterations run on the matrix divided by its largest
// magnitude, so that no sum of squares over- or underflows (entries of
// 1e200 or 1e-200 in float64).
// Eigen- and singular vectors are unique only up to sign, and the device's
// signs may differ from LAPACK's (PyTorch's CUDA and CPU differ too).
// Each matrix keeps an info like LAPACK's (a zero pivot, a non-positive
// minor, a non-finite svd input, a Jacobi iteration that did not converge
// in kMaxSweeps sweeps); the host reads them after the walk, which waits
// for it, and throws for the first failing matrix in batch order with the
// CPU's messages (backend/common/linalg_errors.h). det and slogdet never
// fail and do not wait.
//
// This is the reference path for every device: a thread per matrix is
// right for batches of small matrices and slow for one large matrix, where
// a device library's blocked factorisations belong.
#pragma once

#include <algorithm>
#include <vector>

#include "backend/common/index_kernels.h"
#include "backend/common/linalg_errors.h"
#include "backend/common/scratch.h"
#include "meshflow/backend.h"

namespace mf::linalg_kernels {

using index_kernels::operand;
using index_kernels::walk_geometry;

constexpr int kMaxSweeps = 100;

// A matrix in memory: element (r, c) at p[r * rs + c * cs].
template <typename T>
struct Mat {
  T* p;
  int64_t rs, cs;
  MF_FORCE_INLINE MF_HOST_DEVICE T& operator()(int64_t r, int64_t c) const { return p[r * rs + c * cs]; }
  MF_FORCE_INLINE MF_HOST_DEVICE Mat t() const { return {p, cs, rs}; }
};

// Where each operand's matrices are in a walk over the batch: the base
// pointer comes from the walk, the layout inside a matrix from here.
struct Layout {
  int64_t rs = 0, cs = 0;
};

inline Layout layout_of(const Tensor& t) { return {t.stride(-2), t.stride(-1)}; }

template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE Mat<T> at(char* const* data, const int64_t* off, int k, Layout l) {
  return {reinterpret_cast<T*>(data[k] + off[k]), l.rs, l.cs};
}

template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T eps() {
  return std::is_same_v<T, float> ? T(1.1920929e-07f) : T(2.220446049250313e-16);
}

template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE bool finite(T x) {
  return !M::isnan(x) && !M::isinf(x);
}

// sqrt(a^2 + b^2) without overflow or underflow in the squares.
template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T hypot2(T a, T b) {
  const T x = M::fabs(a), y = M::fabs(b), big = x > y ? x : y;
  if (big == T(0) || M::isinf(big)) return big;
  const T u = x / big, v = y / big;
  return big * M::sqrt(u * u + v * v);
}

// Columns p and q of m (rows x ...) exchanged. Rows are the columns of m.t().
template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE void swap_columns(Mat<T> m, int64_t rows, int64_t p, int64_t q) {
  for (int64_t i = 0; i < rows; ++i) {
    const T v = m(i, p);
    m(i, p) = m(i, q), m(i, q) = v;
  }
}

// --- LU ----------------------------------------------------------------------------------

// Partial-pivoting elimination of a (n x n) in place, applied to the nrhs
// columns of b too; swaps counts the row exchanges. Returns getrf's info:
// the first zero pivot (1-based), or 0.
template <typename M, typename T>
MF_HOST_DEVICE int lu_eliminate(Mat<T> a, int64_t n, Mat<T> b, int64_t nrhs, int64_t& swaps) {
  int info = 0;
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    T best = M::fabs(a(k, k));
    for (int64_t i = k + 1; i < n; ++i) {
      const T v = M::fabs(a(i, k));
      if (v > best || (M::isnan(v) && !M::isnan(best))) best = v, p = i;
    }
    if (a(p, k) == T(0)) {
      if (info == 0) info = int(k + 1);
      continue;  // the column below is zero: nothing to eliminate
    }
    if (p != k) {
      ++swaps;
      swap_columns<T>(a.t(), n, k, p);  // rows k and p
      swap_columns<T>(b.t(), nrhs, k, p);
    }
    const T pivot = a(k, k);
    for (int64_t i = k + 1; i < n; ++i) {
      const T l = a(i, k) / pivot;
      a(i, k) = l;
      if (l == T(0)) continue;
      for (int64_t j = k + 1; j < n; ++j) a(i, j) -= l * a(k, j);
      for (int64_t j = 0; j < nrhs; ++j) b(i, j) -= l * b(k, j);
    }
  }
  return info;
}

// b = U^-1 b for the upper triangle U of a (n x n).
template <typename T>
MF_HOST_DEVICE void back_substitute(Mat<T> a, int64_t n, Mat<T> b, int64_t nrhs) {
  for (int64_t j = 0; j < nrhs; ++j)
    for (int64_t i = n - 1; i >= 0; --i) {
      T x = b(i, j);
      for (int64_t k = i + 1; k < n; ++k) x -= a(i, k) * b(k, j);
      b(i, j) = x / a(i, i);
    }
}

// Operands: 0 the scratch (n x n row-major), 1 the info, 2 A, 3 det or
// sign, 4 logabsdet (slogdet only).
template <typename M, typename T, bool kLog>
struct Determinant {
  int64_t n;
  Layout a;
  MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const Mat<T> lu = at<T>(data, off, 0, {n, 1}), in = at<T>(data, off, 2, a);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) lu(r, c) = in(r, c);
    int64_t swaps = 0;
    lu_eliminate<M, T>(lu, n, lu, 0, swaps);
    T sign = swaps % 2 ? T(-1) : T(1), log_abs = T(0), product = sign;
    for (int64_t k = 0; k < n; ++k) {
      const T u = lu(k, k);
      product *= u;
      if (M::isnan(u)) sign = u;
      else if (u < T(0)) sign = -sign;
      else if (u == T(0)) sign = T(0);
      log_abs += M::log(M::fabs(u));
    }
    if constexpr (kLog) {
      *reinterpret_cast<T*>(data[3] + off[3]) = sign;
      *reinterpret_cast<T*>(data[4] + off[4]) = log_abs;
    } else {
      *reinterpret_cast<T*>(data[3] + off[3]) = product;
    }
  }
};

// inv (b = identity) and solve (b = B): operands 0 the scratch, 1 the info,
// 2 A, 3 the output X (n x k), 4 B (solve only).
template <typename M, typename T, bool kSolve>
struct Solve {
  int64_t n, k;
  Layout a, x, b;
  MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const Mat<T> lu = at<T>(data, off, 0, {n, 1}), in = at<T>(data, off, 2, a), out = at<T>(data, off, 3, x);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) lu(r, c) = in(r, c);
    if constexpr (kSolve) {
      const Mat<T> rhs = at<T>(data, off, 4, b);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) out(r, c) = rhs(r, c);
    } else {
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) out(r, c) = r == c ? T(1) : T(0);
    }
    int64_t swaps = 0;
    const int info = lu_eliminate<M, T>(lu, n, out, k, swaps);
    *reinterpret_cast<int*>(data[1] + off[1]) = info;
    if (info == 0) back_substitute<T>(lu, n, out, k);
  }
};

// --- Cholesky ----------------------------------------------------------------------------

// Operands: 0 unused scratch, 1 the info, 2 A, 3 the factor.
template <typename M, typename T>
struct Cholesky {
  int64_t n;
  Layout a, l;
  bool upper;
  MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    // The upper factor U of A is the transpose of the lower factor of A^T.
    const Mat<T> in = upper ? at<T>(data, off, 2, a).t() : at<T>(data, off, 2, a);
    const Mat<T> f = upper ? at<T>(data, off, 3, l).t() : at<T>(data, off, 3, l);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) f(r, c) = c <= r ? in(r, c) : T(0);
    int info = 0;
    for (int64_t j = 0; j < n && info == 0; ++j) {
      T d = f(j, j);
      for (int64_t k = 0; k < j; ++k) d -= f(j, k) * f(j, k);
      if (!(d > T(0))) {  // NaN too (potrf)
        f(j, j) = d;
        info = int(j + 1);
        break;
      }
      const T root = M::sqrt(d);
      f(j, j) = root;
      for (int64_t i = j + 1; i < n; ++i) {
        T v = f(i, j);
        for (int64_t k = 0; k < j; ++k) v -= f(i, k) * f(j, k);
        f(i, j) = v / root;
      }
    }
    *reinterpret_cast<int*>(data[1] + off[1]) = info;
  }
};

// --- QR ----------------------------------------------------------------------------------

// Operands: 0 the scratch (m x n row-major reflectors and R, then k taus),
// 1 the info (unused), 2 A, 3 Q (m x q_cols; q_cols 0: R only), 4 R.
template <typename M, typename T>
struct Householder {
  int64_t m, n, q_cols, r_rows;
  Layout a, q, r;
  MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const int64_t k = m < n ? m : n;
    const Mat<T> h = at<T>(data, off, 0, {n, 1}), in = at<T>(data, off, 2, a);
    T* tau = reinterpret_cast<T*>(data[0] + off[0]) + m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) h(i, j) = in(i, j);
    for (int64_t j = 0; j < k; ++j) {
      // dlarfg: H = I - tau v v^T with v(j) = 1 maps h(j.., j) to (beta, 0, ...).
      const T alpha = h(j, j);
      T scale = T(0), ssq = T(1);  // ||h(j+1.., j)|| as scale * sqrt(ssq)
      for (int64_t i = j + 1; i < m; ++i) {
        const T v = M::fabs(h(i, j));
        if (v == T(0)) continue;
        if (scale < v) ssq = T(1) + ssq * (scale / v) * (scale / v), scale = v;
        else ssq += (v / scale) * (v / scale);
      }
      const T xnorm = scale * M::sqrt(ssq);
      if (xnorm == T(0)) {
        tau[j] = T(0);
        continue;
      }
      const T beta = -M::copysign(hypot2<M, T>(alpha, xnorm), alpha);
      tau[j] = (beta - alpha) / beta;
      const T inv = T(1) / (alpha - beta);
      for (int64_t i = j + 1; i < m; ++i) h(i, j) *= inv;
      h(j, j) = beta;
      for (int64_t c = j + 1; c < n; ++c) {  // the trailing columns
        T w = h(j, c);
        for (int64_t i = j + 1; i < m; ++i) w += h(i, j) * h(i, c);
        w *= tau[j];
        h(j, c) -= w;
        for (int64_t i = j + 1; i < m; ++i) h(i, c) -= w * h(i, j);
      }
    }
    const Mat<T> ro = at<T>(data, off, 4, r);
    for (int64_t i = 0; i < r_rows; ++i)
      for (int64_t c = 0; c < n; ++c) ro(i, c) = c >= i ? h(i, c) : T(0);
    if (q_cols == 0) return;
    const Mat<T> qo = at<T>(data, off, 3, q);  // orgqr: H_0 ... H_{k-1} applied to I
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < q_cols; ++c) qo(i, c) = i == c ? T(1) : T(0);
    for (int64_t j = k - 1; j >= 0; --j) {
      if (tau[j] == T(0)) continue;
      for (int64_t c = 0; c < q_cols; ++c) {
        T w = qo(j, c);
        for (int64_t i = j + 1; i < m; ++i) w += h(i, j) * qo(i, c);
        w *= tau[j];
        qo(j, c) -= w;
        for (int64_t i = j + 1; i < m; ++i) qo(i, c) -= w * h(i, j);
      }
    }
  }
};

// --- eigh --------------------------------------------------------------------------------

// Divides m (rows x cols) by its largest magnitude and returns that
// magnitude: 1 for a zero matrix, and NaN or inf (m unchanged) when m
// holds one.
template <typename M, typename T>
MF_HOST_DEVICE T scale_down(Mat<T> m, int64_t rows, int64_t cols) {
  T big = T(0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const T v = M::fabs(m(r, c));
      if (M::isnan(v)) return v;
      big = v > big ? v : big;
    }
  if (!finite<M, T>(big)) return big;
  if (big == T(0)) return T(1);
  const T inv = T(1) / big;
  if (finite<M, T>(inv)) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) m(r, c) *= inv;
  } else {  // big is subnormal: its reciprocal overflows
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) m(r, c) /= big;
  }
  return big;
}

// Columns p and q of m (rows x ...) turned by the plane rotation (c, s):
// (x, y) -> (c x - s y, s x + c y). Rows are the columns of m.t().
template <typename T>
MF_FORCE_INLINE MF_HOST_DEVICE void rotate_columns(Mat<T> m, int64_t rows, int64_t p, int64_t q, T c, T s) {
  for (int64_t i = 0; i < rows; ++i) {
    const T x = m(i, p), y = m(i, q);
    m(i, p) = c * x - s * y, m(i, q) = s * x + c * y;
  }
}

// The rotation's tangent for the ratio theta: the smaller root of
// t^2 + 2 theta t - 1 = 0 (Rutishauser's choice, |t| <= 1).
template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T jacobi_tangent(T theta) {
  return (theta >= T(0) ? T(1) : T(-1)) / (M::fabs(theta) + M::sqrt(T(1) + theta * theta));
}

// Operands: 0 the scratch (the symmetric n x n matrix, then n x n vectors
// when V is not an output), 1 the info, 2 A, 3 the eigenvalues (n), 4 V.
template <typename M, typename T>
struct JacobiEigh {
  int64_t n;
  Layout a, v;
  bool upper, vectors;
  MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const Mat<T> s = at<T>(data, off, 0, {n, 1}), in = at<T>(data, off, 2, a);
    const Mat<T> vec = vectors ? at<T>(data, off, 4, v) : Mat<T>{s.p + n * n, n, 1};
    T* w = reinterpret_cast<T*>(data[3] + off[3]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) {
        const bool stored = upper ? c >= r : c <= r;  // the triangle read, as syevd
        s(r, c) = stored ? in(r, c) : in(c, r);
        vec(r, c) = r == c ? T(1) : T(0);
      }
    // Iterate on A / max|A|, so that no square over- or underflows.
    const T big = scale_down<M, T>(s, n, n);
    if (!finite<M, T>(big)) {  // a NaN or an inf: NaN values and vectors (the CPU's syevd gives NaNs or fails)
      for (int64_t i = 0; i < n; ++i) {
        w[i] = big - big;
        for (int64_t r = 0; r < n; ++r) vec(r, i) = big - big;
      }
      *reinterpret_cast<int*>(data[1] + off[1]) = 0;
      return;
    }
    T norm2 = T(0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) norm2 += s(r, c) * s(r, c);
    const T tol = eps<T>() * M::sqrt(norm2);
    int info = kMaxSweeps;
    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
      bool rotated = false;
      for (int64_t p = 0; p < n; ++p)
        for (int64_t q = p + 1; q < n; ++q) {
          const T apq = s(p, q);
          if (!(M::fabs(apq) > tol)) continue;
          rotated = true;
          const T t = jacobi_tangent<M, T>((s(q, q) - s(p, p)) / (T(2) * apq));
          const T c = T(1) / M::sqrt(T(1) + t * t), sn = t * c;
          rotate_columns<T>(s, n, p, q, c, sn);      // A J
          rotate_columns<T>(s.t(), n, p, q, c, sn);  // J^T (A J)
          s(p, q) = s(q, p) = T(0);
          rotate_columns<T>(vec, n, p, q, c, sn);
        }
      if (!rotated) {
        info = 0;
        break;
      }
    }
    for (int64_t i = 0; i < n; ++i) w[i] = s(i, i) * big;
    for (int64_t i = 0; i < n; ++i) {  // ascending, vectors along
      int64_t lo = i;
      for (int64_t j = i + 1; j < n; ++j)
        if (w[j] < w[lo]) lo = j;
      if (lo == i) continue;
      const T x = w[i];
      w[i] = w[lo], w[lo] = x;
      swap_columns<T>(vec, n, i, lo);
    }
    *reinterpret_cast<int*>(data[1] + off[1]) = info;
  }
};

// --- svd ---------------------------------------------------------------------------------

// Completes the columns of q (rows x cols) for which good[c] is false to
// an orthonormal basis with the good ones: each takes the unit vector
// least in the span of the good columns (its residual is then at least
// 1/rows), orthogonalised twice (Gram-Schmidt) and normalised.
template <typename M, typename T>
MF_HOST_DEVICE void complete_basis(Mat<T> q, int64_t rows, int64_t cols, bool* good) {
  for (int64_t c = 0; c < cols; ++c) {
    if (good[c]) continue;
    int64_t pick = 0;
    T least = T(0);
    for (int64_t i = 0; i < rows; ++i) {  // |projection of e_i|^2 = sum over good g of q(i, g)^2
      T in_span = T(0);
      for (int64_t g = 0; g < cols; ++g)
        if (good[g]) in_span += q(i, g) * q(i, g);
      if (i == 0 || in_span < least) least = in_span, pick = i;
    }
    for (int64_t i = 0; i < rows; ++i) q(i, c) = i == pick ? T(1) : T(0);
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t g = 0; g < cols; ++g) {
        if (!good[g]) continue;
        T d = T(0);
        for (int64_t i = 0; i < rows; ++i) d += q(i, g) * q(i, c);
        for (int64_t i = 0; i < rows; ++i) q(i, c) -= d * q(i, g);
      }
    T norm2 = T(0);
    for (int64_t i = 0; i < rows; ++i) norm2 += q(i, c) * q(i, c);
    const T inv = T(1) / M::sqrt(norm2);
    for (int64_t i = 0; i < rows; ++i) q(i, c) *= inv;
    good[c] = true;
  }
}

// Operands: 0 the scratch (W: big x small, V: small x small, then `small`
// flags of determined columns as bytes, and big more for the completion),
// 1 the info, 2 A, 3 S (k), 4 U (m x u_cols), 5 Vh (vh_rows x n).
// W is the taller orientation of A (A, or A^T when m < n): W V = U' S with
// U' (big x small) and V orthogonal, so A = U' S V^T or, transposed,
// A = V S U'^T.
template <typename M, typename T>
struct JacobiSvd {
  int64_t m, n, u_cols, vh_rows;
  Layout a, u, vh;
  bool vectors;
  MF_HOST_DEVICE void operator()(char* const* data, const int64_t* off) const {
    const bool tall = m >= n;
    const int64_t big = tall ? m : n, small = tall ? n : m;
    T* scratch = reinterpret_cast<T*>(data[0] + off[0]);
    const Mat<T> w{scratch, small, 1}, rv{scratch + big * small, small, 1};
    bool* good = reinterpret_cast<bool*>(scratch + big * small + small * small);
    const Mat<T> in = tall ? at<T>(data, off, 2, a) : at<T>(data, off, 2, a).t();
    T* s = reinterpret_cast<T*>(data[3] + off[3]);
    int info = 0;
    for (int64_t i = 0; i < big; ++i)
      for (int64_t j = 0; j < small; ++j) {
        w(i, j) = in(i, j);
        if (!finite<M, T>(w(i, j))) info = linalg_errors::kNonFinite;
      }
    if (info != 0) {
      *reinterpret_cast<int*>(data[1] + off[1]) = info;
      return;
    }
    const T magnitude = scale_down<M, T>(w, big, small);  // W / max|W|: no square over- or underflows
    for (int64_t i = 0; i < small; ++i)
      for (int64_t j = 0; j < small; ++j) rv(i, j) = i == j ? T(1) : T(0);
    info = kMaxSweeps;
    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
      bool rotated = false;
      for (int64_t p = 0; p < small; ++p)
        for (int64_t q = p + 1; q < small; ++q) {
          T alpha = T(0), beta = T(0), gamma = T(0);
          for (int64_t i = 0; i < big; ++i) {
            alpha += w(i, p) * w(i, p), beta += w(i, q) * w(i, q), gamma += w(i, p) * w(i, q);
          }
          if (!(M::fabs(gamma) > eps<T>() * M::sqrt(alpha) * M::sqrt(beta))) continue;
          rotated = true;
          const T t = jacobi_tangent<M, T>((beta - alpha) / (T(2) * gamma));
          const T c = T(1) / M::sqrt(T(1) + t * t), sn = c * t;
          rotate_columns<T>(w, big, p, q, c, sn);
          rotate_columns<T>(rv, small, p, q, c, sn);
        }
      if (!rotated) {
        info = 0;
        break;
      }
    }
    *reinterpret_cast<int*>(data[1] + off[1]) = info;
    T largest = T(0);
    for (int64_t j = 0; j < small; ++j) {
      T norm2 = T(0);
      for (int64_t i = 0; i < big; ++i) norm2 += w(i, j) * w(i, j);
      s[j] = M::sqrt(norm2);
      largest = s[j] > largest ? s[j] : largest;
    }
    for (int64_t i = 0; i < small; ++i) {  // descending, both factors' columns along
      int64_t hi = i;
      for (int64_t j = i + 1; j < small; ++j)
        if (s[j] > s[hi]) hi = j;
      if (hi == i) continue;
      const T x = s[i];
      s[i] = s[hi], s[hi] = x;
      swap_columns<T>(w, big, i, hi);
      swap_columns<T>(rv, small, i, hi);
    }
    if (vectors) {
      // The left factor of W, in U (tall) or Vh^T (wide), `cols` columns.
      const Mat<T> left = tall ? at<T>(data, off, 4, u) : at<T>(data, off, 5, vh).t();
      const Mat<T> right = tall ? at<T>(data, off, 5, vh).t() : at<T>(data, off, 4, u);
      const int64_t cols = tall ? u_cols : vh_rows;
      const T tiny = T(big) * eps<T>() * largest;
      for (int64_t j = 0; j < cols; ++j) {
        good[j] = j < small && s[j] > tiny;
        for (int64_t i = 0; i < big; ++i) left(i, j) = good[j] ? w(i, j) / s[j] : T(0);
      }
      complete_basis<M, T>(left, big, cols, good);
      for (int64_t i = 0; i < small; ++i)
        for (int64_t j = 0; j < small; ++j) right(i, j) = rv(i, j);
    }
    for (int64_t j = 0; j < small; ++j) s[j] *= magnitude;  // the scale W was divided by
  }
};

// --- the walks ---------------------------------------------------------------------------

// An operand of a walk over the matrices of `batch`: t's leading dims
// before its `core` trailing ones, aligned right (broadcast: stride 0).
inline index_kernels::Operand batch_operand(const Tensor& t, int64_t core, const Shape& batch) {
  const int64_t nd = int64_t(batch.size()), tb = t.dim() - core;
  Shape s(size_t(nd), 0);
  for (int64_t i = 0; i < tb; ++i)
    if (t.sizes()[size_t(i)] != 1) s[size_t(nd - tb + i)] = t.strides()[size_t(i)];
  return operand(t, std::move(s));
}

// A walk's scratch (Note [Kernel scratch]): per_matrix elements of dtype
// for each matrix of `batch` (at least one, so every matrix has a row),
// then an int info each.
inline ScratchLayout walk_scratch(const Shape& batch, DType dtype, int64_t per_matrix, const char* op) {
  Shape rows = batch;
  rows.push_back(std::max<int64_t>(per_matrix, 1));
  ScratchLayout layout(op);
  layout.add(rows, dtype).add(batch, DType::Int32);
  return layout;
}

// Runs f, a functor over (scratch, info, ops...), once per matrix of
// `batch` with its row of the scratch (walk_scratch) and its info. With
// describe, reads the infos back (which waits for the walk) and throws for
// the first failing matrix (linalg_errors.h).
template <typename L, size_t N, typename F>
void walk_matrices(const Shape& batch, const Tensor& a, int64_t per_matrix, Scratch& taken,
                   const std::array<index_kernels::Operand, N - 2>& ops, const F& f, const char* op,
                   std::string (*describe)(int) = nullptr, bool batched = false) {
  const int64_t count = shape_numel(batch);
  if (count == 0) return;
  Shape rows = batch;
  rows.push_back(std::max<int64_t>(per_matrix, 1));
  const Tensor scratch = taken.take(rows, a.dtype());
  const Tensor infos = taken.take(batch, DType::Int32);
  std::array<index_kernels::Operand, N> all{batch_operand(scratch, 1, batch), batch_operand(infos, 0, batch)};
  for (size_t k = 0; k + 2 < N; ++k) all[k + 2] = ops[k];
  L::template for_each<N>(a.device(), walk_geometry<N>(batch, all, op), count, f);
  if (!describe) return;
  std::vector<int> host(static_cast<size_t>(count));  // a blocking copy: it waits for the walk
  get_backend(a.device().type())
      .copy(host.data(), Device(), infos.data_ptr(), a.device(), host.size() * sizeof(int), false);
  linalg_errors::check_infos(host.data(), host.size(), batched, op, describe);
}

inline Shape batch_of(const Shape& sizes) { return Shape(sizes.begin(), sizes.end() - 2); }
inline Shape batch_of(const Tensor& t) { return batch_of(t.sizes()); }

// Each walk's scratch elements per matrix (of the input's dtype), for an
// (m, n) input; the kernels and their ScratchFns share them.
inline int64_t lu_scratch(int64_t n, const char* op) { return checked_mul(n, n, op, "the matrix elements"); }
inline int64_t qr_scratch(int64_t m, int64_t n, const char* op) {
  return checked_add(checked_mul(m, n, op, "the matrix elements"), std::min(m, n), op, "the scratch");
}
// W, V, then the flags as bytes (rounded up to elements).
inline int64_t svd_scratch(int64_t m, int64_t n, DType dtype, const char* op) {
  const int64_t big = std::max(m, n), small = std::min(m, n), size = int64_t(itemsize(dtype));
  const int64_t flags = (big + size - 1) / size;
  return checked_add(checked_mul(checked_add(big, small, op, "the scratch"), small, op, "the scratch"), flags, op,
                     "the scratch");
}
inline int64_t eigh_scratch(int64_t n, bool vectors, const char* op) {
  return checked_mul(vectors ? 1 : 2, checked_mul(n, n, op, "the matrix elements"), op, "the scratch");
}

template <typename F>
void by_dtype(DType dtype, const char* op, F&& fn) {
  if (dtype == DType::Float32) return fn.template operator()<float>();
  if (dtype == DType::Float64) return fn.template operator()<double>();
  throw TypeError(detail::concat(op, ": expected float32 or float64, got ", dtype_name(dtype)));
}

template <typename L, bool kLog>
void determinant(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor& a = in[0];
  const char* op = kLog ? "linalg.slogdet" : "linalg.det";
  const int64_t n = a.size(-1);
  const Tensor& logabs = kLog ? out[1] : out[0];
  const Shape batch = batch_of(a);
  Scratch taken(out);
  by_dtype(a.dtype(), op, [&]<typename T>() {
    walk_matrices<L, 5>(batch, a, lu_scratch(n, op), taken,
                        {batch_operand(a, 2, batch), batch_operand(out[0], 0, batch), batch_operand(logabs, 0, batch)},
                        Determinant<typename L::Math, T, kLog>{n, layout_of(a)}, op);
  });
}

template <typename L>
void inverse(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &a = in[0], &x = out[0];
  const int64_t n = a.size(-1);
  const Shape batch = batch_of(a);
  Scratch taken(out);
  by_dtype(a.dtype(), "linalg.inv", [&]<typename T>() {
    walk_matrices<L, 4>(batch, a, lu_scratch(n, "linalg.inv"), taken, {batch_operand(a, 2, batch), batch_operand(x, 2, batch)},
                        Solve<typename L::Math, T, false>{n, n, layout_of(a), layout_of(x), {}}, "linalg.inv",
                        linalg_errors::singular_inverse, a.dim() > 2);
  });
}

template <typename L>
void solve(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &a = in[0], &b = in[1], &x = out[0];
  const int64_t n = a.size(-1), k = b.size(-1);
  const Shape batch = batch_of(x);
  Scratch taken(out);
  by_dtype(a.dtype(), "linalg.solve", [&]<typename T>() {
    walk_matrices<L, 5>(batch, a, lu_scratch(n, "linalg.solve"), taken,
                        {batch_operand(a, 2, batch), batch_operand(x, 2, batch), batch_operand(b, 2, batch)},
                        Solve<typename L::Math, T, true>{n, k, layout_of(a), layout_of(x), layout_of(b)},
                        "linalg.solve", linalg_errors::singular_solve, x.dim() > 2);
  });
}

template <typename L>
void cholesky(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor &a = in[0], &f = out[0];
  const Shape batch = batch_of(a);
  Scratch taken(out);
  by_dtype(a.dtype(), "linalg.cholesky", [&]<typename T>() {
    walk_matrices<L, 4>(batch, a, 0, taken, {batch_operand(a, 2, batch), batch_operand(f, 2, batch)},
                        Cholesky<typename L::Math, T>{a.size(-1), layout_of(a), layout_of(f), attrs.get_bool("upper")},
                        "linalg.cholesky", linalg_errors::not_positive_definite, a.dim() > 2);
  });
}

template <typename L>
void qr(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor &a = in[0], &q = out[0], &r = out[1];
  const char* op = "linalg.qr";
  const int64_t m = a.size(-2), n = a.size(-1);
  const Shape batch = batch_of(a);
  Scratch taken(out);
  by_dtype(a.dtype(), op, [&]<typename T>() {
    walk_matrices<L, 5>(batch, a, qr_scratch(m, n, op), taken,
                        {batch_operand(a, 2, batch), batch_operand(q, 2, batch), batch_operand(r, 2, batch)},
                        Householder<typename L::Math, T>{m, n, q.size(-1), r.size(-2), layout_of(a), layout_of(q),
                                                         layout_of(r)},
                        op);
  });
}

// svd (vectors) and svdvals: out is (U, S, Vh) or (S).
template <typename L, bool kVectors>
void svd(const TensorList& in, TensorList& out, const Attrs&) {
  const Tensor& a = in[0];
  const char* op = kVectors ? "linalg.svd" : "linalg.svdvals";
  const int64_t m = a.size(-2), n = a.size(-1);
  const Tensor& s = kVectors ? out[1] : out[0];
  const Tensor& u = kVectors ? out[0] : s;  // svdvals: unused operands
  const Tensor& vh = kVectors ? out[2] : s;
  const Shape batch = batch_of(a);
  const int core = kVectors ? 2 : 1;
  Scratch taken(out);
  by_dtype(a.dtype(), op, [&]<typename T>() {
    walk_matrices<L, 6>(batch, a, svd_scratch(m, n, a.dtype(), op), taken,
                        {batch_operand(a, 2, batch), batch_operand(s, 1, batch), batch_operand(u, core, batch),
                         batch_operand(vh, core, batch)},
                        JacobiSvd<typename L::Math, T>{m, n, kVectors ? u.size(-1) : 0, kVectors ? vh.size(-2) : 0,
                                                       layout_of(a), kVectors ? layout_of(u) : Layout{},
                                                       kVectors ? layout_of(vh) : Layout{}, kVectors},
                        op, linalg_errors::svd_failed, a.dim() > 2);
  });
}

// eigh (vectors) and eigvalsh: out is (L, V) or (L).
template <typename L, bool kVectors>
void eigh(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor& a = in[0];
  const char* op = kVectors ? "linalg.eigh" : "linalg.eigvalsh";
  const int64_t n = a.size(-1);
  const Tensor& w = out[0];
  const Tensor& v = kVectors ? out[1] : w;  // eigvalsh: an unused operand
  const Shape batch = batch_of(a);
  Scratch taken(out);
  by_dtype(a.dtype(), op, [&]<typename T>() {
    walk_matrices<L, 5>(batch, a, eigh_scratch(n, kVectors, op), taken,
                        {batch_operand(a, 2, batch), batch_operand(w, 1, batch),
                         batch_operand(v, kVectors ? 2 : 1, batch)},
                        JacobiEigh<typename L::Math, T>{n, layout_of(a), kVectors ? layout_of(v) : Layout{},
                                                        attrs.get_bool("upper"), kVectors},
                        op, linalg_errors::eigh_failed, a.dim() > 2);
  });
}

// The walks' ScratchFns: the batch is the input's (the output's for solve,
// whose batch dims broadcast).
template <int64_t (*kPerMatrix)(const Tensor& a, const Attrs& attrs), bool kOutputBatch = false>
int64_t scratch_bytes(const TensorList& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  const Shape batch = kOutputBatch ? batch_of(out[0].sizes) : batch_of(in[0]);
  return walk_scratch(batch, in[0].dtype(), kPerMatrix(in[0], attrs), "linalg").bytes();
}
inline int64_t lu_per_matrix(const Tensor& a, const Attrs&) { return lu_scratch(a.size(-1), "linalg"); }
inline int64_t no_per_matrix(const Tensor&, const Attrs&) { return 0; }
inline int64_t qr_per_matrix(const Tensor& a, const Attrs&) { return qr_scratch(a.size(-2), a.size(-1), "linalg.qr"); }
inline int64_t svd_per_matrix(const Tensor& a, const Attrs&) {
  return svd_scratch(a.size(-2), a.size(-1), a.dtype(), "linalg.svd");
}
template <bool kVectors>
int64_t eigh_per_matrix(const Tensor& a, const Attrs&) {
  return eigh_scratch(a.size(-1), kVectors, "linalg.eigh");
}

template <typename L>
void register_all(DeviceType device) {
  OpRegistry& r = OpRegistry::instance();
  r.set_kernel("linalg_det", device, determinant<L, false>, scratch_bytes<lu_per_matrix>);
  r.set_kernel("linalg_slogdet", device, determinant<L, true>, scratch_bytes<lu_per_matrix>);
  r.set_kernel("linalg_inv", device, inverse<L>, scratch_bytes<lu_per_matrix>);
  r.set_kernel("linalg_solve", device, solve<L>, scratch_bytes<lu_per_matrix, true>);
  r.set_kernel("linalg_cholesky", device, cholesky<L>, scratch_bytes<no_per_matrix>);
  r.set_kernel("linalg_qr", device, qr<L>, scratch_bytes<qr_per_matrix>);
  r.set_kernel("linalg_svd", device, svd<L, true>, scratch_bytes<svd_per_matrix>);
  r.set_kernel("linalg_svdvals", device, svd<L, false>, scratch_bytes<svd_per_matrix>);
  r.set_kernel("linalg_eigh", device, eigh<L, true>, scratch_bytes<eigh_per_matrix<true>>);
  r.set_kernel("linalg_eigvalsh", device, eigh<L, false>, scratch_bytes<eigh_per_matrix<false>>);
}

}  // namespace mf::linalg_kernels
