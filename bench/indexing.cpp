// Indexing ops on training-sized shapes (embedding lookup and its gradient,
// cross entropy's gather and scatter_add, cat, a mask select, a row sort),
// each against a direct loop over raw pointers doing the same work with the
// same threads, measured alternately in one run. Prints ms per call of each
// and the speed ratio direct / mf (1.0 = as fast as the hand loop).
// 2 threads (or argv[1]), median of 7 samples after a warm-up.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void compare(const char* name, const std::function<void()>& run_mf, const std::function<void()>& run_direct) {
  const double once = seconds_per_call(run_direct, 1);
  const int iters = std::max(1, int(0.1 / std::max(once, 1e-6)));
  seconds_per_call(run_mf, iters);
  seconds_per_call(run_direct, iters);
  std::vector<double> mf_times, direct_times;
  for (int s = 0; s < 7; ++s) {
    mf_times.push_back(seconds_per_call(run_mf, iters));
    direct_times.push_back(seconds_per_call(run_direct, iters));
  }
  const double m = median(mf_times), d = median(direct_times);
  std::printf("%-44s %10.3f %10.3f %8.2f\n", name, m * 1e3, d * 1e3, d / m);
}

mf::Tensor random_floats(const mf::Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> v(size_t(mf::shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return mf::from_vector(v, shape);
}

mf::Tensor random_longs(const mf::Shape& shape, int64_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, hi - 1);
  std::vector<int64_t> v(size_t(mf::shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return mf::from_data(v, shape);
}

// Two output buffers used in turn, as the caching allocator hands out mf's
// results (the previous result is still alive when the next one is made),
// and from that allocator, so both sides write to the same kind of memory.
template <typename T>
struct Outputs {
  mf::Tensor a, b;
  bool second = false;
  explicit Outputs(int64_t n)
      : a(mf::empty({n}, {.dtype = mf::dtype_of<T>()})), b(mf::empty({n}, {.dtype = mf::dtype_of<T>()})) {}
  T* next() {
    second = !second;
    return (second ? b : a).template data<T>();
  }
};

}  // namespace

int main(int argc, char** argv) {
  mf::set_num_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  const int threads = mf::get_num_threads();
  std::printf("indexing ops vs direct loops, float32, %d threads, median of 7 samples\n", threads);
  std::printf("%-44s %10s %10s %8s\n", "case", "mf ms", "direct ms", "ratio");
  mf::Tensor out;

  {  // Embedding lookup: rows of a (30000, 512) table.
    const int64_t vocab = 30000, dim = 512, n = 16384;
    mf::Tensor table = random_floats({vocab, dim}, 1), idx = random_longs({n}, vocab, 2);
    Outputs<float> direct(n * dim);
    const float* tp = table.data<float>();
    const int64_t* ip = idx.data<int64_t>();
    compare(
        "index_select (30000,512)[16384 rows]", [&] { out = mf::index_select(table, 0, idx); },
        [&] {
          float* d = direct.next();
#pragma omp parallel for num_threads(threads)
          for (int64_t r = 0; r < n; ++r) std::memcpy(d + r * dim, tp + ip[r] * dim, dim * sizeof(float));
        });
  }
  {  // Embedding gradient: 16384 rows added into a (1000, 512) table.
    const int64_t vocab = 1000, dim = 512, n = 16384;
    mf::Tensor base = mf::zeros({vocab, dim}), src = random_floats({n, dim}, 3), idx = random_longs({n}, vocab, 4);
    Outputs<float> direct(vocab * dim);
    const float* sp = src.data<float>();
    const float* bp = base.data<float>();
    const int64_t* ip = idx.data<int64_t>();
    compare(
        "index_add (1000,512) += 16384 rows", [&] { out = mf::index_add(base, 0, idx, src); },
        [&] {
          float* out_p = direct.next();
          std::memcpy(out_p, bp, vocab * dim * sizeof(float));
#pragma omp parallel num_threads(threads)
          {
            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t c0 = dim * t / nt, c1 = dim * (t + 1) / nt;
            for (int64_t r = 0; r < n; ++r) {
              float* d = out_p + ip[r] * dim;
              const float* s = sp + r * dim;
              for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
            }
          }
        });
  }
  {  // Cross entropy: the target logit of each row, and the gradient back.
    const int64_t rows = 65536, classes = 1000;
    mf::Tensor logits = random_floats({rows, classes}, 5), target = random_longs({rows, 1}, classes, 6);
    Outputs<float> picked(rows);
    const float* lp = logits.data<float>();
    const int64_t* tp = target.data<int64_t>();
    compare(
        "gather (65536,1000) dim 1, one per row", [&] { out = mf::gather(logits, 1, target); },
        [&] {
          float* p = picked.next();
#pragma omp parallel for num_threads(threads)
          for (int64_t r = 0; r < rows; ++r) p[r] = lp[r * classes + tp[r]];
        });
    const int64_t grad_rows = 16384;
    mf::Tensor zeros = mf::zeros({grad_rows, classes}), g = random_floats({grad_rows, 1}, 7);
    mf::Tensor gt = random_longs({grad_rows, 1}, classes, 8);
    Outputs<float> grad(grad_rows * classes);
    const float* gp = g.data<float>();
    const float* zp = zeros.data<float>();
    const int64_t* gtp = gt.data<int64_t>();
    compare(
        "scatter_add (16384,1000) dim 1, one per row", [&] { out = mf::scatter_add(zeros, 1, gt, g); },
        [&] {
          float* d = grad.next();
          std::memcpy(d, zp, grad_rows * classes * sizeof(float));
          for (int64_t r = 0; r < grad_rows; ++r) d[r * classes + gtp[r]] += gp[r];
        });
    mf::Tensor logits_grad = random_floats({grad_rows, classes}, 14).requires_grad_();
    compare(
        "gather backward (16384,1000) dim 1", [&] { out = mf::autograd::grad({mf::gather(logits_grad, 1, gt)}, {logits_grad}, {g})[0]; },
        [&] {
          // The forward gather, then the gradient: zeros with g added at the targets.
          const float* lgp = logits_grad.data<float>();
          float* p = picked.next();
          for (int64_t r = 0; r < grad_rows; ++r) p[r] = lgp[r * classes + gtp[r]];
          float* d = grad.next();
          std::memset(d, 0, grad_rows * classes * sizeof(float));
          for (int64_t r = 0; r < grad_rows; ++r) d[r * classes + gtp[r]] += gp[r];
        });
  }
  {  // Concatenating features.
    const int64_t rows = 4096, cols = 512;
    mf::Tensor a = random_floats({rows, cols}, 9), b = random_floats({rows, cols}, 10);
    Outputs<float> direct(rows * cols * 2);
    const float* ap = a.data<float>();
    const float* bp = b.data<float>();
    compare(
        "cat (4096,512)+(4096,512) dim 1", [&] { out = mf::cat({a, b}, 1); },
        [&] {
          float* d = direct.next();
#pragma omp parallel for num_threads(threads)
          for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(d + r * 2 * cols, ap + r * cols, cols * sizeof(float));
            std::memcpy(d + r * 2 * cols + cols, bp + r * cols, cols * sizeof(float));
          }
        });
  }
  {  // A bool mask over 4M elements (about half true).
    const int64_t n = 1 << 22;
    mf::Tensor x = random_floats({n}, 11);
    std::vector<uint8_t> m(static_cast<size_t>(n));
    std::mt19937 gen(12);
    for (auto& v : m) v = gen() & 1;
    mf::Tensor mask = mf::from_data(m, {n});
    mask = mf::to(mask, mf::kBool);
    Outputs<float> direct(n);
    const float* xp = x.data<float>();
    const bool* mp = mask.data<bool>();
    compare(
        "masked_select 4M elements", [&] { out = mf::masked_select(x, mask); },
        [&] {
          // Counted first, as the size of a new output must be.
          int64_t count = 0;
          for (int64_t i = 0; i < n; ++i) count += mp[i];
          float* d = direct.next();
          int64_t k = 0;
          for (int64_t i = 0; i < n; ++i)
            if (mp[i]) d[k++] = xp[i];
          if (k != count) std::abort();
        });
  }
  {  // Sorting rows.
    const int64_t rows = 1000, cols = 1000;
    mf::Tensor x = random_floats({rows, cols}, 13);
    Outputs<float> values(rows * cols);
    Outputs<int64_t> indices(rows * cols);
    const float* xp = x.data<float>();
    compare(
        "sort (1000,1000) dim 1", [&] { out = mf::sort(x, 1).values; },
        [&] {
          float* vp = values.next();
          int64_t* ip = indices.next();
#pragma omp parallel for num_threads(threads)
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<std::pair<float, int64_t>> line(static_cast<size_t>(cols));
            for (int64_t c = 0; c < cols; ++c) line[size_t(c)] = {xp[r * cols + c], c};
            std::sort(line.begin(), line.end());
            for (int64_t c = 0; c < cols; ++c) {
              vp[r * cols + c] = line[size_t(c)].first;
              ip[r * cols + c] = line[size_t(c)].second;
            }
          }
        });
  }
  return out.defined() ? 0 : 1;
}
