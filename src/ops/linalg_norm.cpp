// torch.linalg's norms, composed as PyTorch 1.13 composes them: the vector
// norm is the "norm" reduction (src/ops/reduce_stats.cpp) after PyTorch's
// checks; matrix norms are vector norms, sums and extrema of |A| or of the
// singular values (svdvals). Gradients, SBP signatures and autocast come
// from those ops.
#include <algorithm>
#include <cmath>
#include <functional>

#include "meshflow/autocast.h"
#include "meshflow/ops/reduce.h"
#include "ops/linalg_common.h"

namespace mf::linalg {
namespace {

using linalg_detail::check_is_matrix;

void check_floating_input(DType dtype, const char* op) {
  MF_CHECK(is_floating(dtype), TypeError, op, ": Expected a floating point tensor as input. Got ", dtype_name(dtype));
}

// PyTorch's check_linalg_norm_dtype: a floating dtype the input widens to.
void check_norm_dtype(std::optional<DType> dtype, DType input, const char* op) {
  if (!dtype) return;
  MF_CHECK(is_floating(*dtype), TypeError, op, ": dtype should be floating point, but got ", dtype_name(*dtype));
  MF_CHECK(promote_types(input, *dtype) == *dtype, TypeError, op, ": the dtype of the input (", dtype_name(input),
           ") should be convertible without narrowing to the specified dtype (", dtype_name(*dtype), ")");
}

std::string order_text(double ord) { return detail::concat(ord); }

// The two dims of a matrix norm, wrapped and checked.
std::pair<int64_t, int64_t> matrix_dims(const Tensor& A, const Shape& dim, const char* op) {
  MF_CHECK(dim.size() == 2, ValueError, op, ": dim must be a 2-tuple. Got ", shape_str(dim));
  const int64_t d0 = wrap_dim(dim[0], A.dim(), op), d1 = wrap_dim(dim[1], A.dim(), op);
  MF_CHECK(d0 != d1, ValueError, op, ": dims must be different. Got (", d0, ", ", d1, ")");
  return {d0, d1};
}

// A reduction over the matrices' singular values (A's dims d0, d1 moved last).
Tensor over_singular_values(const Tensor& A, int64_t d0, int64_t d1, bool keepdim,
                            const std::function<Tensor(const Tensor&)>& reduce_last) {
  Shape perm;
  for (int64_t d = 0; d < A.dim(); ++d)
    if (d != d0 && d != d1) perm.push_back(d);
  perm.push_back(d0);
  perm.push_back(d1);
  Tensor result = reduce_last(svdvals(permute(A, perm)));
  if (keepdim)
    for (int64_t d : {std::min(d0, d1), std::max(d0, d1)}) result = unsqueeze(result, d);
  return result;
}

}  // namespace

Tensor vector_norm(const Tensor& x, double ord, const Shape& dim, bool keepdim, std::optional<DType> dtype) {
  const char* op = "linalg.vector_norm";
  check_floating_input(x.dtype(), op);
  check_norm_dtype(dtype, x.dtype(), op);
  // Norms without an identity (inf, negative orders) over no elements.
  if (x.numel() == 0 && (ord < 0 || std::isinf(ord))) {
    MF_CHECK(!dim.empty(), Error, op, " cannot compute the ", order_text(ord),
             " norm on an empty tensor because the operation does not have an identity");
    for (int64_t d : dim)
      MF_CHECK(x.size(d) != 0, Error, op, " cannot compute the ", order_text(ord), " norm on the dimension ", d,
               " because this dimension is empty and the operation does not have an identity");
  }
  return mf::norm(dtype ? to(x, *dtype) : x, ord, dim, keepdim);
}

Tensor matrix_norm(const Tensor& A_in, const NormOrder& ord, const Shape& dim, bool keepdim,
                   std::optional<DType> dtype) {
  const char* op = "linalg.matrix_norm";
  // PyTorch's autocast runs every matrix norm in float32: svdvals' policy.
  const Tensor A = autocast::cast_for(dispatch::op("linalg_svdvals"), A_in);
  const std::string* name = std::get_if<std::string>(&ord);
  const double order = name ? 0.0 : std::get<double>(ord);
  MF_CHECK(name ? (*name == "fro" || *name == "nuc") : (std::abs(order) == 1 || std::abs(order) == 2 || std::isinf(order)),
           ValueError, op, ": Order ", name ? *name : order_text(order), " not supported.");
  check_is_matrix(A, op);
  check_floating_input(A.dtype(), op);
  const bool spectral = name ? *name == "nuc" : std::abs(order) == 2;
  MF_CHECK(!spectral || A.dtype() == DType::Float32 || A.dtype() == DType::Float64, TypeError, op,
           ": Low precision dtypes not supported. Got ", dtype_name(A.dtype()));
  auto [d0, d1] = matrix_dims(A, dim, op);
  check_norm_dtype(dtype, A.dtype(), op);
  if (name && *name == "fro") return vector_norm(A, 2, {d0, d1}, keepdim, dtype);
  const Tensor a = dtype ? to(A, *dtype) : A;
  if (spectral) {
    return over_singular_values(a, d0, d1, keepdim, [&](const Tensor& s) {
      if (name) return sum(s, {-1});
      return order > 0 ? amax(s, {-1}) : amin(s, {-1});
    });
  }
  // 1 / -1: the extreme column sum; inf / -inf: the extreme row sum.
  if (std::isinf(order)) std::swap(d0, d1);
  if (!keepdim && d0 < d1) --d1;
  const Tensor sums = vector_norm(a, 1, {d0}, keepdim);
  return order > 0 ? amax(sums, {d1}, keepdim) : amin(sums, {d1}, keepdim);
}

Tensor norm(const Tensor& A, const std::optional<NormOrder>& ord, const std::optional<Shape>& dim, bool keepdim,
            std::optional<DType> dtype) {
  const char* op = "linalg.norm";
  if (dim) {
    MF_CHECK(dim->size() == 1 || dim->size() == 2, ValueError, op,
             ": If dim is specified, it must be of length 1 or 2. Got ", shape_str(*dim));
  } else if (ord) {
    MF_CHECK(A.dim() == 1 || A.dim() == 2, ValueError, op,
             ": If dim is not specified but ord is, the input must be 1D or 2D. Got ", A.dim(), "D.");
  }
  const bool string_ord = ord && std::holds_alternative<std::string>(*ord);
  if (string_ord || (ord && (dim ? dim->size() == 2 : A.dim() == 2)))
    return matrix_norm(A, *ord, dim.value_or(Shape{0, 1}), keepdim, dtype);
  return vector_norm(A, ord ? std::get<double>(*ord) : 2.0, dim.value_or(Shape{}), keepdim, dtype);
}

}  // namespace mf::linalg
