// A number passed where a tensor could be: bool, integer or floating.
#pragma once

#include <cstdint>
#include <string>

#include "meshflow/dtype.h"

namespace mf {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
  Scalar() : Scalar(int64_t(0)) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}                  // NOLINT
  Scalar(int v) : kind_(Kind::Int), i_(v) {}                    // NOLINT
  Scalar(int64_t v) : kind_(Kind::Int), i_(v) {}                // NOLINT
  Scalar(long long v) : kind_(Kind::Int), i_(int64_t(v)) {}     // NOLINT
  Scalar(double v) : kind_(Kind::Float), d_(v) {}               // NOLINT
  Scalar(float v) : kind_(Kind::Float), d_(v) {}                // NOLINT

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return kind_ == Kind::Float ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? int64_t(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::Float ? d_ != 0 : i_ != 0; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (is_floating_type_v<T>) return T(float_value<T>());
    else return kind_ == Kind::Float ? T(d_) : T(i_);
  }
  // The dtype a Python number of this kind gets: bool, int64 or float32.
  DType default_dtype() const {
    return kind_ == Kind::Bool ? DType::Bool : kind_ == Kind::Int ? DType::Int64 : DType::Float32;
  }
  std::string str() const;
  bool operator==(const Scalar& o) const {
    return kind_ == o.kind_ && (kind_ == Kind::Float ? d_ == o.d_ : i_ == o.i_);
  }

 private:
  template <typename T>
  auto float_value() const {
    if constexpr (std::is_same_v<T, double>) return to_double();
    else return float(to_double());
  }
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

}  // namespace mf
