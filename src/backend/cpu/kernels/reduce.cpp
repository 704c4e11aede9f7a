#include "backend/cpu/kernels/reduce.h"

namespace mf::cpu {

IndexWalker kept_walker_without(const ReduceGeometry& g, int64_t lane, bool output_strides) {
  Shape sizes, strides;
  for (int64_t d = 0; d < int64_t(g.kept_sizes.size()); ++d) {
    if (d == lane) continue;
    sizes.push_back(g.kept_sizes[size_t(d)]);
    strides.push_back((output_strides ? g.kept_out_strides : g.kept_strides)[size_t(d)]);
  }
  return IndexWalker(sizes, strides);
}

}  // namespace mf::cpu
