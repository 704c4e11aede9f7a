"""Every public op described once, for the differential tests and docs/ops.md.

An OpInfo says how to draw valid random inputs for an op (shapes including
0-size and broadcasting, dtypes, attributes), which dtypes its forward and
backward are checked in, and how closely meshflow must agree with PyTorch.
test_ops.py runs each sample in PyTorch and in meshflow on the same NumPy
data (every other sample with non-contiguous inputs) and compares outputs and
input gradients; tools/gen_ops_table.py turns this list into docs/ops.md.
"""
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from sampling import (ALL, BINARY_SHAPES, BOOL, FLOATS, INTS, NUMERIC, Arr, Dt, S, binary, in_range, index_arr,
                      inplace, make, method_call, mf_function_or_method, no_tensor, reduction, scalar_of, unary,
                      validate_binary_values, validate_multinomial, validate_normal, validate_randint, validate_randn,
                      validate_randperm, values_of, wider)

GRAD_DTYPES = ("float32", "float64")

# (rtol, atol) per dtype; integer and bool results must match exactly.
TOLERANCE = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-5, 1e-5),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1e-2),
}


@dataclass
class OpInfo:
    name: str  # "add", "nn.functional.relu", "Tensor.add_"
    samples: Callable  # (rng, dtype) -> list of Sample
    dtypes: tuple = FLOATS
    # dtypes the backward is checked in; None: float32/float64 when differentiable
    grad_dtypes: Optional[tuple] = None
    differentiable: bool = True
    method: bool = False  # also run as Tensor.<name>
    aliases: tuple = ()  # other public names of the same op, run on the same samples
    # call(lib, *args, **kwargs) for ops that are not lib.<name>(...) in both libraries
    call: Optional[Callable] = None
    check: str = "values"  # "values", or "meta" (shape and dtype only: random or uninitialised)
    validate: Optional[Callable] = None  # validate(sample_args, mf_output) for "meta" ops
    tol: dict = field(default_factory=dict)  # dtype -> (rtol, atol) overrides
    grad_tol: dict = field(default_factory=dict)
    noncontig: bool = True  # odd samples get non-contiguous tensor inputs
    compare_inputs: bool = False  # the op writes into its inputs (batch_norm's running stats)
    # signs(lib, out): out with each eigen- or singular vector's sign fixed, applied to both
    # libraries' outputs on devices other than the CPU, whose vectors may differ from LAPACK's
    # in sign (docs/backends.md)
    signs: Optional[Callable] = None

    def checked_grad_dtypes(self):
        if not self.differentiable or self.check != "values":
            return ()
        dtypes = GRAD_DTYPES if self.grad_dtypes is None else self.grad_dtypes
        return tuple(d for d in dtypes if d in self.dtypes)

    def covered_names(self):
        names = [self.name, *self.aliases]
        if self.method:
            names.append("Tensor." + self.name.split(".")[-1])
        return names

    def tolerance(self, dtype, grad=False):
        table = self.grad_tol if grad and dtype in self.grad_tol else self.tol
        return table.get(dtype, TOLERANCE.get(dtype, (0, 0)))


# --- the ops --------------------------------------------------------------------------------

OPS = []


def op(name, samples, **kw):
    OPS.append(OpInfo(name, samples, **kw))


# Elementwise, unary.
op("abs", unary(), dtypes=NUMERIC, method=True)
op("neg", unary(), dtypes=NUMERIC, method=True)
op("sign", unary(), dtypes=ALL, method=True)
op("square", unary(), dtypes=NUMERIC, method=True)
for _name in ("exp", "expm1", "sin", "cos", "tanh", "sigmoid", "erf"):
    op(_name, unary(), dtypes=ALL, method=True)
op("log", unary(0.1, 3.0), dtypes=ALL, method=True)
op("log1p", unary(-0.9, 3.0), dtypes=ALL, method=True)
op("sqrt", unary(0.1, 3.0), dtypes=ALL, method=True)
op("rsqrt", unary(0.1, 3.0), dtypes=ALL, method=True)
op("reciprocal", unary(nonzero=True), dtypes=ALL, method=True)
for _name in ("floor", "ceil", "round", "trunc"):
    op(_name, unary(-5.0, 5.0), dtypes=NUMERIC, method=True)
op("relu", unary(), dtypes=NUMERIC, method=True)
# src/ops/unary_math.cpp, each on its domain (and its other PyTorch names).
_UNARY_MATH = {"tan": (-1.2, 1.2, ()), "asin": (-0.95, 0.95, ("arcsin",)), "acos": (-0.95, 0.95, ("arccos",)),
               "atan": (-3.0, 3.0, ("arctan",)), "sinh": (-3.0, 3.0, ()), "cosh": (-3.0, 3.0, ()),
               "asinh": (-3.0, 3.0, ("arcsinh",)), "acosh": (1.1, 4.0, ("arccosh",)),
               "atanh": (-0.95, 0.95, ("arctanh",)), "log2": (0.1, 3.0, ()), "log10": (0.1, 3.0, ()),
               "exp2": (-3.0, 3.0, ()), "erfc": (-3.0, 3.0, ()), "erfinv": (-0.95, 0.95, ()), "sinc": (-3.0, 3.0, ()),
               "deg2rad": (-200.0, 200.0, ()), "rad2deg": (-3.0, 3.0, ())}
for _name, (_lo, _hi, _aliases) in _UNARY_MATH.items():
    # erfinv of a bfloat16/float16 input: torch evaluates in float, like meshflow, but rounds its own way
    op(_name, unary(_lo, _hi), dtypes=ALL if _name not in ("deg2rad", "rad2deg") else FLOATS, method=True,
       aliases=_aliases + tuple("Tensor." + a for a in _aliases))
op("frac", unary(-5.0, 5.0), method=True)
op("absolute", unary(), dtypes=NUMERIC, method=True)
op("negative", unary(), dtypes=NUMERIC, method=True)
op("fix", unary(-5.0, 5.0), dtypes=NUMERIC, method=True)
# The in-place forms (Tensor.f_() and mf.f_(t)) on (0.1, 0.9), inside every function's domain; they
# write into a clone when gradients are checked (inplace()).
_IN_PLACE = ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "square", "reciprocal", "sin", "cos", "tanh", "sigmoid",
             "erf", "lgamma", "digamma", "sign", "floor", "ceil", "round", "trunc", "tan", "asin", "acos", "atan",
             "sinh", "cosh", "asinh", "atanh", "log2", "log10", "exp2", "erfc", "erfinv", "sinc", "frac", "deg2rad",
             "rad2deg", "absolute", "negative", "fix", "arcsin", "arccos", "arctan", "arcsinh", "arctanh")


def _module_inplace(name):
    def call(lib, x):
        target = x.clone() if x.requires_grad else x
        return getattr(lib, name)(target)

    return call


# torch 1.13 has no derivative for the in-place inverse hyperbolic functions: forward only for those
_NO_TORCH_GRAD = ("asinh", "atanh", "arcsinh", "arctanh", "acosh", "arccosh")
for _name in _IN_PLACE:
    _grads = {"grad_dtypes": ()} if _name in _NO_TORCH_GRAD else {}
    op("Tensor." + _name + "_", unary(0.1, 0.9), call=inplace(_name + "_"), **_grads)
    if _name not in ("absolute", "lgamma", "digamma", "sign", "erfinv", "negative"):  # no module-level form
        op(_name + "_", unary(0.1, 0.9), call=_module_inplace(_name + "_"), **_grads)
for _name in ("acosh", "arccosh"):
    op("Tensor." + _name + "_", unary(1.1, 3.0), call=inplace(_name + "_"), grad_dtypes=())
    op(_name + "_", unary(1.1, 3.0), call=_module_inplace(_name + "_"), grad_dtypes=())
for _name in ("multiply", "divide", "subtract", "true_divide"):
    op("Tensor." + _name + "_", binary(rhs={"nonzero": True}, inplace=True), call=inplace(_name + "_"))
# The gamma family: negative non-integers too (reflection), and integer inputs (computed as float).
# meshflow evaluates them in double: near a pole, float32 results differ from torch's float ones
# by more than float32's usual tolerance (and are closer to the exact value).
_GAMMA_TOL = {"float32": (1e-4, 1e-5)}
op("lgamma", unary(-3.3, 6.0), dtypes=ALL, method=True, tol=_GAMMA_TOL, grad_tol=_GAMMA_TOL)
op("digamma", unary(-3.3, 6.0), dtypes=FLOATS + ("int64",), method=True, tol=_GAMMA_TOL, grad_tol=_GAMMA_TOL)
op("polygamma", unary(0.2, 5.0, kwargs=({"n": 0}, {"n": 2}, {"n": 3})), dtypes=FLOATS,
   call=lambda lib, x, n=1: lib.polygamma(n, x), tol=_GAMMA_TOL, grad_tol=_GAMMA_TOL)
op("Tensor.polygamma", unary(0.2, 5.0, kwargs=({"n": 2},)), dtypes=FLOATS, call=lambda lib, x, n=1: x.polygamma(n),
   tol=_GAMMA_TOL, grad_tol=_GAMMA_TOL)
def top_level_activation(name):
    """call= for activations PyTorch has in nn.functional only (meshflow.gelu, ...)."""
    return lambda lib, *args, **kwargs: getattr(lib if lib.__name__ == "meshflow" else lib.nn.functional, name)(
        *args, **kwargs)


op("gelu", unary(kwargs=({"approximate": "tanh"},)), call=top_level_activation("gelu"))
op("silu", unary(), call=top_level_activation("silu"))
op("leaky_relu", unary(kwargs=({"negative_slope": 0.2},)), call=top_level_activation("leaky_relu"))
op("elu", unary(kwargs=({"alpha": 0.5},)), call=top_level_activation("elu"))
op("softplus", unary(-25.0, 25.0, kwargs=({"beta": 2.0, "threshold": 5.0},)), call=top_level_activation("softplus"))
op("logical_not", unary(), dtypes=ALL, method=True)
op("bitwise_not", unary(), dtypes=BOOL + INTS, method=True)
for _name in ("isnan", "isinf", "isfinite"):
    op(_name, unary(special=True), dtypes=ALL, method=True)

# Elementwise, binary.
op("add", binary(kwargs=({"alpha": 2},)), dtypes=ALL, method=True)
op("sub", binary(kwargs=({"alpha": 2},)), dtypes=NUMERIC, method=True)
op("rsub", binary(kwargs=({"alpha": 2},)), dtypes=NUMERIC)
op("mul", binary(), dtypes=ALL, method=True)
op("div", binary(rhs={"nonzero": True}), dtypes=ALL, method=True)
op("div", binary(rhs={"nonzero": True}, kwargs=({"rounding_mode": "floor"}, {"rounding_mode": "trunc"})),
   dtypes=NUMERIC, method=True)
# PyTorch has no derivative for floor_divide.
op("floor_divide", binary(rhs={"nonzero": True}), dtypes=NUMERIC, method=True, grad_dtypes=())
op("remainder", binary(rhs={"nonzero": True}), dtypes=NUMERIC, method=True)
op("pow", binary(0.5, 2.0, rhs={"low": -2.0, "high": 2.0}), dtypes=FLOATS, method=True)
op("pow", binary(-3, 3, rhs={"low": 0, "high": 3}, promote=False), dtypes=INTS, method=True)
op("minimum", binary(scalars=False), dtypes=ALL, method=True)
op("maximum", binary(scalars=False), dtypes=ALL, method=True)
op("atan2", binary(scalars=False), dtypes=INTS + FLOATS, method=True)
# zeros in x (grid 0.5 from 0) give 0 whatever y is
op("xlogy", binary(0.0, 2.0, rhs={"low": 0.5, "high": 3.0}, grid=0.5), dtypes=FLOATS, method=True)
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    op(_name, binary(-2.0, 2.0, grid=0.5), dtypes=ALL, method=True, differentiable=False)
# PyTorch's other names of binary ops
op("multiply", binary(), dtypes=ALL, method=True)
op("subtract", binary(kwargs=({"alpha": 2},)), dtypes=NUMERIC, method=True)
op("divide", binary(rhs={"nonzero": True}), dtypes=ALL, method=True)
op("true_divide", binary(rhs={"nonzero": True}), dtypes=ALL, method=True)
op("arctan2", binary(scalars=False), dtypes=INTS + FLOATS, method=True)
for _name in ("greater", "greater_equal", "less", "less_equal", "not_equal"):
    op(_name, binary(-2.0, 2.0, grid=0.5), dtypes=ALL, method=True, differentiable=False)


def closeness(kwargs=()):
    """Samples for isclose / allclose / equal: tensors of one dtype (they
    refuse two), broadcasting, identical pairs, and NaN/inf pairs."""
    base = binary(-2.0, 2.0, grid=0.5, scalars=False, promote=False, kwargs=kwargs)

    def samples(rng, dtype):
        out = base(rng, dtype)
        x = make(rng, (3, 4), dtype, -2.0, 2.0, grid=0.5)
        out.append(S(x, x))
        if dtype in FLOATS:
            y = make(rng, (4, 5), dtype, special=True)
            out.append(S(y, y, **({"equal_nan": True} if kwargs else {})))
        return out

    return samples


CLOSE_KWARGS = ({"rtol": 0.3}, {"atol": 0.5}, {"rtol": 0.0, "atol": 0.0}, {"equal_nan": True})
op("isclose", closeness(CLOSE_KWARGS), dtypes=ALL, method=True, differentiable=False)
op("allclose", closeness(CLOSE_KWARGS), dtypes=ALL, method=True, differentiable=False)
op("equal", closeness(), dtypes=ALL, method=True, differentiable=False)
for _name in ("logical_and", "logical_or", "logical_xor"):
    op(_name, binary(-1.0, 1.0, grid=1.0, scalars=False), dtypes=ALL, method=True, differentiable=False)
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    op(_name, binary(0, 7, float_scalar=False, promote=False), dtypes=BOOL + INTS, method=True,
       differentiable=False)
for _name in ("bitwise_left_shift", "bitwise_right_shift"):
    op(_name, binary(0, 7, float_scalar=False, promote=False), dtypes=INTS, method=True, differentiable=False)


def pow_scalar_base(rng, dtype):
    return [S(2.0, make(rng, (3, 4), dtype, -2, 2)), S(0.5, make(rng, (5,), dtype, -2, 2))]


op("pow", pow_scalar_base, call=lambda lib, base, exponent: lib.pow(base, exponent), dtypes=FLOATS)


def where_samples(rng, dtype):
    def cond(shape):
        return make(rng, shape, "bool")

    return [S(cond((3, 4)), make(rng, (3, 4), dtype), make(rng, (3, 4), dtype)),
            S(cond((2, 3, 4)), make(rng, (3, 4), dtype), make(rng, (2, 1, 4), dtype)),
            S(cond(()), make(rng, (3,), dtype), make(rng, (), dtype)),
            S(cond((4,)), make(rng, (3, 4), dtype), scalar_of(dtype)),
            S(cond((0, 2)), make(rng, (0, 2), dtype), make(rng, (1, 2), dtype)),
            S(cond((2, 5)), scalar_of(dtype), make(rng, (2, 5), dtype))]


op("where", where_samples, dtypes=ALL)
op("where", lambda rng, dtype: [S(make(rng, (3, 4), dtype)), S(make(rng, (2, 0, 3), dtype)), S(make(rng, (5,), dtype))],
   dtypes=ALL, differentiable=False, call=lambda lib, c: lib.where(c))
op("take", lambda rng, dtype: [S(make(rng, (3, 4), dtype), index_arr(rng, (2, 3), 12, low=-12)),
                               S(make(rng, (5,), dtype), index_arr(rng, (4,), 5)),
                               S(make(rng, (), dtype), index_arr(rng, (3,), 1)),
                               S(make(rng, (2, 3), dtype), index_arr(rng, (0,), 6))], dtypes=ALL, method=True)
op("Tensor.where", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (3, 4), "bool"),
                                         make(rng, (3, 4), dtype))],
   call=lambda lib, x, cond, other: x.where(cond, other), dtypes=ALL)


def masked_fill_samples(rng, dtype):
    return [S(make(rng, (3, 4), dtype), make(rng, (3, 4), "bool"), scalar_of(dtype)),
            S(make(rng, (2, 3, 4), dtype), make(rng, (3, 1), "bool"), scalar_of(dtype)),
            S(make(rng, (), dtype), make(rng, (), "bool"), scalar_of(dtype)),
            S(make(rng, (5,), dtype), make(rng, (5,), "bool"), make(rng, (), dtype, requires_grad=False)),
            S(make(rng, (0, 3), dtype), make(rng, (0, 3), "bool"), scalar_of(dtype))]


op("masked_fill", masked_fill_samples, dtypes=ALL, method=True)
op("Tensor.masked_fill_", masked_fill_samples, call=inplace("masked_fill_"), dtypes=ALL,
   grad_dtypes=())  # the tensor-valued form is out of place only


def clamp_samples(rng, dtype):
    lo, hi = (-1, 1) if dtype != "uint8" else (1, 2)
    return [S(make(rng, (3, 4), dtype), lo, hi),
            S(make(rng, (2, 3, 4), dtype), min=lo),
            S(make(rng, (), dtype), max=hi),
            S(make(rng, (5,), dtype), make(rng, (5,), dtype, -1, 0), make(rng, (5,), dtype, 0, 1)),
            S(make(rng, (0, 3), dtype), lo, hi),
            S(make(rng, (2, 4), dtype), min=make(rng, (4,), dtype, -1, 0))]


op("clamp", clamp_samples, dtypes=NUMERIC, method=True, aliases=("clip", "Tensor.clip"))
for _name in ("clamp_min", "clamp_max"):
    op(_name, lambda rng, dtype: [S(make(rng, (3, 4), dtype), scalar_of(dtype, -1.0, 1.0)),
                                  S(make(rng, (2, 3), dtype), 0), S(make(rng, (0, 2), dtype), 1)],
       dtypes=NUMERIC, method=True)


def clamp_scalar_samples(rng, dtype):  # clamp_ takes numbers only
    samples = clamp_samples(rng, dtype)
    return [s for s in samples if not any(isinstance(a, Arr) for a in (*s.args[1:], *s.kwargs.values()))]


op("Tensor.clamp_", clamp_scalar_samples, call=inplace("clamp_"), dtypes=NUMERIC)
op("lerp", lambda rng, dtype: [S(make(rng, a, dtype), make(rng, b, dtype), 0.3) for a, b in BINARY_SHAPES],
   method=True)


def addc_samples(nonzero):
    def samples(rng, dtype):
        value = 2 if dtype in INTS else 0.5
        return [S(make(rng, (3, 4), dtype), make(rng, (3, 4), dtype), make(rng, (3, 4), dtype, nonzero=nonzero)),
                S(make(rng, (2, 3, 4), dtype), make(rng, (3, 1), dtype),
                  make(rng, (4,), dtype, nonzero=nonzero), value=value),
                S(make(rng, (), dtype), make(rng, (), dtype), make(rng, (), dtype, nonzero=nonzero)),
                S(make(rng, (0, 2), dtype), make(rng, (1, 2), dtype), make(rng, (0, 2), dtype, nonzero=nonzero))]

    return samples


op("addcmul", addc_samples(False), dtypes=NUMERIC, method=True)
op("addcdiv", addc_samples(True), method=True)

# In-place elementwise methods (and relu_ as a function).
op("Tensor.add_", binary(promote=False, inplace=True, kwargs=({"alpha": 2},)), call=inplace("add_"), dtypes=NUMERIC)
op("Tensor.sub_", binary(promote=False, inplace=True, kwargs=({"alpha": 2},)), call=inplace("sub_"), dtypes=NUMERIC)
op("Tensor.mul_", binary(promote=False, inplace=True), call=inplace("mul_"), dtypes=NUMERIC)
op("Tensor.div_", binary(rhs={"nonzero": True}, promote=False, inplace=True), call=inplace("div_"), dtypes=FLOATS)
op("Tensor.neg_", unary(), call=inplace("neg_"), dtypes=NUMERIC)
op("Tensor.abs_", unary(), call=inplace("abs_"), dtypes=NUMERIC)
op("abs_", unary(), call=lambda lib, x: lib.abs_(x.clone() if x.requires_grad else x), dtypes=NUMERIC)
op("Tensor.relu_", unary(), call=inplace("relu_"), dtypes=NUMERIC)
op("relu_", unary(), call=lambda lib, x: lib.relu_(x.clone() if x.requires_grad else x), dtypes=NUMERIC)
op("nn.functional.relu_", unary(), dtypes=NUMERIC,
   call=lambda lib, x: lib.nn.functional.relu_(x.clone() if x.requires_grad else x))


def broadcast_shapes_samples(rng, dtype):
    return [S((3, 1), (4,)), S((2, 1, 4), (3, 1), ()), S((0, 3), (1, 3)), S(5, (2, 1))]


op("broadcast_shapes", broadcast_shapes_samples, dtypes=("int64",), differentiable=False)


def result_type_samples(rng, dtype):
    out = [S(make(rng, (2,), dtype), make(rng, (2,), other)) for other in ALL]
    out += [S(make(rng, (2,), dtype), make(rng, (), other)) for other in ("int64", "float64", "bool")]
    out += [S(make(rng, (2,), dtype), value) for value in (True, 2, 2.5)]
    return out


op("result_type", result_type_samples, dtypes=ALL, differentiable=False, noncontig=False)
op("promote_types", lambda rng, dtype: [S(Dt(dtype), Dt(other)) for other in ALL], dtypes=ALL,
   differentiable=False)

# Casts and other Tensor conversions.
for _name, _target in (("float", "float32"), ("double", "float64"), ("half", "float16"),
                       ("bfloat16", "bfloat16"), ("long", "int64"), ("int", "int32"), ("short", "int16"),
                       ("char", "int8"), ("byte", "uint8"), ("bool", "bool")):
    op("Tensor." + _name, unary(-3, 3), call=method_call(_name), dtypes=ALL,
       grad_dtypes=GRAD_DTYPES if _target in FLOATS else ())


def to_samples(rng, dtype):
    return [S(make(rng, (3, 4), dtype), Dt(other)) for other in ("float64", "float32", "int32", "bool")] + [
        S(make(rng, (2, 3), dtype), dtype=Dt("float64")), S(make(rng, (2,), dtype), make(rng, (1,), "int16")),
        S(make(rng, (2, 2), dtype), "cpu"), S(make(rng, (3,), dtype), Dt(dtype), copy=True)]


op("Tensor.to", to_samples, call=method_call("to"), dtypes=ALL)
op("Tensor.type_as", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (2,), other))
                                         for other in ("float64", "int32", dtype)],
   call=method_call("type_as"), dtypes=ALL)
op("Tensor.cpu", unary(), call=method_call("cpu"), dtypes=ALL)
op("Tensor.detach", unary(), call=method_call("detach"), dtypes=ALL, differentiable=False)
# PyTorch refuses to detach a view in place.
op("Tensor.detach_", unary(), call=method_call("detach_"), dtypes=ALL, differentiable=False, noncontig=False)
op("contiguous", unary(), call=mf_function_or_method("contiguous"), dtypes=ALL, method=True)
op("clone", unary(), dtypes=ALL, method=True)

# Creation.
_SIZES = (S(2, 3, dtype=Dt("?")), S((4,), dtype=Dt("?")), S([0, 3], dtype=Dt("?")), S((), dtype=Dt("?")),
          S(3, 1, 2))
op("zeros", no_tensor(*_SIZES), dtypes=ALL, differentiable=False)
op("ones", no_tensor(*_SIZES), dtypes=ALL, differentiable=False)
op("empty", no_tensor(*_SIZES), dtypes=ALL, check="meta", differentiable=False)
op("full", no_tensor(S((2, 3), 1.5), S((4,), 7), S((2,), True), S((0, 2), 3, dtype=Dt("?")),
                     S((2, 2), 2, dtype=Dt("?")), S((), 2.25, dtype=Dt("?")), S((3,), -1.5)), dtypes=ALL,
   differentiable=False)


def like_samples(*extra):
    def samples(rng, dtype):
        return [S(make(rng, shape, dtype), *extra) for shape in ((3, 4), (), (0, 2))] + [
            S(make(rng, (2, 3), dtype), *extra, dtype=Dt("float64"))]

    return samples


op("zeros_like", like_samples(), dtypes=ALL, differentiable=False)
op("ones_like", like_samples(), dtypes=ALL, differentiable=False)
op("empty_like", like_samples(), dtypes=ALL, check="meta", differentiable=False)
op("full_like", like_samples(1), dtypes=ALL, differentiable=False)
op("rand_like", like_samples(), check="meta", differentiable=False, validate=in_range(0, 1))
op("randn_like", like_samples(), check="meta", differentiable=False, validate=validate_normal)
op("arange", no_tensor(S(5), S(2, 9), S(1, 10, 3), S(0.0, 1.0, 0.25), S(10, 0, -3), S(5, dtype=Dt("?")),
                       S(-2, 3, 2, dtype=Dt("?")), S(0), S(-1.5, 2.5)), dtypes=("float32", "float64", "int32", "int64"),
   differentiable=False)
op("linspace", no_tensor(S(0, 1, 5), S(-2.0, 3.5, 7, dtype=Dt("?")), S(3, 3, 1), S(0, 1, 0), S(10, 0, 4)),
   dtypes=("float32", "float64"), differentiable=False)
op("logspace", no_tensor(S(0, 2, 5), S(-2.0, 1.5, 7, dtype=Dt("?")), S(1, 3, 4, base=2.0), S(0, 1, 1), S(0, 1, 0),
                         S(2, -1, 4, 3.0)), dtypes=("float32", "float64"), differentiable=False)
op("eye", no_tensor(S(3), S(2, 4), S(3, 1, dtype=Dt("?")), S(0)), dtypes=ALL, differentiable=False)
op("scalar_tensor", no_tensor(S(1.5), S(3), S(2, dtype=Dt("?")), S(True, dtype=Dt("?"))), dtypes=ALL,
   differentiable=False)
op("rand", no_tensor(S(2, 3), S((40, 50)), S(0, 3, dtype=Dt("?"))), check="meta", differentiable=False,
   validate=in_range(0, 1), dtypes=FLOATS)
op("randn", no_tensor(S(2, 3), S((40, 50)), S(0, 3, dtype=Dt("?"))), check="meta", differentiable=False,
   validate=validate_randn, dtypes=FLOATS)
op("randint", no_tensor(S(5, (3, 4)), S(-3, 3, (100,)), S(0, 2, (0, 2)), S(10, (2,), dtype=Dt("?"))),
   check="meta", differentiable=False, validate=validate_randint, dtypes=("int64", "int32", "float32"))
op("randperm", no_tensor(S(5), S(0), S(100)), check="meta", differentiable=False, validate=validate_randperm,
   dtypes=("int64",))


def bernoulli_samples(rng, dtype):
    p = make(rng, (3, 4), dtype, 0, 1, noncontig=False)
    return [S(Arr(np.zeros((3, 4)), dtype)), S(Arr(np.ones((2, 5)), dtype)), S(p), S(make(rng, (4, 2), dtype), 0.0),
            S(make(rng, (4, 2), dtype), 1.0), S(make(rng, (30, 30), dtype), 0.25)]


op("bernoulli", bernoulli_samples, check="meta", differentiable=False, validate=validate_binary_values,
   method=True)


def multinomial_samples(rng, dtype):
    w = make(rng, (3, 5), dtype, 0.1, 2, requires_grad=False)
    sparse = Arr(np.array([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 1.0, 1.0]]), dtype, requires_grad=False)
    return [S(w, 4), S(w, 7, True), S(make(rng, (6,), dtype, 0.1, 2, requires_grad=False), 6), S(sparse, 2),
            S(sparse, 9, True)]


op("Tensor.bernoulli_", lambda rng, dtype: [S(make(rng, (3, 4), dtype, requires_grad=False)),
                                             S(make(rng, (30, 30), dtype, requires_grad=False), 0.25),
                                             S(make(rng, (2, 5), dtype, requires_grad=False), 1.0)],
   call=inplace("bernoulli_"), check="meta", differentiable=False, validate=validate_binary_values, dtypes=FLOATS)
op("multinomial", multinomial_samples, check="meta", differentiable=False, validate=validate_multinomial,
   method=True, dtypes=("float32", "float64"))


def normal_samples(rng, dtype):
    return [S(make(rng, (3, 4), dtype, requires_grad=False), make(rng, (3, 4), dtype, 0.1, 2, requires_grad=False)),
            S(make(rng, (2, 1), dtype, requires_grad=False), make(rng, (3,), dtype, 0.1, 2, requires_grad=False)),
            S(make(rng, (4,), dtype, requires_grad=False), 2.0)]


op("normal", normal_samples, check="meta", differentiable=False, validate=validate_normal,
   dtypes=("float32", "float64"))


def standard_gamma_samples(rng, dtype):
    return [S(make(rng, (3, 4), dtype, 0.05, 5)), S(make(rng, (0, 3), dtype, 0.5, 2)),
            S(make(rng, (), dtype, 0.5, 2)), S(make(rng, (30, 30), dtype, 0.01, 50)),
            S(Arr(np.array([0.0, 1e-3, 1e3, 1e8]), dtype))]


def validate_gamma_samples(args, out):
    v = values_of(out)
    assert np.isfinite(v).all() and (v > 0).all(), v


# Random: shapes and dtypes against torch, values (finite, positive) here; the
# distribution of the samples and their gradient are tested in test_distributions_gamma.py.
op("_standard_gamma", standard_gamma_samples, check="meta", validate=validate_gamma_samples,
   dtypes=("float32", "float64"))


def standard_gamma_grad_samples(rng, dtype):
    a = make(rng, (3, 4), dtype, 0.5, 5, requires_grad=False)
    x = Arr(a.data * rng.uniform(0.3, 2.5, size=a.data.shape), dtype, requires_grad=False)
    a0 = make(rng, (), dtype, 1, 3, requires_grad=False)
    return [S(a, x), S(a0, Arr(a0.data * 0.7, dtype, requires_grad=False)),
            S(make(rng, (0, 2), dtype, 1, 2, requires_grad=False), make(rng, (0, 2), dtype, 1, 2, requires_grad=False))]


# torch approximates d sample / d concentration (to about 1e-4 relative here, 1e-3 at worst
# in these ranges); meshflow computes it to about 1e-13 (test_distributions_gamma.py checks it against mpmath).
op("_standard_gamma_grad", standard_gamma_grad_samples, differentiable=False, dtypes=("float32", "float64"),
   tol={"float64": (2e-3, 1e-6), "float32": (2e-3, 1e-5)})
op("bernoulli", lambda rng, dtype: bernoulli_samples(rng, dtype)[:2] + bernoulli_samples(rng, dtype)[3:5],
   method=True, differentiable=False)
op("Tensor.uniform_", lambda rng, dtype: [S(make(rng, (20, 30), dtype), -2.0, 3.0), S(make(rng, (0,), dtype))],
   call=lambda lib, x, *args: x.detach().uniform_(*args), check="meta", differentiable=False,
   validate=in_range(-2, 3))
op("Tensor.normal_", lambda rng, dtype: [S(make(rng, (20, 30), dtype), 1.0, 2.0), S(make(rng, (3,), dtype))],
   call=lambda lib, x, *args: x.detach().normal_(*args), check="meta", differentiable=False,
   validate=validate_normal)
op("Tensor.fill_", lambda rng, dtype: [S(make(rng, (3, 4), dtype), scalar_of(dtype)),
                                       S(make(rng, (2, 3, 4), dtype), 0), S(make(rng, (), dtype), True)],
   call=inplace("fill_"), dtypes=ALL)
op("Tensor.zero_", unary(), call=inplace("zero_"), dtypes=ALL)
op("Tensor.copy_", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (3, 4), dtype)),
                                       S(make(rng, (2, 3, 4), dtype), make(rng, (3, 1), "float64")),
                                       S(make(rng, (), dtype), make(rng, (), "int32")),
                                       S(make(rng, (5,), dtype), make(rng, (5,), dtype))],
   call=inplace("copy_"), dtypes=ALL)


# Reductions.
op("sum", reduction(kwargs=({"dtype": Dt("float64")},)), dtypes=ALL, method=True)
op("mean", reduction(kwargs=({"dtype": Dt("float64")},)), dtypes=FLOATS, method=True)
op("prod", reduction(low=-1.5, high=1.5, tuple_dims=False), dtypes=ALL, method=True, tol={"bfloat16": (3e-2, 1e-2)})


def max_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, distinct=dtype != "bool")

    out = [S(x((3, 4))), S(x((2, 3, 4))), S(x(())), S(x((5,)), make(rng, (5,), dtype)),
           S(x((2, 3)), make(rng, (3,), dtype))]
    if dtype != "bool":
        out += [S(x((3, 4)), 1), S(x((2, 3, 4)), -1, keepdim=True), S(x((4,)), 0), S(x((0, 3)), 1)]
    return out


op("max", max_samples, dtypes=ALL, method=True)
op("min", max_samples, dtypes=ALL, method=True)
op("amax", reduction(distinct=True, empty=False), dtypes=ALL, method=True)
op("amin", reduction(distinct=True, empty=False), dtypes=ALL, method=True)
op("argmax", reduction(distinct=True, empty=False, tuple_dims=False), dtypes=NUMERIC, method=True, differentiable=False)
op("argmin", reduction(distinct=True, empty=False, tuple_dims=False), dtypes=NUMERIC, method=True, differentiable=False)


def moment_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((3, 4))), S(x((2, 3, 4)), 1), S(x((4, 5)), (0, 1), keepdim=True), S(x((6,)), False),
            S(x((3, 4)), 0, correction=0), S(x((3, 5)), -1, correction=2), S(x((2, 3, 4)), (0, 2), True, True)]


op("var", moment_samples, method=True, tol={"bfloat16": (3e-2, 2e-2)})
op("std", moment_samples, method=True, tol={"bfloat16": (3e-2, 2e-2)})


def norm_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((3, 4))), S(x((2, 3, 4)), 1), S(x((3, 4)), float("inf")), S(x((5,)), 3), S(x(()), 2),
            S(x((2, 3, 4)), "fro", (1, 2)), S(x((3, 4)), 1, 1, True), S(x((0, 3)))]


op("norm", norm_samples, method=True)
op("logsumexp", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 1), S(make(rng, (2, 3, 4), dtype), (0, 2), True),
                                    S(make(rng, (5,), dtype), 0), S(make(rng, (0, 3), dtype), 1)], method=True)
def all_any_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1, grid=1.0)

    return [S(x((3, 4))), S(x((2, 3, 4))), S(x(())), S(x((0, 3))), S(x((3, 4)), 1), S(x((2, 3, 4)), -1, keepdim=True),
            S(x((0, 3)), 0)]


op("all", all_any_samples, dtypes=ALL, method=True, differentiable=False)
op("any", all_any_samples, dtypes=ALL, method=True, differentiable=False)
op("cumsum", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 1), S(make(rng, (2, 3, 4), dtype), 0),
                                 S(make(rng, (), dtype), 0), S(make(rng, (5,), dtype), -1, dtype=Dt("float64")),
                                 S(make(rng, (0, 3), dtype), 1)], dtypes=ALL, method=True,
   tol={"bfloat16": (3e-2, 3e-2), "float16": (3e-3, 3e-3)})
def median_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, distinct=True)

    return [S(x((3, 5))), S(x((7,))), S(x(())), S(x((3, 5)), 1), S(x((4, 3)), 0, keepdim=True), S(x((2, 3, 4)), -1),
            S(x(()), 0), S(make(rng, (6,), dtype, -2, 2, grid=1.0))]  # ties: the gradient shared as torch's


op("median", median_samples, dtypes=NUMERIC, method=True)
# From 0: torch's bfloat16 unique tells -0.0 from 0.0, its float32 one does not.
op("unique", lambda rng, dtype: [S(make(rng, (3, 5), dtype, 0, 4, grid=1.0)),
                                 S(make(rng, (12,), dtype, 0, 4, grid=1.0), return_inverse=True),
                                 S(make(rng, (2, 3, 4), dtype, 0, 4, grid=1.0), return_counts=True),
                                 S(make(rng, (2, 4), dtype, 0, 4, grid=1.0), return_inverse=True, return_counts=True),
                                 S(make(rng, (0, 3), dtype)), S(make(rng, (), dtype))],
   dtypes=ALL, method=True, differentiable=False)
# Values near 1 keep long products in range; a grid from -2 puts exact zeros in (the exact gradient there).
op("cumprod", lambda rng, dtype: [S(make(rng, (3, 4), dtype, 0.5, 1.5), 1), S(make(rng, (2, 3, 4), dtype, 0.5, 1.5), 0),
                                  S(make(rng, (), dtype), 0), S(make(rng, (5,), dtype, -2, 2), -1, dtype=Dt("float64")),
                                  S(make(rng, (4, 6), dtype, -2, 2, grid=1.0), 1),
                                  S(make(rng, (0, 3), dtype), 1)], dtypes=ALL, method=True,
   tol={"bfloat16": (3e-2, 3e-2), "float16": (3e-3, 3e-3)})
op("Tensor.sum_to_size", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 1, 4), S(make(rng, (2, 3, 4), dtype), (3, 1)),
                                             S(make(rng, (2, 3), dtype), (2, 3))],
   call=method_call("sum_to_size"), dtypes=NUMERIC)


# Views and shape ops.
def view_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, noncontig=False)

    return [S(x((3, 4)), (4, 3)), S(x((2, 3, 4)), (-1,)), S(x(()), (1, 1)), S(x((6,)), (2, -1)), S(x((0, 3)), (3, 0))]


op("view", view_samples, dtypes=ALL, call=mf_function_or_method("view"))
op("Tensor.view", view_samples, dtypes=ALL, call=lambda lib, x, size: x.view(*size))
op("reshape", lambda rng, dtype: [S(make(rng, (3, 4), dtype), (4, 3)), S(make(rng, (2, 3, 4), dtype), (-1, 2)),
                                  S(make(rng, (), dtype), (1,)), S(make(rng, (6,), dtype), (2, 3)),
                                  S(make(rng, (0, 3), dtype), (-1,))], dtypes=ALL)
op("Tensor.reshape", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 2, 6), S(make(rng, (2, 3, 4), dtype), (4, -1))],
   dtypes=ALL, call=method_call("reshape"))
op("Tensor.view_as", lambda rng, dtype: [S(make(rng, (3, 4), dtype, noncontig=False), make(rng, (6, 2), "int32"))],
   dtypes=ALL, call=method_call("view_as"))
op("Tensor.reshape_as", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (2, 6), "int32"))], dtypes=ALL,
   call=method_call("reshape_as"))
op("permute", lambda rng, dtype: [S(make(rng, (2, 3, 4), dtype), (2, 0, 1)), S(make(rng, (3, 4), dtype), (-1, 0)),
                                  S(make(rng, (), dtype), ()), S(make(rng, (0, 2), dtype), (1, 0))], dtypes=ALL)
op("Tensor.permute", lambda rng, dtype: [S(make(rng, (2, 3, 4), dtype), 1, 2, 0), S(make(rng, (3, 4), dtype), (1, 0))],
   dtypes=ALL, call=method_call("permute"))
op("transpose", lambda rng, dtype: [S(make(rng, (2, 3, 4), dtype), 0, 2), S(make(rng, (3, 4), dtype), -1, -2),
                                    S(make(rng, (5,), dtype), 0, 0)], dtypes=ALL, method=True)
op("t", lambda rng, dtype: [S(make(rng, (3, 4), dtype)), S(make(rng, (5,), dtype)), S(make(rng, (), dtype)),
                            S(make(rng, (0, 2), dtype))], dtypes=ALL, method=True)
op("Tensor.T", lambda rng, dtype: [S(make(rng, (3, 4), dtype)), S(make(rng, (5,), dtype))], dtypes=ALL,
   call=lambda lib, x: x.T)
op("Tensor.mT", lambda rng, dtype: [S(make(rng, (2, 3, 4), dtype)), S(make(rng, (3, 4), dtype))], dtypes=ALL,
   call=lambda lib, x: x.mT)
op("narrow", lambda rng, dtype: [S(make(rng, (5, 4), dtype), 0, 1, 3), S(make(rng, (2, 6), dtype), -1, 2, 0),
                                 S(make(rng, (4, 3), dtype), 1, -2, 2)], dtypes=ALL, method=True)
op("select", lambda rng, dtype: [S(make(rng, (5, 4), dtype), 0, 1), S(make(rng, (2, 3, 4), dtype), -1, -1),
                                 S(make(rng, (3,), dtype), 0, 2)], dtypes=ALL, method=True)


def expand_samples(rng, dtype):
    return [S(make(rng, (3, 1), dtype), (3, 4)), S(make(rng, (4,), dtype), (2, 3, 4)), S(make(rng, (), dtype), (2,)),
            S(make(rng, (1, 2), dtype), (0, -1, 2)), S(make(rng, (2, 1), dtype), (-1, 3))]


op("expand", expand_samples, dtypes=ALL, call=mf_function_or_method("expand"))
op("Tensor.expand", expand_samples, dtypes=ALL, call=lambda lib, x, size: x.expand(*size))
op("broadcast_to", expand_samples, dtypes=ALL, method=True)
op("expand_as", lambda rng, dtype: [S(make(rng, (3, 1), dtype), make(rng, (3, 4), "int32")),
                                    S(make(rng, (), dtype), make(rng, (2, 2), "float32"))], dtypes=ALL, method=True,
   call=mf_function_or_method("expand_as"))
op("squeeze", lambda rng, dtype: [S(make(rng, (3, 1, 4, 1), dtype)), S(make(rng, (3, 1), dtype), 1),
                                  S(make(rng, (3, 4), dtype), 0), S(make(rng, (1,), dtype)), S(make(rng, (), dtype)),
                                  S(make(rng, (0, 1), dtype), -1)], dtypes=ALL, method=True)
op("unsqueeze", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 0), S(make(rng, (3, 4), dtype), -1),
                                    S(make(rng, (), dtype), 0), S(make(rng, (2, 3), dtype), 1)], dtypes=ALL,
   method=True)
op("flatten", lambda rng, dtype: [S(make(rng, (2, 3, 4), dtype)), S(make(rng, (2, 3, 4, 2), dtype), 1, 2),
                                  S(make(rng, (), dtype)), S(make(rng, (3, 4), dtype), -2, -1),
                                  S(make(rng, (0, 3), dtype))], dtypes=ALL, method=True)
op("unflatten", lambda rng, dtype: [S(make(rng, (6, 4), dtype), 0, (2, 3)), S(make(rng, (2, 12), dtype), -1, (3, -1))],
   dtypes=ALL, method=True)
op("as_strided", lambda rng, dtype: [S(make(rng, (3, 4), dtype, noncontig=False), (2, 2), (1, 2)),
                                     S(make(rng, (12,), dtype, noncontig=False), (3, 3), (3, 1), 1)], dtypes=ALL,
   method=True)
op("diagonal", lambda rng, dtype: [S(make(rng, (3, 4), dtype)), S(make(rng, (3, 4), dtype), 1),
                                   S(make(rng, (2, 3, 4), dtype), -1, 0, 2), S(make(rng, (3, 3), dtype), 5)],
   dtypes=ALL, method=True)


def cat_samples(rng, dtype):
    return [S([make(rng, (2, 3), dtype), make(rng, (4, 3), dtype)]),
            S([make(rng, (2, 3), dtype), make(rng, (2, 1), dtype), make(rng, (2, 0), dtype)], 1),
            S([make(rng, (2, 3, 4), dtype), make(rng, (2, 3, 2), dtype)], dim=-1),
            S([make(rng, (3,), dtype), make(rng, (3,), wider(dtype))]),
            S((make(rng, (0, 2), dtype), make(rng, (1, 2), dtype)))]


op("cat", cat_samples, dtypes=ALL, aliases=("concat",))
op("stack", lambda rng, dtype: [S([make(rng, (2, 3), dtype), make(rng, (2, 3), dtype)]),
                                S([make(rng, (3,), dtype)] * 3, 1), S([make(rng, (), dtype), make(rng, (), dtype)]),
                                S([make(rng, (0, 2), dtype)], -1)], dtypes=ALL)
op("split", lambda rng, dtype: [S(make(rng, (5, 4), dtype), 2), S(make(rng, (5, 4), dtype), [1, 3], 1),
                                S(make(rng, (6,), dtype), [0, 6]), S(make(rng, (2, 6), dtype), 4, -1)], dtypes=ALL,
   method=True)
op("chunk", lambda rng, dtype: [S(make(rng, (5, 4), dtype), 2), S(make(rng, (5, 4), dtype), 3, 1),
                                S(make(rng, (6,), dtype), 6)], dtypes=ALL, method=True)
op("unbind", lambda rng, dtype: [S(make(rng, (3, 4), dtype)), S(make(rng, (2, 3, 4), dtype), -1),
                                 S(make(rng, (0, 2), dtype), 1)], dtypes=ALL, method=True)


def index_select_samples(rng, dtype):
    return [S(make(rng, (5, 4), dtype), 0, index_arr(rng, (3,), 5)),
            S(make(rng, (2, 3, 4), dtype), -1, index_arr(rng, (6,), 4)),
            S(make(rng, (3,), dtype), 0, index_arr(rng, (0,), 3)),
            S(make(rng, (3, 2), dtype), 1, Arr(np.array(1), "int64", requires_grad=False))]


op("index_select", index_select_samples, dtypes=ALL, method=True)


def gather_samples(rng, dtype):
    return [S(make(rng, (3, 4), dtype), 1, index_arr(rng, (3, 6), 4)),
            S(make(rng, (3, 4), dtype), 0, index_arr(rng, (2, 4), 3)),
            S(make(rng, (2, 3, 4), dtype), -1, index_arr(rng, (2, 3, 2), 4)),
            S(make(rng, (5,), dtype), 0, index_arr(rng, (0,), 5))]


op("gather", gather_samples, dtypes=ALL, method=True)


def unique_index(rng, shape, high, dim):
    """An index whose entries along dim are distinct (scatter writes are then unordered-safe)."""
    index = np.stack([rng.permutation(high)[:shape[dim]] for _ in range(int(np.prod(shape)) // shape[dim])])
    index = index.reshape(tuple(s for i, s in enumerate(shape) if i != dim) + (shape[dim],))
    return Arr(np.moveaxis(index, -1, dim), "int64", requires_grad=False)


def scatter_samples(rng, dtype):  # src has index's shape: PyTorch's backward requires it
    return [S(make(rng, (3, 5), dtype), 1, unique_index(rng, (3, 2), 5, 1), make(rng, (3, 2), dtype)),
            S(make(rng, (4, 3), dtype), 0, unique_index(rng, (2, 3), 4, 0), make(rng, (2, 3), dtype)),
            S(make(rng, (2, 3, 4), dtype), -1, unique_index(rng, (2, 3, 3), 4, 2), make(rng, (2, 3, 3), dtype)),
            S(make(rng, (3, 5), dtype), 1, unique_index(rng, (3, 3), 5, 1), scalar_of(dtype))]


op("scatter", scatter_samples, dtypes=ALL, method=True)


def scatter_add_samples(rng, dtype):
    return [S(make(rng, (3, 5), dtype), 1, index_arr(rng, (3, 4), 5), make(rng, (3, 4), dtype)),
            S(make(rng, (4, 3), dtype), 0, index_arr(rng, (6, 3), 4), make(rng, (6, 3), dtype)),
            S(make(rng, (2, 3), dtype), -1, index_arr(rng, (2, 0), 3), make(rng, (2, 0), dtype))]


op("scatter_add", scatter_add_samples, dtypes=NUMERIC, method=True, tol={"bfloat16": (3e-2, 3e-2)})


def scatter_reduce_samples(rng, dtype):  # src has index's shape: PyTorch's backward requires it
    samples = []
    for k, reduce in enumerate(("sum", "prod", "mean", "amax", "amin")):
        include_self = k % 2 == 0
        samples += [S(make(rng, (3, 5), dtype), 1, index_arr(rng, (3, 4), 5), make(rng, (3, 4), dtype), reduce,
                      include_self=include_self),
                    S(make(rng, (4, 3), dtype), 0, index_arr(rng, (6, 2), 4), make(rng, (6, 2), dtype), reduce,
                      include_self=not include_self)]
    src = make(rng, (2, 3), dtype)
    if dtype not in ("bool",):
        src.data[0, 1] = 0  # a single zero in a product: its gradient is the product of the others
    samples += [S(make(rng, (2, 2), dtype), 1, index_arr(rng, (2, 3), 2), src, "prod"),
                S(make(rng, (2, 3), dtype), -1, index_arr(rng, (2, 0), 3), make(rng, (2, 0), dtype), "amax")]
    return samples


op("scatter_reduce", scatter_reduce_samples, dtypes=NUMERIC, method=True, tol={"bfloat16": (3e-2, 3e-2)})
op("Tensor.scatter_reduce_", scatter_reduce_samples, call=inplace("scatter_reduce_"), dtypes=NUMERIC,
   tol={"bfloat16": (3e-2, 3e-2)})


def index_add_samples(rng, dtype):
    return [S(make(rng, (5, 3), dtype), 0, index_arr(rng, (4,), 5), make(rng, (4, 3), dtype)),
            S(make(rng, (2, 6), dtype), 1, index_arr(rng, (3,), 6), make(rng, (2, 3), dtype),
              alpha=2 if dtype in INTS else 0.5),
            S(make(rng, (3,), dtype), 0, index_arr(rng, (0,), 3), make(rng, (0,), dtype))]


op("index_add", index_add_samples, dtypes=NUMERIC, method=True, tol={"bfloat16": (3e-2, 3e-2)})
# The in-place forms write into a clone when gradients are checked (inplace()).
op("Tensor.scatter_", scatter_samples, call=inplace("scatter_"), dtypes=ALL)
op("Tensor.scatter_add_", scatter_add_samples, call=inplace("scatter_add_"), dtypes=NUMERIC,
   tol={"bfloat16": (3e-2, 3e-2)})
op("Tensor.index_add_", index_add_samples, call=inplace("index_add_"), dtypes=NUMERIC, tol={"bfloat16": (3e-2, 3e-2)})


def index_fill_samples(rng, dtype):
    value = scalar_of(dtype)
    return [S(make(rng, (5, 3), dtype), 0, index_arr(rng, (2,), 5), value),
            S(make(rng, (2, 6), dtype), 1, index_arr(rng, (4,), 6), value),
            S(make(rng, (2, 3, 4), dtype), -1, Arr(np.array(2), "int64", requires_grad=False), value),
            S(make(rng, (), dtype), 0, Arr(np.array([0]), "int64", requires_grad=False), value),
            S(make(rng, (3,), dtype), 0, index_arr(rng, (0,), 3), value)]


op("index_fill", index_fill_samples, dtypes=ALL, method=True)
op("Tensor.index_fill_", index_fill_samples, call=inplace("index_fill_"), dtypes=ALL)
op("diag", lambda rng, dtype: [S(make(rng, (4,), dtype)), S(make(rng, (3,), dtype), 2), S(make(rng, (3,), dtype), -1),
                               S(make(rng, (3, 4), dtype)), S(make(rng, (4, 3), dtype), 1),
                               S(make(rng, (3, 3), dtype), -2), S(make(rng, (0,), dtype))], dtypes=ALL, method=True)
op("argwhere", lambda rng, dtype: [S(make(rng, (3, 4), dtype, -1, 1)), S(make(rng, (2, 3, 4), dtype, -1, 1)),
                                   S(make(rng, (), dtype, -1, 1)), S(make(rng, (0, 3), dtype))], dtypes=ALL,
   method=True, differentiable=False)
op("broadcast_tensors", lambda rng, dtype: [S(make(rng, (2, 1), dtype), make(rng, (3,), dtype)),
                                            S(make(rng, (), dtype), make(rng, (2, 3), dtype), make(rng, (1, 3), dtype)),
                                            S(make(rng, (4,), dtype))], dtypes=ALL)
op("masked_select", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (3, 4), "bool")),
                                        S(make(rng, (2, 3, 4), dtype), make(rng, (3, 1), "bool")),
                                        S(make(rng, (), dtype), make(rng, (2,), "bool")),
                                        S(make(rng, (0, 2), dtype), make(rng, (0, 2), "bool"))], dtypes=ALL,
   method=True)
op("nonzero", lambda rng, dtype: [S(make(rng, (3, 4), dtype, -1, 1)), S(make(rng, (2, 3, 4), dtype, -1, 1)),
                                  S(make(rng, (), dtype, -1, 1)), S(make(rng, (0, 3), dtype)),
                                  S(make(rng, (5,), dtype, -1, 1), as_tuple=True)], dtypes=ALL, method=True,
   differentiable=False)
for _name in ("tril", "triu"):
    op(_name, lambda rng, dtype: [S(make(rng, (3, 4), dtype)), S(make(rng, (2, 3, 4), dtype), 1),
                                  S(make(rng, (4, 3), dtype), -1), S(make(rng, (0, 3), dtype))], dtypes=ALL,
       method=True)
op("repeat", lambda rng, dtype: [S(make(rng, (2, 3), dtype), (2, 1)), S(make(rng, (3,), dtype), (2, 2, 1)),
                                 S(make(rng, (), dtype), (3,)), S(make(rng, (2, 1), dtype), (0, 2))], dtypes=ALL,
   call=mf_function_or_method("repeat"))
op("Tensor.repeat", lambda rng, dtype: [S(make(rng, (2, 3), dtype), 2, 1), S(make(rng, (3,), dtype), (2, 2))],
   dtypes=ALL, call=method_call("repeat"))
op("repeat_interleave", lambda rng, dtype: [S(make(rng, (2, 3), dtype), 2), S(make(rng, (2, 3), dtype), 3, 1),
                                            S(make(rng, (4,), dtype), 1, 0), S(make(rng, (0, 2), dtype), 2, 0)],
   dtypes=ALL, method=True)
op("flip", lambda rng, dtype: [S(make(rng, (3, 4), dtype), (0,)), S(make(rng, (2, 3, 4), dtype), (0, -1)),
                               S(make(rng, (5,), dtype), [0]), S(make(rng, (0, 2), dtype), (1,))], dtypes=ALL)
op("Tensor.flip", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 0, 1), S(make(rng, (2, 3), dtype), (1,))],
   dtypes=ALL, call=method_call("flip"))
op("roll", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 1), S(make(rng, (3, 4), dtype), -2, 1),
                               S(make(rng, (2, 3, 4), dtype), (1, 2), (0, 2)), S(make(rng, (5,), dtype), 7, 0)],
   dtypes=ALL, method=True)


def topk_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, distinct=True)

    return [S(x((3, 5)), 2), S(x((2, 3, 4)), 3, 1), S(x((6,)), 6, largest=False), S(x((4, 3)), 1, 0, True, True),
            S(x((3, 4)), 0)]


op("topk", topk_samples, dtypes=NUMERIC, method=True)


def sort_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, distinct=dtype != "bool")

    out = [S(x((3, 5))), S(x((2, 3, 4)), 1), S(x((6,)), descending=True), S(x(())), S(x((0, 3)), 0)]
    return out if dtype != "bool" else out[3:]


op("sort", sort_samples, dtypes=ALL, method=True)
op("argsort", sort_samples, dtypes=ALL, method=True, differentiable=False)


def index_put_samples(rng, dtype):
    rows = Arr(np.array([0, 2, 1]), "int64", requires_grad=False)
    cols = Arr(np.array([1, 1, 3]), "int64", requires_grad=False)
    return [S(make(rng, (3, 4), dtype), (rows, cols), make(rng, (3,), dtype)),
            S(make(rng, (3, 4), dtype), (rows,), make(rng, (4,), dtype)),
            S(make(rng, (3, 4), dtype), (make(rng, (3, 4), "bool"),), make(rng, (), dtype)),
            S(make(rng, (3, 4), dtype), (Arr(np.array([0, 0, 2]), "int64", requires_grad=False), cols),
              make(rng, (3,), dtype), accumulate=True)]


op("Tensor.index_put_", index_put_samples, call=inplace("index_put_"), dtypes=NUMERIC,
   tol={"bfloat16": (3e-2, 3e-2)})
op("Tensor.index_put", index_put_samples, call=method_call("index_put"), dtypes=NUMERIC,
   tol={"bfloat16": (3e-2, 3e-2)})


# Public callables of meshflow that are not ops (tested in test_tensor.py), so the
# coverage test does not ask for an OpInfo.
NOT_OPS = {
    "tensor", "as_tensor", "from_numpy", "from_dlpack", "to_dlpack", "is_tensor", "is_floating_point", "numel",
    "manual_seed", "initial_seed", "seed", "get_rng_state", "set_rng_state", "get_num_threads", "set_num_threads", "get_default_dtype", "set_default_dtype",
    "is_grad_enabled", "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "reset_peak_memory_stats", "empty_cache", "save", "load",
    # Tensor metadata, autograd and conversion to Python values
    "Tensor.size", "Tensor.stride", "Tensor.dim", "Tensor.ndimension", "Tensor.numel", "Tensor.nelement",
    "Tensor.storage_offset", "Tensor.is_contiguous", "Tensor.is_floating_point", "Tensor.element_size",
    "Tensor.data_ptr", "Tensor.item", "Tensor.tolist", "Tensor.numpy", "Tensor.backward", "Tensor.register_hook",
    "Tensor.register_post_accumulate_grad_hook",
    "Tensor.retain_grad", "Tensor.requires_grad_", "Tensor.new_zeros", "Tensor.new_ones", "Tensor.new_empty",
    "Tensor.new_full", "Tensor.new_tensor",
    # properties
    "Tensor.shape", "Tensor.dtype", "Tensor.device", "Tensor.ndim", "Tensor.is_cpu", "Tensor.is_cuda", "Tensor.cuda",
    "Tensor.pin_memory", "Tensor.is_pinned",  # tests/python/test_backends.py
    "Tensor.itemsize", "Tensor.nbytes", "Tensor.data", "Tensor.grad", "Tensor.grad_fn", "Tensor.is_leaf",
    "Tensor.requires_grad", "Tensor.output_nr", "Tensor.retains_grad",
    # the global view's conversions and metadata (tests/python/test_global.py)
    "Tensor.is_global", "Tensor.placement", "Tensor.sbp", "Tensor.to_global", "Tensor.to_local",
    # autocast state (tests/python/test_amp.py)
    "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype",
    "is_autocast_cache_enabled", "set_autocast_cache_enabled", "autocast_increment_nesting",
    "autocast_decrement_nesting", "clear_autocast_cache",
}


# torch's private ops that meshflow binds under the same names (torch.distributions uses them).
PRIVATE_OPS = ("_standard_gamma", "_standard_gamma_grad")


def public_names(mf):
    """Every public callable of meshflow, meshflow.nn.functional, meshflow.linalg and Tensor, by qualified name."""
    names = {n for n in dir(mf) if not n.startswith("_") and callable(getattr(mf, n))
             and not isinstance(getattr(mf, n), type)}
    names |= {n for n in PRIVATE_OPS if hasattr(mf, n)}
    names |= {"nn.functional." + n for n in mf.nn.functional.__all__}
    names |= {"Tensor." + n for n in dir(mf.Tensor) if not n.startswith("_")}
    names |= {"linalg." + n for n in mf.linalg.__all__ if not isinstance(getattr(mf.linalg, n), type)}
    return names


def ops_by_name():
    table = {}
    for info in OPS:
        for name in info.covered_names():
            table.setdefault(name, []).append(info)
    return table


# Linear algebra and nn.functional are described in opinfo_nn.py, torch.linalg
# in opinfo_linalg.py; importing them here, after op() is defined, adds their
# entries to OPS.
import opinfo_linalg  # noqa: E402,F401
import opinfo_nn  # noqa: E402,F401
