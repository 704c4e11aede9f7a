"""Drawing inputs for the op descriptions in opinfo.py: tensor arguments as
NumPy data with a dtype (Arr), values exact in that dtype, the standard
shape sets (0-size, 0-d, broadcasting) and sample builders shared by many
ops, and validators for the results of random ops."""
from dataclasses import dataclass, field

import numpy as np

BOOL = ("bool",)
INTS = ("uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
NUMERIC = INTS + FLOATS
ALL = BOOL + NUMERIC


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
    return t.double().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()


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
    v = out.cpu().numpy()
    assert v.size == 0 or (v.min() >= low and v.max() < high)


def validate_randperm(args, out):
    assert sorted(out.tolist()) == list(range(args[0]))


def validate_multinomial(args, out):
    weights = np.atleast_2d(args[0].data)
    drawn = np.atleast_2d(values_of(out)).astype(np.int64)
    replacement = args[2] if len(args) > 2 else False
    for row, picks in zip(weights, drawn):
        assert (row[picks] > 0).all()
        if not replacement:
            assert len(set(picks.tolist())) == len(picks)


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
