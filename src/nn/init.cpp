#include "meshflow/nn/init.h"

#include <cmath>
#include <vector>

#include "meshflow/autograd.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/shape.h"

namespace mf::nn::init {
namespace {

Tensor& writable(const Tensor& t, const char* op) {
  MF_CHECK(t.defined(), ValueError, "nn.init.", op, ": the tensor is None");
  MF_CHECK(t.is_floating_point(), TypeError, "nn.init.", op, ": expected a floating-point tensor, got ",
           dtype_name(t.dtype()));
  return const_cast<Tensor&>(t);
}

int64_t fan(const Tensor& t, const std::string& mode, const char* op) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  MF_CHECK(mode == "fan_in" || mode == "fan_out", ValueError, "nn.init.", op, ": mode ", mode,
           " not supported, please use one of fan_in, fan_out");
  return mode == "fan_in" ? fan_in : fan_out;
}

double norm_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Inverse of the standard normal CDF: a rational first guess (Acklam) and two
// Newton steps on erfc, accurate to double precision in (0, 1).
double norm_ppf(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  for (int i = 0; i < 2; ++i) {
    double err = norm_cdf(x) - p;
    x -= err * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  }
  return x;
}

}  // namespace

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  MF_CHECK(t.dim() >= 2, ValueError,
           "nn.init: fan in and fan out can not be computed for tensor with fewer than 2 dimensions (got shape ",
           shape_str(t.shape()), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, std::optional<double> param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "conv_transpose1d" || nonlinearity == "conv_transpose2d" ||
      nonlinearity == "conv_transpose3d" || nonlinearity == "sigmoid")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw ValueError("nn.init.calculate_gain: unsupported nonlinearity " + nonlinearity);
}

const Tensor& uniform_(const Tensor& t, double a, double b) {
  MF_CHECK(a <= b, ValueError, "nn.init.uniform_: a (", a, ") must not exceed b (", b, ")");
  NoGradGuard no_grad;
  mf::uniform_(writable(t, "uniform_"), a, b);
  return t;
}

const Tensor& normal_(const Tensor& t, double mean, double std) {
  MF_CHECK(std >= 0, ValueError, "nn.init.normal_: std must be >= 0, got ", std);
  NoGradGuard no_grad;
  mf::normal_(writable(t, "normal_"), mean, std);
  return t;
}

const Tensor& constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  MF_CHECK(t.defined(), ValueError, "nn.init.constant_: the tensor is None");
  fill_(const_cast<Tensor&>(t), value);
  return t;
}

const Tensor& ones_(const Tensor& t) { return constant_(t, 1.0); }
const Tensor& zeros_(const Tensor& t) { return constant_(t, 0.0); }

const Tensor& trunc_normal_(const Tensor& t, double mean, double std, double a, double b) {
  MF_CHECK(std > 0, ValueError, "nn.init.trunc_normal_: std must be > 0, got ", std);
  MF_CHECK(a < b, ValueError, "nn.init.trunc_normal_: a (", a, ") must be less than b (", b, ")");
  Tensor& out = writable(t, "trunc_normal_");
  NoGradGuard no_grad;
  double lo = norm_cdf((a - mean) / std), hi = norm_cdf((b - mean) / std);
  // Uniform in CDF space, mapped back through the inverse CDF.
  Tensor u = mf::empty(out.shape(), TensorOptions{.dtype = DType::Float64});
  mf::uniform_(u, lo, hi);
  double* p = u.data<double>();
  for (int64_t i = 0; i < u.numel(); ++i) {
    double v = mean + std * norm_ppf(std::min(std::max(p[i], 1e-300), 1.0 - 1e-16));
    p[i] = std::min(std::max(v, a), b);
  }
  copy_(out, u);
  return t;
}

const Tensor& xavier_uniform_(const Tensor& t, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  double std = gain * std::sqrt(2.0 / double(fan_in + fan_out));
  double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound);
}

const Tensor& xavier_normal_(const Tensor& t, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / double(fan_in + fan_out)));
}

const Tensor& kaiming_uniform_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  if (t.numel() == 0) return t;  // PyTorch warns and leaves a 0-size tensor
  double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan(t, mode, "kaiming_uniform_")));
  double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound);
}

const Tensor& kaiming_normal_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  if (t.numel() == 0) return t;
  double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan(t, mode, "kaiming_normal_")));
  return normal_(t, 0.0, std);
}

const Tensor& orthogonal_(const Tensor& t, double gain) {
  MF_CHECK(t.defined(), ValueError, "nn.init.orthogonal_: the tensor is None");
  MF_CHECK(t.dim() >= 2, ValueError, "nn.init.orthogonal_: Only tensors with 2 or more dimensions are supported (got shape ",
           shape_str(t.shape()), ")");
  Tensor& out = writable(t, "orthogonal_");
  if (out.numel() == 0) return t;
  NoGradGuard no_grad;
  const int64_t rows = out.size(0), cols = out.numel() / rows;
  const DType dtype = out.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor flat = mf::empty({rows, cols}, TensorOptions{.dtype = dtype});
  mf::normal_(flat, 0.0, 1.0);
  if (rows < cols) flat = mf::t(flat);
  auto [q, r] = linalg::qr(flat);
  q = mul(q, sign(diagonal(r)));  // column j times sign(R_jj)
  if (rows < cols) q = mf::t(q);
  copy_(out, reshape(mul(q, gain), out.shape()));
  return t;
}

}  // namespace mf::nn::init
