// Element types, PyTorch's type promotion, and dtype dispatch for kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "meshflow/error.h"
#include "meshflow/half.h"

namespace mf {

// Order matters: promote_types() and the lattice below index by it.
enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};
inline constexpr int kNumDTypes = 10;

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kInt16 = DType::Int16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;

// Bytes per element (inline: every allocation and stride computation asks).
inline size_t itemsize(DType dtype) {
  constexpr unsigned char kSizes[kNumDTypes] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return kSizes[size_t(dtype)];
}
// "float32", "bfloat16", ... (PyTorch's names without the "torch." prefix).
const char* dtype_name(DType dtype);
// Parses a dtype name; accepts PyTorch aliases ("float", "half", "long", ...).
DType dtype_from_name(const std::string& name);
std::ostream& operator<<(std::ostream& os, DType dtype);

inline bool is_floating(DType d) { return d >= DType::Float16; }
inline bool is_integral(DType d, bool include_bool = false) {
  return (d >= DType::UInt8 && d <= DType::Int64) || (include_bool && d == DType::Bool);
}
inline bool is_reduced_floating(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

// PyTorch's promote_types: the smallest dtype that holds both, e.g.
// (uint8, int8) -> int16, (float16, bfloat16) -> float32, (int64, float16) -> float16.
DType promote_types(DType a, DType b);

// The dtype a floating op computes in for a given input (ints -> float32).
inline DType to_floating(DType d) { return is_floating(d) ? d : DType::Float32; }

// C++ type of each dtype.
template <DType D> struct TypeOf;
template <> struct TypeOf<DType::Bool> { using type = bool; };
template <> struct TypeOf<DType::UInt8> { using type = uint8_t; };
template <> struct TypeOf<DType::Int8> { using type = int8_t; };
template <> struct TypeOf<DType::Int16> { using type = int16_t; };
template <> struct TypeOf<DType::Int32> { using type = int32_t; };
template <> struct TypeOf<DType::Int64> { using type = int64_t; };
template <> struct TypeOf<DType::Float16> { using type = Half; };
template <> struct TypeOf<DType::BFloat16> { using type = BFloat16; };
template <> struct TypeOf<DType::Float32> { using type = float; };
template <> struct TypeOf<DType::Float64> { using type = double; };

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::Int8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::Int16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }

// The type kernels compute in: float for the 16-bit floats, T otherwise.
template <typename T>
using acc_type = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <typename T>
inline constexpr bool is_floating_type_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Calls fn.template operator()<T>() with T the C++ type of dtype.
//   dispatch_dtype(t.dtype(), [&]<typename T>() { fill<T>(t); });
template <typename F>
decltype(auto) dispatch_dtype(DType dtype, F&& fn) {
  switch (dtype) {
    case DType::Bool: return fn.template operator()<bool>();
    case DType::UInt8: return fn.template operator()<uint8_t>();
    case DType::Int8: return fn.template operator()<int8_t>();
    case DType::Int16: return fn.template operator()<int16_t>();
    case DType::Int32: return fn.template operator()<int32_t>();
    case DType::Int64: return fn.template operator()<int64_t>();
    case DType::Float16: return fn.template operator()<Half>();
    case DType::BFloat16: return fn.template operator()<BFloat16>();
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
  }
  throw TypeError("dispatch_dtype: unknown dtype");
}

// Like dispatch_dtype but only for floating dtypes; others throw TypeError
// naming op.
template <typename F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case DType::Float16: return fn.template operator()<Half>();
    case DType::BFloat16: return fn.template operator()<BFloat16>();
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
    default: break;
  }
  throw TypeError(detail::concat(op, ": expected a floating-point tensor, got ", dtype_name(dtype)));
}

// Every dtype but bool (arithmetic that bool does not support).
template <typename F>
decltype(auto) dispatch_numeric(DType dtype, const char* op, F&& fn) {
  if (dtype == DType::Bool)
    throw TypeError(detail::concat(op, ": not supported for bool tensors"));
  return dispatch_dtype(dtype, std::forward<F>(fn));
}

}  // namespace mf
