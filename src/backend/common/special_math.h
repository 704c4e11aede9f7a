// Special functions as scalar functions of double: the gamma family
// (lgamma, digamma, trigamma and the Hurwitz zeta function, which gives
// polygamma), the derivative of a gamma sample with respect to its shape
// (standard_gamma_grad) and erfinv. Plain inline functions of <cmath> only, so that every
// backend's loops can use them; the gamma family (lgamma, digamma,
// trigamma, zeta, polygamma) and standard_gamma_grad are also compiled for
// devices (MF_HOST_DEVICE: no tables at namespace scope). The methods are the classical ones (Cephes'
// asymptotic digamma series and Euler-Maclaurin zeta summation), which are
// also those PyTorch uses, so results agree to rounding.
#pragma once

#include <cmath>
#include <limits>

#include "meshflow/host_device.h"

namespace mf::special_math {

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kMachEp = 1.11022302462515654042e-16;  // 2^-53

// log|Gamma(x)|; +inf at the poles 0, -1, -2, ...
MF_HOST_DEVICE inline double lgamma(double x) {
#ifdef __CUDA_ARCH__
  return ::lgamma(x);
#else
  int sign = 0;
  return ::lgamma_r(x, &sign);  // the reentrant form: no global signgam written by parallel loops
#endif
}

// psi(x) = d/dx log Gamma(x); -+inf at +-0, NaN at the negative integers.
MF_HOST_DEVICE inline double digamma(double x) {
  if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
  if (std::isnan(x)) return x;
  if (x < 0) {
    if (x == std::trunc(x)) return std::numeric_limits<double>::quiet_NaN();
    // reflection; tan of the fractional part keeps pi * x's rounding out
    double whole = 0;
    const double frac = std::modf(x, &whole);
    return digamma(1 - x) - kPi / std::tan(kPi * frac);
  }
  double result = 0;
  while (x < 10) {  // psi(x) = psi(x + 1) - 1 / x
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + 2.25175258906672110764;  // psi(10)
  // psi(x) ~ log x - 1/(2x) - sum B_2k / (2k x^2k)
  constexpr double kB[] = {8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
                           -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
                           8.33333333333333333333e-2};
  double tail = 0;
  if (x < 1.0e17) {
    const double z = 1.0 / (x * x);
    double p = kB[0];
    for (int i = 1; i < 7; ++i) p = p * z + kB[i];
    tail = z * p;
  }
  return result + std::log(x) - 0.5 / x - tail;
}

// psi'(x): reflection below 1/2, six recurrence steps, then the asymptotic series.
MF_HOST_DEVICE inline double trigamma(double x) {
  double sign = 1, result = 0;
  if (x < 0.5) {
    sign = -1;
    const double s = std::sin(kPi * x);
    result -= (kPi * kPi) / (s * s);
    x = 1 - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += 1 / (x * x);
    x += 1;
  }
  const double ixx = 1 / (x * x);
  result += (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x;
  return sign * result;
}

// Hurwitz zeta sum_{k >= 0} (q + k)^-s for s > 1, by Euler-Maclaurin
// summation: terms up to q + 9 (at least 9 of them), then the integral and
// the Bernoulli corrections (2k)! / B_2k.
MF_HOST_DEVICE inline double zeta(double s, double q) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (s == 1) return kInf;
  if (s < 1) return std::numeric_limits<double>::quiet_NaN();
  if (q <= 0) {
    if (q == std::floor(q)) return kInf;
    if (s != std::floor(s)) return std::numeric_limits<double>::quiet_NaN();  // q^-s is not real
  }
  constexpr double kA[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18};
  double sum = std::pow(q, -s), a = q, b = 0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    i += 1;
    a += 1.0;
    b = std::pow(a, -s);
    sum += b;
    if (std::abs(b / sum) < kMachEp) return sum;
  }
  const double w = a;
  sum += b * w / (s - 1.0);
  sum -= 0.5 * b;
  double f = 1.0, k = 0.0;
  for (double coeff : kA) {
    f *= s + k;
    b /= w;
    const double t = f * b / coeff;
    sum += t;
    if (std::abs(t / sum) < kMachEp) return sum;
    k += 1.0;
    f *= s + k;
    b /= w;
    k += 1.0;
  }
  return sum;
}

// The n-th derivative of digamma: (-1)^(n+1) n! zeta(n + 1, x) for n >= 1.
MF_HOST_DEVICE inline double polygamma(int64_t n, double x) {
  if (n == 0) return digamma(x);
  if (n == 1) return trigamma(x);
  return ((n % 2) ? 1.0 : -1.0) * std::exp(lgamma(double(n) + 1.0)) * zeta(double(n + 1), x);
}

// The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside): Giles'
// single-precision polynomial ("Approximating the erfinv function", 2010)
// refined by two Newton steps on erf (erfc near +-1, where erf rounds to
// +-1), which give double precision.
inline double erfinv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1 || y == -1) return std::copysign(std::numeric_limits<double>::infinity(), y);
  double w = -std::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      p = c + p * w;
  } else {
    w = std::sqrt(w) - 3;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682})
      p = c + p * w;
  }
  double x = p * y;
  for (int step = 0; step < 2; ++step) {
    // erf(x) - y, written with erfc away from 0 so that it keeps its digits
    const double r = y > 0.5 ? (1.0 - y) - std::erfc(x) : y < -0.5 ? std::erfc(-x) - (1.0 + y) : std::erf(x) - y;
    x -= r / (2.0 / std::sqrt(kPi) * std::exp(-x * x));
  }
  return x;
}

// log(a) - digamma(a), without the cancellation of the difference for large a.
MF_HOST_DEVICE inline double log_minus_digamma(double a) {
  if (a < 10) return std::log(a) - digamma(a);
  // 1/(2a) + sum B_2k / (2k a^2k), to a^-10: the next term is below 1e-13 of the sum
  const double z = 1 / (a * a);
  return 0.5 / a + z * (1. / 12 - z * (1. / 120 - z * (1. / 252 - z * (1. / 240 - z / 132))));
}

namespace gamma_detail {

// Note [Gamma sample gradient]: a standard gamma sample x of shape a moves
// with a as dx/da = -(dP/da) / (dP/dx), P(a, x) the regularised lower
// incomplete gamma function and dP/dx = x^(a-1) e^-x / Gamma(a) its
// density (implicit reparameterisation, Figurnov et al. 2018). Two exact
// evaluations, each accurate to about 1e-12 relative over the whole range:
//
// Small shapes (a < 10, x < a + 50): the power series of P for x <= a or
// x <= 1, the continued fraction of Q = 1 - P otherwise (Cephes' igam and
// igamc), both differentiated term by term in a, as Eigen's igamma_der_a:
//   P = x^a e^-x / Gamma(a + 1) * S,  dx/da = -(x / a) (S (log x - psi(a + 1)) + dS/da)
//   Q = x^a e^-x / Gamma(a) * C,      dx/da = x (C (log x - psi(a)) + dC/da)
// They converge in O(x + a) terms, which is why they stop at a = 10.
//
// Otherwise, the same derivative as an integral. Differentiating P under
// the integral sign and substituting t = x e^-s (x <= a) or t = x e^s
// (x > a) gives, with c = log x - psi(a),
//   x <= a:  dx/da = -x Integral_0^inf (c - s) exp(phi(s)) ds,  phi(s) = -a s + x (1 - e^-s)
//   x > a:   dx/da =  x Integral_0^inf (c + s) exp(phi(s)) ds,  phi(s) = a s - x (e^s - 1)
// (the second is the first's complement: the integrand over all t has
// mean zero). phi is concave and decreasing from phi(0) = 0, so the
// integrand is smooth and decays from s = 0: exponentially at rate |x - a|
// or as a Gaussian of width 1/sqrt(x), whichever is faster. It is cut where
// phi = -50 (found by Newton's method from an upper bound, which converges
// monotonically on a concave function) and integrated by 8 panels of
// 16-point Gauss-Legendre. Neither form cancels badly: c - s < 0 for x
// below exp(psi(a)) and c + s > 0 above a, and in between c is O(1/a).
// The cost is fixed (128 exponentials), so any a works, 1e300 included.

inline constexpr double kPhiCut = 50;
inline constexpr int kPanels = 8;

// e^(sign s) - 1 - sign s for s >= 0, accurate where it is O(s^2).
MF_HOST_DEVICE inline double exp_minus_linear(double s, double sign) {
  if (s >= 0.5) return std::expm1(sign * s) - sign * s;
  double term = s * s / 2, sum = 0;
  for (int k = 3; term != 0 && std::abs(term) > 1e-17 * std::abs(sum); ++k) {
    sum += term;
    term *= sign * s / k;
  }
  return sum;
}

MF_HOST_DEVICE inline double integral_grad(double a, double x) {
  // 16-point Gauss-Legendre: the nodes on [-1, 1] (positive half) and their weights.
  constexpr double kNodes[8] = {0.9894009349916499326,  0.94457502307323257608, 0.86563120238783174388,
                                0.7554044083550030339,  0.61787624440264374845, 0.45801677765722738634,
                                0.28160355077925891323, 0.095012509837637440185};
  constexpr double kWeights[8] = {0.027152459411754094852, 0.062253523938647892863, 0.09515851168249278481,
                                  0.12462897125553387205,  0.14959598881657673208,  0.16915651939500253819,
                                  0.18260341504492358887,  0.18945061045506849629};
  const bool lower = x <= a;
  const double sign = lower ? -1.0 : 1.0;  // t = x e^(sign s)
  // phi(s) = (x - a) s + ... written so that x close to a does not cancel
  const auto phi = [&](double s) { return sign * (a - x) * s - x * exp_minus_linear(s, sign); };
  const auto dphi = [&](double s) { return sign * (a - x) - x * sign * std::expm1(sign * s); };
  double cut;
  if (lower) {
    // phi <= x - a s, phi <= (x - a) s, and phi <= -x s^2 / 4 for s <= 1.5
    cut = (kPhiCut + x) / a;
    if (a > x) cut = std::min(cut, kPhiCut / (a - x));
    const double gaussian = std::sqrt(4 * kPhiCut / x);
    if (gaussian <= 1.5) cut = std::min(cut, gaussian);
  } else {
    cut = std::min(kPhiCut / (x - a), std::sqrt(2 * kPhiCut / x));  // phi <= (a - x) s - x s^2 / 2
  }
  for (int i = 0; i < 100; ++i) {
    const double slope = dphi(cut);
    if (!(slope < 0)) break;
    const double step = (phi(cut) + kPhiCut) / slope;
    cut -= step;
    if (std::abs(step) <= 1e-3 * cut) break;
  }
  const double log_ratio = (x > 0.5 * a && x < 2 * a) ? std::log1p((x - a) / a) : std::log(x) - std::log(a);
  const double c = log_ratio + log_minus_digamma(a);
  const double half = cut / (2 * kPanels);
  double sum = 0;
  for (int p = 0; p < kPanels; ++p) {
    const double mid = (2 * p + 1) * half;
    for (int n = 0; n < 8; ++n) {
      const double below = mid - half * kNodes[n], above = mid + half * kNodes[n];
      sum += kWeights[n] * (c + sign * below) * std::exp(phi(below));
      sum += kWeights[n] * (c + sign * above) * std::exp(phi(above));
    }
  }
  return sign * x * half * sum;
}

MF_HOST_DEVICE inline double series_grad(double a, double x) {
  double r = a, term = 1, sum = 1, dterm = 0, dsum = 0;
  for (int i = 0; i < 2000; ++i) {
    r += 1;
    dterm = dterm * (x / r) - term * x / (r * r);
    term *= x / r;
    sum += term;
    dsum += dterm;
    if (term <= kMachEp * sum && std::abs(dterm) <= kMachEp * std::abs(dsum)) break;
  }
  return -(dsum + sum * (std::log(x) - digamma(a + 1))) * x / a;
}

MF_HOST_DEVICE inline double continued_fraction_grad(double a, double x) {
  constexpr double kBig = 0x1p500, kBigInv = 0x1p-500;
  double y = 1 - a, z = x + y + 1, c = 0;
  double pkm2 = 1, qkm2 = x, pkm1 = x + 1, qkm1 = z * x;
  double dpkm2 = 0, dqkm2 = 0, dpkm1 = 0, dqkm1 = -x;
  double ans = pkm1 / qkm1, dans = (dpkm1 - ans * dqkm1) / qkm1;
  for (int i = 0; i < 2000; ++i) {
    c += 1, y += 1, z += 2;
    const double yc = y * c;
    const double pk = pkm1 * z - pkm2 * yc, qk = qkm1 * z - qkm2 * yc;
    const double dpk = dpkm1 * z - pkm1 - dpkm2 * yc + pkm2 * c;
    const double dqk = dqkm1 * z - qkm1 - dqkm2 * yc + qkm2 * c;
    if (qk != 0) {
      const double previous = ans, dprevious = dans;
      ans = pk / qk;
      dans = (dpk - ans * dqk) / qk;
      if (std::abs(ans - previous) <= kMachEp * std::abs(ans) &&
          std::abs(dans - dprevious) <= kMachEp * std::abs(dans))
        break;
    }
    pkm2 = pkm1, pkm1 = pk, qkm2 = qkm1, qkm1 = qk;
    dpkm2 = dpkm1, dpkm1 = dpk, dqkm2 = dqkm1, dqkm1 = dqk;
    if (std::abs(pk) > kBig) {
      pkm2 *= kBigInv, pkm1 *= kBigInv, qkm2 *= kBigInv, qkm1 *= kBigInv;
      dpkm2 *= kBigInv, dpkm1 *= kBigInv, dqkm2 *= kBigInv, dqkm1 *= kBigInv;
    }
  }
  return x * (dans + ans * (std::log(x) - digamma(a)));
}

}  // namespace gamma_detail

// dx/da of a sample x of the standard gamma distribution of shape a (Note
// [Gamma sample gradient]). 0 at x = 0; NaN where a <= 0, x < 0 or either is
// infinite or NaN.
MF_HOST_DEVICE inline double standard_gamma_grad(double a, double x) {
  if (!(a > 0) || !(x >= 0) || std::isinf(a) || std::isinf(x)) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return 0;
  if (a >= 10 || x >= a + 50) return gamma_detail::integral_grad(a, x);
  if (x <= a || x <= 1) return gamma_detail::series_grad(a, x);
  return gamma_detail::continued_fraction_grad(a, x);
}

}  // namespace mf::special_math
