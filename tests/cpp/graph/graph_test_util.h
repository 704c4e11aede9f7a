// Helpers of the graph tests: hand-built graphs and what their nodes are.
#pragma once

#include <string>
#include <vector>

#include "meshflow/dispatch.h"
#include "meshflow/graph/ir.h"

namespace mf::testing {

inline const OpDef& op(const char* name) { return dispatch::op(name); }

// The op of each node in order, an in-place node's with a trailing "_".
inline std::vector<std::string> op_names(const graph::Graph& g) {
  std::vector<std::string> names;
  for (const auto& n : g.nodes()) names.push_back(n.op->name + (n.inplace ? "_" : ""));
  return names;
}

inline TensorMeta f32(Shape shape) { return {std::move(shape), DType::Float32, Device()}; }

}  // namespace mf::testing
