// The elementwise ops' kernels, written once over a backend's loops
// (Note [Shared elementwise math] in elementwise_functors.h): dtype dispatch,
// attributes and the choice of functor. A backend instantiates the table
// with its loops L and registers it for its device type:
//
//   L::Math                                  the backend's math (see the note)
//   L::run<Out, In...>(out, {&a, ...}, f)    out[i] = Out(f(a[i], ...)) over
//                                            broadcast, strided operands
//   L::run_indexed<Out>(out, f)              out[i] = Out(f(i)), out contiguous
//   L::copy_cast(dst, src)                   optional: the backend's own copy
//
// The ops' schemas, inference, backward and functional API live in
// src/ops/ (unary.cpp, unary_math.cpp, activation.cpp, binary.cpp, pow.cpp,
// ternary.cpp, compare.cpp, copy.cpp, creation.cpp).
#pragma once

#include "backend/common/elementwise_functors.h"
#include "backend/common/scratch.h"
#include "backend/common/strided_operands.h"
#include "meshflow/op_def.h"

namespace mf::elementwise_kernels {

using functors::InAcc;

// out = F(in) in acc_type<T>, for the dtypes `dispatch` accepts.
template <typename L, typename F>
void unary(const Tensor& in, Tensor& out, F f) {
  dispatch_dtype(in.dtype(), [&]<typename T>() {
    using K = kernel_type<T>;
    L::template run<K, K>(out, {&in}, InAcc<acc_type<K>, F>{f});
  });
}

template <typename L, typename F>
void floating_unary(const char* name, const Tensor& in, Tensor& out) {
  dispatch_floating(in.dtype(), name, [&]<typename T>() {
    L::template run<T, T>(out, {&in}, InAcc<acc_type<T>, F>{F{}});
  });
}

template <typename L, typename F>
KernelFn floating_unary(const char* name) {
  return [name](const TensorList& in, TensorList& out, const Attrs&) { floating_unary<L, F>(name, in[0], out[0]); };
}

// A floating unary functor that make(std::type_identity<A>{}, attrs) builds
// for the compute type A from the attributes.
template <typename L, typename MakeF>
KernelFn floating_unary_with(const char* name, MakeF make) {
  return [name, make](const TensorList& in, TensorList& out, const Attrs& attrs) {
    dispatch_floating(in[0].dtype(), name, [&]<typename T>() {
      using A = acc_type<T>;
      const auto f = make(std::type_identity<A>{}, attrs);
      L::template run<T, T>(out[0], {&in[0]}, InAcc<A, decltype(f)>{f});
    });
  };
}

// Every dtype (the op's inference has refused the ones it does not take).
template <typename L, typename F>
KernelFn any_unary() {
  return [](const TensorList& in, TensorList& out, const Attrs&) { unary<L>(in[0], out[0], F{}); };
}

template <typename L, typename F>
KernelFn floating_binary(const char* name) {
  return [name](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_floating(in[0].dtype(), name, [&]<typename T>() {
      L::template run<T, T, T>(out[0], {&in[0], &in[1]}, InAcc<acc_type<T>, F>{F{}});
    });
  };
}

template <typename L, typename F>
void binary(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  dispatch_dtype(a.dtype(), [&]<typename T>() {
    using K = kernel_type<T>;
    L::template run<K, K, K>(out, {&a, &b}, InAcc<acc_type<K>, F>{f});
  });
}

template <typename L, typename F>
KernelFn any_binary() {
  return [](const TensorList& in, TensorList& out, const Attrs&) { binary<L>(in[0], in[1], out[0], F{}); };
}

// add and mul: or and and for bool tensors.
template <typename L, typename F, typename BoolF>
KernelFn arithmetic() {
  return [](const TensorList& in, TensorList& out, const Attrs&) {
    if (in[0].dtype() == DType::Bool) L::template run<uint8_t, uint8_t, uint8_t>(out[0], {&in[0], &in[1]}, BoolF{});
    else binary<L>(in[0], in[1], out[0], F{});
  };
}

// Bool-valued ops over every input dtype, compared in acc_type.
template <typename L, typename F>
KernelFn predicate() {
  return [](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() {
      using K = kernel_type<T>;
      if constexpr (requires { F{}(K(), K()); })
        L::template run<bool, K, K>(out[0], {&in[0], &in[1]}, InAcc<acc_type<K>, F>{F{}});
      else
        L::template run<bool, K>(out[0], {&in[0]}, InAcc<acc_type<K>, F>{F{}});
    });
  };
}

// Bitwise ops of bool and integer tensors (kIntegerOnly: shifts, which have
// no meaning for bool); the result keeps the dtype.
template <typename L, typename F, bool kIntegerOnly = false>
KernelFn bitwise(const char* name) {
  return [name](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() {
      using K = kernel_type<T>;
      constexpr bool accepted = kIntegerOnly ? std::is_integral_v<T> && !std::is_same_v<T, bool> : !is_floating_type_v<T>;
      if constexpr (accepted)
        L::template run<K, K, K>(out[0], {&in[0], &in[1]}, F{});
      else
        throw TypeError(detail::concat(name, ": expected ", kIntegerOnly ? "integer" : "bool or integer",
                                       " tensors, got ", dtype_name(in[0].dtype())));
    });
  };
}

// addcmul (input + value * t1 * t2) and addcdiv (input + value * t1 / t2).
template <typename L, bool kDivide>
void addc(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Scalar value = attrs.get_scalar("value");
  dispatch_numeric(in[0].dtype(), kDivide ? "addcdiv" : "addcmul", [&]<typename T>() {
    using A = acc_type<T>;
    const std::array<const Tensor*, 3> operands{&in[0], &in[1], &in[2]};
    if constexpr (kDivide) L::template run<T, T, T, T>(out[0], operands, InAcc<A, functors::AddcDiv<A>>{{value.to<A>()}});
    else L::template run<T, T, T, T>(out[0], operands, InAcc<A, functors::AddcMul<A>>{{value.to<A>()}});
  });
}

template <typename L>
void gelu(const Tensor& x, Tensor& y, const Attrs& attrs) {
  using M = typename L::Math;
  if (attrs.get_string("approximate") == "tanh") floating_unary<L, functors::GeluTanh<M>>("gelu", x, y);
  else floating_unary<L, functors::GeluErf<M>>("gelu", x, y);
}

template <typename L>
void gelu_backward(const Tensor& g, const Tensor& x, Tensor& dx, const Attrs& attrs) {
  using M = typename L::Math;
  const bool tanh_form = attrs.get_string("approximate") == "tanh";
  dispatch_floating(x.dtype(), "gelu_backward", [&]<typename T>() {
    using A = acc_type<T>;
    if (tanh_form) L::template run<T, T, T>(dx, {&g, &x}, InAcc<A, functors::GeluBackwardTanh<M>>{});
    else L::template run<T, T, T>(dx, {&g, &x}, InAcc<A, functors::GeluBackwardErf<M>>{});
  });
}

// dst = src broadcast to dst's shape and converted to its dtype. A backend
// with a copy of its own (the CPU's transposing and vectorised conversions)
// provides L::copy_cast; otherwise one elementwise loop: the bits as
// unsigned integers of the element's size within one dtype, Convert between
// two.
template <typename L>
void copy_cast(Tensor& dst, const Tensor& src) {
  if constexpr (requires { L::copy_cast(dst, src); }) {
    L::copy_cast(dst, src);
  } else if (dst.dtype() == src.dtype()) {
    switch (dst.element_size()) {
      case 1: return L::template run<uint8_t, uint8_t>(dst, {&src}, functors::Identity{});
      case 2: return L::template run<uint16_t, uint16_t>(dst, {&src}, functors::Identity{});
      case 4: return L::template run<uint32_t, uint32_t>(dst, {&src}, functors::Identity{});
      case 8: return L::template run<uint64_t, uint64_t>(dst, {&src}, functors::Identity{});
      default: throw Error(detail::concat("copy: no copy for elements of ", dst.element_size(), " bytes"));
    }
  } else {
    dispatch_dtype(dst.dtype(), [&]<typename D>() {
      dispatch_dtype(src.dtype(), [&]<typename S>() {
        using KS = kernel_type<S>;
        if constexpr (!std::is_same_v<D, S>)
          L::template run<kernel_type<D>, KS>(dst, {&src}, functors::Convert<D, KS>{});
      });
    });
  }
}

// t itself when contiguous, else a contiguous copy in the kernel's scratch
// (add_dense in scratch.h sizes it).
template <typename L>
Tensor dense(const Tensor& t, Scratch& taken) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = taken.take(t.sizes(), t.dtype());
  copy_cast<L>(c, t);
  return c;
}

template <typename L>
void fill(Tensor& out, Scalar value) {
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    L::template run<kernel_type<T>>(out, {}, functors::Constant<kernel_type<T>>{kernel_type<T>(value.to<T>())});
  });
}

// out (contiguous) = F<T>(i) for each flat index i; make(type_identity<T>)
// builds the functor.
template <typename L, typename MakeF>
void fill_indexed(Tensor& out, MakeF make) {
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    const auto f = make(std::type_identity<T>{});
    L::template run_indexed<kernel_type<T>>(out, f);
  });
}

template <typename L>
void register_all(DeviceType device) {
  using M = typename L::Math;
  using namespace functors;
  auto set = [device](const char* op, KernelFn kernel) {
    OpRegistry::instance().set_kernel(op, device, std::move(kernel));
  };

  // unary.cpp
  set("exp", floating_unary<L, Exp<M>>("exp"));
  set("log", floating_unary<L, Log<M>>("log"));
  set("log1p", floating_unary<L, Log1p<M>>("log1p"));
  set("expm1", floating_unary<L, Expm1<M>>("expm1"));
  set("sqrt", floating_unary<L, Sqrt<M>>("sqrt"));
  set("rsqrt", floating_unary<L, Rsqrt<M>>("rsqrt"));
  set("reciprocal", floating_unary<L, Reciprocal<M>>("reciprocal"));
  set("sin", floating_unary<L, Sin<M>>("sin"));
  set("cos", floating_unary<L, Cos<M>>("cos"));
  set("tanh", floating_unary<L, Tanh<M>>("tanh"));
  set("sigmoid", floating_unary<L, Sigmoid<M>>("sigmoid"));
  set("erf", floating_unary<L, Erf<M>>("erf"));
  set("floor", floating_unary<L, Floor<M>>("floor"));
  set("ceil", floating_unary<L, Ceil<M>>("ceil"));
  set("round", floating_unary<L, Round<M>>("round"));
  set("trunc", floating_unary<L, Trunc<M>>("trunc"));
  set("abs", [](const TensorList& in, TensorList& out, const Attrs&) {
    MF_CHECK(in[0].dtype() != DType::Bool, TypeError, "abs: not supported for bool tensors");
    unary<L>(in[0], out[0], Abs<M>{});
  });
  set("sign", any_unary<L, Sign>());

  // activation.cpp
  set("relu", any_unary<L, Relu>());
  set("silu", floating_unary<L, Silu<M>>("silu"));
  set("gelu", [](const TensorList& in, TensorList& out, const Attrs& attrs) { gelu<L>(in[0], out[0], attrs); });
  set("gelu_backward", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    gelu_backward<L>(in[0], in[1], out[0], attrs);
  });
  // (grad * gelu'(x), gelu(x)) (Note [GELU with its gradient] in
  // graph/fusion.h): the two ops' own loops over the block, so each output
  // has the bits of its op however the compiler contracts multiplies and
  // adds into FMAs (one loop sharing erf would round differently). gelu
  // runs first: output 0 may overwrite an input in place (graph/passes.cpp
  // run_in_place), output 1 never does.
  set("gelu_with_backward", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    gelu<L>(in[1], out[1], attrs);
    gelu_backward<L>(in[0], in[1], out[0], attrs);
  });
  set("leaky_relu", floating_unary_with<L>("leaky_relu", []<typename A>(std::type_identity<A>, const Attrs& attrs) {
        return LeakyRelu<M, A>{A(attrs.get_float("negative_slope"))};
      }));
  set("elu", floating_unary_with<L>("elu", []<typename A>(std::type_identity<A>, const Attrs& attrs) {
        return Elu<M, A>{A(attrs.get_float("alpha"))};
      }));
  set("softplus", floating_unary_with<L>("softplus", []<typename A>(std::type_identity<A>, const Attrs& attrs) {
        return Softplus<M, A>{A(attrs.get_float("beta")), A(attrs.get_float("threshold"))};
      }));
  // Attrs "min" and "max" are present only for the bounds given.
  set("clamp", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const bool has_min = attrs.has("min"), has_max = attrs.has("max");
    dispatch_numeric(in[0].dtype(), "clamp", [&]<typename T>() {
      using A = acc_type<T>;
      const A lo = has_min ? attrs.get_scalar("min").to<A>() : A(0);
      const A hi = has_max ? attrs.get_scalar("max").to<A>() : A(0);
      if (has_min && has_max) L::template run<T, T>(out[0], {&in[0]}, InAcc<A, ClampBoth<A>>{{lo, hi}});
      else if (has_min) L::template run<T, T>(out[0], {&in[0]}, InAcc<A, ClampLow<A>>{{lo}});
      else L::template run<T, T>(out[0], {&in[0]}, InAcc<A, ClampHigh<A>>{{hi}});
    });
  });
  set("clamp_min_tensor", any_binary<L, ClampLowBy>());
  set("clamp_max_tensor", any_binary<L, ClampHighBy>());

  // binary.cpp
  set("add", arithmetic<L, Add, BitOr>());
  set("mul", arithmetic<L, Mul, BitAnd>());
  set("sub", any_binary<L, Sub>());
  set("neg", any_unary<L, Neg>());
  set("div", floating_binary<L, Div>("div"));
  // div with rounding_mode "trunc" or "floor" (attr "mode").
  set("div_rounding", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const bool floor_mode = attrs.get_string("mode") == "floor";
    dispatch_numeric(in[0].dtype(), "div", [&]<typename T>() {
      using A = acc_type<T>;
      const std::array<const Tensor*, 2> ab{&in[0], &in[1]};
      if constexpr (is_floating_type_v<T>) {
        if (floor_mode) L::template run<T, T, T>(out[0], ab, InAcc<A, DivFloorFloat<M>>{});
        else L::template run<T, T, T>(out[0], ab, InAcc<A, DivTruncFloat<M>>{});
      } else {
        if (floor_mode) L::template run<T, T, T>(out[0], ab, DivFloorInt<M>{});
        else L::template run<T, T, T>(out[0], ab, DivTruncInt<M>{});
      }
    });
  });
  set("remainder", [](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_numeric(in[0].dtype(), "remainder", [&]<typename T>() {
      const std::array<const Tensor*, 2> ab{&in[0], &in[1]};
      if constexpr (is_floating_type_v<T>) L::template run<T, T, T>(out[0], ab, InAcc<acc_type<T>, RemainderFloat<M>>{});
      else L::template run<T, T, T>(out[0], ab, RemainderInt<M>{});
    });
  });

  // unary_math.cpp
  set("tan", floating_unary<L, Tan<M>>("tan"));
  set("asin", floating_unary<L, Asin<M>>("asin"));
  set("acos", floating_unary<L, Acos<M>>("acos"));
  set("atan", floating_unary<L, Atan<M>>("atan"));
  set("sinh", floating_unary<L, Sinh<M>>("sinh"));
  set("cosh", floating_unary<L, Cosh<M>>("cosh"));
  set("asinh", floating_unary<L, Asinh<M>>("asinh"));
  set("acosh", floating_unary<L, Acosh<M>>("acosh"));
  set("atanh", floating_unary<L, Atanh<M>>("atanh"));
  set("log2", floating_unary<L, Log2<M>>("log2"));
  set("log10", floating_unary<L, Log10<M>>("log10"));
  set("exp2", floating_unary<L, Exp2<M>>("exp2"));
  set("erfc", floating_unary<L, Erfc<M>>("erfc"));
  set("erfinv", floating_unary<L, Erfinv<M>>("erfinv"));
  set("lgamma", floating_unary<L, Lgamma<M>>("lgamma"));
  set("digamma", floating_unary<L, Digamma<M>>("digamma"));
  set("polygamma", floating_unary_with<L>("polygamma", []<typename A>(std::type_identity<A>, const Attrs& attrs) {
        return functors::Polygamma<M, A>{attrs.get_int("n")};
      }));
  set("sinc", floating_unary<L, Sinc<M>>("sinc"));
  set("frac", floating_unary<L, Frac<M>>("frac"));
  set("deg2rad", floating_unary<L, Deg2rad<M>>("deg2rad"));
  set("rad2deg", floating_unary<L, Rad2deg<M>>("rad2deg"));

  // pow.cpp
  set("pow", [](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_numeric(in[0].dtype(), "pow", [&]<typename T>() {
      const std::array<const Tensor*, 2> ab{&in[0], &in[1]};
      if constexpr (is_floating_type_v<T>) L::template run<T, T, T>(out[0], ab, InAcc<acc_type<T>, Pow<M>>{});
      else L::template run<T, T, T>(out[0], ab, IntPow{});
    });
  });
  // x ** e with common exponents in cheaper forms (as PyTorch does).
  set("pow_scalar", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const Scalar e = attrs.get_scalar("exponent");
    dispatch_numeric(in[0].dtype(), "pow", [&]<typename T>() {
      if constexpr (is_floating_type_v<T>) {
        using A = acc_type<T>;
        const double d = e.to_double();
        const char* name = "pow";
        if (d == 2.0) floating_unary<L, Square<M>>(name, in[0], out[0]);
        else if (d == 3.0) floating_unary<L, Cube<M>>(name, in[0], out[0]);
        else if (d == 0.5) floating_unary<L, Sqrt<M>>(name, in[0], out[0]);
        else if (d == -0.5) floating_unary<L, Rsqrt<M>>(name, in[0], out[0]);
        else if (d == -1.0) floating_unary<L, Reciprocal<M>>(name, in[0], out[0]);
        else if (d == -2.0) floating_unary<L, InverseSquare<M>>(name, in[0], out[0]);
        else L::template run<T, T>(out[0], {&in[0]}, InAcc<A, PowBy<M, A>>{{A(d)}});
      } else if constexpr (!std::is_same_v<T, bool>) {  // bool: refused by dispatch_numeric
        const int64_t n = e.to_int();
        if (n == 2) L::template run<T, T>(out[0], {&in[0]}, Square<M>{});
        else L::template run<T, T>(out[0], {&in[0]}, IntPowBy<T>{n});
      }
    });
  });
  set("maximum", arithmetic<L, Max, BitOr>());
  set("minimum", arithmetic<L, Min, BitAnd>());
  set("atan2", floating_binary<L, Atan2<M>>("atan2"));
  set("standard_gamma_grad", floating_binary<L, StandardGammaGrad>("_standard_gamma_grad"));

  // ternary.cpp
  set("where", [](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_dtype(in[1].dtype(), [&]<typename T>() {
      using K = kernel_type<T>;
      L::template run<K, uint8_t, K, K>(out[0], {&in[0], &in[1], &in[2]}, Select{});
    });
  });
  set("masked_fill", [](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() {
      using K = kernel_type<T>;
      L::template run<K, K, uint8_t, K>(out[0], {&in[0], &in[1], &in[2]}, MaskedFill{});
    });
  });
  set("lerp", [](const TensorList& in, TensorList& out, const Attrs& attrs) {
    const double weight = attrs.get_float("weight");
    dispatch_floating(in[0].dtype(), "lerp", [&]<typename T>() {
      using A = acc_type<T>;
      const std::array<const Tensor*, 2> ab{&in[0], &in[1]};
      if (weight < 0.5 && weight > -0.5) L::template run<T, T, T>(out[0], ab, InAcc<A, LerpFromStart<A>>{{A(weight)}});
      else L::template run<T, T, T>(out[0], ab, InAcc<A, LerpFromEnd<A>>{{A(weight)}});
    });
  });
  set("addcmul", addc<L, false>);
  set("addcdiv", addc<L, true>);

  // compare.cpp
  set("eq", predicate<L, Eq>());
  set("ne", predicate<L, Ne>());
  set("lt", predicate<L, Lt>());
  set("le", predicate<L, Le>());
  set("gt", predicate<L, Gt>());
  set("ge", predicate<L, Ge>());
  set("logical_and", predicate<L, LogicalAnd>());
  set("logical_or", predicate<L, LogicalOr>());
  set("logical_xor", predicate<L, LogicalXor>());
  set("logical_not", predicate<L, LogicalNot>());
  set("isnan", predicate<L, IsNan<M>>());
  set("isinf", predicate<L, IsInf<M>>());
  set("isfinite", predicate<L, IsFinite<M>>());
  set("bitwise_and", bitwise<L, BitAnd>("bitwise_and"));
  set("bitwise_or", bitwise<L, BitOr>("bitwise_or"));
  set("bitwise_xor", bitwise<L, BitXor>("bitwise_xor"));
  set("bitwise_left_shift", bitwise<L, LeftShift, true>("bitwise_left_shift"));
  set("bitwise_right_shift", bitwise<L, RightShift, true>("bitwise_right_shift"));
  set("bitwise_not", [](const TensorList& in, TensorList& out, const Attrs&) {
    dispatch_dtype(in[0].dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, bool>)
        L::template run<uint8_t, uint8_t>(out[0], {&in[0]}, BitwiseNot<true>{});
      else if constexpr (!is_floating_type_v<T>)
        L::template run<T, T>(out[0], {&in[0]}, BitwiseNot<false>{});
      else
        throw TypeError(detail::concat("bitwise_not: expected a bool or integer tensor, got ",
                                       dtype_name(in[0].dtype())));
    });
  });

  // copy.cpp
  const KernelFn copy = [](const TensorList& in, TensorList& out, const Attrs&) { copy_cast<L>(out[0], in.back()); };
  set("cast", copy);
  set("clone", copy);
  set("copy", copy);

  // creation.cpp
  const KernelFn fill_value = [](const TensorList&, TensorList& out, const Attrs& attrs) {
    fill<L>(out[0], attrs.get_scalar("value"));
  };
  set("full", fill_value);
  set("fill", fill_value);
  // Uninitialised, except bool: a byte other than 0 or 1 read as a C++ bool
  // is undefined behaviour in every later kernel, so bool tensors start false.
  set("empty", [](const TensorList&, TensorList& out, const Attrs&) {
    if (out[0].dtype() == DType::Bool) fill<L>(out[0], Scalar(false));
  });
  set("arange", [](const TensorList&, TensorList& out, const Attrs& attrs) {
    const Scalar start = attrs.get_scalar("start"), step = attrs.get_scalar("step");
    fill_indexed<L>(out[0], [&]<typename T>(std::type_identity<T>) {
      if constexpr (is_floating_type_v<T>) return Arange<T>{start.to_double(), step.to_double()};
      else return Arange<T>{start.to_int(), step.to_int()};
    });
  });
  set("linspace", [](const TensorList&, TensorList& out, const Attrs& attrs) {
    const double start = attrs.get_float("start"), end = attrs.get_float("end");
    const int64_t steps = attrs.get_int("steps");
    const double step = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
    fill_indexed<L>(out[0], [&]<typename T>(std::type_identity<T>) { return Linspace<T>{start, end, step, steps}; });
  });
  set("eye", [](const TensorList&, TensorList& out, const Attrs& attrs) {
    const int64_t m = attrs.get_int("m");
    fill_indexed<L>(out[0], [m]<typename T>(std::type_identity<T>) { return Eye<T>{m}; });
  });
}

}  // namespace mf::elementwise_kernels
