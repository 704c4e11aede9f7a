// Comparisons (eq ne lt le gt ge), logical and bitwise ops, isnan/isinf/
// isfinite. Comparisons and logical ops compare in the promoted dtype and
// return bool; none of these ops has a gradient.
#include <cmath>
#include <functional>

#include "ops/elementwise_common.h"
#include "meshflow/autograd.h"
#include "meshflow/distributed/global.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/compare.h"
#include "meshflow/ops/reduce.h"

namespace mf {

using namespace elementwise_detail;

namespace {

std::vector<TensorMeta> infer_bool_result(const char* op, const TensorList& in) {
  return infer_broadcast(op, in, DType::Bool);
}

// A bool-valued binary op over any input dtype: out = f(a, b) in acc_type.
template <typename F>
OpDef predicate_op(const char* name, F f) {
  return OpDef{
      .name = name,
      .inputs = {"input", "other"},
      .infer = [name](const TensorList& in, const Attrs&) { return infer_bool_result(name, in); },
      .cpu_kernel = [f](const TensorList& in, TensorList& out, const Attrs&) {
        dispatch_dtype(in[0].dtype(), [&]<typename T>() {
          using K = kernel_type<T>;
          using A = acc_type<K>;
          binary_loop<bool, K, K>(out[0], in[0], in[1], [&](K a, K b) { return f(A(a), A(b)); });
        });
      },
      .differentiable = false,
      .elementwise = true,
  };
}

MF_REGISTER_OP(predicate_op("eq", std::equal_to<>()));
MF_REGISTER_OP(predicate_op("ne", std::not_equal_to<>()));
MF_REGISTER_OP(predicate_op("lt", std::less<>()));
MF_REGISTER_OP(predicate_op("le", std::less_equal<>()));
MF_REGISTER_OP(predicate_op("gt", std::greater<>()));
MF_REGISTER_OP(predicate_op("ge", std::greater_equal<>()));
MF_REGISTER_OP(predicate_op("logical_and", [](auto a, auto b) { return (a != 0) && (b != 0); }));
MF_REGISTER_OP(predicate_op("logical_or", [](auto a, auto b) { return (a != 0) || (b != 0); }));
MF_REGISTER_OP(predicate_op("logical_xor", [](auto a, auto b) { return (a != 0) != (b != 0); }));

// A bool-valued unary op over any input dtype.
template <typename F>
OpDef unary_predicate_op(const char* name, F f) {
  return OpDef{
      .name = name,
      .inputs = {"input"},
      .infer = infer_unary(name, [](DType) { return true; }, "any", DType::Bool),
      .cpu_kernel = [f](const TensorList& in, TensorList& out, const Attrs&) {
        dispatch_dtype(in[0].dtype(), [&]<typename T>() {
          using K = kernel_type<T>;
          using A = acc_type<K>;
          cpu::elementwise<bool, K>(out[0], {&in[0]}, [&](K a) { return f(A(a)); });
        });
      },
      .differentiable = false,
      .elementwise = true,
  };
}

MF_REGISTER_OP(unary_predicate_op("logical_not", [](auto a) { return a == 0; }));
MF_REGISTER_OP(unary_predicate_op("isnan", [](auto a) {
  if constexpr (std::is_floating_point_v<decltype(a)>) return std::isnan(a);
  else return false;
}));
MF_REGISTER_OP(unary_predicate_op("isinf", [](auto a) {
  if constexpr (std::is_floating_point_v<decltype(a)>) return std::isinf(a);
  else return false;
}));
MF_REGISTER_OP(unary_predicate_op("isfinite", [](auto a) {
  if constexpr (std::is_floating_point_v<decltype(a)>) return std::isfinite(a);
  else return true;
}));

// Bitwise ops of bool and integer tensors; the result keeps the dtype.
template <typename F>
KernelFn bitwise_kernel(const char* name, F f) {
  return [f, name](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() {
      using K = kernel_type<T>;
      if constexpr (!is_floating_type_v<T>)
        binary_loop<K, K, K>(out[0], in[0], in[1], [&](K a, K b) { return K(f(a, b)); });
      else
        throw TypeError(detail::concat(name, ": expected bool or integer tensors, got ", dtype_name(in[0].dtype())));
    });
  };
}

OpDef bitwise_op(const char* name, KernelFn kernel) {
  return OpDef{
      .name = name,
      .inputs = {"input", "other"},
      .infer = [name](const TensorList& in, const Attrs&) {
        MF_CHECK(!is_floating(in[0].dtype()), TypeError, name, ": expected bool or integer tensors, got ",
                 dtype_name(in[0].dtype()));
        return infer_broadcast(name, in);
      },
      .cpu_kernel = std::move(kernel),
      .differentiable = false,
      .elementwise = true,
  };
}

MF_REGISTER_OP(bitwise_op("bitwise_and", bitwise_kernel("bitwise_and", [](auto a, auto b) { return a & b; })));
MF_REGISTER_OP(bitwise_op("bitwise_or", bitwise_kernel("bitwise_or", [](auto a, auto b) { return a | b; })));
MF_REGISTER_OP(bitwise_op("bitwise_xor", bitwise_kernel("bitwise_xor", [](auto a, auto b) { return a ^ b; })));

// Shifts as PyTorch defines them for every amount (C++ leaves amounts that
// are negative or not below the bit width undefined): such a left shift gives
// 0, such a right shift fills with the sign bit.
struct LeftShift {
  template <typename T>
  T operator()(T a, T b) const {
    constexpr auto bits = int64_t(sizeof(T) * 8);
    if (std::make_signed_t<T>(b) < 0 || int64_t(b) >= bits) return T(0);
    return T(std::make_unsigned_t<T>(a) << b);
  }
};
struct RightShift {
  template <typename T>
  T operator()(T a, T b) const {
    constexpr auto max_shift = int64_t(sizeof(T) * 8) - int64_t(std::is_signed_v<T>);
    if (std::make_signed_t<T>(b) < 0 || int64_t(b) >= max_shift) return T(a >> max_shift);
    return T(a >> b);
  }
};

// Integer-only: a shift of bools has no meaning.
template <typename F>
KernelFn shift_kernel(const char* name, F f) {
  return [f, name](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
        binary_loop<T, T, T>(out[0], in[0], in[1], [&](T a, T b) { return f(a, b); });
      else
        throw TypeError(detail::concat(name, ": expected integer tensors, got ", dtype_name(in[0].dtype())));
    });
  };
}

OpDef shift_op(const char* name, KernelFn kernel) {
  OpDef def = bitwise_op(name, std::move(kernel));
  def.infer = [name](const TensorList& in, const Attrs&) {
    MF_CHECK(is_integral(in[0].dtype()), TypeError, name, ": expected integer tensors, got ",
             dtype_name(in[0].dtype()));
    return infer_broadcast(name, in);
  };
  return def;
}

MF_REGISTER_OP(shift_op("bitwise_left_shift", shift_kernel("bitwise_left_shift", LeftShift{})));
MF_REGISTER_OP(shift_op("bitwise_right_shift", shift_kernel("bitwise_right_shift", RightShift{})));

MF_REGISTER_OP(OpDef{
    .name = "bitwise_not",
    .inputs = {"input"},
    .infer = infer_unary("bitwise_not", is_integral_or_bool, "a bool or integer"),
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs&) {
      dispatch_dtype(in[0].dtype(), [&]<typename T>() {
        if constexpr (std::is_same_v<T, bool>)
          cpu::elementwise<uint8_t, uint8_t>(out[0], {&in[0]}, [](uint8_t a) { return uint8_t(a ^ 1u); });
        else if constexpr (!is_floating_type_v<T>)
          cpu::elementwise<T, T>(out[0], {&in[0]}, [](T a) { return T(~a); });
        else
          throw TypeError(detail::concat("bitwise_not: expected a bool or integer tensor, got ",
                                         dtype_name(in[0].dtype())));
      });
    },
    .differentiable = false,
    .elementwise = true,
});

// Both operands in their common dtype (a Scalar as a 0-d tensor of it).
Tensor apply_promoted(const OpDef& op, const Tensor& a, const Tensor& b) {
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}
Tensor apply_promoted(const OpDef& op, const Tensor& a, Scalar b) {
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), scalar_tensor(b, dt, a.device())});
}

}  // namespace

#define MF_DEFINE_BINARY(name)                                   \
  Tensor name(const Tensor& a, const Tensor& b) {                \
    static const OpDef& op = dispatch::op(#name);                \
    return apply_promoted(op, a, b);                             \
  }
#define MF_DEFINE_COMPARISON(name)                               \
  MF_DEFINE_BINARY(name)                                         \
  Tensor name(const Tensor& a, Scalar b) {                       \
    static const OpDef& op = dispatch::op(#name);                \
    return apply_promoted(op, a, b);                             \
  }

MF_DEFINE_COMPARISON(eq)
MF_DEFINE_COMPARISON(ne)
MF_DEFINE_COMPARISON(lt)
MF_DEFINE_COMPARISON(le)
MF_DEFINE_COMPARISON(gt)
MF_DEFINE_COMPARISON(ge)
MF_DEFINE_BINARY(logical_and)
MF_DEFINE_BINARY(logical_or)
MF_DEFINE_BINARY(logical_xor)
MF_DEFINE_BINARY(bitwise_and)
MF_DEFINE_BINARY(bitwise_or)
MF_DEFINE_BINARY(bitwise_xor)
MF_DEFINE_COMPARISON(bitwise_left_shift)
MF_DEFINE_COMPARISON(bitwise_right_shift)

#undef MF_DEFINE_COMPARISON
#undef MF_DEFINE_BINARY

Tensor logical_not(const Tensor& t) {
  static const OpDef& op = dispatch::op("logical_not");
  return dispatch::apply_one(op, {t});
}
Tensor bitwise_not(const Tensor& t) {
  static const OpDef& op = dispatch::op("bitwise_not");
  return dispatch::apply_one(op, {t});
}
Tensor isnan(const Tensor& t) {
  static const OpDef& op = dispatch::op("isnan");
  return dispatch::apply_one(op, {t});
}
Tensor isinf(const Tensor& t) {
  static const OpDef& op = dispatch::op("isinf");
  return dispatch::apply_one(op, {t});
}
Tensor isfinite(const Tensor& t) {
  static const OpDef& op = dispatch::op("isfinite");
  return dispatch::apply_one(op, {t});
}

}  // namespace mf

// --- closeness and equality (meshflow/ops/compare.h) ----------------------------------------

namespace mf {

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  MF_CHECK(a.defined() && b.defined(), ValueError, "isclose: input and other must be defined tensors");
  MF_CHECK(a.dtype() == b.dtype(), TypeError, "isclose: input and other must have the same dtype, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  MF_CHECK(rtol >= 0, ValueError, "isclose: rtol must be greater than or equal to zero, got ", rtol);
  MF_CHECK(atol >= 0, ValueError, "isclose: atol must be greater than or equal to zero, got ", atol);
  NoGradGuard no_grad;
  Tensor close = eq(a, b);
  if (a.dtype() == DType::Bool) return close;
  const bool floating = is_floating(a.dtype());
  if (equal_nan && floating) close = logical_or(close, logical_and(isnan(a), isnan(b)));
  if (rtol == 0 && atol == 0) return close;
  // Integers are compared in float64: |a - b| may not fit their type.
  const Tensor x = floating ? a : to(a, DType::Float64), y = floating ? b : to(b, DType::Float64);
  const Tensor diff = abs(sub(x, y));
  const Tensor allowed = add(mul(abs(y), Scalar(rtol)), Scalar(atol));
  return logical_or(close, logical_and(isfinite(diff), le(diff, allowed)));
}

namespace {

// The value of a 0-d bool result; a global one is broadcast first, so every
// rank of its placement gets the same answer.
bool truth(const Tensor& r) {
  if (!r.is_global()) return r.item().to_bool();
  const Tensor whole = global_to_local(
      global_to_global(r, placement_of(r), NdSbp(size_t(placement_of(r).ndim()), Sbp::broadcast())));
  MF_CHECK(whole.defined(), ValueError, "allclose/equal: this rank is not in the inputs' placement");
  return whole.item().to_bool();
}

}  // namespace

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return truth(all(isclose(a, b, rtol, atol, equal_nan)));
}

bool equal(const Tensor& a, const Tensor& b) {
  MF_CHECK(a.defined() && b.defined(), ValueError, "equal: input and other must be defined tensors");
  if (a.sizes() != b.sizes()) return false;
  NoGradGuard no_grad;
  return truth(all(eq(a, b)));
}

}  // namespace mf
