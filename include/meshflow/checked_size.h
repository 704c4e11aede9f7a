// Overflow-checked size arithmetic (Note [Checked sizes]).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "meshflow/dtype.h"
#include "meshflow/error.h"
#include "meshflow/small_vector.h"

namespace mf {

// Sizes and strides (Note [Inline shapes] in small_vector.h).
using Shape = SmallVector<int64_t, 6>;

// Note [Checked sizes]: sizes, strides, paddings and repeat counts come from
// users, and a product that wraps around int64 turns a refused request into
// a small allocation that a kernel then writes past. So every size that user
// input reaches is computed with these helpers, which throw ShapeError
// naming the op and the quantity instead of wrapping, and every tensor's
// shape passes checked_numel: each dim is non-negative and the product of
// the dims (empty dims counted as 1, so contiguous strides and every index
// a kernel forms fit too) fits in int64. checked_nbytes adds the element
// size. The dispatcher checks each op's inferred output shapes this way
// before allocating, so a wrong size is an error naming the op, never a
// buffer of the wrong length.
[[noreturn]] void throw_size_overflow(std::string_view op, std::string_view what, int64_t a, char sign,
                                      int64_t b);

inline int64_t checked_mul(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]]
    throw_size_overflow(op, what, a, '*', b);
  return r;
}
inline int64_t checked_add(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]]
    throw_size_overflow(op, what, a, '+', b);
  return r;
}
inline int64_t checked_sub(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) [[unlikely]]
    throw_size_overflow(op, what, a, '-', b);
  return r;
}

// The number of elements of shape. Throws ValueError for a negative dim and
// ShapeError when the dims' product (empty dims as 1) overflows int64.
int64_t checked_numel(const Shape& shape, std::string_view op);
// checked_numel(shape) * itemsize(dtype), checked the same way.
int64_t checked_nbytes(const Shape& shape, DType dtype, std::string_view op);

// Refuses, as an allocation of that size would be, a request whose host
// memory (bytes, for `what`) exceeds what this process may use: the
// machine's memory, or a lower address-space limit. For requests made of
// many small pieces (views, layers' parameters), which would otherwise fill
// memory one piece at a time. Throws OutOfMemoryError.
void check_host_memory(std::string_view op, double bytes, std::string_view what);

}  // namespace mf
