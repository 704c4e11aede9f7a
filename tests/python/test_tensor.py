"""The Tensor API from Python: construction, NumPy and DLPack exchange, indexing,
printing, Python protocols and operators, autograd, grad mode and utilities,
each checked against PyTorch where PyTorch defines the behaviour."""
import gc
import operator

import numpy as np
import pytest
import torch

import meshflow as mf


def name(dtype):
    return str(dtype).split(".")[-1]


def assert_like_torch(m, t):
    """m (meshflow) equals t (torch): dtype, shape and values."""
    assert isinstance(m, mf.Tensor)
    assert name(m.dtype) == name(t.dtype)
    assert tuple(m.shape) == tuple(t.shape)
    expected = t.detach().double().numpy() if t.is_floating_point() else t.detach().numpy()
    actual = m.detach().double().numpy() if m.is_floating_point() else m.detach().numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6, equal_nan=True)


# --- construction ------------------------------------------------------------------------

DATA = [
    [1, 2, 3], [1.5, 2, 3], [True, False], [[1, 2], [3, 4]], [[1.0], [2.5]], 3, 2.5, True, [], [[]],
    [True, 2], [1, 2.0], [[[1, 2, 3]], [[4, 5, 6]]], (1, 2), [(1, 2), (3, 4)], [np.float64(1.5), 2], [np.int64(3)],
]


@pytest.mark.parametrize("data", DATA, ids=repr)
def test_tensor_from_python_data(data):
    assert_like_torch(mf.tensor(data), torch.tensor(data))


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                                   "float32", "float64"])
def test_tensor_with_dtype(dtype):
    data = [[0, 1.5, -2], [3, 0.25, 7]]
    assert_like_torch(mf.tensor(data, dtype=getattr(mf, dtype)), torch.tensor(data, dtype=getattr(torch, dtype)))


@pytest.mark.parametrize("np_dtype", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                                      "float64"])
def test_tensor_from_numpy_array_copies(np_dtype):
    a = (np.arange(12).reshape(3, 4) % 3).astype(np_dtype)
    t = mf.tensor(a)
    assert_like_torch(t, torch.tensor(a))
    a[0, 0] = 1 - a[0, 0]
    assert t[0, 0].item() != a[0, 0].item()


def test_tensor_from_a_list_of_torch_scalars():
    assert mf.tensor([torch.tensor(1.5), torch.tensor(2)]).tolist() == [1.5, 2.0]


def test_deepcopy():
    import copy

    x = mf.tensor([1.0, 2.0], requires_grad=True)
    y = copy.deepcopy(x)
    assert y.requires_grad and y.is_leaf and y.data_ptr() != x.data_ptr() and y.tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="deepcopy"):
        copy.deepcopy(x * 2)


def test_tensor_from_tensor_and_scalar_tensors():
    base = mf.tensor([1.0, 2.0], requires_grad=True)
    copy = mf.tensor(base)
    assert not copy.requires_grad and copy.tolist() == [1.0, 2.0]
    assert mf.tensor([mf.tensor(1), mf.tensor(2)]).tolist() == [1, 2]
    assert mf.tensor(np.float32(2.5)).dtype == mf.float32


def test_tensor_requires_grad_and_device():
    t = mf.tensor([1.0, 2.0], requires_grad=True, device="cpu")
    assert t.requires_grad and t.is_leaf and t.device == mf.device("cpu") and t.is_cpu


def test_tensor_bad_data():
    with pytest.raises(ValueError, match="expected sequence of length 2 at dim 1"):
        mf.tensor([[1, 2], [3]])
    with pytest.raises(ValueError):
        torch.tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="tensor: could not convert"):
        mf.tensor(["a"])
    with pytest.raises(TypeError):
        mf.tensor([1, None])


def test_as_tensor_shares_when_it_can():
    a = np.arange(4.0)
    t = mf.as_tensor(a)
    a[0] = 7
    assert t[0].item() == 7
    assert mf.as_tensor(t) is not None and mf.as_tensor(t, dtype=mf.int32).dtype == mf.int32
    assert mf.as_tensor([1, 2]).tolist() == [1, 2]


def test_factories_accept_size_forms():
    for lib in (mf, torch):
        assert tuple(lib.zeros(2, 3).shape) == (2, 3)
        assert tuple(lib.ones((2, 3)).shape) == (2, 3)
        assert tuple(lib.empty([4]).shape) == (4,)
        assert tuple(lib.zeros(()).shape) == ()
    assert mf.zeros(2, dtype=mf.int32, requires_grad=False).dtype == mf.int32
    x = mf.ones(2, 2, requires_grad=True)
    assert x.requires_grad and x.is_leaf


def test_new_factories_follow_the_tensor():
    x = mf.ones(2, dtype=mf.float64)
    assert x.new_zeros((3,)).dtype == mf.float64 and x.new_ones(2).tolist() == [1.0, 1.0]
    assert x.new_full((2,), 5).tolist() == [5.0, 5.0]
    assert x.new_tensor([1, 2]).dtype == mf.float64
    assert tuple(x.new_empty((2, 1)).shape) == (2, 1)


def test_default_dtype():
    assert mf.get_default_dtype() == mf.float32
    mf.set_default_dtype(mf.float64)
    try:
        assert mf.tensor([1.5]).dtype == mf.float64 and mf.zeros(1).dtype == mf.float64
        assert mf.full((1,), 2.5).dtype == mf.float64
    finally:
        mf.set_default_dtype(mf.float32)
    with pytest.raises(TypeError):
        mf.set_default_dtype(mf.int32)


# --- dtypes and devices --------------------------------------------------------------------


def test_dtypes_have_pytorch_names_and_aliases():
    for d in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"):
        assert repr(getattr(mf, d)) == "meshflow." + d
        assert getattr(mf, d).is_floating_point == getattr(torch, d).is_floating_point
        assert getattr(mf, d).itemsize == torch.tensor([], dtype=getattr(torch, d)).element_size()
    assert (mf.float, mf.double, mf.half, mf.long, mf.int, mf.short) == (
        mf.float32, mf.float64, mf.float16, mf.int64, mf.int32, mf.int16)
    assert mf.promote_types(mf.uint8, mf.int8) == mf.int16
    assert isinstance(mf.float32, mf.dtype)


def test_device():
    d = mf.device("cpu")
    assert d.type == "cpu" and str(d) == "cpu" and repr(d) == "device(type='cpu')"
    assert d == mf.device("cpu") and hash(d) == hash(mf.device("cpu"))
    assert mf.zeros(1).device == d
    with pytest.raises(ValueError, match="tpu"):
        mf.device("tpu")


# --- NumPy -----------------------------------------------------------------------------


def test_from_numpy_shares_memory_both_ways():
    a = np.zeros((2, 3), dtype=np.float32)
    t = mf.from_numpy(a)
    a[0, 1] = 5
    assert t[0, 1].item() == 5
    t[1, 2] = 7
    assert a[1, 2] == 7
    t.add_(1)
    assert a[0, 0] == 1


def test_from_numpy_keeps_the_array_alive_and_handles_strides():
    a = np.arange(24, dtype=np.int64).reshape(4, 6)
    t = mf.from_numpy(a[::2, 1::2])
    u = mf.from_numpy(a.T)
    del a
    gc.collect()
    assert t.tolist() == [[1, 3, 5], [13, 15, 17]]
    assert u.stride() == (1, 6) and u[2, 1].item() == 8


def test_from_numpy_rejects_what_it_cannot_share():
    with pytest.raises(TypeError, match="from_numpy"):
        mf.from_numpy(np.zeros(2, dtype=np.complex64))
    with pytest.raises(ValueError, match="negative strides"):
        mf.from_numpy(np.arange(4)[::-1])
    with pytest.raises(TypeError, match="from_numpy: expected np.ndarray"):
        mf.from_numpy([1, 2])


def test_numpy_shares_memory_and_keeps_the_tensor_alive():
    t = mf.arange(6).reshape(2, 3)
    a = t.numpy()
    a[0, 0] = 9
    assert t[0, 0].item() == 9
    t[1, 1] = -1
    assert a[1, 1] == -1
    view = mf.arange(10.0)[::3].numpy()
    del t
    gc.collect()
    assert a.tolist() == [[9, 1, 2], [3, -1, 5]]
    assert view.tolist() == [0.0, 3.0, 6.0, 9.0]
    transposed = mf.arange(6.0).reshape(2, 3).T.numpy()
    assert transposed.shape == (3, 2) and transposed[2, 1] == 5.0


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                                   "float64"])
def test_numpy_round_trip(dtype):
    a = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
    back = mf.from_numpy(a).numpy()
    assert back.dtype == a.dtype and (back == a).all()
    assert np.asarray(mf.from_numpy(a)).dtype == a.dtype
    assert np.asarray(mf.from_numpy(a), dtype=np.float64).dtype == np.float64


def test_numpy_refuses_grad_and_bfloat16():
    with pytest.raises(RuntimeError, match="requires grad"):
        mf.ones(2, requires_grad=True).numpy()
    assert mf.ones(2, requires_grad=True).numpy(force=True).tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="bfloat16"):
        mf.ones(2, dtype=mf.bfloat16).numpy()


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^"])
def test_numpy_array_operands(op):
    ints = op in ("&", "|", "^")
    for expr in ("t {} a", "t {} s", "s {} t"):  # what PyTorch 1.13 accepts
        results = []
        for lib in (torch, mf):
            t = lib.tensor([1, 2, 3]) if ints else lib.tensor([1.0, 2.5, 3.0])
            env = {"t": t, "a": np.array([3, 1, 2]) if ints else np.array([0.5, 2.0, 1.5]),
                   "s": np.int64(2) if ints else np.float64(2.0)}
            results.append(eval(expr.format(op), env))
        assert_like_torch(results[1], results[0])
    # An array on the left reads as a tensor too (PyTorch 1.13 refuses it).
    a, t = (np.array([3, 1, 2]), mf.tensor([1, 2, 3])) if ints else (np.array([0.5, 2.0, 1.5]), mf.tensor([1.0, 2.5]))
    if not ints:
        a = a[:2]
    expected = eval(f"a {op} t.numpy()")
    np.testing.assert_allclose(eval(f"a {op} t").numpy(), expected, rtol=1e-6)


# --- DLPack ----------------------------------------------------------------------------------

DLPACK_DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


@pytest.mark.parametrize("dtype", DLPACK_DTYPES)
def test_dlpack_from_torch_shares_memory(dtype):
    src = torch.arange(12).reshape(3, 4).to(getattr(torch, dtype))
    t = mf.from_dlpack(src)
    assert name(t.dtype) == dtype and tuple(t.shape) == (3, 4)
    src[1, 2] = 0
    assert t[1, 2].item() == 0
    transposed = mf.from_dlpack(src.t())
    assert transposed.stride() == (1, 4)
    assert_like_torch(transposed, src.t())


@pytest.mark.parametrize("dtype", DLPACK_DTYPES)
def test_dlpack_to_torch_shares_memory(dtype):
    src = mf.arange(12).reshape(3, 4).to(getattr(mf, dtype))
    t = torch.from_dlpack(src)
    assert name(t.dtype) == dtype
    assert_like_torch(src, t)
    t[0, 1] = 3
    assert src[0, 1].item() == 3
    assert torch.from_dlpack(src.T).stride() == (1, 4)


def test_dlpack_lifetimes_and_legacy_capsules():
    src = mf.arange(5.0)
    t = torch.utils.dlpack.from_dlpack(mf.to_dlpack(src))
    del src
    gc.collect()
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    back = mf.from_dlpack(torch.utils.dlpack.to_dlpack(torch.ones(3)))
    gc.collect()
    assert back.tolist() == [1.0, 1.0, 1.0]
    capsule = mf.to_dlpack(mf.ones(2))
    mf.from_dlpack(capsule)
    with pytest.raises(ValueError, match="consumed"):
        mf.from_dlpack(capsule)
    unused = mf.to_dlpack(mf.ones(2))
    del unused  # an unconsumed capsule frees its tensor
    assert mf.from_dlpack(mf.tensor([True, False])).tolist() == [True, False]
    with pytest.raises(RuntimeError, match="requires grad"):
        mf.ones(1, requires_grad=True).__dlpack__()
    assert mf.ones(1).__dlpack_device__() == (1, 0)


# --- indexing ---------------------------------------------------------------------------

INDEX_EXPRESSIONS = [
    "[1]", "[-1]", "[1:3]", "[::2]", "[1:, ::3]", "[..., 2]", "[None]", "[:, None, 1]", "[1, ..., None]", "[True]",
    "[False]", "[[0, 2]]", "[[0, 2], [1, 3]]", "[:, [0, 2]]", "[[0, 2], :, [1, 4]]", "[[[0], [1]], [[2, 3]]]",
    "[..., [1, 2]]", "[(0, 1)]", "[mask]", "[mask2]", "[idx]", "[0, idx]", "[idx, 1:3, idx]", "[1, 2, 3]", "[1:1]",
    "[-10:10]", "[[True, False, True, False]]", "[scalar_idx]", "[bool_scalar]", "[np.array([0, 3])]",
    "[np.int64(2), 1]", "[idx, None, idx]",
]


def index_env(lib, t):
    return {"t": t, "np": np, "mask": t > 50, "mask2": t[:, :, 0] > 30, "idx": lib.tensor([1, 0, 3]),
            "scalar_idx": lib.tensor(2), "bool_scalar": lib.tensor(True)}


@pytest.mark.parametrize("expr", INDEX_EXPRESSIONS)
def test_getitem_like_torch(expr):
    data = np.arange(120.0).reshape(4, 5, 6)
    t_src = torch.tensor(data, requires_grad=True)
    m_src = mf.tensor(data, requires_grad=True)
    t_out = eval("t" + expr, index_env(torch, t_src))
    m_out = eval("t" + expr, index_env(mf, m_src))
    assert_like_torch(m_out, t_out)
    cotangent = np.random.default_rng(0).standard_normal(tuple(t_out.shape))
    t_out.backward(torch.tensor(cotangent))
    m_out.backward(mf.tensor(cotangent))
    assert_like_torch(m_src.grad, t_src.grad)


@pytest.mark.parametrize("expr", INDEX_EXPRESSIONS)
@pytest.mark.parametrize("value", ["scalar", "tensor"])
def test_setitem_like_torch(expr, value):
    data = np.arange(120.0).reshape(4, 5, 6)
    results = []
    for lib in (torch, mf):
        t = lib.tensor(data)
        env = index_env(lib, t)
        target_shape = tuple(eval("t" + expr, env).shape)
        if value == "scalar":
            v = -1.5
        else:  # broadcasts along the first dims
            v = lib.tensor(np.linspace(-1, 1, target_shape[-1] if target_shape else 1))
        exec("t" + expr + " = v", {**env, "v": v})
        results.append(t)
    assert_like_torch(results[1], results[0])


def test_setitem_keeps_autograd_history():
    for lib in (torch, mf):
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        y[1] = x[0] * 5
        y.sum().backward()
        assert x.grad.tolist() == [7.0, 0.0, 2.0]


def test_setitem_from_python_and_numpy_values():
    t = mf.zeros(2, 3)
    t[0] = [1, 2, 3]
    t[1, 1:] = np.array([5.0, 6.0])
    t[:, 0] = mf.tensor([7, 8])
    assert t.tolist() == [[7.0, 2.0, 3.0], [8.0, 5.0, 6.0]]


def test_index_errors_are_index_errors():
    t = mf.zeros(2, 3)
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    with pytest.raises(TypeError, match="valid indices"):
        t["a"]
    with pytest.raises(IndexError):
        t[mf.tensor([5])]
    with pytest.raises(IndexError):
        torch.zeros(2, 3)[torch.tensor([5])]


# --- printing -----------------------------------------------------------------------------

REPR_CASES = [
    "lib.tensor([1.5, 2, 3])", "lib.tensor([[1, 2], [3, 4]])", "lib.tensor([True, False])", "lib.tensor(3.25)",
    "lib.tensor([1e10, 1.0])", "lib.tensor([1e-5, 1.0])", "lib.tensor([], dtype=lib.float64)", "lib.zeros(2, 0)",
    "lib.tensor([1.0, 2.0], dtype=lib.float64)", "lib.tensor([1, 2], dtype=lib.int32)",
    "lib.tensor([0.1, 2.0], requires_grad=True)", "lib.tensor([float('nan'), float('inf'), 1.5])",
    "lib.tensor([1.0, 2.0], dtype=lib.bfloat16)", "lib.ones(2, 3, 4)", "lib.tensor([-1.0, 100.0])",
    "lib.tensor([1.0, 2000.0])", "lib.arange(10)", "lib.tensor(7)", "lib.tensor([0.0, -0.5])",
    "lib.tensor([[1.0, 2.5], [-3.0, 4.0]], dtype=lib.float16)", "lib.tensor([1e9, 2e9])", "lib.tensor([3, 2, 1]).t()",
]


@pytest.mark.parametrize("expr", REPR_CASES)
def test_repr_like_torch(expr):
    expected = repr(eval(expr, {"lib": torch})).replace("torch.", "meshflow.")
    assert repr(eval(expr, {"lib": mf})) == expected
    assert str(eval(expr, {"lib": mf})) == expected


def test_repr_summarises_large_tensors():
    text = repr(mf.arange(2000.0).reshape(2, 1000))
    assert "..." in text and text.count("\n") < 10


def test_format_and_repr_of_results():
    assert f"{mf.tensor(2.5):.2f}" == "2.50"
    out = mf.tensor([1.0, 2.0], requires_grad=True) * 2
    assert repr(out).endswith("grad_fn=<MulBackward0>)")
    assert repr(mf.tensor([3.0, 1.0]).max(0)).startswith("ValuesIndices(values=tensor(3.)")
    assert repr(mf.zeros(2).shape) == "meshflow.Size([2])"


# --- Python protocols and metadata ---------------------------------------------------------


def test_shape_size_and_metadata():
    for lib in (torch, mf):
        x = lib.zeros(2, 3, 4)
        assert x.shape == (2, 3, 4) and isinstance(x.shape, tuple) and x.shape.numel() == 24
        assert x.shape[1:] == (3, 4) and type(x.shape[1:]) is type(x.shape)
        assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4 and x.size(dim=0) == 2
        assert x.dim() == 3 and x.ndim == 3 and x.numel() == 24 and len(x) == 2
        assert x.stride() == (12, 4, 1) and x.stride(0) == 12 and x.stride(dim=-1) == 1 and x.is_contiguous()
        assert not x.transpose(0, 1).is_contiguous()
        assert x.element_size() == 4 and x.is_floating_point()
        assert x.T.shape == (4, 3, 2) and x.mT.shape == (2, 4, 3)
        assert x[0].storage_offset() == 0 and x[1].storage_offset() == 12
    assert mf.zeros(3).nbytes == 12 and mf.zeros(3).itemsize == 4
    assert mf.numel(mf.zeros(2, 2)) == 4 and mf.is_tensor(mf.zeros(1)) and not mf.is_tensor(1)
    assert mf.zeros(2).data_ptr() != 0


def test_python_number_conversions():
    for lib in (torch, mf):
        assert lib.tensor(2.5).item() == 2.5 and isinstance(lib.tensor(2).item(), int)
        assert lib.tensor(True).item() is True
        assert float(lib.tensor([1.5])) == 1.5 and int(lib.tensor(3.7)) == 3
        assert bool(lib.tensor([0.0])) is False and bool(lib.tensor(2))
        assert [1, 2, 3][lib.tensor(1)] == 2 and operator.index(lib.tensor(4)) == 4
        assert lib.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
        assert lib.tensor(1.5).tolist() == 1.5
        assert lib.tensor([True]).tolist() == [True]
        assert 3 in lib.tensor([1, 3]) and 5 not in lib.tensor([1, 3])
    for lib, error in ((torch, RuntimeError), (mf, RuntimeError)):
        with pytest.raises(error):
            bool(lib.tensor([1, 2]))
    with pytest.raises(ValueError):
        float(mf.tensor([1.0, 2.0]))
    with pytest.raises(TypeError):
        operator.index(mf.tensor(1.5))
    with pytest.raises(TypeError):
        len(mf.tensor(1))


def test_iteration_and_hashing():
    x = mf.arange(6).reshape(3, 2)
    rows = list(x)
    assert len(rows) == 3 and rows[1].tolist() == [2, 3]
    a, b = mf.tensor([1.0, 2.0])
    assert a.item() == 1.0 and b.item() == 2.0
    with pytest.raises(TypeError):
        iter(mf.tensor(1))
    t = mf.zeros(1)
    assert {t: 1}[t] == 1 and hash(t) != hash(mf.zeros(1))


def test_conversions_between_dtypes():
    x = mf.tensor([1.7, -2.2])
    assert x.long().dtype == mf.int64 and x.long().tolist() == [1, -2]
    assert x.int().dtype == mf.int32 and x.bool().tolist() == [True, True]
    assert x.double().dtype == mf.float64 and x.half().dtype == mf.float16 and x.bfloat16().dtype == mf.bfloat16
    assert x.to(mf.float32) is not None and x.to("cpu").device == mf.device("cpu")
    assert x.to(dtype=mf.float64).dtype == mf.float64 and x.to(mf.zeros(1, dtype=mf.int8)).dtype == mf.int8
    assert x.to(mf.float32, copy=True).data_ptr() != x.data_ptr()
    with pytest.raises(RuntimeError):
        x.to("cuda")


BINARY_OPERATORS = ["+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">", ">="]


@pytest.mark.parametrize("op", BINARY_OPERATORS)
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_binary_operators_like_torch(op, dtype):
    a_data = [[1, 5, -3], [4, -2, 6]]
    b_data = [2, 3, 7]
    for left, right in (("a", "b"), ("a", "2"), ("a", "2.5"), ("3", "a"), ("1.5", "a"), ("s", "a"), ("a", "s")):
        if op == "**" and dtype == "int32" and left == "a" and right in ("b", "2", "s"):
            env_a = "abs"  # integer powers of negative bases stay well defined
        else:
            env_a = None
        results = []
        for lib in (torch, mf):
            a = lib.tensor(a_data, dtype=getattr(lib, dtype))
            if env_a:
                a = a.abs()
            env = {"a": a, "b": lib.tensor(b_data, dtype=getattr(lib, dtype)), "s": lib.tensor(3)}
            results.append(eval(f"{left} {op} {right}", env))
        assert_like_torch(results[1], results[0])


@pytest.mark.parametrize("op", ["&", "|", "^"])
def test_bitwise_operators_like_torch(op):
    for left, right in (("a", "b"), ("a", "6"), ("5", "a"), ("m", "n"), ("m", "True")):
        results = []
        for lib in (torch, mf):
            env = {"a": lib.tensor([1, 2, 3, 12]), "b": lib.tensor([3, 3, 1, 10]),
                   "m": lib.tensor([True, False, True, False]), "n": lib.tensor([True, True, False, False])}
            results.append(eval(f"{left} {op} {right}", env))
        assert_like_torch(results[1], results[0])


def test_unary_matmul_and_inplace_operators():
    for lib in (torch, mf):
        a = lib.tensor([[1.0, -2.0], [3.0, 4.0]])
        assert (-a).tolist() == [[-1.0, 2.0], [-3.0, -4.0]] and (+a).tolist() == a.tolist()
        assert abs(a).tolist() == [[1.0, 2.0], [3.0, 4.0]]
        assert (~lib.tensor([True, False])).tolist() == [False, True] and (~lib.tensor([1])).tolist() == [-2]
        assert (a @ a).tolist() == [[-5.0, -10.0], [15.0, 10.0]]
        b = a.clone()
        before = b.data_ptr()
        b += 1
        b -= a
        b *= 3
        b /= 2
        assert b.tolist() == [[1.5, 1.5], [1.5, 1.5]] and b.data_ptr() == before
        c = lib.tensor([1, 2])
        c += 2
        assert c.tolist() == [3, 4]
    assert (mf.ones(2) == None) is False  # noqa: E711  (like torch: no elementwise compare with None)
    assert (mf.ones(2) != "x") is True
    with pytest.raises(TypeError):
        mf.ones(2) + "x"
    with pytest.raises(TypeError, match="add_: result type float32 can't be cast"):
        c = mf.ones(2, dtype=mf.int64)
        c += 1.5


# --- autograd -------------------------------------------------------------------------------


def test_backward_and_grad_accumulation():
    for lib in (torch, mf):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = (x * x).sum()
        y.backward(retain_graph=True)
        assert x.grad.tolist() == [2.0, 4.0, 6.0]
        y.backward()
        assert x.grad.tolist() == [4.0, 8.0, 12.0]
        with pytest.raises(RuntimeError):
            y.backward()
        x.grad = None
        assert x.grad is None
        (x * 3).backward(lib.tensor([1.0, 0.0, 2.0]))
        assert x.grad.tolist() == [3.0, 0.0, 6.0]
        with pytest.raises(RuntimeError):
            (x * 3).backward()  # a non-scalar needs a gradient


def test_grad_property_and_graph_inspection():
    x = mf.tensor([1.0, 2.0], requires_grad=True)
    assert x.grad is None and x.grad_fn is None and x.is_leaf
    y = x.exp() * 2
    assert not y.is_leaf and y.grad_fn.name() == "MulBackward0" and repr(y.grad_fn) == "<MulBackward0>"
    exp_node, _ = y.grad_fn.next_functions[0]
    assert exp_node.name() == "ExpBackward0"
    x.grad = mf.ones(2)
    assert x.grad.tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError):
        x.grad = mf.ones(3)
    with pytest.raises(RuntimeError):
        y.requires_grad = False
    d = y.detach()
    assert not d.requires_grad and d.data_ptr() == y.data_ptr() and y.data.data_ptr() == y.data_ptr()
    z = mf.zeros(2)
    assert z.requires_grad_() is z and z.requires_grad
    z.requires_grad = False
    assert not z.requires_grad
    with pytest.raises(TypeError):
        mf.zeros(2, dtype=mf.int64).requires_grad_()


def test_hooks():
    for lib in (torch, mf):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        seen = []
        handle = x.register_hook(lambda g: seen.append(g.tolist()))
        x.register_hook(lambda g: g * 10)
        y = x * 3
        y_hook = y.register_hook(lambda g: g + 1)
        y.sum().backward()
        assert seen == [[6.0, 6.0]] and x.grad.tolist() == [60.0, 60.0]
        handle.remove()
        y_hook.remove()
        x.grad = None
        (x * 3).sum().backward()
        assert seen == [[6.0, 6.0]] and x.grad.tolist() == [30.0, 30.0]


def test_post_accumulate_grad_hook():
    # torch >= 2.1's Tensor.register_post_accumulate_grad_hook: runs with the
    # leaf after its .grad was updated, once per backward.
    x = mf.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda leaf: seen.append(leaf.grad.tolist()))
    (x * 3).sum().backward()
    (x * x).sum().backward()
    assert seen == [[3.0, 3.0], [5.0, 7.0]]
    handle.remove()
    (x * 3).sum().backward()
    assert len(seen) == 2
    with pytest.raises(RuntimeError, match="leaf"):
        (x * 2).register_post_accumulate_grad_hook(lambda leaf: None)


def test_hook_errors_propagate():
    x = mf.ones(2, requires_grad=True)

    def bad_hook(grad):
        raise ValueError("from the hook")

    x.register_hook(bad_hook)
    with pytest.raises(ValueError, match="from the hook"):
        (x * 2).sum().backward()
    y = mf.ones(2, requires_grad=True)
    y.register_hook(lambda g: "not a tensor")
    with pytest.raises(TypeError, match="register_hook"):
        (y * 2).sum().backward()
    with pytest.raises(RuntimeError, match="register_hook"):
        mf.ones(1).register_hook(lambda g: g)
    for lib in (torch, mf):
        z = lib.ones(2, requires_grad=True)
        z.register_hook(lambda g: lib.ones(3))
        with pytest.raises(RuntimeError):
            (z * 2).sum().backward()


def test_retain_grad():
    for lib in (torch, mf):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        y.retain_grad()
        assert y.retains_grad
        (y * y).sum().backward()
        assert y.grad.tolist() == [4.0, 8.0]


def test_create_graph_second_derivative():
    results = []
    for lib in (torch, mf):
        x = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = (x ** 3 + x.sin()).sum()
        (g,) = lib.autograd.grad(y, x, create_graph=True)
        (h,) = lib.autograd.grad(g.sum(), x)
        x.grad = None
        g2 = lib.autograd.grad(y, x, create_graph=True)[0]
        (g2 * g2).sum().backward()
        results.append((g, h, x.grad))
    for m, t in zip(results[1], results[0]):
        assert_like_torch(m, t)


def test_autograd_functions():
    for lib in (torch, mf):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        w = lib.tensor([3.0], requires_grad=True)
        unused = lib.tensor([1.0], requires_grad=True)
        out = x * w
        gx, gw, gu = lib.autograd.grad([out], [x, w, unused], [lib.ones(2)], retain_graph=True, allow_unused=True)
        assert gx.tolist() == [3.0, 3.0] and gw.tolist() == [3.0] and gu is None
        with pytest.raises(RuntimeError):
            lib.autograd.grad([out.sum()], [unused])
        lib.autograd.backward([out.sum(), (w * 2).sum()])
        assert x.grad.tolist() == [3.0, 3.0] and w.grad.tolist() == [5.0]
        lib.autograd.backward(x * w, lib.tensor([1.0, -1.0]))
        assert w.grad.tolist() == [4.0]


def test_grad_mode():
    x = mf.ones(2, requires_grad=True)
    with mf.no_grad():
        assert not mf.is_grad_enabled()
        assert not (x * 2).requires_grad
        with mf.enable_grad():
            assert (x * 2).requires_grad
    assert mf.is_grad_enabled()

    @mf.no_grad()
    def double(t):
        return t * 2

    assert not double(x).requires_grad and mf.is_grad_enabled()
    assert double.__name__ == "double"
    with mf.set_grad_enabled(False):
        assert not (x + 1).requires_grad
    assert mf.is_grad_enabled()
    mf.set_grad_enabled(False)
    assert not mf.is_grad_enabled()
    mf.set_grad_enabled(True)
    with pytest.raises(KeyError):
        with mf.no_grad():
            raise KeyError("body errors pass through")
    assert mf.is_grad_enabled()


def test_inplace_on_leaf_that_requires_grad_fails():
    for lib in (torch, mf):
        x = lib.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError):
            x.add_(1)
        with pytest.raises(RuntimeError):
            x[0] = 2.0


def test_saved_tensor_modified_in_place_is_reported():
    for lib in (torch, mf):
        x = lib.ones(2, requires_grad=True)
        y = x * 1
        z = y.sin()  # sin saves its input
        y.add_(1)
        with pytest.raises(RuntimeError):
            z.sum().backward()


# --- random numbers, threads, memory ------------------------------------------------------


def test_manual_seed_reproduces_random_tensors():
    mf.manual_seed(123)
    a = mf.rand(5)
    b = mf.randn(3)
    mf.manual_seed(123)
    assert mf.rand(5).tolist() == a.tolist() and mf.randn(3).tolist() == b.tolist()
    assert mf.initial_seed() == 123
    generator = mf.manual_seed(7)
    state = generator.get_state()
    first = mf.rand(4).tolist()
    generator.set_state(state)
    assert mf.rand(4).tolist() == first
    assert mf.default_generator.initial_seed() == 7


def test_threads():
    previous = mf.get_num_threads()
    mf.set_num_threads(1)
    assert mf.get_num_threads() == 1
    mf.set_num_threads(previous)
    assert mf.get_num_threads() == previous


def test_memory_stats():
    stats = mf.memory_stats()
    assert set(stats) == {"allocated_bytes", "peak_allocated_bytes", "reserved_bytes", "num_allocations",
                          "num_cache_hits"}
    before = mf.memory_allocated()
    mf.reset_peak_memory_stats()
    big = mf.empty(1 << 20)
    assert mf.memory_allocated() >= before + 4 * (1 << 20)
    assert mf.max_memory_allocated("cpu") >= mf.memory_allocated()
    del big
    assert mf.memory_allocated() <= before
    assert mf.memory_reserved() >= mf.memory_allocated()
    mf.empty_cache()


def test_detach_in_place_like_torch():
    for lib in (torch, mf):
        a = lib.ones(3, requires_grad=True)
        b = a * 2
        assert b.detach_() is b
        assert b.grad_fn is None and b.is_leaf and not b.requires_grad
        c = (b * a).sum()
        c.backward()
        assert a.grad.tolist() == [2.0, 2.0, 2.0]
        a.detach_()
        assert not a.requires_grad and a.grad.tolist() == [2.0, 2.0, 2.0]


def test_detach_in_place_refuses_views_like_torch():
    for lib in (torch, mf):
        base = lib.ones(2, 3)
        with pytest.raises(RuntimeError, match="detach"):
            base.t().detach_()


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int8", "bool"])
def test_transposing_copies_match_numpy_for_every_block_edge(dtype):
    # Note [Transposing copies]: blocks of a cache line of elements, partial
    # blocks at the edges, outer dims, and a destination that is itself
    # transposed (copy_ into a .t() view).
    rng = np.random.default_rng(0)
    for shape, perm in (((1024, 1024), (1, 0)), ((33, 70), (1, 0)), ((17, 16), (1, 0)), ((3, 40, 50), (0, 2, 1)),
                        ((4, 18, 5, 66), (3, 1, 0, 2))):
        a = (rng.standard_normal(shape) * 5).astype(np.float32)
        x = mf.tensor(a).to(getattr(mf, dtype))
        want = x.to(mf.float64).numpy().transpose(perm)
        got = x.permute(*perm).contiguous()
        assert got.is_contiguous() and got.shape == want.shape
        np.testing.assert_array_equal(got.to(mf.float64).numpy(), want)
    a = mf.tensor(rng.standard_normal((40, 90)).astype(np.float32)).to(getattr(mf, dtype))
    out = mf.zeros(90, 40, dtype=getattr(mf, dtype))
    out.t().copy_(a)
    np.testing.assert_array_equal(out.to(mf.float64).numpy(), a.to(mf.float64).numpy().T)
