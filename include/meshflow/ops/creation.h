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

// Uniform in [0, 1), standard normal, integers in [low, high). Every random
// function draws from `generator`, or the default generator when it is null.
Tensor rand(const Shape& size, const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& size, const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& size, const TensorOptions& options = {.dtype = DType::Int64},
               Generator* generator = nullptr);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
// A random permutation of 0..n-1 (int64).
Tensor randperm(int64_t n, Device device = Device(), Generator* generator = nullptr);
// Each element is 1 with probability p (p scalar) or p[i] (p tensor).
Tensor bernoulli(const Tensor& p, Generator* generator = nullptr);
Tensor bernoulli(const Tensor& like, double p, Generator* generator = nullptr);
// num_samples category indices (int64) per row of probs (1-d: one row;
// 2-d: (rows, categories)), each drawn with probability proportional to
// its weight; without replacement a row yields distinct categories, so it
// needs num_samples positive weights. Weights must be finite and >= 0 with
// a positive sum.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);
// A Gamma(a, 1) sample for each element a >= 0 of a float32 or float64
// concentration (torch._standard_gamma); differentiable in the
// concentration by the implicit reparameterisation gradient,
// standard_gamma_grad (elementwise.h).
Tensor standard_gamma(const Tensor& concentration, Generator* generator = nullptr);
// In-place fills (no autograd history; they bump the version counter).
Tensor& uniform_(Tensor& t, double from = 0.0, double to = 1.0, Generator* generator = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
Tensor& fill_(Tensor& t, Scalar value);
Tensor& zero_(Tensor& t);
// Copies src (broadcast, cast) into t; differentiable w.r.t. src.
Tensor& copy_(Tensor& t, const Tensor& src);

}  // namespace mf
