// Reductions over any set of dims (empty dims = all), with keepdim.
#pragma once

#include <optional>

#include "meshflow/tensor.h"

namespace mf {

// Integer and bool inputs sum to int64, as in PyTorch.
Tensor sum(const Tensor& t, const Shape& dims = {}, bool keepdim = false,
           std::optional<DType> dtype = {});
Tensor mean(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& t, std::optional<int64_t> dim = {}, bool keepdim = false);
// Sums t down to `size` (the inverse of broadcasting to t's shape).
Tensor sum_to(const Tensor& t, const Shape& size);

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
Tensor max(const Tensor& t);  // over all elements
Tensor min(const Tensor& t);
ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor amax(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& t, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor argmin(const Tensor& t, std::optional<int64_t> dim = {}, bool keepdim = false);
// correction = 1 is the unbiased estimator.
Tensor var(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// p-norm (p = 2 by default; inf allowed).
Tensor norm(const Tensor& t, double p = 2.0, const Shape& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim = false);
Tensor all(const Tensor& t, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor any(const Tensor& t, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor cumsum(const Tensor& t, int64_t dim, std::optional<DType> dtype = {});
// Inclusive products along dim (integers and bool as int64 unless dtype).
Tensor cumprod(const Tensor& t, int64_t dim, std::optional<DType> dtype = {});

}  // namespace mf
