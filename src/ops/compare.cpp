// Comparisons (eq ne lt le gt ge), logical and bitwise ops, isnan/isinf/
// isfinite. Comparisons and logical ops compare in the promoted dtype and
// return bool; none of these ops has a gradient.
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

// A bool-valued binary op over any input dtype (compared in acc_type).
OpDef predicate_op(const char* name) {
  return OpDef{
      .name = name,
      .inputs = {"input", "other"},
      .infer = [name](const TensorList& in, const Attrs&) { return infer_bool_result(name, in); },
      .differentiable = false,
      .elementwise = true,
  };
}

MF_REGISTER_OP(predicate_op("eq"));
MF_REGISTER_OP(predicate_op("ne"));
MF_REGISTER_OP(predicate_op("lt"));
MF_REGISTER_OP(predicate_op("le"));
MF_REGISTER_OP(predicate_op("gt"));
MF_REGISTER_OP(predicate_op("ge"));
MF_REGISTER_OP(predicate_op("logical_and"));
MF_REGISTER_OP(predicate_op("logical_or"));
MF_REGISTER_OP(predicate_op("logical_xor"));

// A bool-valued unary op over any input dtype.
OpDef unary_predicate_op(const char* name) {
  return OpDef{
      .name = name,
      .inputs = {"input"},
      .infer = infer_unary(name, [](DType) { return true; }, "any", DType::Bool),
      .differentiable = false,
      .elementwise = true,
  };
}

MF_REGISTER_OP(unary_predicate_op("logical_not"));
MF_REGISTER_OP(unary_predicate_op("isnan"));
MF_REGISTER_OP(unary_predicate_op("isinf"));
MF_REGISTER_OP(unary_predicate_op("isfinite"));

// Bitwise ops of bool and integer tensors; the result keeps the dtype.
// Shifts are defined for every amount as PyTorch defines them
// (functors::LeftShift, RightShift).
OpDef bitwise_op(const char* name, bool integer_only = false) {
  return OpDef{
      .name = name,
      .inputs = {"input", "other"},
      .infer = [name, integer_only](const TensorList& in, const Attrs&) {
        if (integer_only)
          MF_CHECK(is_integral(in[0].dtype()), TypeError, name, ": expected integer tensors, got ",
                   dtype_name(in[0].dtype()));
        else
          MF_CHECK(!is_floating(in[0].dtype()), TypeError, name, ": expected bool or integer tensors, got ",
                   dtype_name(in[0].dtype()));
        return infer_broadcast(name, in);
      },
      .differentiable = false,
      .elementwise = true,
  };
}

MF_REGISTER_OP(bitwise_op("bitwise_and"));
MF_REGISTER_OP(bitwise_op("bitwise_or"));
MF_REGISTER_OP(bitwise_op("bitwise_xor"));
MF_REGISTER_OP(bitwise_op("bitwise_left_shift", true));
MF_REGISTER_OP(bitwise_op("bitwise_right_shift", true));

MF_REGISTER_OP(OpDef{
    .name = "bitwise_not",
    .inputs = {"input"},
    .infer = infer_unary("bitwise_not", is_integral_or_bool, "a bool or integer"),
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
