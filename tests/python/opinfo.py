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

BOOL = ("bool",)
INTS = ("uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
NUMERIC = INTS + FLOATS
ALL = BOOL + NUMERIC
GRAD_DTYPES = ("float32", "float64")

# (rtol, atol) per dtype; integer and bool results must match exactly.
TOLERANCE = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-5, 1e-5),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1e-2),
}


class Arr:
    """A tensor argument: exact values for its dtype (NumPy) and the dtype."""

    def __init__(self, data, dtype, requires_grad=True, noncontig=True):
        self.data = np.asarray(data)
        self.dtype = dtype
        self.requires_grad = requires_grad  # only floating tensors in a grad dtype ever do
        self.noncontig = noncontig

    def __repr__(self):
        return f"Arr({self.dtype}{list(self.data.shape)})"


class Dt:
    """A dtype argument (dtype=Dt('float64')): becomes torch.float64 / meshflow.float64."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


@dataclass
class Sample:
    args: tuple
    kwargs: dict = field(default_factory=dict)

    def __repr__(self):
        kwargs = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"({', '.join(map(repr, self.args))}{kwargs})"


def S(*args, **kwargs):
    return Sample(args, kwargs)


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


# --- input drawing -----------------------------------------------------------------------


def exact(values, dtype):
    """values rounded to what dtype holds (float64 carrier for floats)."""
    values = np.asarray(values)
    if dtype == "bool":
        return values.astype(bool)
    if dtype in INTS:
        return values.astype(np.int64)
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float64)
    if dtype == "float32":
        return values.astype(np.float32).astype(np.float64)
    if dtype == "bfloat16":  # round to nearest even on the upper 16 bits of float32
        bits = np.atleast_1d(values.astype(np.float32)).view(np.uint32).astype(np.uint64)
        one, shift = np.uint64(1), np.uint64(16)
        bits = ((bits + np.uint64(0x7FFF) + ((bits >> shift) & one)) & np.uint64(0xFFFF0000)).astype(np.uint32)
        return bits.view(np.float32).astype(np.float64).reshape(values.shape)
    return values.astype(np.float64)


def make(rng, shape, dtype, low=-3.0, high=3.0, *, distinct=False, nonzero=False, special=False, grid=None,
         requires_grad=True, noncontig=True):
    shape = tuple(shape)
    n = int(np.prod(shape))
    if dtype == "bool":
        values = rng.random(shape) < 0.5
    elif dtype in INTS:
        lo, hi = int(np.floor(low)), int(np.ceil(high))
        if dtype == "uint8":
            lo, hi = max(lo, 0), max(hi, max(lo, 0) + 1)
        if distinct:
            values = (lo + rng.permutation(n)).reshape(shape)
        else:
            values = rng.integers(lo, hi + 1, size=shape)
        if nonzero:
            values = np.where(values == 0, 1, values)
    else:
        if distinct:
            values = ((rng.permutation(n) + 0.5 * rng.random(n)) / max(n, 1) * (high - low) + low).reshape(shape)
        else:
            values = rng.uniform(low, high, size=shape)
        if grid:
            values = np.round(values / grid) * grid
        if nonzero:
            values = np.where(np.abs(values) < 0.25, np.copysign(0.5, values), values)
        if special and n >= 3:
            flat = values.reshape(-1)
            flat[rng.choice(n, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    return Arr(exact(values, dtype), dtype, requires_grad=requires_grad, noncontig=noncontig)


def index_arr(rng, shape, high, low=0):
    return Arr(rng.integers(low, high, size=shape), "int64", requires_grad=False)


def random_shape(rng, min_dims=1, max_dims=4, max_size=5):
    return tuple(int(s) for s in rng.integers(1, max_size + 1, size=int(rng.integers(min_dims, max_dims + 1))))


# Odd positions get non-contiguous inputs (see test_ops.py).
def unary_shapes(rng):
    return [(3, 4), (2, 3, 4), (), (5,), (0, 3), random_shape(rng)]


BINARY_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (3, 4)), ((), (3,)), ((2, 1, 4), (3, 1)), ((0, 3), (1, 3)),
                 ((5,), ())]


def scalar_of(dtype, low=-3, high=3):
    if dtype == "bool":
        return True
    if dtype in INTS:
        return 2 if high >= 2 else 1
    return 1.5 if high >= 1.5 else (low + high) / 2


def wider(dtype):
    """A dtype that the pair (dtype, wider(dtype)) promotes to: exercises type promotion."""
    return {"bool": "int32", "uint8": "int16", "int8": "int64", "int16": "float32", "int32": "float64",
            "int64": "float32", "float16": "float32", "bfloat16": "float16", "float32": "float64",
            "float64": "int32"}[dtype]


def unary(low=-3.0, high=3.0, kwargs=(), **kw):
    """Samples for a unary op; kwargs: extra keyword sets tried on the first shapes."""

    def samples(rng, dtype):
        out = [S(make(rng, shape, dtype, low, high, **kw)) for shape in unary_shapes(rng)]
        for i, extra in enumerate(kwargs):
            out.append(S(make(rng, unary_shapes(rng)[i % 2], dtype, low, high, **kw), **extra))
        return out

    return samples


def binary(low=-3.0, high=3.0, rhs=None, scalars=True, float_scalar=True, promote=True, inplace=False, kwargs=(),
           **kw):
    """Samples for op(input, other): broadcasting shapes, a scalar other, mixed dtypes.
    inplace: only shapes where other broadcasts to input's shape."""
    rhs = rhs or {}
    shapes = [(a, b) for a, b in BINARY_SHAPES if not inplace or np.broadcast_shapes(a, b) == a]

    def samples(rng, dtype):
        r_low, r_high = rhs.get("low", low), rhs.get("high", high)
        r_kw = {k: v for k, v in rhs.items() if k not in ("low", "high")}

        def lhs_rhs(a, b, da=dtype, db=dtype):
            return make(rng, a, da, low, high, **kw), make(rng, b, db, r_low, r_high, **{**kw, **r_kw})

        out = [S(*lhs_rhs(a, b)) for a, b in shapes]
        if scalars:
            out.append(S(make(rng, (3, 4), dtype, low, high, **kw), scalar_of(dtype, r_low, r_high)))
            if float_scalar and not inplace and dtype in INTS + BOOL:
                out.append(S(make(rng, (2, 3), dtype, low, high, **kw), 1.5 if r_high >= 1.5 else 0.5))
        if promote:
            out.append(S(*lhs_rhs((2, 3), (2, 3), dtype, wider(dtype))))
        for extra in kwargs:
            out.append(S(*lhs_rhs((3, 4), (3, 4)), **extra))
        return out

    return samples


def reduction(dims=True, keepdim=True, empty=True, distinct=False, tuple_dims=True, low=-3.0, high=3.0, kwargs=()):
    def samples(rng, dtype):
        def x(shape):
            return make(rng, shape, dtype, low, high, distinct=distinct)

        out = [S(x((3, 4))), S(x((2, 3, 4))), S(x(()))]
        if dims:
            out += [S(x((3, 4)), 1), S(x((2, 3, 4)), -1, keepdim=True) if keepdim else S(x((2, 3, 4)), -1),
                    S(x((4, 5)), 0)]
            if tuple_dims:
                out.append(S(x((2, 3, 4)), (0, 2)))
        if empty:
            out.append(S(x((0, 3))))
            if dims:
                out.append(S(x((0, 3)), 1))
        for extra in kwargs:
            out.append(S(x((3, 4)), **extra))
        return out

    return samples


def no_tensor(*samples_list):
    """Samples of factories: the same arguments whatever the dtype (Dt('?') becomes the dtype)."""

    def samples(rng, dtype):
        def fill(value):
            if isinstance(value, Dt) and value.name == "?":
                return Dt(dtype)
            return value

        return [Sample(tuple(fill(a) for a in s.args), {k: fill(v) for k, v in s.kwargs.items()}) for s in
                samples_list]

    return samples


def method_call(method):
    """call= for ops that are only Tensor methods in PyTorch (x.view(...))."""
    return lambda lib, x, *args, **kwargs: getattr(x, method)(*args, **kwargs)


def mf_function_or_method(name):
    """call= for ops meshflow has as a function but PyTorch only as a method."""
    return lambda lib, x, *args, **kwargs: (getattr(lib, name)(x, *args, **kwargs) if lib.__name__ == "meshflow"
                                            else getattr(x, name)(*args, **kwargs))


def requires_grad(value):
    if isinstance(value, (tuple, list)):
        return any(requires_grad(v) for v in value)
    return getattr(value, "requires_grad", False)


def inplace(method):
    """call= for x.<method>_(...). It writes into x itself (a non-contiguous view on odd
    samples) unless gradients are checked: then into a clone, since a leaf can't be
    written and meshflow does not differentiate in-place writes to views yet."""

    def call(lib, x, *args, **kwargs):
        target = x.clone() if requires_grad((x, args, tuple(kwargs.values()))) else x
        return getattr(target, method)(*args, **kwargs)

    return call


# --- validators for random ops ------------------------------------------------------------


def values_of(t):
    return t.double().numpy() if t.is_floating_point() else t.numpy()


def in_range(low, high):
    """Values in [low, high); float16/bfloat16 may round up to high."""

    def validate(args, out):
        v = values_of(out)
        if v.size == 0:
            return
        top_ok = v.max() <= high if str(out.dtype).split(".")[-1] in ("float16", "bfloat16") else v.max() < high
        assert v.min() >= low and top_ok, (v.min(), v.max())

    return validate


def validate_randn(args, out):
    v = values_of(out)
    if v.size >= 1000:
        assert abs(v.mean()) < 0.1 and abs(v.std() - 1) < 0.1, (v.mean(), v.std())


def validate_randint(args, out):
    ints = [a for a in args if isinstance(a, int)]
    low, high = (0, ints[0]) if len(ints) == 1 else ints[:2]
    v = out.numpy()
    assert v.size == 0 or (v.min() >= low and v.max() < high)


def validate_randperm(args, out):
    assert sorted(out.tolist()) == list(range(args[0]))


def validate_binary_values(args, out):
    v = values_of(out)
    assert np.isin(v, [0.0, 1.0]).all()


def validate_dropout(args, out):
    x = args[0].data
    p = args[1] if len(args) > 1 else 0.5
    v = values_of(out)
    kept = v != 0
    np.testing.assert_allclose(v[kept], (x / (1 - p))[kept], rtol=1e-2, atol=1e-2)


def validate_normal(args, out):
    assert np.isfinite(values_of(out)).all()


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
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    op(_name, binary(-2.0, 2.0, grid=0.5), dtypes=ALL, method=True, differentiable=False)
for _name in ("logical_and", "logical_or", "logical_xor"):
    op(_name, binary(-1.0, 1.0, grid=1.0, scalars=False), dtypes=ALL, method=True, differentiable=False)
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    op(_name, binary(0, 7, float_scalar=False, promote=False), dtypes=BOOL + INTS, method=True,
       differentiable=False)


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
op("contiguous", unary(), call=mf_function_or_method("contiguous"), dtypes=ALL, method=True)
op("clone", unary(), dtypes=ALL, method=True)

# Creation.
_SIZES = (S(2, 3, dtype=Dt("?")), S((4,), dtype=Dt("?")), S([0, 3], dtype=Dt("?")), S((), dtype=Dt("?")),
          S(3, 1, 2))
op("zeros", no_tensor(*_SIZES), dtypes=ALL, differentiable=False)
op("ones", no_tensor(*_SIZES), dtypes=ALL, differentiable=False)
op("empty", no_tensor(*_SIZES), dtypes=ALL, check="meta")
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
op("empty_like", like_samples(), dtypes=ALL, check="meta")
op("full_like", like_samples(1), dtypes=ALL, differentiable=False)
op("rand_like", like_samples(), check="meta", validate=in_range(0, 1))
op("randn_like", like_samples(), check="meta", validate=validate_normal)
op("arange", no_tensor(S(5), S(2, 9), S(1, 10, 3), S(0.0, 1.0, 0.25), S(10, 0, -3), S(5, dtype=Dt("?")),
                       S(-2, 3, 2, dtype=Dt("?")), S(0), S(-1.5, 2.5)), dtypes=("float32", "float64", "int32", "int64"),
   differentiable=False)
op("linspace", no_tensor(S(0, 1, 5), S(-2.0, 3.5, 7, dtype=Dt("?")), S(3, 3, 1), S(0, 1, 0), S(10, 0, 4)),
   dtypes=("float32", "float64"), differentiable=False)
op("eye", no_tensor(S(3), S(2, 4), S(3, 1, dtype=Dt("?")), S(0)), dtypes=ALL, differentiable=False)
op("scalar_tensor", no_tensor(S(1.5), S(3), S(2, dtype=Dt("?")), S(True, dtype=Dt("?"))), dtypes=ALL,
   differentiable=False)
op("rand", no_tensor(S(2, 3), S((40, 50)), S(0, 3, dtype=Dt("?"))), check="meta", validate=in_range(0, 1),
   dtypes=FLOATS)
op("randn", no_tensor(S(2, 3), S((40, 50)), S(0, 3, dtype=Dt("?"))), check="meta", validate=validate_randn,
   dtypes=FLOATS)
op("randint", no_tensor(S(5, (3, 4)), S(-3, 3, (100,)), S(0, 2, (0, 2)), S(10, (2,), dtype=Dt("?"))),
   check="meta", validate=validate_randint, dtypes=("int64", "int32", "float32"))
op("randperm", no_tensor(S(5), S(0), S(100)), check="meta", validate=validate_randperm, dtypes=("int64",))


def bernoulli_samples(rng, dtype):
    p = make(rng, (3, 4), dtype, 0, 1, noncontig=False)
    return [S(Arr(np.zeros((3, 4)), dtype)), S(Arr(np.ones((2, 5)), dtype)), S(p), S(make(rng, (4, 2), dtype), 0.0),
            S(make(rng, (4, 2), dtype), 1.0), S(make(rng, (30, 30), dtype), 0.25)]


op("bernoulli", bernoulli_samples, check="meta", validate=validate_binary_values, method=True)
op("bernoulli", lambda rng, dtype: bernoulli_samples(rng, dtype)[:2] + bernoulli_samples(rng, dtype)[3:5],
   method=True, differentiable=False)
op("Tensor.uniform_", lambda rng, dtype: [S(make(rng, (20, 30), dtype), -2.0, 3.0), S(make(rng, (0,), dtype))],
   call=lambda lib, x, *args: x.detach().uniform_(*args), check="meta", validate=in_range(-2, 3))
op("Tensor.normal_", lambda rng, dtype: [S(make(rng, (20, 30), dtype), 1.0, 2.0), S(make(rng, (3,), dtype))],
   call=lambda lib, x, *args: x.detach().normal_(*args), check="meta", validate=validate_normal)
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


def index_add_samples(rng, dtype):
    return [S(make(rng, (5, 3), dtype), 0, index_arr(rng, (4,), 5), make(rng, (4, 3), dtype)),
            S(make(rng, (2, 6), dtype), 1, index_arr(rng, (3,), 6), make(rng, (2, 3), dtype),
              alpha=2 if dtype in INTS else 0.5),
            S(make(rng, (3,), dtype), 0, index_arr(rng, (0,), 3), make(rng, (0,), dtype))]


op("index_add", index_add_samples, dtypes=NUMERIC, method=True, tol={"bfloat16": (3e-2, 3e-2)})
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


# Linear algebra.
_MATMUL_TOL = {"float32": (1e-4, 1e-4), "bfloat16": (3e-2, 5e-2), "float16": (3e-3, 5e-3)}


def matmul_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((3, 4)), x((4, 5))), S(x((2, 3, 4)), x((4, 2))), S(x((4,)), x((4,))), S(x((3, 4)), x((4,))),
            S(x((4,)), x((2, 4, 3))), S(x((2, 1, 3, 4)), x((5, 4, 2))), S(x((0, 4)), x((4, 3))),
            S(x((3, 0)), x((0, 2)))]


op("matmul", matmul_samples, method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("mm", lambda rng, dtype: [S(make(rng, (3, 4), dtype, -1, 1), make(rng, (4, 5), dtype, -1, 1)),
                             S(make(rng, (1, 7), dtype, -1, 1), make(rng, (7, 1), dtype, -1, 1)),
                             S(make(rng, (2, 0), dtype), make(rng, (0, 3), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("bmm", lambda rng, dtype: [S(make(rng, (2, 3, 4), dtype, -1, 1), make(rng, (2, 4, 5), dtype, -1, 1)),
                              S(make(rng, (0, 3, 4), dtype), make(rng, (0, 4, 2), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("mv", lambda rng, dtype: [S(make(rng, (3, 4), dtype, -1, 1), make(rng, (4,), dtype, -1, 1)),
                             S(make(rng, (0, 2), dtype), make(rng, (2,), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("dot", lambda rng, dtype: [S(make(rng, (5,), dtype, -1, 1), make(rng, (5,), dtype, -1, 1)),
                              S(make(rng, (0,), dtype), make(rng, (0,), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("outer", lambda rng, dtype: [S(make(rng, (3,), dtype), make(rng, (4,), dtype)),
                                S(make(rng, (0,), dtype), make(rng, (2,), dtype))], method=True)
op("addmm", lambda rng, dtype: [S(make(rng, (3, 5), dtype, -1, 1), make(rng, (3, 4), dtype, -1, 1),
                                  make(rng, (4, 5), dtype, -1, 1)),
                                S(make(rng, (5,), dtype, -1, 1), make(rng, (2, 4), dtype, -1, 1),
                                  make(rng, (4, 5), dtype, -1, 1), beta=0.5, alpha=2)],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("baddbmm", lambda rng, dtype: [S(make(rng, (2, 3, 5), dtype, -1, 1), make(rng, (2, 3, 4), dtype, -1, 1),
                                    make(rng, (2, 4, 5), dtype, -1, 1)),
                                  S(make(rng, (3, 1), dtype, -1, 1), make(rng, (2, 3, 4), dtype, -1, 1),
                                    make(rng, (2, 4, 2), dtype, -1, 1), beta=2, alpha=0.5)],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("nn.functional.linear", lambda rng, dtype: [
    S(make(rng, (3, 4), dtype, -1, 1), make(rng, (5, 4), dtype, -1, 1), make(rng, (5,), dtype)),
    S(make(rng, (2, 3, 4), dtype, -1, 1), make(rng, (2, 4), dtype, -1, 1)),
    S(make(rng, (4,), dtype, -1, 1), make(rng, (3, 4), dtype, -1, 1), make(rng, (3,), dtype)),
    S(make(rng, (0, 4), dtype), make(rng, (2, 4), dtype), make(rng, (2,), dtype))],
   tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)


# nn.functional: activations.
def f_unary(kwargs=(), low=-3.0, high=3.0):
    return unary(low, high, kwargs=kwargs)


op("nn.functional.relu", f_unary(({"inplace": False},)), dtypes=NUMERIC)
op("nn.functional.relu", unary(), call=lambda lib, x: lib.nn.functional.relu(x.clone() if x.requires_grad else x,
                                                                             inplace=True), dtypes=NUMERIC)
op("nn.functional.gelu", f_unary(({"approximate": "tanh"},)))
op("nn.functional.silu", f_unary())
op("nn.functional.leaky_relu", f_unary(({"negative_slope": 0.3},)))
op("nn.functional.elu", f_unary(({"alpha": 2.0},)))
for _name in ("silu", "leaky_relu", "elu"):
    op("nn.functional." + _name, unary(),
       call=lambda lib, x, _name=_name: getattr(lib.nn.functional, _name)(x.clone() if x.requires_grad else x,
                                                                           inplace=True))
op("nn.functional.softplus", f_unary(({"beta": 0.5, "threshold": 3.0},), -30.0, 30.0))
op("nn.functional.sigmoid", f_unary())
op("nn.functional.tanh", f_unary())


def softmax_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((3, 4)), 1), S(x((2, 3, 4)), 0), S(x((5,)), -1), S(x(()), 0), S(x((0, 3)), 1),
            S(x((2, 3)), dim=1, dtype=Dt("float64"))]


op("nn.functional.softmax", softmax_samples, aliases=("softmax",))
op("nn.functional.log_softmax", softmax_samples, aliases=("log_softmax",))
op("Tensor.softmax", lambda rng, dtype: softmax_samples(rng, dtype)[:5], call=method_call("softmax"))
op("Tensor.log_softmax", lambda rng, dtype: softmax_samples(rng, dtype)[:5], call=method_call("log_softmax"))

_NORM_TOL = {"float32": (1e-4, 1e-4), "bfloat16": (3e-2, 5e-2), "float16": (5e-3, 5e-3)}


def layer_norm_samples(rng, dtype):
    def x(shape, low=-3, high=3):
        return make(rng, shape, dtype, low, high)

    return [S(x((3, 4)), (4,)), S(x((2, 3, 4)), (3, 4), x((3, 4)), x((3, 4))), S(x((5, 6)), (6,), x((6,)), None, 1e-3),
            S(x((2, 3, 4)), [4], None, x((4,))), S(x((0, 3)), (3,))]


op("nn.functional.layer_norm", layer_norm_samples, aliases=("layer_norm",), tol=_NORM_TOL, grad_tol=_NORM_TOL)


def batch_norm_samples(rng, dtype):
    def x(shape, low=-3, high=3, **kw):
        return make(rng, shape, dtype, low, high, **kw)

    def stats(c):
        return x((c,), requires_grad=False), x((c,), 0.5, 2.0, requires_grad=False)

    return [S(x((4, 3)), *stats(3), x((3,)), x((3,)), True),
            S(x((2, 3, 4, 5)), *stats(3), None, None, True, 0.2),
            S(x((2, 3, 4)), *stats(3), x((3,)), x((3,)), False),
            S(x((4, 2, 3, 3)), None, None, x((2,)), x((2,)), True, eps=1e-3),
            S(x((3, 2)), *stats(2), training=False)]


op("nn.functional.batch_norm", batch_norm_samples, compare_inputs=True, tol=_NORM_TOL, grad_tol=_NORM_TOL)


def group_norm_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((2, 4, 3)), 2), S(x((2, 6, 2, 2)), 3, x((6,)), x((6,))), S(x((3, 4)), 2, x((4,)), x((4,)), 1e-3),
            S(x((1, 4, 5)), 1, x((4,)))]


op("nn.functional.group_norm", group_norm_samples, aliases=("group_norm",), tol=_NORM_TOL, grad_tol=_NORM_TOL)


def embedding_samples(rng, dtype):
    weight = make(rng, (10, 3), dtype)
    return [S(index_arr(rng, (4,), 10), weight), S(index_arr(rng, (2, 3), 10), make(rng, (10, 3), dtype)),
            S(Arr(np.array([0, 2, 0, 5]), "int64", requires_grad=False), make(rng, (6, 4), dtype), padding_idx=0),
            S(index_arr(rng, (0,), 10), make(rng, (10, 2), dtype))]


op("nn.functional.embedding", embedding_samples)


def dropout_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, nonzero=True)

    return [S(x((3, 4)), 0.0), S(x((2, 3)), 0.5, False), S(x((4,)), 1.0), S(x((0, 2)), 0.3), S(x(()), 0.0, True)]


op("nn.functional.dropout", dropout_samples)
op("nn.functional.dropout", lambda rng, dtype: [S(make(rng, (30, 40), dtype, nonzero=True), 0.5),
                                                S(make(rng, (10,), dtype, nonzero=True), 0.2, True)],
   check="meta", validate=validate_dropout)
op("nn.functional.dropout", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 0.0, True, True)],
   call=lambda lib, x, *args: lib.nn.functional.dropout(x.clone() if x.requires_grad else x, *args))

_LOSS_TOL = {"float32": (1e-5, 1e-5), "bfloat16": (3e-2, 3e-2), "float16": (5e-3, 5e-3)}


def target_arr(rng, shape, classes, ignore=False):
    values = rng.integers(0, classes, size=shape)
    if ignore and values.size:
        values.reshape(-1)[0] = -100
    return Arr(values, "int64", requires_grad=False)


def class_weight(rng, classes, dtype):  # PyTorch does not differentiate class weights
    return make(rng, (classes,), dtype, 0.5, 2.0, requires_grad=False)


def cross_entropy_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((4, 5)), target_arr(rng, (4,), 5)),
            S(x((4, 5)), target_arr(rng, (4,), 5, ignore=True), reduction="sum"),
            S(x((3, 4)), target_arr(rng, (3,), 4), class_weight(rng, 4, dtype), reduction="none"),
            S(x((2, 3, 4, 2)), target_arr(rng, (2, 4, 2), 3)),
            S(x((5, 3)), target_arr(rng, (5,), 3, ignore=True), class_weight(rng, 3, dtype)),
            S(x((4, 5)), target_arr(rng, (4,), 5), label_smoothing=0.1),
            S(x((3,)), Arr(np.array(1), "int64", requires_grad=False)),
            S(x((4, 5)), make(rng, (4, 5), dtype, 0, 1)),
            S(x((0, 3)), target_arr(rng, (0,), 3), reduction="sum")]


op("nn.functional.cross_entropy", cross_entropy_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)


def nll_loss_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -3, 0)

    return [S(x((4, 5)), target_arr(rng, (4,), 5)),
            S(x((4, 5)), target_arr(rng, (4,), 5, ignore=True), reduction="none"),
            S(x((3, 4)), target_arr(rng, (3,), 4), class_weight(rng, 4, dtype)),
            S(x((2, 3, 4)), target_arr(rng, (2, 4), 3), reduction="sum"),
            S(x((3,)), Arr(np.array(2), "int64", requires_grad=False)),
            S(x((4, 3)), target_arr(rng, (4,), 3), ignore_index=1)]


op("nn.functional.nll_loss", nll_loss_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)
op("nn.functional.mse_loss", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (3, 4), dtype)),
                                                 S(make(rng, (2, 3), dtype), make(rng, (2, 3), dtype), reduction="sum"),
                                                 S(make(rng, (5,), dtype), make(rng, (5,), dtype), reduction="none"),
                                                 S(make(rng, (0, 2), dtype), make(rng, (0, 2), dtype),
                                                   reduction="sum")],
   tol=_LOSS_TOL, grad_tol=_LOSS_TOL)


def weight(arr):  # PyTorch does not differentiate loss weights
    arr.requires_grad = False
    return arr


def bce_samples(rng, dtype):
    def x(shape, low=-3, high=3):
        return make(rng, shape, dtype, low, high)

    return [S(x((3, 4)), x((3, 4), 0, 1)),
            S(x((2, 3)), x((2, 3), 0, 1), weight(x((2, 3), 0.5, 2)), reduction="sum"),
            S(x((4, 3)), x((4, 3), 0, 1), pos_weight=weight(x((3,), 0.5, 3))),
            S(x((5,)), x((5,), 0, 1), weight(x((5,), 0.5, 2)), reduction="none", pos_weight=weight(x((5,), 0.5, 3)))]


op("nn.functional.binary_cross_entropy_with_logits", bce_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)

def attention_reference(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """scaled_dot_product_attention in PyTorch 1.13, which has no fused one."""
    import torch

    scores = q @ k.transpose(-2, -1) * (q.size(-1) ** -0.5 if scale is None else scale)
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return torch.softmax(scores, -1) @ v


def attention_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    keep = make(rng, (3, 5), "bool")
    keep.data[:, 0] = True  # every query attends to something
    return [S(x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6))),
            S(x((2, 2, 3, 4)), x((2, 2, 5, 4)), x((2, 2, 5, 3)), keep),
            S(x((3, 4)), x((5, 4)), x((5, 2)), x((3, 5))),
            S(x((2, 4, 3)), x((2, 4, 3)), x((2, 4, 3)), is_causal=True),
            S(x((1, 3, 4)), x((1, 5, 4)), x((1, 5, 4)), None, 0.0, False, scale=0.3)]


op("nn.functional.scaled_dot_product_attention", attention_samples, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL,
   call=lambda lib, *args, **kwargs: (lib.nn.functional.scaled_dot_product_attention(*args, **kwargs)
                                      if lib.__name__ == "meshflow" else attention_reference(*args, **kwargs)))

_CONV_TOL = {"float32": (1e-4, 1e-4), "bfloat16": (3e-2, 6e-2), "float16": (5e-3, 5e-3)}


def conv_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((2, 3, 6, 6)), x((4, 3, 3, 3)), x((4,))),
            S(x((1, 2, 7, 5)), x((3, 2, 3, 2)), None, 2, 1),
            S(x((2, 4, 6, 6)), x((4, 2, 3, 3)), x((4,)), padding=(1, 2), groups=2),
            S(x((1, 2, 8, 8)), x((2, 2, 3, 3)), dilation=2, stride=(1, 2)),
            S(x((2, 3, 5, 5)), x((2, 3, 3, 3)), x((2,)), padding="same"),
            S(x((3, 5, 5)), x((2, 3, 1, 1)), padding="valid"),
            S(x((0, 2, 4, 4)), x((3, 2, 3, 3)))]


op("nn.functional.conv2d", conv_samples, aliases=("conv2d",), tol=_CONV_TOL, grad_tol=_CONV_TOL)


def pool_input(rng, dtype, shape):
    return make(rng, shape, dtype, distinct=True)


def max_pool_samples(rng, dtype):
    return [S(pool_input(rng, dtype, (2, 3, 6, 6)), 2), S(pool_input(rng, dtype, (1, 2, 7, 5)), 3, 2, 1),
            S(pool_input(rng, dtype, (2, 2, 8, 8)), (2, 3), dilation=2),
            S(pool_input(rng, dtype, (1, 1, 5, 5)), 2, ceil_mode=True),
            S(pool_input(rng, dtype, (3, 6, 6)), 3, 1, 1),
            S(pool_input(rng, dtype, (1, 2, 6, 6)), 2, return_indices=True)]


op("nn.functional.max_pool2d", max_pool_samples)
op("max_pool2d", lambda rng, dtype: max_pool_samples(rng, dtype)[:5])
op("nn.functional.max_pool2d_with_indices", lambda rng, dtype: max_pool_samples(rng, dtype)[:5])


def avg_pool_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((2, 3, 6, 6)), 2), S(x((1, 2, 7, 5)), 3, 2, 1),
            S(x((1, 2, 7, 5)), 3, 2, 1, count_include_pad=False), S(x((1, 1, 5, 5)), 2, ceil_mode=True),
            S(x((3, 6, 6)), (2, 3), (1, 2), (1, 1))]


op("nn.functional.avg_pool2d", avg_pool_samples, tol=_NORM_TOL)
op("nn.functional.adaptive_avg_pool2d", lambda rng, dtype: [S(make(rng, (2, 3, 6, 6), dtype), 1),
                                                            S(make(rng, (1, 2, 7, 5), dtype), (3, 2)),
                                                            S(make(rng, (3, 5, 5), dtype), (5, 5)),
                                                            S(make(rng, (1, 1, 4, 6), dtype), (3, 4))],
   tol=_NORM_TOL)
op("nn.functional.pad", lambda rng, dtype: [S(make(rng, (3, 4), dtype), (1, 2)),
                                            S(make(rng, (2, 3, 4), dtype), (1, 0, 2, 1), value=scalar_of(dtype)),
                                            S(make(rng, (3, 5), dtype), (-1, 2, 0, -1)),
                                            S(make(rng, (2,), dtype), [0, 0], "constant", 0)], dtypes=ALL)
op("nn.functional.one_hot", lambda rng, dtype: [S(index_arr(rng, (4,), 5)), S(index_arr(rng, (2, 3), 3), 5),
                                                S(index_arr(rng, (0,), 3), 3)],
   dtypes=("int64",), differentiable=False)


# Public callables of meshflow that are not ops (tested in test_tensor.py), so the
# coverage test does not ask for an OpInfo.
NOT_OPS = {
    "tensor", "as_tensor", "from_numpy", "from_dlpack", "to_dlpack", "is_tensor", "is_floating_point", "numel",
    "manual_seed", "initial_seed", "get_num_threads", "set_num_threads", "get_default_dtype", "set_default_dtype",
    "is_grad_enabled", "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "reset_peak_memory_stats", "empty_cache", "save", "load",
    # Tensor metadata, autograd and conversion to Python values
    "Tensor.size", "Tensor.stride", "Tensor.dim", "Tensor.ndimension", "Tensor.numel", "Tensor.nelement",
    "Tensor.storage_offset", "Tensor.is_contiguous", "Tensor.is_floating_point", "Tensor.element_size",
    "Tensor.data_ptr", "Tensor.item", "Tensor.tolist", "Tensor.numpy", "Tensor.backward", "Tensor.register_hook",
    "Tensor.retain_grad", "Tensor.requires_grad_", "Tensor.new_zeros", "Tensor.new_ones", "Tensor.new_empty",
    "Tensor.new_full", "Tensor.new_tensor",
    # properties
    "Tensor.shape", "Tensor.dtype", "Tensor.device", "Tensor.ndim", "Tensor.is_cpu", "Tensor.is_cuda",
    "Tensor.itemsize", "Tensor.nbytes", "Tensor.data", "Tensor.grad", "Tensor.grad_fn", "Tensor.is_leaf",
    "Tensor.requires_grad", "Tensor.output_nr", "Tensor.retains_grad",
}


def public_names(mf):
    """Every public callable of meshflow, meshflow.nn.functional and Tensor, by qualified name."""
    names = {n for n in dir(mf) if not n.startswith("_") and callable(getattr(mf, n))
             and not isinstance(getattr(mf, n), type)}
    names |= {"nn.functional." + n for n in mf.nn.functional.__all__}
    names |= {"Tensor." + n for n in dir(mf.Tensor) if not n.startswith("_")}
    return names


def ops_by_name():
    table = {}
    for info in OPS:
        for name in info.covered_names():
            table.setdefault(name, []).append(info)
    return table
