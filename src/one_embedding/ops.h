// What the ops of MultiTableEmbedding (ops.cpp) share with their CPU kernels
// (backend/cpu/kernels/one_embedding.cpp).
#pragma once

#include <memory>

#include "meshflow/one_embedding.h"
#include "meshflow/op_def.h"

namespace mf::one_embedding {

// The table set an op's "table_set" attr names (register_table_set); throws
// when it no longer exists.
std::shared_ptr<TableSet> table_set_of(const Attrs& attrs);

}  // namespace mf::one_embedding
