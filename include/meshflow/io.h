// Checkpoints: tensors in the safetensors format.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON mapping each tensor name to {"dtype", "shape", "data_offsets"}
// (plus an optional "__metadata__" object of strings), padded with spaces to
// a multiple of 8, then the tensors' little-endian bytes, packed back to back.
// Files written here load in other safetensors readers and vice versa.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "meshflow/tensor.h"

namespace mf::io {

// Writes tensors (any strides; stored contiguous, in row-major order) and
// string metadata to path. The write is atomic: the data goes to a temporary
// file in the same directory, which is synced and renamed over path, so path
// holds either its old content or the whole new file. Throws ValueError for a
// tensor that cannot be stored (undefined, not on the CPU, a name that is not
// UTF-8 or is "__metadata__") and Error when the file cannot be written.
void save_file(const std::map<std::string, Tensor>& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file: its tensors (contiguous CPU tensors that own their
// memory) and its "__metadata__". The whole file is checked before any tensor
// is returned; a truncated, corrupt or malformed file throws Error naming the
// path and the problem. dtypes meshflow lacks (U16, U32, U64, F8_*) are
// rejected the same way.
std::pair<std::map<std::string, Tensor>, std::map<std::string, std::string>> load_file(
    const std::string& path);

}  // namespace mf::io
