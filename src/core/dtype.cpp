#include "meshflow/dtype.h"

#include <array>
#include <ostream>
#include <utility>

namespace mf {

namespace {
constexpr std::array<const char*, kNumDTypes> kNames = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
};
}  // namespace

const char* dtype_name(DType dtype) { return kNames[size_t(dtype)]; }
std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

DType dtype_from_name(const std::string& raw) {
  std::string name = raw.rfind("torch.", 0) == 0 ? raw.substr(6) : raw;
  if (name.rfind("meshflow.", 0) == 0) name = name.substr(9);
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kNames[i]) return DType(i);
  static const std::pair<const char*, DType> kAliases[] = {
      {"float", DType::Float32},  {"double", DType::Float64}, {"half", DType::Float16},
      {"long", DType::Int64},     {"int", DType::Int32},      {"short", DType::Int16},
      {"bf16", DType::BFloat16},  {"fp16", DType::Float16},   {"fp32", DType::Float32},
  };
  for (const auto& [alias, d] : kAliases)
    if (name == alias) return d;
  throw TypeError("dtype: unknown dtype name '" + raw + "'");
}

// Note [Type promotion]: the lattice of PyTorch's promoteTypes restricted to
// meshflow's dtypes. Rows and columns follow the DType enum order.
DType promote_types(DType a, DType b) {
  if (a == b) return a;
  constexpr DType b1 = DType::Bool, u1 = DType::UInt8, i1 = DType::Int8, i2 = DType::Int16,
                  i4 = DType::Int32, i8 = DType::Int64, f2 = DType::Float16, bf = DType::BFloat16,
                  f4 = DType::Float32, f8 = DType::Float64;
  static constexpr DType kTable[kNumDTypes][kNumDTypes] = {
      /*        b1  u1  i1  i2  i4  i8  f2  bf  f4  f8 */
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  return kTable[size_t(a)][size_t(b)];
}

}  // namespace mf
