// Special functions as scalar functions of double: the gamma family
// (lgamma, digamma, trigamma and the Hurwitz zeta function, which gives
// polygamma) and erfinv. Plain inline functions of <cmath> only, so that every
// backend's loops can use them. The methods are the classical ones (Cephes'
// asymptotic digamma series and Euler-Maclaurin zeta summation), which are
// also those PyTorch uses, so results agree to rounding.
#pragma once

#include <cmath>
#include <limits>

namespace mf::special_math {

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kMachEp = 1.11022302462515654042e-16;  // 2^-53

// log|Gamma(x)|; +inf at the poles 0, -1, -2, ...
inline double lgamma(double x) {
  int sign = 0;
  return ::lgamma_r(x, &sign);  // the reentrant form: no global signgam written by parallel loops
}

// psi(x) = d/dx log Gamma(x); -+inf at +-0, NaN at the negative integers.
inline double digamma(double x) {
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
inline double trigamma(double x) {
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
inline double zeta(double s, double q) {
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
inline double polygamma(int64_t n, double x) {
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

}  // namespace mf::special_math
