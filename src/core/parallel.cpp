#include "meshflow/parallel.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>

#include "meshflow/error.h"

namespace mf {

namespace {
std::atomic<int> g_num_threads{0};
// Far above any machine's cores; a larger request is a mistake (a size
// passed for a count), and OpenMP would try to start that many threads.
constexpr int kMaxThreads = 4096;
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
  MF_CHECK(n <= kMaxThreads, ValueError, "set_num_threads: expected at most ", kMaxThreads, " threads, got ", n);
  g_num_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
  // OpenBLAS gives each of its threads a buffer of tens of MiB; more BLAS
  // threads than processors never help, and under a memory limit the
  // allocation of buffers for them retries forever (blas_memory_alloc).
  openblas_set_num_threads(std::min(n, std::max(1, openblas_get_num_procs())));
}

}  // namespace mf
