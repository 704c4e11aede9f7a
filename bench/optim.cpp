// Optimizer steps: the fused update op of each optimizer against the same
// update written as separate ops (as PyTorch's single-tensor loops do), on
// one float32 parameter of 16M elements. Prints ms per step and the ratio,
// measured in the same run, with the machine's default thread count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "meshflow/meshflow.h"
#include "meshflow/optim.h"

namespace {

double median_ms(const std::function<void()>& f) {
  f();  // warm up the allocator cache
  std::vector<double> samples;
  for (int rep = 0; rep < 9; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

void report(const char* name, double fused, double composed) {
  std::printf("%-22s fused %7.2f ms   separate ops %7.2f ms   ratio %.2fx\n", name, fused, composed, composed / fused);
}

}  // namespace

int main() {
  using namespace mf;
  constexpr int64_t n = int64_t(1) << 24;
  mf::NoGradGuard no_grad;
  Tensor p = randn({n}), g = randn({n}), a = zeros({n}), b = zeros({n}), step = zeros({});
  std::printf("optimizer step on one float32 parameter of %ld elements, %d threads\n", long(n), get_num_threads());

  report("SGD momentum", median_ms([&] { optim::sgd_update_(p, g, a, {.lr = 1e-3, .momentum = 0.9}); }),
         median_ms([&] {
           mul_(a, 0.9);
           add_(a, g);
           sub_(p, a, 1e-3);
         }));

  report("Adam", median_ms([&] { optim::adam_update_(p, g, a, b, Tensor(), step, {.lr = 1e-3}); }),
         median_ms([&] {
           mul_(a, 0.9);
           add_(a, g, 0.1);
           mul_(b, 0.999);
           add_(b, mul(g, g), 0.001);
           Tensor denom = add(div(sqrt(b), 0.03), 1e-8);
           sub_(p, div(a, denom), 0.01);
         }));

  report("RMSprop", median_ms([&] { optim::rmsprop_update_(p, g, a, Tensor(), Tensor(), step, {.lr = 1e-3}); }),
         median_ms([&] {
           mul_(a, 0.99);
           add_(a, mul(g, g), 0.01);
           sub_(p, div(g, add(sqrt(a), 1e-8)), 1e-3);
         }));

  report("Adagrad", median_ms([&] { optim::adagrad_update_(p, g, a, step, {.lr = 1e-3}); }),
         median_ms([&] {
           add_(a, mul(g, g));
           sub_(p, div(g, add(sqrt(a), 1e-10)), 1e-3);
         }));
  return 0;
}
