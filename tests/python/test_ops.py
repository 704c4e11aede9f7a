"""Differential tests: every op of opinfo.OPS run in PyTorch and in meshflow on
the same NumPy data, forward values and input gradients compared. Each case
runs on every device meshflow can use: on the CPU, and on a CUDA device when
one is available (its inputs and gradient leaves live there; its results are
compared with PyTorch's CPU results)."""
import functools
import importlib.util
import pathlib
import zlib

import numpy as np
import pytest
import torch

import meshflow as mf
from opinfo import NOT_OPS, OPS, ops_by_name, public_names
from sampling import Arr, Dt, exact

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOW_PRECISION = ("float16", "bfloat16")
from devices import DEVICES  # noqa: E402


def _cases():
    seen = {}
    for info in OPS:
        seen[info.name] = seen.get(info.name, 0) + 1
        label = info.name if seen[info.name] == 1 else f"{info.name}#{seen[info.name]}"
        for dtype in info.dtypes:
            for device in DEVICES:
                yield pytest.param(info, dtype, device, id=f"{label}-{dtype}" + ("" if device == "cpu" else f"-{device}"))


def dtype_name(d):
    return str(d).split(".")[-1]


def lib_tensor(lib, data, dtype):
    return lib.from_numpy(np.array(data)).to(getattr(lib, dtype))


class Builder:
    """Turns sample arguments into one library's tensors; remembers the grad leaves."""

    def __init__(self, lib, layout, grad_dtypes, upcast=False, device="cpu"):
        self.lib, self.layout, self.grad_dtypes, self.upcast = lib, layout, grad_dtypes, upcast
        self.device = device
        self.leaves = []

    def __call__(self, value):
        if isinstance(value, Arr):
            return self.tensor(value)
        if isinstance(value, Dt):
            return getattr(self.lib, "float32" if self.upcast and value.name in LOW_PRECISION else value.name)
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self(v) for v in value)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        return value

    def tensor(self, arr):
        dtype = "float32" if self.upcast and arr.dtype in LOW_PRECISION else arr.dtype
        data = arr.data
        layout = self.layout if arr.noncontig and data.ndim >= 1 and data.size > 0 else None
        if layout == "transposed" and data.ndim < 2:
            layout = "strided"
        if layout == "transposed":  # the values of data, laid out column-major
            base = lib_tensor(self.lib, np.swapaxes(data, -1, -2), dtype)
        elif layout == "strided":  # every other element of a buffer twice as wide
            wide = np.zeros(data.shape[:-1] + (2 * data.shape[-1],), dtype=data.dtype)
            wide[..., ::2] = data
            base = lib_tensor(self.lib, wide, dtype)
        else:
            base = lib_tensor(self.lib, data, dtype)
        if self.device != "cpu":
            base = base.to(self.device)
        if arr.requires_grad and arr.dtype in self.grad_dtypes and not self.upcast:
            base.requires_grad_()
            self.leaves.append(base)
        if layout == "transposed":
            return base.transpose(-1, -2)
        if layout == "strided":
            return base[..., ::2]
        return base


def resolve(lib, name):
    if name.startswith("Tensor."):
        method = name[len("Tensor."):]
        return lambda x, *args, **kwargs: getattr(x, method)(*args, **kwargs)
    return functools.reduce(getattr, name.split("."), lib)


def variants(info):
    """(label, lib -> callable) for each public name the samples run through."""
    if info.call is not None:
        out = [(info.name, lambda lib: functools.partial(info.call, lib))]
    else:
        out = [(info.name, lambda lib: resolve(lib, info.name))]
    out += [(alias, lambda lib, alias=alias: resolve(lib, alias)) for alias in info.aliases]
    if info.method:
        method = "Tensor." + info.name.split(".")[-1]
        out.append((method, lambda lib: resolve(lib, method)))
    return out


def flatten(value):
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in flatten(v)]
    return [value]


def to_numpy(t):
    t = t.detach().cpu()
    return t.double().numpy() if t.is_floating_point() else t.numpy()


# Gradients are compared at the tolerance of the least precise dtype that took part.
PRECISION_RANK = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3}


def least_precise(dtypes):
    floats = [d for d in dtypes if d in PRECISION_RANK]
    return max(floats, key=PRECISION_RANK.get) if floats else None


def sample_dtypes(value):
    if isinstance(value, Arr):
        return [value.dtype]
    if isinstance(value, (tuple, list)):
        return [d for v in value for d in sample_dtypes(v)]
    if isinstance(value, dict):
        return sample_dtypes(list(value.values()))
    return []


def assert_same(t, m, info, what, meta=False, grad=False, tol_dtype=None):
    if isinstance(t, torch.Tensor):
        assert isinstance(m, mf.Tensor), f"{what}: expected a tensor, got {type(m).__name__}"
        assert dtype_name(t.dtype) == dtype_name(m.dtype), f"{what}: dtype {m.dtype} != torch's {t.dtype}"
        assert tuple(t.shape) == tuple(m.shape), f"{what}: shape {tuple(m.shape)} != torch's {tuple(t.shape)}"
        if meta:
            return
        expected, actual = to_numpy(t), to_numpy(m)
        if t.is_floating_point():
            rtol, atol = info.tolerance(least_precise([dtype_name(t.dtype), tol_dtype]), grad)
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=what)
    elif isinstance(t, (tuple, list)):
        assert isinstance(m, (tuple, list)) and len(t) == len(m), f"{what}: expected {len(t)} results, got {m!r}"
        for i, (a, b) in enumerate(zip(t, m)):
            assert_same(a, b, info, f"{what}[{i}]", meta, grad, tol_dtype)
    elif isinstance(t, torch.dtype):
        assert dtype_name(t) == dtype_name(m), f"{what}: {m} != torch's {t}"
    else:
        assert t == m, f"{what}: {m!r} != torch's {t!r}"


def run_torch(fn, sample, layout, grad_dtypes, dtype):
    """Runs the sample in PyTorch; float16/bfloat16 ops PyTorch lacks on the CPU run in
    float32 and are rounded back, so meshflow is still checked against a reference."""
    build = Builder(torch, layout, grad_dtypes)
    args, kwargs = build(sample.args), build(sample.kwargs)
    try:
        return fn(torch)(*args, **kwargs), build, args, False
    except RuntimeError as error:
        if dtype not in LOW_PRECISION or "not implemented for" not in str(error):
            raise
    build = Builder(torch, layout, grad_dtypes, upcast=True)
    args, kwargs = build(sample.args), build(sample.kwargs)
    out = fn(torch)(*args, **kwargs)
    low = getattr(torch, dtype)

    def round_back(value):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            return value.to(low)
        if isinstance(value, (tuple, list)):
            return type(value)(round_back(v) for v in value) if not hasattr(value, "_fields") else \
                type(value)(*(round_back(v) for v in value))
        return value

    return round_back(out), build, round_back(args), True


def check_gradients(info, sample, t_out, m_out, t_build, m_build, rng, what):
    t_flat, m_flat = flatten(t_out), flatten(m_out)
    pairs = []
    for i, (t, m) in enumerate(zip(t_flat, m_flat)):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            assert m.requires_grad == t.requires_grad, f"{what}[{i}]: requires_grad {m.requires_grad} != torch's"
            if t.requires_grad:
                pairs.append((t, m))
    if not pairs or not t_build.leaves:
        return
    cotangents = [exact(rng.standard_normal(tuple(t.shape)), dtype_name(t.dtype)) for t, _ in pairs]
    try:
        t_grads = torch.autograd.grad([t for t, _ in pairs], t_build.leaves,
                                      [lib_tensor(torch, c, dtype_name(t.dtype)) for c, (t, _) in
                                       zip(cotangents, pairs)], allow_unused=True)
    except RuntimeError as error:  # PyTorch's backward of a float16 input it can't compute on the CPU
        if "not implemented for 'Half'" in str(error):
            return
        raise
    m_grads = mf.autograd.grad([m for _, m in pairs], m_build.leaves,
                               [lib_tensor(mf, c, dtype_name(t.dtype)).to(m_build.device)
                                for c, (t, _) in zip(cotangents, pairs)],
                               allow_unused=True)
    for i, (tg, mg, leaf) in enumerate(zip(t_grads, m_grads, t_build.leaves)):
        tg = torch.zeros_like(leaf) if tg is None else tg
        mg = mf.zeros(tuple(leaf.shape), dtype=getattr(mf, dtype_name(leaf.dtype))) if mg is None else mg
        involved = sample_dtypes(sample.args) + sample_dtypes(sample.kwargs) + [dtype_name(t.dtype) for t, _ in pairs]
        assert_same(tg, mg, info, f"{what} grad of input {i}", grad=True, tol_dtype=least_precise(involved))


@pytest.mark.parametrize("info,dtype,device", list(_cases()))
def test_op(info, dtype, device):
    grad_dtypes = info.checked_grad_dtypes()
    seed = zlib.crc32(f"{info.name}-{dtype}-{len(info.aliases)}".encode())
    rng = np.random.default_rng(seed)
    samples = info.samples(rng, dtype)
    assert samples, "no samples"
    for i, sample in enumerate(samples):
        layout = None
        if info.noncontig and i % 2 == 1:
            layout = "strided" if i % 4 == 1 else "transposed"
        for label, fn in variants(info):
            what = f"{label}{sample!r} [{dtype}, {layout or 'contiguous'}]"
            t_out, t_build, t_args, upcast = run_torch(fn, sample, layout, grad_dtypes, dtype)
            m_build = Builder(mf, layout, () if upcast else grad_dtypes, device=device)
            m_args, m_kwargs = m_build(sample.args), m_build(sample.kwargs)
            m_out = fn(mf)(*m_args, **m_kwargs)
            if device != "cpu" and info.signs is not None:
                t_out, m_out = info.signs(torch, t_out), info.signs(mf, m_out)
            meta = info.check == "meta"
            assert_same(t_out, m_out, info, what, meta=meta)
            if meta and info.validate is not None:
                info.validate(sample.args, m_out)
            if info.compare_inputs:
                assert_same(t_args, m_args, info, f"{what} inputs after the call")
            if not upcast:
                check_gradients(info, sample, t_out, m_out, t_build, m_build, rng, what)


def test_every_public_op_has_an_entry():
    covered = set(ops_by_name())
    missing = sorted(n for n in public_names(mf) if n not in covered and n not in NOT_OPS)
    assert not missing, f"public ops without an OpInfo in tests/python/opinfo.py: {missing}"


def test_entries_name_public_ops():
    public = public_names(mf)
    stale = sorted(n for n in ops_by_name() if n not in public)
    stale += sorted(n for n in NOT_OPS if n not in public)
    assert not stale, f"opinfo names that meshflow does not have: {stale}"


def load_table_generator():
    spec = importlib.util.spec_from_file_location("gen_ops_table", ROOT / "tools" / "gen_ops_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ops_table_is_current():
    table = (ROOT / "docs" / "ops.md").read_text()
    assert table == load_table_generator().render(), "docs/ops.md is stale: run tools/gen_ops_table.py"
    missing = [n for n in sorted(public_names(mf) - NOT_OPS) if f"`{n}`" not in table]
    assert not missing, f"public ops missing from docs/ops.md: {missing}"


def test_ops_table_has_a_column_per_device_and_the_cpu_runs_every_op():
    lines = (ROOT / "docs" / "ops.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| op |"))
    devices = [c.strip() for c in header.strip("|").split("|")][3:]
    assert devices == sorted(mf.ops.coverage())
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| `")]
    assert rows and all(len(row) == 3 + len(devices) for row in rows)
    cpu = devices.index("cpu") + 3
    assert all(row[cpu] in ("yes", "any") for row in rows), [row[0] for row in rows if row[cpu] not in ("yes", "any")]
    # An op that runs a kernel a device lacks is marked there.
    assert load_table_generator().device_cells({"add", "sub"}, {"cpu": set(), "x": {"sub"}}) == ["yes", "-"]
    assert load_table_generator().device_cells(set(), {"cpu": set(), "x": {"sub"}}) == ["any", "any"]


# C++ functions reached from Python under another name.
CPP_TO_PYTHON = {"to": "Tensor.to", "cast": "Tensor.to", "from_vector": "tensor", "from_data": "tensor",
                 "slice": "Tensor.__getitem__", "index": "Tensor.__getitem__", "sum_to": "Tensor.sum_to_size",
                 "channel_dropout": "dropout2d",  # dropout1d/2d/3d
                 "standard_gamma": "_standard_gamma", "standard_gamma_grad": "_standard_gamma_grad",
                 "apply_unary_": "Tensor.exp_"}  # the in-place unary forms


def test_every_cpp_op_is_bound():
    """Each function of include/meshflow/ops/*.h is reachable from Python, so an op
    that lands in the C++ API without a binding fails here."""
    import re

    declared = set()
    for header in sorted((ROOT / "include" / "meshflow" / "ops").glob("*.h")):
        declared |= set(re.findall(r"^(?:Tensor&?|TensorList|ValuesIndices|DType|Shape) +(\w+)\(",
                                   header.read_text(), flags=re.M))
    assert len(declared) > 150, sorted(declared)

    def reachable(name):
        name = CPP_TO_PYTHON.get(name, name)
        owner, _, attr = name.rpartition(".")
        if owner == "Tensor":
            return hasattr(mf.Tensor, attr)
        return any(hasattr(module, name) for module in (mf, mf.nn.functional, mf.Tensor, mf.linalg))

    missing = sorted(n for n in declared if not reachable(n))
    assert not missing, f"C++ ops without a Python binding: {missing}"
