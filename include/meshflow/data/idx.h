// Reading IDX files (the MNIST family's format), plain or gzip-compressed.
#pragma once

#include <string>

#include "meshflow/tensor.h"

namespace mf::data {

// The array stored in an IDX file as a tensor of its element type (uint8,
// int8, int16, int32, float32 or float64). Throws mf::Error naming the path
// when the file is missing, truncated or not IDX.
Tensor read_idx(const std::string& path);

}  // namespace mf::data
