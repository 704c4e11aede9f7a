// Helpers for the checkpoint tests: a scratch directory, raw file bytes,
// safetensors files assembled by hand, and tensors of random raw bytes.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "meshflow/io.h"
#include "test_util.h"

namespace mf::testing {

// A fresh directory under the system temp dir, removed with its contents.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "meshflow_io_XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    if (!made) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path_, ec))
      if (entry.is_directory(ec)) std::filesystem::permissions(entry.path(), std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of the entries in the directory (or a subdirectory), sorted.
  std::vector<std::string> entries(const std::string& sub = "") const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(sub.empty() ? path_ : file(sub)))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xFF);
  return s;
}

// A safetensors file as the format describes it: the header length as 8
// little-endian bytes, the header, the data section.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

template <typename T>
std::string le_bytes(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // the tests run on little-endian hosts, as the library requires
    s.append(b, sizeof(T));
  }
  return s;
}

// The bytes of t's elements in row-major order.
inline std::string tensor_bytes(const Tensor& t) {
  Tensor c = contiguous(t);
  return std::string(static_cast<const char*>(c.data_ptr()), size_t(c.numel()) * c.element_size());
}

// A contiguous tensor whose bytes are random (any bit pattern, NaNs
// included); bool elements are random 0 / 1.
inline Tensor random_bytes_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = make_empty(shape, dtype);
  std::mt19937 gen(seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  const size_t n = size_t(t.numel()) * t.element_size();
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(dtype == DType::Bool ? gen() & 1 : gen() & 0xFF);
  return t;
}

inline std::vector<DType> all_dtypes() {
  return {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
}

// The message of the mf::Error that f throws (fails the test if it throws
// nothing or something else).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-meshflow exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace mf::testing
