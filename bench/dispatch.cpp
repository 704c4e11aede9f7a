// Dispatch overhead: time of one small `add` through the full op door
// (type promotion, inference, allocation, kernel, autograd check) from C++.
// Prints ns per call; the aim is under 1 us. Single thread (overhead only).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "meshflow/meshflow.h"

int main() {
  mf::set_num_threads(1);
  mf::Tensor a = mf::ones({4});
  mf::Tensor b = mf::ones({4});
  mf::Tensor c;
  constexpr int kIters = 200000;
  std::vector<double> samples;
  for (int rep = 0; rep < 7; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) c = mf::add(a, b);
    auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kIters);
  }
  std::sort(samples.begin(), samples.end());
  std::printf("dispatch overhead: add of two float32[4] tensors, 1 thread\n");
  std::printf("median %.0f ns/call (min %.0f ns)\n", samples[samples.size() / 2], samples[0]);
  return c.numel() == 4 ? 0 : 1;
}
