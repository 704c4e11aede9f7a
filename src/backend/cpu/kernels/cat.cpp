// cat's CPU kernel (src/ops/join.cpp).
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/kernels/loops.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"
#include "ops/join_common.h"

namespace mf::cpu {
namespace {

using join_detail::first_kept;
using join_detail::is_skipped;

void cat_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const Tensor* ref = first_kept(in);
  if (y.numel() == 0 || !ref) return;
  const int64_t dim = wrap_dim(attrs.get_int("dim"), ref->dim(), "cat");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= y.sizes()[size_t(d)];
  for (int64_t d = dim + 1; d < y.dim(); ++d) inner *= y.sizes()[size_t(d)];
  bool all_contiguous = true;
  for (const auto& t : in) all_contiguous = all_contiguous && (is_skipped(t) || t.is_contiguous());
  if (outer > 1 && all_contiguous) {
    // Row by row: each output row is the inputs' rows back to back.
    const int64_t item = int64_t(y.element_size());
    const int64_t row_bytes = y.sizes()[size_t(dim)] * inner * item;
    std::vector<std::pair<const char*, int64_t>> blocks;  // (data, bytes per row)
    for (const auto& t : in)
      if (!is_skipped(t) && t.numel() > 0)
        blocks.emplace_back(static_cast<const char*>(t.data_ptr()), t.sizes()[size_t(dim)] * inner * item);
    char* dst = static_cast<char*>(y.data_ptr());
    parallel_for(0, outer, std::max<int64_t>(1, kGrainSize * 4 / std::max<int64_t>(row_bytes, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) {
                     char* d = dst + o * row_bytes;
                     for (const auto& [src, bytes] : blocks) {
                       std::memcpy(d, src + o * bytes, size_t(bytes));
                       d += bytes;
                     }
                   }
                 });
    return;
  }
  int64_t offset = 0;
  for (const auto& t : in) {
    if (is_skipped(t)) continue;
    Tensor part = make_view(y, t.sizes(), y.strides(), y.storage_offset() + offset * y.strides()[size_t(dim)]);
    copy_cast(part, t);
    offset += t.sizes()[size_t(dim)];
  }
}

}  // namespace

MF_REGISTER_KERNEL("cat", DeviceType::CPU, cat_kernel);

}  // namespace mf::cpu
