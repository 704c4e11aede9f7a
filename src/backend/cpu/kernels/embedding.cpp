// The CPU kernels of embedding and embedding_backward (src/ops/embedding.cpp):
// rows of a (num_embeddings, dim) table picked by int32 or int64 indices,
// and their gradient added back into a zero table.
#include <cstring>
#include <vector>

#include "backend/cpu/kernels/dense_scratch.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

// Calls fn(i, index) for the flat indices in [begin, end) as int64.
template <typename F>
void for_each_index(const Tensor& indices, int64_t begin, int64_t end, const F& fn) {
  if (indices.dtype() == kInt64) {
    const int64_t* p = static_cast<const int64_t*>(indices.data_ptr());
    for (int64_t i = begin; i < end; ++i) fn(i, p[i]);
  } else {
    const int32_t* p = static_cast<const int32_t*>(indices.data_ptr());
    for (int64_t i = begin; i < end; ++i) fn(i, int64_t(p[i]));
  }
}

void embedding_kernel(const TensorList& in, TensorList& out, const Attrs&) {
  Scratch taken(out);
  const Tensor weight = dense(in[0], taken), indices = dense(in[1], taken);
  const int64_t rows = weight.sizes()[0];
  const size_t row_bytes = size_t(weight.sizes()[1]) * weight.element_size();
  const char* src = static_cast<const char*>(weight.data_ptr());
  char* dst = static_cast<char*>(out[0].data_ptr());
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(weight.sizes()[1], 1));
  parallel_for(0, indices.numel(), grain, [&](int64_t b, int64_t e) {
    for_each_index(indices, b, e, [&](int64_t i, int64_t index) {
      MF_CHECK(index >= 0 && index < rows, IndexError, "embedding: index ", index, " is out of range for a weight of ",
               rows, " rows");
      std::memcpy(dst + size_t(i) * row_bytes, src + size_t(index) * row_bytes, row_bytes);
    });
  });
}

// grad_weight[v] = sum of grad rows i with indices[i] == v (v != padding_idx).
// Each task owns a range of table rows and walks all indices in order, so
// every row is accumulated in the same order whatever the thread count.
void embedding_backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Scratch taken(out);
  const Tensor grad = dense(in[0], taken), indices = dense(in[1], taken);
  const int64_t padding = attrs.get_int("padding_idx");  // -1: none
  const int64_t rows = out[0].sizes()[0], dim = out[0].sizes()[1], n = indices.numel();
  dispatch_floating(grad.dtype(), "embedding_backward", [&]<typename T>() {
    using A = acc_type<T>;
    const T* gp = static_cast<const T*>(grad.data_ptr());
    T* op = static_cast<T*>(out[0].data_ptr());
    const int64_t grain = n * dim > kGrainSize ? 1 : std::max<int64_t>(rows, 1);
    parallel_for(0, rows, grain, [&](int64_t v0, int64_t v1) {
      std::vector<A> acc(size_t((v1 - v0) * dim), A(0));
      for_each_index(indices, 0, n, [&](int64_t i, int64_t index) {
        if (index < v0 || index >= v1 || index == padding) return;
        A* dst = acc.data() + (index - v0) * dim;
        const T* src = gp + i * dim;
#pragma omp simd
        for (int64_t j = 0; j < dim; ++j) dst[j] += A(src[j]);
      });
      T* dst = op + v0 * dim;
      for (size_t j = 0; j < acc.size(); ++j) dst[j] = T(acc[j]);
    });
  });
}

}  // namespace

MF_REGISTER_KERNEL("embedding", DeviceType::CPU, embedding_kernel, dense_inputs_scratch("embedding", {0, 1}));
MF_REGISTER_KERNEL("embedding_backward", DeviceType::CPU, embedding_backward_kernel,
                   dense_inputs_scratch("embedding_backward", {0, 1}));

}  // namespace mf::cpu
