#include "meshflow/parallel.h"

#include <cblas.h>

#include <atomic>

#include "meshflow/error.h"

namespace mf {

namespace {
std::atomic<int> g_num_threads{0};
}

int get_num_threads() {
  int n = g_num_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = omp_get_max_threads();
    g_num_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void set_num_threads(int n) {
  MF_CHECK(n >= 1, ValueError, "set_num_threads: expected a positive number of threads, got ", n);
  g_num_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace mf
