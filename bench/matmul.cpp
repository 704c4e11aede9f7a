// float32 matmul throughput: mf::matmul against a direct cblas_sgemm call
// on the same operands, measured alternately in one run. Prints the median
// GFLOP/s of each and the median of the per-pair ratios (back-to-back
// samples, order alternating, so drifting machine load cancels); the aim is
// >= 0.95. 2 threads (mf::set_num_threads sets OpenBLAS's too), 21 sample
// pairs after a warm-up.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "meshflow/meshflow.h"

namespace {

double seconds_per_call(const std::function<void()>& fn, int iters) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / iters;
}

mf::Tensor random_matrix(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist;
  std::vector<double> v(size_t(n * n));
  for (auto& x : v) x = dist(gen);
  return mf::from_vector(v, {n, n});
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  mf::set_num_threads(2);
  std::printf("float32 square matmul, %d threads (OpenBLAS OpenMP build), medians of 21 sample pairs\n",
              mf::get_num_threads());
  std::printf("%6s %14s %14s %8s\n", "n", "mf GFLOP/s", "sgemm GFLOP/s", "ratio");
  for (int64_t n : {256, 1024, 2048}) {
    mf::Tensor a = random_matrix(n, 1), b = random_matrix(n, 2);
    mf::Tensor c_direct = mf::empty({n, n});
    mf::Tensor c;
    const float* ap = a.data<float>();
    const float* bp = b.data<float>();
    float* cp = c_direct.data<float>();
    auto run_mf = [&] { c = mf::matmul(a, b); };
    auto run_direct = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, ap, int(n), bp, int(n),
                  0.0f, cp, int(n));
    };
    const double flops = 2.0 * double(n) * double(n) * double(n);
    // Enough calls for about 0.05 s per sample.
    const double once = seconds_per_call(run_direct, 1);
    const int iters = std::max(1, int(0.05 / std::max(once, 1e-6)));
    seconds_per_call(run_mf, iters);
    seconds_per_call(run_direct, iters);
    std::vector<double> mf_times, direct_times, ratios;
    for (int s = 0; s < 21; ++s) {
      double t_mf, t_direct;
      if (s % 2 == 0) {
        t_mf = seconds_per_call(run_mf, iters);
        t_direct = seconds_per_call(run_direct, iters);
      } else {
        t_direct = seconds_per_call(run_direct, iters);
        t_mf = seconds_per_call(run_mf, iters);
      }
      mf_times.push_back(t_mf);
      direct_times.push_back(t_direct);
      ratios.push_back(t_direct / t_mf);
    }
    std::printf("%6lld %14.1f %14.1f %8.3f\n", static_cast<long long>(n), flops / median(mf_times) / 1e9,
                flops / median(direct_times) / 1e9, median(ratios));
  }
  return 0;
}
