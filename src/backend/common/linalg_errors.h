// The torch.linalg kernels' failures, worded once for every backend: the
// CPU's LAPACK calls (backend/cpu/kernels/lapack.cpp) and the device walks
// (backend/common/linalg_kernels.h) keep one info per matrix, 0 for
// success, and report the first failing matrix in batch order as
// LinAlgError with PyTorch's messages, so the error does not depend on the
// thread count or the device.
#pragma once

#include <climits>
#include <string>

#include "meshflow/error.h"

namespace mf::linalg_errors {

// An info no LAPACK routine returns: the input held a NaN or an inf
// (Note [Non-finite input to gesdd] in lapack.cpp).
constexpr int kNonFinite = INT_MAX;

// How each op words a positive info.
inline std::string singular_inverse(int info) {
  return detail::concat("The diagonal element ", info,
                        " is zero, the inversion could not be completed because the input matrix is singular.");
}
inline std::string singular_solve(int) { return "The solver failed because the input matrix is singular."; }
inline std::string not_positive_definite(int info) {
  return detail::concat("The factorization could not be completed because the input is not positive-definite "
                        "(the leading minor of order ", info, " is not positive-definite).");
}
inline std::string svd_failed(int info) {
  if (info == kNonFinite)
    return "The algorithm failed to converge because the input matrix contained non-finite values.";
  return detail::concat("The algorithm failed to converge because the input matrix is ill-conditioned or has too "
                        "many repeated singular values (error code: ", info, ").");
}
inline std::string eigh_failed(int info) {
  return detail::concat("The algorithm failed to converge because the input matrix is ill-conditioned or has too "
                        "many repeated eigenvalues (error code: ", info, ").");
}

// Throws for the first nonzero of infos[0, count): LinAlgError worded by
// describe for a positive one, "(Batch element i): " naming the matrix of a
// batched input; a negative one is an argument the routine rejected.
template <typename Describe>
void check_infos(const int* infos, size_t count, bool batched, const char* op, const Describe& describe) {
  for (size_t i = 0; i < count; ++i) {
    if (infos[i] == 0) continue;
    const std::string where = batched ? detail::concat("(Batch element ", i, "): ") : std::string();
    if (infos[i] < 0)
      throw Error(detail::concat(op, ": ", where, "LAPACK rejected argument ", -infos[i],
                                 " (an internal error of meshflow's call)"));
    throw LinAlgError(detail::concat(op, ": ", where, describe(infos[i])));
  }
}

}  // namespace mf::linalg_errors
