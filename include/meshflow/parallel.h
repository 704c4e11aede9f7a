// The intra-op thread pool. See Note [One thread pool] in CMakeLists.txt:
// meshflow's loops, OpenBLAS and oneDNN share one OpenMP runtime.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace mf {

int get_num_threads();
// Sets the threads of meshflow's loops, OpenBLAS and oneDNN together.
void set_num_threads(int n);

// Elements per chunk below which a loop runs on the calling thread.
inline constexpr int64_t kGrainSize = 32768;

// Calls fn(chunk_begin, chunk_end) over [begin, end) split into at most
// get_num_threads() chunks of at least grain_size elements. The first
// exception thrown by fn is rethrown on the calling thread.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const F& fn) {
  if (begin >= end) return;
  const int64_t n = end - begin;
  int64_t threads = std::min<int64_t>(get_num_threads(), (n + grain_size - 1) / std::max<int64_t>(grain_size, 1));
  if (threads <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel num_threads(int(threads))
  {
    const int64_t tid = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = begin + tid * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) {
      try {
        fn(b, e);
      } catch (...) {
#pragma omp critical(mf_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace mf
