// Factories and random numbers. Random values come from the Philox
// generator (generator.h): element i depends only on (seed, offset, i).
#pragma once

#include <optional>

#include "meshflow/tensor.h"

namespace mf {

class Generator;

Tensor empty(const Shape& size, const TensorOptions& options = {});
Tensor zeros(const Shape& size, const TensorOptions& options = {});
Tensor ones(const Shape& size, const TensorOptions& options = {});
Tensor full(const Shape& size, Scalar value, const TensorOptions& options = {});
// dtype: int64 when start, end and step are integral, else the default dtype;
// pass options.dtype explicitly with `dtype_given` to force it.
Tensor arange(Scalar end, std::optional<DType> dtype = {}, Device device = Device());
Tensor arange(Scalar start, Scalar end, Scalar step = 1, std::optional<DType> dtype = {},
              Device device = Device());
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = {}, const TensorOptions& options = {});
Tensor empty_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor full_like(const Tensor& t, Scalar value, std::optional<DType> dtype = {});
// A tensor from host values, cast to options.dtype.
Tensor from_vector(const std::vector<double>& values, const Shape& size, const TensorOptions& options = {});
template <typename T>
Tensor from_data(const std::vector<T>& values, const Shape& size);

// Uniform in [0, 1), standard normal, integers in [low, high).
Tensor rand(const Shape& size, const TensorOptions& options = {});
Tensor randn(const Shape& size, const TensorOptions& options = {});
Tensor randint(int64_t low, int64_t high, const Shape& size, const TensorOptions& options = {.dtype = DType::Int64});
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
// A random permutation of 0..n-1 (int64), drawn from `generator` (the
// default generator when null).
Tensor randperm(int64_t n, Device device = Device(), Generator* generator = nullptr);
// Each element is 1 with probability p (p scalar) or p[i] (p tensor).
Tensor bernoulli(const Tensor& p);
Tensor bernoulli(const Tensor& like, double p);
// In-place fills (no autograd history; they bump the version counter).
Tensor& uniform_(Tensor& t, double from = 0.0, double to = 1.0);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0);
Tensor& fill_(Tensor& t, Scalar value);
Tensor& zero_(Tensor& t);
// Copies src (broadcast, cast) into t; differentiable w.r.t. src.
Tensor& copy_(Tensor& t, const Tensor& src);

}  // namespace mf
