"""meshflow.testing: assert_close (and the deprecated assert_allclose), as torch.testing.

assert_close(actual, expected) checks that two tensors (or numbers, or sequences and mappings of them,
compared element by element) have the same shape, dtype and values within rtol and atol:
|actual - expected| <= atol + rtol * |expected|. The default tolerances depend on the dtype as in
PyTorch (float32: rtol 1.3e-6, atol 1e-5; float64: 1e-7, 1e-7; integers and bool: exact). A mismatch
raises AssertionError with PyTorch's message: the number of mismatched elements and the greatest
absolute and relative differences with their index.
"""
import collections.abc
import math

import numpy as np

__all__ = ["assert_close", "assert_allclose", "make_tensor"]

# dtype name -> (rtol, atol), PyTorch's defaults
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7)}


def _mf():
    import meshflow
    return meshflow


def _dtype_name(dtype):
    return str(dtype).split(".")[-1]


def _tolerances(dtype, rtol, atol):
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no {'rtol' if rtol is None else 'atol'}.")
    if rtol is not None:
        return rtol, atol
    return _TOLERANCES.get(_dtype_name(dtype), (0.0, 0.0))


def _as_array(t):
    mf = _mf()
    if t.is_global:
        t = t.to_global(sbp=[mf.sbp.broadcast] * len(t.sbp)).to_local()
    t = t.detach()
    if _dtype_name(t.dtype) in ("float16", "bfloat16"):
        t = t.float()
    return t.numpy()


def _fail(msg, default):
    if msg is None:
        raise AssertionError(default)
    raise AssertionError(msg(default) if callable(msg) else msg)


def _index(flat_index, shape):
    return tuple(int(i) for i in np.unravel_index(flat_index, shape)) if shape else ()


def _compare_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, check_stride, msg, path):
    mf = _mf()
    where = f" at {path}" if path else ""
    if tuple(actual.shape) != tuple(expected.shape):
        _fail(msg, f"The values for attribute 'shape' do not match: {mf.Size(actual.shape)} != "
                   f"{mf.Size(expected.shape)}{where}.")
    if check_dtype and actual.dtype != expected.dtype:
        _fail(msg, f"The values for attribute 'dtype' do not match: {actual.dtype} != {expected.dtype}{where}.")
    if check_stride and actual.stride() != expected.stride():
        _fail(msg, f"The values for attribute 'stride()' do not match: {actual.stride()} != {expected.stride()}"
                   f"{where}.")
    rtol, atol = _tolerances(actual.dtype if check_dtype else expected.dtype, rtol, atol)
    a, e = _as_array(actual), _as_array(expected)
    if a.dtype == np.bool_ or e.dtype == np.bool_:
        a, e = a.astype(np.int64), e.astype(np.int64)
    if a.dtype.kind != "f" and e.dtype.kind != "f":
        a, e = a.astype(np.int64), e.astype(np.int64)
        close = a == e
    else:
        a, e = a.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.abs(a - e) <= atol + rtol * np.abs(e)
            close |= a == e  # equal infinities
            if equal_nan:
                close |= np.isnan(a) & np.isnan(e)
    if close.all():
        return
    total, bad = close.size, int((~close).sum())
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = diff / np.abs(e.astype(np.float64))
        rel = np.where(np.isnan(rel), np.inf, rel)
    ai, ri = int(np.argmax(diff)), int(np.argmax(rel))
    exact = rtol == 0 and atol == 0
    verdict = "equal" if exact else "close"

    def allowed(tol):
        return "" if exact else f" (up to {tol} allowed)"

    if actual.dim() == 0:
        text = (f"Scalars are not {verdict}!{where}\n\n"
                f"Absolute difference: {_num(diff.reshape(-1)[ai])}{allowed(atol)}\n"
                f"Relative difference: {_num(rel.reshape(-1)[ri])}{allowed(rtol)}")
    else:
        text = (f"Tensor-likes are not {verdict}!{where}\n\n"
                f"Mismatched elements: {bad} / {total} ({100 * bad / total:.1f}%)\n"
                f"Greatest absolute difference: {_num(diff.reshape(-1)[ai])} at index {_index(ai, a.shape)}"
                f"{allowed(atol)}\n"
                f"Greatest relative difference: {_num(rel.reshape(-1)[ri])} at index {_index(ri, a.shape)}"
                f"{allowed(rtol)}")
    _fail(msg, text)


def _num(v):
    v = float(v)
    return int(v) if v.is_integer() and not math.isinf(v) else v


def _to_tensor(value, like=None):
    mf = _mf()
    if isinstance(value, mf.Tensor):
        return value
    if isinstance(value, bool):
        return mf.tensor(value)
    if isinstance(value, (int, float)):
        return mf.tensor(value, dtype=mf.int64 if isinstance(value, int) else mf.float64)
    if isinstance(value, np.ndarray):
        return mf.from_numpy(np.ascontiguousarray(value))
    return None


def _compare(actual, expected, path, **kw):
    mf = _mf()
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected, collections.abc.Mapping):
        if set(actual) != set(expected):
            _fail(kw["msg"], f"The keys of the mappings do not match{' at ' + path if path else ''}: "
                              f"{sorted(map(str, actual))} != {sorted(map(str, expected))}")
        for key in expected:
            _compare(actual[key], expected[key], f"{path}[{key!r}]" if path else f"item [{key!r}]", **kw)
        return
    sequence = (collections.abc.Sequence,)
    if (isinstance(actual, sequence) and isinstance(expected, sequence) and not isinstance(actual, str)
            and not isinstance(expected, str)):
        if len(actual) != len(expected):
            _fail(kw["msg"], f"The length of the sequences mismatch: {len(actual)} != {len(expected)}"
                              f"{' at ' + path if path else ''}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{path}[{i}]" if path else f"item [{i}]", **kw)
        return
    a, e = _to_tensor(actual), _to_tensor(expected)
    if a is None or e is None:
        if actual == expected:
            return
        raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and "
                        f"{type(expected)}.")
    if not kw["allow_subclasses"] and type(actual) is not type(expected):
        raise TypeError(f"Comparing {type(actual)} and {type(expected)} needs allow_subclasses=True")
    # numbers are compared as numbers (their dtype is the other side's when one is a tensor)
    check_dtype = kw["check_dtype"] and isinstance(actual, mf.Tensor) == isinstance(expected, mf.Tensor)
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        check_dtype = kw["check_dtype"] and type(actual) is type(expected)
    _compare_tensors(a, e, kw["rtol"], kw["atol"], kw["equal_nan"], check_dtype, kw["check_stride"], kw["msg"], path)


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Raises AssertionError unless actual and expected are close (see the module's doc)."""
    _compare(actual, expected, "", allow_subclasses=allow_subclasses, rtol=rtol, atol=atol, equal_nan=equal_nan,
             check_dtype=check_dtype, check_stride=check_stride, msg=msg)


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """The deprecated form: dtypes may differ, NaNs compare equal by default."""
    _compare(actual, expected, "", allow_subclasses=True, rtol=rtol, atol=atol, equal_nan=equal_nan,
             check_dtype=False, check_stride=False, msg=msg or None)


def make_tensor(*shape, dtype, device=None, low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False):
    """A tensor of random values in [low, high) (PyTorch's defaults: [-9, 9) for floats and signed integers,
    [0, 10) for uint8, booleans uniform)."""
    mf = _mf()
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if noncontiguous and shape and shape[-1] > 1:
        # every other element of a twice as wide tensor
        wide = make_tensor(*shape[:-1], 2 * shape[-1], dtype=dtype, low=low, high=high, exclude_zero=exclude_zero)
        t = wide[..., ::2]
        return t.requires_grad_(True) if requires_grad else t
    name = _dtype_name(dtype)
    if name == "bool":
        t = mf.randint(0, 2, shape).bool()
    elif name in ("uint8", "int8", "int16", "int32", "int64"):
        lo = 0 if name == "uint8" and low is None else (-9 if low is None else int(low))
        hi = 10 if high is None else int(high)
        t = mf.randint(lo, hi, shape, dtype=dtype)
    else:
        lo, hi = (-9.0 if low is None else low), (9.0 if high is None else high)
        t = (mf.rand(shape, dtype=mf.float64) * (hi - lo) + lo).to(dtype)
    if exclude_zero:
        t = mf.where(t == 0, mf.ones_like(t), t)
    if requires_grad:
        t.requires_grad_(True)
    return t
