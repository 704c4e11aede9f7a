// The plan of an advanced index (Note [Index plan] in
// src/ops/advanced_index.cpp): the basic part as a strided view, and the
// shapes of the rows and the result. Shared by the op and every backend's
// kernels.
#pragma once

#include <vector>

#include "meshflow/op_def.h"
#include "meshflow/tensor.h"

namespace mf::index_plan {

struct IndexPlan {
  Shape sizes, src_dims, steps, starts;
  int64_t num_pre = 0;

  Attrs attrs() const {
    return {{"sizes", sizes}, {"src_dims", src_dims}, {"steps", steps}, {"starts", starts}, {"num_pre", num_pre}};
  }
  static IndexPlan from(const Attrs& a) {
    return {a.get_shape("sizes"), a.get_shape("src_dims"), a.get_shape("steps"), a.get_shape("starts"),
            a.get_int("num_pre")};
  }
};

// The basic-index view of x; checks the plan against x's shape first so a
// bad plan can never address memory outside x.
inline Tensor plan_view(const Tensor& x, const IndexPlan& p) {
  const int64_t nd = x.dim();
  const size_t nv = p.sizes.size();
  MF_CHECK(int64_t(p.starts.size()) == nd && p.src_dims.size() == nv && p.steps.size() == nv &&
               p.num_pre >= 0 && p.num_pre <= int64_t(nv),
           Error, "index: plan does not fit a tensor of shape ", shape_str(x.sizes()));
  std::vector<bool> used(size_t(nd), false);
  Shape strides(nv);
  for (size_t j = 0; j < nv; ++j) {
    const int64_t d = p.src_dims[j];
    if (d < 0) {
      MF_CHECK(p.sizes[j] == 1, Error, "index: a new axis must have size 1");
      strides[j] = 0;
      continue;
    }
    MF_CHECK(d < nd && !used[size_t(d)] && p.sizes[j] >= 0 && p.steps[j] > 0 && p.starts[size_t(d)] >= 0 &&
                 p.starts[size_t(d)] <= x.sizes()[size_t(d)] &&
                 (p.sizes[j] == 0 || p.starts[size_t(d)] + (p.sizes[j] - 1) * p.steps[j] < x.sizes()[size_t(d)]),
             Error, "index: plan dim ", j, " does not fit a tensor of shape ", shape_str(x.sizes()));
    used[size_t(d)] = true;
    strides[j] = p.steps[j] * x.strides()[size_t(d)];
  }
  int64_t offset = x.storage_offset();
  for (int64_t d = 0; d < nd; ++d) {
    MF_CHECK(used[size_t(d)] || (p.starts[size_t(d)] >= 0 && p.starts[size_t(d)] < x.sizes()[size_t(d)]), Error,
             "index: plan start of dim ", d, " does not fit a tensor of shape ", shape_str(x.sizes()));
    offset += p.starts[size_t(d)] * x.strides()[size_t(d)];
  }
  return make_view(x, p.sizes, strides, offset);
}

// Shape of the rows and of the result, pre + rows + post.
inline Shape rows_shape_of(const TensorList& idx, const char* op) {
  if (idx.empty()) return {};
  for (const auto& t : idx) {
    MF_CHECK(t.dtype() == DType::Int64, TypeError, op, ": index tensors must be int64, got ", dtype_name(t.dtype()));
    MF_CHECK(t.sizes() == idx[0].sizes(), ShapeError, op, ": index tensors must share one shape, got ",
             shape_str(idx[0].sizes()), " and ", shape_str(t.sizes()));
  }
  return idx[0].sizes();
}

inline Shape result_shape(const IndexPlan& p, const Shape& rows, int64_t k) {
  MF_CHECK(p.num_pre + k <= int64_t(p.sizes.size()), Error, "index: plan has ", p.sizes.size(), " dims, fewer than ",
           p.num_pre, " + ", k, " indexed");
  Shape out(p.sizes.begin(), p.sizes.begin() + p.num_pre);
  out.insert(out.end(), rows.begin(), rows.end());
  out.insert(out.end(), p.sizes.begin() + p.num_pre + k, p.sizes.end());
  return out;
}

}  // namespace mf::index_plan
