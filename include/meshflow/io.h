// Checkpoints: tensors in the safetensors format, and nested state (a Value
// tree of maps, lists, tensors and scalars) stored in the same format.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON mapping each tensor name to {"dtype", "shape", "data_offsets"}
// (plus an optional "__metadata__" object of strings), padded with spaces to
// a multiple of 8, then the tensors' little-endian bytes, packed back to back.
// Files written here load in other safetensors readers and vice versa.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

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
// rejected the same way. save_file stores a CRC-32C of every tensor and of
// the metadata (Note [Checkpoint checksums] in src/io/safetensors.cpp);
// verify checks them, and a mismatch throws Error naming the tensor.
std::pair<std::map<std::string, Tensor>, std::map<std::string, std::string>> load_file(
    const std::string& path, bool verify = true);

// A safetensors file opened for reading parts of its tensors (Note [Reading
// shards by range] in src/io/safetensors.cpp). The constructor reads and
// checks the header only; read_box then reads just the bytes of a box.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path, bool verify = true);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // (name, (dtype, shape)) of every tensor, by name.
  std::vector<std::pair<std::string, std::pair<DType, Shape>>> tensors() const;
  std::map<std::string, std::string> metadata() const;
  // Copies the box [offsets, offsets + sizes) of tensor `name` into dst (a
  // CPU tensor of shape sizes and the tensor's dtype, any strides) through
  // one read buffer of about buffer_bytes; returns the bytes read. A box
  // that is the whole tensor is checked against its checksum (with verify).
  uint64_t read_box(const std::string& name, const Shape& offsets, const Shape& sizes, Tensor& dst,
                    size_t buffer_bytes) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A tree of checkpoint state: none, bool, int64, double, string, tensor, list
// or string-keyed map, e.g. an optimizer's
//   {"param_groups": [{"lr": 0.1, "params": [0, 1]}], "state": {"0": {"step": 3, "exp_avg": t}}}
class Value {
 public:
  using List = std::vector<Value>;
  using Map = std::map<std::string, Value>;
  enum class Kind : uint8_t { None, Bool, Int, Double, String, Tensor, List, Map };

  Value() = default;
  Value(std::nullptr_t) {}                // NOLINT: implicit like a JSON literal
  Value(bool v) : data_(v) {}             // NOLINT
  template <typename T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Value(T v) : data_(checked_int(v)) {}   // NOLINT
  template <typename T>
    requires std::is_floating_point_v<T>
  Value(T v) : data_(double(v)) {}        // NOLINT
  Value(std::string v) : data_(std::move(v)) {}   // NOLINT
  Value(const char* v) : data_(std::string(v)) {}  // NOLINT: not bool
  Value(Tensor v) : data_(std::move(v)) {}  // NOLINT
  Value(List v) : data_(std::move(v)) {}    // NOLINT
  Value(Map v) : data_(std::move(v)) {}     // NOLINT

  Kind kind() const { return Kind(data_.index()); }
  bool is_none() const { return kind() == Kind::None; }

  // Typed access; the wrong kind throws TypeError naming both kinds.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const Tensor& as_tensor() const;
  const List& as_list() const;
  List& as_list();
  const Map& as_map() const;
  Map& as_map();
  // Element of a map or list; a missing key or index throws IndexError.
  const Value& at(const std::string& key) const;
  const Value& at(size_t index) const;

 private:
  template <typename T>
  static int64_t checked_int(T v) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t))
      MF_CHECK(v <= uint64_t(INT64_MAX), ValueError, "Value: integer ", v, " does not fit in int64");
    return int64_t(v);
  }

  // The alternatives are in Kind order.
  std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, List, Map> data_;
};

// "none", "bool", "int", "double", "string", "tensor", "list", "map".
const char* kind_name(Value::Kind kind);

// How deeply lists and maps may nest in a saved Value.
inline constexpr int kMaxValueDepth = 200;

// Saves a Value tree as a safetensors file whose tensors are named by their
// paths in the tree ("state.0.exp_avg") and whose "__metadata__" holds the
// rest of the tree; see Note [Value layout] in src/io/value.cpp. Atomic like
// save_file. Throws ValueError when two tensors' paths give the same name or
// the tree is nested deeper than kMaxValueDepth.
void save(const Value& value, const std::string& path);

// Loads what save wrote, with the same structure, kinds and values. A
// safetensors file written by another tool loads as a map from tensor name to
// tensor. Throws Error naming the path for a corrupt or malformed file.
Value load(const std::string& path, bool verify = true);

}  // namespace mf::io
