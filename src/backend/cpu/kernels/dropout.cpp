// The CPU kernels of dropout and dropout_backward (src/ops/dropout.cpp):
// element i is kept when word i % 4 of philox(seed, offset + i / 4) is below
// (1 - p) * 2^32 (24 random bits), whatever the thread count.
#include <cmath>

#include "backend/cpu/kernels/dense_scratch.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "ops/random_common.h"

namespace mf::cpu {
namespace {

constexpr int64_t kWordsPerCounter = 4;
constexpr int64_t kBatch = 64;  // counters per philox_batch call

// philox() (generator.cpp) for the kBatch counters first, first + 1, ...,
// computed side by side so that the rounds vectorise; words[4 * c + w] is
// word w of counter first + c. The dropout tests check it against philox().
void philox_batch(uint64_t seed, uint64_t first, uint32_t (&words)[kWordsPerCounter * kBatch]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0[kBatch], c1[kBatch], c2[kBatch], c3[kBatch];
  for (int64_t c = 0; c < kBatch; ++c) {
    const uint64_t counter = first + uint64_t(c);
    c0[c] = uint32_t(counter), c1[c] = uint32_t(counter >> 32), c2[c] = 0, c3[c] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int64_t c = 0; c < kBatch; ++c) {
      const uint64_t p0 = uint64_t(kM0) * c0[c];
      const uint64_t p1 = uint64_t(kM1) * c2[c];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[c] ^ k0;
      const uint32_t n2 = uint32_t(p0 >> 32) ^ c3[c] ^ k1;
      c1[c] = uint32_t(p1), c3[c] = uint32_t(p0), c0[c] = n0, c2[c] = n2;
    }
    k0 += kW0, k1 += kW1;
  }
  for (int64_t c = 0; c < kBatch; ++c) {
    uint32_t* w = words + kWordsPerCounter * c;
    w[0] = c0[c], w[1] = c1[c], w[2] = c2[c], w[3] = c3[c];
  }
}

// Outputs (y, mask): mask is bool, y = x * (mask ? scale : 0).
void dropout_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Scratch taken(out);
  const Tensor x = dense(in[0], taken);
  const double p = attrs.get_float("p");
  const uint64_t seed = uint64_t(attrs.get_int("seed")), offset = uint64_t(attrs.get_int("offset"));
  // keep when the top 24 bits of the word are below (1 - p) * 2^24, i.e.
  // uniform_float(word) < 1 - p
  const uint32_t threshold = uint32_t(std::ceil(double(float(1.0 - p)) * 16777216.0));
  const int64_t n = x.numel();
  bool* mask = static_cast<bool*>(out[1].data_ptr());
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    using A = acc_type<T>;
    const A scale = A(1.0 / (1.0 - p));
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(out[0].data_ptr());
    const int64_t batches = (random_detail::dropout_counters(n) + kBatch - 1) / kBatch;
    parallel_for(0, batches, kGrainSize / (kBatch * kWordsPerCounter), [&](int64_t b, int64_t e) {
      uint32_t words[kWordsPerCounter * kBatch];
      for (int64_t batch = b; batch < e; ++batch) {
        philox_batch(seed, offset + uint64_t(batch * kBatch), words);
        const int64_t i0 = batch * kBatch * kWordsPerCounter;
        const int64_t count = std::min<int64_t>(kBatch * kWordsPerCounter, n - i0);
        const T* xb = xp + i0;
        T* yb = yp + i0;
        bool* mb = mask + i0;
        const A keep_scale = scale;  // locals: bool stores may alias captured ones
        const uint32_t limit = threshold;
        // Multiplying by 0 (not selecting 0) keeps NaN inputs NaN, as in
        // PyTorch, and keeps the loop free of branches.
#pragma omp simd
        for (int64_t k = 0; k < count; ++k) {
          const bool keep = (words[k] >> 8) < limit;
          mb[k] = keep;
          yb[k] = T(A(xb[k]) * (keep ? keep_scale : A(0)));
        }
      }
    });
  });
}

// dropout_backward(grad, mask): grad * (mask ? scale : 0).
void dropout_backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Scratch taken(out);
  const Tensor g = dense(in[0], taken), m = dense(in[1], taken);
  const double scale = attrs.get_float("scale");
  const bool* mask = static_cast<const bool*>(m.data_ptr());
  dispatch_floating(g.dtype(), "dropout_backward", [&]<typename T>() {
    using A = acc_type<T>;
    const A s = A(scale);
    const T* gp = static_cast<const T*>(g.data_ptr());
    T* dp = static_cast<T*>(out[0].data_ptr());
    parallel_for(0, g.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      const T* gb = gp + b;
      const uint8_t* mb = reinterpret_cast<const uint8_t*>(mask + b);  // bool loads do not vectorise
      T* db = dp + b;
      const A keep_scale = s;
#pragma omp simd
      for (int64_t i = 0; i < e - b; ++i) db[i] = T(A(gb[i]) * (mb[i] != 0 ? keep_scale : A(0)));
    });
  });
}

}  // namespace

MF_REGISTER_KERNEL("dropout", DeviceType::CPU, dropout_kernel, dense_inputs_scratch("dropout", {0}));
MF_REGISTER_KERNEL("dropout_backward", DeviceType::CPU, dropout_backward_kernel,
                   dense_inputs_scratch("dropout_backward", {0, 1}));

}  // namespace mf::cpu
