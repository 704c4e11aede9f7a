// Broadcasting binary arithmetic: add, sub, mul, div (true, trunc, floor),
// remainder, and PyTorch's type promotion for them (Note [Type promotion] in
// dtype.cpp).
#include <cmath>

#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/ops/creation.h"
#include "ops/elementwise_common.h"

namespace mf {

using namespace elementwise_detail;

// --- promotion -----------------------------------------------------------------------

namespace {
enum class Category { Bool, Integral, Floating };
Category category(DType d) {
  return d == DType::Bool ? Category::Bool : is_floating(d) ? Category::Floating : Category::Integral;
}
// c10's combine_categories: a lower tier only matters when it is of a higher
// category than the higher tier.
DType combine(std::optional<DType> higher, DType lower) {
  if (!higher) return lower;
  if (category(lower) > category(*higher)) return promote_types(*higher, lower);
  return *higher;
}
}  // namespace

DType elementwise_detail::common_dtype(std::initializer_list<const Tensor*> tensors) {
  std::optional<DType> dim_result, zero_result;
  for (const Tensor* t : tensors) {
    auto& slot = t->dim() == 0 ? zero_result : dim_result;
    slot = slot ? promote_types(*slot, t->dtype()) : t->dtype();
  }
  if (!dim_result) return *zero_result;
  if (!zero_result) return *dim_result;
  return combine(dim_result, *zero_result);
}

DType result_type(const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return a.dtype();
  return common_dtype({&a, &b});
}

DType result_type(const Tensor& a, Scalar b) {
  DType wrapped = b.default_dtype();
  if (wrapped == DType::Float32) wrapped = default_dtype();
  return combine(a.dtype(), wrapped);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MF_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": the size of tensor a (", da,
             ") must match the size of tensor b (", db, ") at non-singleton dimension ", i,
             "; shapes ", shape_str(a), " and ", shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor scalar_tensor(Scalar s, std::optional<DType> dtype, Device device) {
  return full({}, s, {.dtype = dtype.value_or(s.default_dtype()), .device = device});
}

// --- ops -------------------------------------------------------------------------------

namespace {

std::vector<TensorMeta> infer_arith(const char* op, const TensorList& in) {
  MF_CHECK(in[0].dtype() != DType::Bool || std::string_view(op) == "add" || std::string_view(op) == "mul",
           TypeError, op, ": not supported for bool tensors");
  return infer_broadcast(op, in);
}

MF_REGISTER_OP(OpDef{
    .name = "add",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_arith("add", in); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      return TensorList{ctx.needs_input_grad[0] ? sum_to(g, ctx.input_metas[0].sizes) : Tensor(),
                        ctx.needs_input_grad[1] ? sum_to(g, ctx.input_metas[1].sizes) : Tensor()};
    },
    .inplace = true,
    .elementwise = true,
    .sbp = sbp::elementwise(sbp::Partial::All),
});

MF_REGISTER_OP(OpDef{
    .name = "sub",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_arith("sub", in); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      return TensorList{ctx.needs_input_grad[0] ? sum_to(g, ctx.input_metas[0].sizes) : Tensor(),
                        ctx.needs_input_grad[1] ? sum_to(neg(g), ctx.input_metas[1].sizes) : Tensor()};
    },
    .inplace = true,
    .elementwise = true,
    .sbp = sbp::elementwise(sbp::Partial::All),
});

MF_REGISTER_OP(OpDef{
    .name = "mul",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) { return infer_arith("mul", in); },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      return TensorList{ctx.needs_input_grad[0] ? sum_to(mul(g, ctx.inputs[1]), ctx.input_metas[0].sizes) : Tensor(),
                        ctx.needs_input_grad[1] ? sum_to(mul(g, ctx.inputs[0]), ctx.input_metas[1].sizes) : Tensor()};
    },
    .save_inputs = 0b11,
    .inplace = true,
    .elementwise = true,
    .sbp = sbp::elementwise(sbp::Partial::One),
});

// True division of floating tensors (the functional API casts integers).
MF_REGISTER_OP(OpDef{
    .name = "div",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(is_floating(in[0].dtype()), TypeError, "div: the div op takes floating inputs, got ",
               dtype_name(in[0].dtype()));
      return infer_broadcast("div", in);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      const Tensor& a = ctx.inputs[0];
      const Tensor& b = ctx.inputs[1];
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(div(g, b), ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1]) grads[1] = sum_to(neg(div(mul(g, a), mul(b, b))), ctx.input_metas[1].sizes);
      return grads;
    },
    .save_inputs = 0b11,
    .inplace = true,
    .elementwise = true,
    .sbp = sbp::elementwise(sbp::Partial::One, 0),
});

// Gradient of a piecewise-constant op: zero for every input that needs one.
TensorList zero_grads(const BackwardContext& ctx) {
  TensorList grads(ctx.input_metas.size());
  for (size_t i = 0; i < grads.size(); ++i)
    if (ctx.needs_input_grad[i])
      grads[i] = zeros(ctx.input_metas[i].sizes, {.dtype = ctx.input_metas[i].dtype, .device = ctx.input_metas[i].device});
  return grads;
}

// div with rounding_mode "trunc" or "floor" (attr "mode").
MF_REGISTER_OP(OpDef{
    .name = "div_rounding",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "div: rounding division is not supported for bool tensors");
      return infer_broadcast("div", in);
    },
    .backward = zero_grads,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "remainder",
    .inputs = {"input", "other"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "remainder: not supported for bool tensors");
      return infer_broadcast("remainder", in);
    },
    .backward = [](const BackwardContext& ctx) {
      const Tensor& g = ctx.grad_outputs[0];
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = sum_to(g, ctx.input_metas[0].sizes);
      if (ctx.needs_input_grad[1])
        grads[1] = sum_to(neg(mul(g, div(ctx.inputs[0], ctx.inputs[1], "floor"))), ctx.input_metas[1].sizes);
      return grads;
    },
    .save_inputs = 0b11,
    .elementwise = true,
});

MF_REGISTER_OP(OpDef{
    .name = "neg",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) {
      MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "neg: negation, the `-` operator, on a bool tensor is not supported");
      return infer_broadcast("neg", in);
    },
    .backward = [](const BackwardContext& ctx) { return TensorList{neg(ctx.grad_outputs[0])}; },
    .inplace = true,
    .elementwise = true,
    .sbp = sbp::elementwise(sbp::Partial::All),
});

const OpDef& op_add() { static const OpDef& op = dispatch::op("add"); return op; }
const OpDef& op_sub() { static const OpDef& op = dispatch::op("sub"); return op; }
const OpDef& op_mul() { static const OpDef& op = dispatch::op("mul"); return op; }
const OpDef& op_div() { static const OpDef& op = dispatch::op("div"); return op; }

bool is_one(Scalar s) { return s.to_double() == 1.0; }

void check_alpha(const char* op, DType dtype, Scalar alpha) {
  MF_CHECK(is_floating(dtype) || !alpha.is_floating(), TypeError, op,
           ": for integral input tensors, argument alpha must not be a floating point number");
}

// An in-place op keeps self's dtype, so the result type of (self, other) must
// cast to it without losing its kind (PyTorch's canCast: no float -> integer,
// nothing but bool -> bool).
void check_inplace_result(const char* op, DType result, DType self) {
  MF_CHECK(!(is_floating(result) && !is_floating(self)) && (result == DType::Bool || self != DType::Bool), TypeError,
           op, ": result type ", dtype_name(result), " can't be cast to the desired output type ", dtype_name(self));
}

Tensor scaled(const Tensor& b, Scalar alpha) { return is_one(alpha) ? b : mul(b, alpha); }

// b * alpha, keeping the kind of number (an int stays an int).
Scalar scale(Scalar b, Scalar alpha) {
  if (is_one(alpha)) return b;
  if (b.is_floating() || alpha.is_floating()) return Scalar(b.to_double() * alpha.to_double());
  return Scalar(b.to_int() * alpha.to_int());
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  DType dt = result_type(a, b);
  check_alpha("add", dt, alpha);
  return dispatch::apply_one(op_add(), {to(a, dt), to(scaled(b, alpha), dt)});
}
Tensor add(const Tensor& a, Scalar b, Scalar alpha) {
  DType dt = result_type(a, b);
  return dispatch::apply_one(op_add(), {to(a, dt), scalar_tensor(scale(b, alpha), dt, a.device())});
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  DType dt = result_type(a, b);
  check_alpha("sub", dt, alpha);
  return dispatch::apply_one(op_sub(), {to(a, dt), to(scaled(b, alpha), dt)});
}
// As PyTorch: a bool operand of a subtraction is an error, also as a number.
static void check_no_bool_subtrahend(Scalar s) {
  MF_CHECK(!s.is_bool(), TypeError, "sub: subtraction, the `-` operator, with a bool is not supported; "
           "to invert a mask use the `~` or `logical_not()` operator instead");
}
Tensor sub(const Tensor& a, Scalar b, Scalar alpha) {
  check_no_bool_subtrahend(b);
  DType dt = result_type(a, b);
  return dispatch::apply_one(op_sub(), {to(a, dt), scalar_tensor(scale(b, alpha), dt, a.device())});
}
Tensor rsub(const Tensor& a, Scalar b) {
  check_no_bool_subtrahend(b);
  DType dt = result_type(a, b);
  return dispatch::apply_one(op_sub(), {scalar_tensor(b, dt, a.device()), to(a, dt)});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  DType dt = result_type(a, b);
  return dispatch::apply_one(op_mul(), {to(a, dt), to(b, dt)});
}
Tensor mul(const Tensor& a, Scalar b) {
  DType dt = result_type(a, b);
  return dispatch::apply_one(op_mul(), {to(a, dt), scalar_tensor(b, dt, a.device())});
}
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  MF_CHECK(rounding_mode.empty() || rounding_mode == "trunc" || rounding_mode == "floor", ValueError,
           "div: expected rounding_mode to be one of None, 'trunc', or 'floor', got '", rounding_mode, "'");
  if (!rounding_mode.empty()) {
    static const OpDef& op = dispatch::op("div_rounding");
    DType dt = result_type(a, b);
    return dispatch::apply_one(op, {to(a, dt), to(b, dt)}, {{"mode", rounding_mode}});
  }
  DType dt = floating_result(result_type(a, b));
  return dispatch::apply_one(op_div(), {to(a, dt), to(b, dt)});
}
Tensor div(const Tensor& a, Scalar b, const std::string& rounding_mode) {
  DType dt = result_type(a, b);
  return div(a, scalar_tensor(b, dt, a.device()), rounding_mode);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) { return div(a, b, "floor"); }
Tensor remainder(const Tensor& a, const Tensor& b) {
  static const OpDef& op = dispatch::op("remainder");
  DType dt = result_type(a, b);
  return dispatch::apply_one(op, {to(a, dt), to(b, dt)});
}
Tensor remainder(const Tensor& a, Scalar b) {
  DType dt = result_type(a, b);
  return remainder(a, scalar_tensor(b, dt, a.device()));
}
Tensor neg(const Tensor& t) {
  static const OpDef& op = dispatch::op("neg");
  return dispatch::apply_one(op, {t});
}

Tensor& add_(Tensor& t, const Tensor& b, Scalar alpha) {
  check_alpha("add_", t.dtype(), alpha);
  check_inplace_result("add_", result_type(t, b), t.dtype());
  dispatch::apply_inplace(op_add(), {t, to(scaled(b, alpha), t.dtype())});
  return t;
}
Tensor& add_(Tensor& t, Scalar b, Scalar alpha) {
  check_inplace_result("add_", result_type(t, b), t.dtype());
  return add_(t, scalar_tensor(scale(b, alpha), t.dtype(), t.device()));
}
Tensor& sub_(Tensor& t, const Tensor& b, Scalar alpha) {
  check_alpha("sub_", t.dtype(), alpha);
  check_inplace_result("sub_", result_type(t, b), t.dtype());
  dispatch::apply_inplace(op_sub(), {t, to(scaled(b, alpha), t.dtype())});
  return t;
}
Tensor& sub_(Tensor& t, Scalar b, Scalar alpha) {
  check_no_bool_subtrahend(b);
  check_inplace_result("sub_", result_type(t, b), t.dtype());
  return sub_(t, scalar_tensor(scale(b, alpha), t.dtype(), t.device()));
}
Tensor& mul_(Tensor& t, const Tensor& b) {
  check_inplace_result("mul_", result_type(t, b), t.dtype());
  dispatch::apply_inplace(op_mul(), {t, to(b, t.dtype())});
  return t;
}
Tensor& mul_(Tensor& t, Scalar b) {
  check_inplace_result("mul_", result_type(t, b), t.dtype());
  return mul_(t, scalar_tensor(b, t.dtype(), t.device()));
}
Tensor& div_(Tensor& t, const Tensor& b) {
  MF_CHECK(is_floating(t.dtype()), TypeError, "div_: result type Float can't be cast to the desired output type ",
           dtype_name(t.dtype()));
  dispatch::apply_inplace(op_div(), {t, to(b, t.dtype())});
  return t;
}
Tensor& div_(Tensor& t, Scalar b) { return div_(t, scalar_tensor(b, t.dtype(), t.device())); }
Tensor& neg_(Tensor& t) {
  static const OpDef& op = dispatch::op("neg");
  dispatch::apply_inplace(op, {t});
  return t;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(Scalar a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(Scalar a, const Tensor& b) {
  DType dt = floating_result(result_type(b, a));
  return div(scalar_tensor(a, dt, b.device()), b);
}
Tensor operator-(const Tensor& t) { return neg(t); }

}  // namespace mf
