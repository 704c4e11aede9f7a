"""meshflow.nn against torch.nn: the same layers with the same arguments and
weights give the same outputs and gradients; the Module API (registration,
traversal, state dicts, hooks, containers, repr) behaves like torch's; the
default initialisation and nn.init follow PyTorch's formulas."""
import collections
import math

import numpy as np
import pytest
import torch

import meshflow as mf
from meshflow import errors

TORCH_DTYPE = {"float32": torch.float32, "float64": torch.float64}
MF_DTYPE = {"float32": mf.float32, "float64": mf.float64}
TOL = {"float32": dict(rtol=2e-4, atol=2e-5), "float64": dict(rtol=1e-9, atol=1e-11)}


def to_numpy(t):
    return t.detach().cpu().numpy()


# The device compare() runs meshflow on; tensors made by mf_from (the
# inputs, and any a call makes) go there.
_device = "cpu"


def mf_from(array, requires_grad=False, device=None):
    t = mf.tensor(np.array(array, copy=True), device=device or _device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def copy_state(t_module, m_module):
    """Copies torch's state dict into the meshflow module (through numpy)."""
    state = {k: mf_from(to_numpy(v)) for k, v in t_module.state_dict().items()}
    m_module.load_state_dict(state)


def assert_same_state_layout(t_module, m_module):
    t_sd, m_sd = t_module.state_dict(), m_module.state_dict()
    assert list(m_sd.keys()) == list(t_sd.keys())
    for k in t_sd:
        assert tuple(m_sd[k].shape) == tuple(t_sd[k].shape), k
    assert [n for n, _ in m_module.named_parameters()] == [n for n, _ in t_module.named_parameters()]
    assert [n for n, _ in m_module.named_buffers()] == [n for n, _ in t_module.named_buffers()]


def flat_outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def compare(t_module, m_module, inputs, dtype="float64", call=None, grad_inputs=None, tol=None, device="cpu"):
    """Runs both modules on the same inputs (numpy arrays; float ones take
    `dtype` and get gradients), then compares outputs, input gradients and
    parameter gradients after the backward of a random-weighted sum.
    meshflow runs on `device`; torch, the reference, on the CPU."""
    global _device
    assert_same_state_layout(t_module, m_module)
    t_module.to(TORCH_DTYPE[dtype])
    m_module.to(MF_DTYPE[dtype])
    copy_state(t_module, m_module)
    m_module.to(device)
    _device = device
    try:
        return _compare_outputs(t_module, m_module, inputs, dtype, call, grad_inputs, tol)
    finally:
        _device = "cpu"


def _compare_outputs(t_module, m_module, inputs, dtype, call, grad_inputs, tol):
    call = call or (lambda m, *xs: m(*xs))
    tol = tol or TOL[dtype]
    rng = np.random.default_rng(0)
    t_in, m_in = [], []
    for i, x in enumerate(inputs):
        if x is None:
            t_in.append(None)
            m_in.append(None)
            continue
        x = np.asarray(x)
        floating = x.dtype.kind == "f"
        needs_grad = floating and (grad_inputs is None or i in grad_inputs)
        if floating:
            x = x.astype(dtype)
        t = torch.tensor(x, requires_grad=needs_grad)
        t_in.append(t)
        m_in.append(mf_from(x, requires_grad=needs_grad))
    t_out = [o for o in flat_outputs(call(t_module, *t_in))]
    m_out = [o for o in flat_outputs(call(m_module, *m_in))]
    assert len(t_out) == len(m_out)
    t_loss, m_loss = 0, 0
    for t_o, m_o in zip(t_out, m_out):
        if t_o is None:
            assert m_o is None
            continue
        assert tuple(m_o.shape) == tuple(t_o.shape)
        np.testing.assert_allclose(to_numpy(m_o), to_numpy(t_o), **tol)
        if t_o.requires_grad:
            w = rng.standard_normal(tuple(t_o.shape)).astype(dtype)
            t_loss = t_loss + (t_o * torch.tensor(w)).sum()
            m_loss = m_loss + (m_o * mf_from(w)).sum()
    if isinstance(t_loss, int):
        return t_out, m_out
    t_loss.backward()
    m_loss.backward()
    for t_x, m_x in zip(t_in, m_in):
        if t_x is not None and t_x.requires_grad:
            np.testing.assert_allclose(to_numpy(m_x.grad), to_numpy(t_x.grad), **tol)
    m_params = dict(m_module.named_parameters())
    for name, p in t_module.named_parameters():
        if p.grad is None:
            assert m_params[name].grad is None, name
        else:
            np.testing.assert_allclose(to_numpy(m_params[name].grad), to_numpy(p.grad), err_msg=name, **tol)
    return t_out, m_out


def randn(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


# --- layers against torch.nn ---------------------------------------------------------

LAYER_CASES = [
    ("Linear", (5, 3), {}, [(4, 5)]),
    ("Linear", (5, 3), {"bias": False}, [(2, 7, 5)]),
    ("Linear", (4, 6), {}, [(4,)]),
    ("Conv2d", (3, 4, 3), {}, [(2, 3, 7, 6)]),
    ("Conv2d", (4, 6, (3, 2)), {"stride": 2, "padding": 1, "dilation": 1, "groups": 2}, [(2, 4, 9, 8)]),
    ("Conv2d", (2, 4, 3), {"stride": (2, 1), "padding": (2, 0), "dilation": 2, "bias": False}, [(1, 2, 9, 9)]),
    ("Conv2d", (6, 6, 3), {"groups": 6}, [(2, 6, 5, 5)]),
    ("Conv2d", (3, 5, 3), {"padding": "same"}, [(2, 3, 6, 7)]),
    ("Conv2d", (3, 5, 5), {"padding": "same", "dilation": 2}, [(1, 3, 8, 8)]),
    ("Conv2d", (3, 5, 3), {"padding": "valid"}, [(1, 3, 6, 6)]),
    ("Conv2d", (3, 4, (2, 4)), {"padding": "same"}, [(2, 3, 5, 6)]),
    ("Conv2d", (2, 4, 2), {"padding": "same", "dilation": (3, 2), "groups": 2}, [(1, 2, 7, 6)]),
    ("LayerNorm", (6,), {}, [(3, 4, 6)]),
    ("LayerNorm", ((4, 6),), {"eps": 1e-3}, [(3, 4, 6)]),
    ("LayerNorm", (6,), {"elementwise_affine": False}, [(5, 6)]),
    ("GroupNorm", (2, 6), {}, [(3, 6, 4, 5)]),
    ("GroupNorm", (3, 6), {"affine": False, "eps": 1e-3}, [(2, 6, 7)]),
    ("ReLU", (), {}, [(4, 5)]),
    ("GELU", (), {}, [(4, 5)]),
    ("GELU", (), {"approximate": "tanh"}, [(4, 5)]),
    ("SiLU", (), {}, [(4, 5)]),
    ("Tanh", (), {}, [(4, 5)]),
    ("Sigmoid", (), {}, [(4, 5)]),
    ("LeakyReLU", (), {}, [(4, 5)]),
    ("LeakyReLU", (0.2,), {}, [(4, 5)]),
    ("ReLU6", (), {}, [(4, 5)]),
    ("Hardtanh", (-0.5, 2.0), {}, [(4, 5)]),
    ("GLU", (), {}, [(4, 6)]),
    ("GLU", (0,), {}, [(4, 6)]),
    ("Softmax", (1,), {}, [(4, 5)]),
    ("Softmax", (-1,), {}, [(2, 3, 5)]),
    ("LogSoftmax", (0,), {}, [(4, 5)]),
    ("LogSoftmax", (-1,), {}, [(2, 3, 5)]),
    ("Flatten", (), {}, [(2, 3, 4, 5)]),
    ("Flatten", (0, 2), {}, [(2, 3, 4, 5)]),
    ("Identity", (), {}, [(3, 4)]),
    ("MaxPool2d", (2,), {}, [(2, 3, 6, 7)]),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1}, [(2, 3, 7, 7)]),
    ("MaxPool2d", ((2, 3),), {"stride": 1, "dilation": 2, "ceil_mode": True}, [(1, 2, 8, 9)]),
    ("AvgPool2d", (2,), {}, [(2, 3, 6, 7)]),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, [(2, 3, 7, 7)]),
    ("AvgPool2d", (3,), {"stride": 2, "ceil_mode": True}, [(1, 2, 8, 8)]),
    ("AdaptiveAvgPool2d", (1,), {}, [(2, 3, 6, 7)]),
    ("AdaptiveAvgPool2d", ((3, 2),), {}, [(2, 3, 7, 5)]),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,args,kwargs,shapes", LAYER_CASES)
def test_layer_matches_torch(name, args, kwargs, shapes, dtype, device):
    t_module = getattr(torch.nn, name)(*args, **kwargs)
    m_module = getattr(mf.nn, name)(*args, **kwargs)
    compare(t_module, m_module, [randn(*s, seed=i + 1) for i, s in enumerate(shapes)], dtype, device=device)
    if name == "Conv2d":
        assert m_module.padding == t_module.padding


@pytest.mark.parametrize("name,args,kwargs,shapes", LAYER_CASES)
def test_layer_repr_matches_torch(name, args, kwargs, shapes):
    t_module = getattr(torch.nn, name)(*args, **kwargs)
    m_module = getattr(mf.nn, name)(*args, **kwargs)
    if name == "MaxPool2d" and isinstance(args[0], tuple):
        assert repr(m_module) == "MaxPool2d(kernel_size=(2, 3), stride=1, padding=0, dilation=2, ceil_mode=True)"
        return
    assert repr(m_module) == repr(t_module)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind,shape", [("BatchNorm1d", (6, 4)), ("BatchNorm1d", (5, 4, 3)),
                                        ("BatchNorm2d", (3, 4, 5, 2))])
@pytest.mark.parametrize("kwargs", [{}, {"momentum": None}, {"momentum": 0.3, "eps": 1e-3}, {"affine": False},
                                    {"track_running_stats": False}])
def test_batchnorm_train_and_eval(kind, shape, kwargs, dtype, device):
    t_module = getattr(torch.nn, kind)(4, **kwargs)
    m_module = getattr(mf.nn, kind)(4, **kwargs)
    assert repr(m_module) == repr(t_module)
    # Three training steps: outputs, gradients, running statistics.
    for step in range(3):
        if step == 0:
            compare(t_module, m_module, [randn(*shape, seed=step) * 2 + 1], dtype, device=device)
        else:
            t_x = torch.tensor(randn(*shape, seed=step).astype(dtype) * 3 - 1)
            m_x = mf_from(randn(*shape, seed=step).astype(dtype) * 3 - 1, device=device)
            np.testing.assert_allclose(to_numpy(m_module(m_x)), to_numpy(t_module(t_x)), **TOL[dtype])
        t_buffers = dict(t_module.named_buffers())
        m_buffers = dict(m_module.named_buffers())
        assert list(m_buffers) == list(t_buffers)
        for k, v in t_buffers.items():
            np.testing.assert_allclose(to_numpy(m_buffers[k]), to_numpy(v), err_msg=k, **TOL[dtype])
        if "num_batches_tracked" in t_buffers:
            assert m_buffers["num_batches_tracked"].dtype == mf.int64
            assert m_buffers["num_batches_tracked"].item() == step + 1
    # Eval: running statistics are used and stay unchanged.
    t_module.eval()
    m_module.eval()
    assert not m_module.training
    before = {k: to_numpy(v).copy() for k, v in m_module.named_buffers()}
    x = randn(*shape, seed=9).astype(dtype)
    t_x = torch.tensor(x, requires_grad=True)
    m_x = mf_from(x, requires_grad=True, device=device)
    t_y, m_y = t_module(t_x), m_module(m_x)
    np.testing.assert_allclose(to_numpy(m_y), to_numpy(t_y), **TOL[dtype])
    t_y.sum().backward()
    m_y.sum().backward()
    np.testing.assert_allclose(to_numpy(m_x.grad), to_numpy(t_x.grad), **TOL[dtype])
    for k, v in m_module.named_buffers():
        np.testing.assert_array_equal(to_numpy(v), before[k])


def test_embedding_matches_torch(device):
    for kwargs in [{}, {"padding_idx": 1}, {"padding_idx": -2}]:
        t_module = torch.nn.Embedding(7, 3, **kwargs)
        m_module = mf.nn.Embedding(7, 3, **kwargs)
        assert repr(m_module) == repr(t_module)
        assert m_module.padding_idx == t_module.padding_idx
        idx = np.array([[1, 2, 5], [1, 0, 6]], dtype=np.int64)
        compare(t_module, m_module, [idx], "float64", device=device)
        if "padding_idx" in kwargs:
            row = to_numpy(m_module.weight.grad)[t_module.padding_idx]
            np.testing.assert_array_equal(row, np.zeros(3))


def test_embedding_init_zeroes_padding_row():
    m = mf.nn.Embedding(10, 4, padding_idx=3)
    np.testing.assert_array_equal(to_numpy(m.weight)[3], np.zeros(4))
    assert np.all(to_numpy(m.weight)[[0, 1, 2, 4]] != 0)


def test_dropout():
    mf.manual_seed(0)
    m = mf.nn.Dropout(0.3)
    assert repr(m) == repr(torch.nn.Dropout(0.3))
    x = mf.ones(200, 500)
    y = to_numpy(m(x))
    zeros = (y == 0).mean()
    assert abs(zeros - 0.3) < 0.01
    np.testing.assert_allclose(y[y != 0], 1 / 0.7, rtol=1e-6)
    m.eval()
    xs = mf_from(randn(4, 5))
    np.testing.assert_array_equal(to_numpy(m(xs)), to_numpy(xs))
    m.train()
    np.testing.assert_array_equal(to_numpy(mf.nn.Dropout(0.0)(xs)), to_numpy(xs))
    assert (to_numpy(mf.nn.Dropout(1.0)(xs)) == 0).all()
    with pytest.raises(ValueError, match="between 0 and 1"):
        mf.nn.Dropout(1.5)


def test_dropout_gradient_matches_mask():
    mf.manual_seed(1)
    x = mf_from(np.ones((50, 40)), requires_grad=True)
    y = mf.nn.Dropout(0.5)(x)
    y.sum().backward()
    np.testing.assert_array_equal(to_numpy(x.grad), to_numpy(y))


# --- attention and transformer ------------------------------------------------------------

def mha_call(need_weights=True, average=True, masks=None):
    def call(m, q, k, v, *rest):
        names = masks or []
        kw = dict(zip(names, rest))
        return m(q, k, v, need_weights=need_weights, average_attn_weights=average, **kw)
    return call


def self_attn_call(need_weights=True, masks=None):
    def call(m, x, *rest):
        kw = dict(zip(masks or [], rest))
        return m(x, x, x, need_weights=need_weights, **kw)
    return call


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_multihead_attention_self(batch_first, bias, dtype, device):
    t_module = torch.nn.MultiheadAttention(8, 2, bias=bias, batch_first=batch_first)
    m_module = mf.nn.MultiheadAttention(8, 2, bias=bias, batch_first=batch_first)
    compare(t_module, m_module, [randn(3, 5, 8)], dtype, call=self_attn_call(), device=device)
    t_module2 = torch.nn.MultiheadAttention(8, 2, bias=bias, batch_first=batch_first)
    m_module2 = mf.nn.MultiheadAttention(8, 2, bias=bias, batch_first=batch_first)
    compare(t_module2, m_module2, [randn(3, 5, 8)], dtype, call=self_attn_call(need_weights=False), device=device)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_multihead_attention_cross(batch_first, need_weights, average, device):
    t_module = torch.nn.MultiheadAttention(6, 3, batch_first=batch_first)
    m_module = mf.nn.MultiheadAttention(6, 3, batch_first=batch_first)
    q_shape, kv_shape = ((2, 4, 6), (2, 7, 6)) if batch_first else ((4, 2, 6), (7, 2, 6))
    inputs = [randn(*q_shape, seed=1), randn(*kv_shape, seed=2), randn(*kv_shape, seed=3)]
    _, m_out = compare(t_module, m_module, inputs, call=mha_call(need_weights, average), device=device)
    if need_weights:
        assert tuple(m_out[1].shape) == ((2, 4, 7) if average else (2, 3, 4, 7))
    else:
        assert m_out[1] is None


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_masks(need_weights, batch_first, device):
    rng = np.random.default_rng(5)
    L, S, N, E, H = 4, 6, 3, 8, 2
    q_shape, kv_shape = ((N, L, E), (N, S, E)) if batch_first else ((L, N, E), (S, N, E))
    bool_mask = rng.random((L, S)) < 0.3
    bool_mask[:, 0] = False  # every query keeps one key
    float_mask = rng.standard_normal((L, S))
    mask3 = rng.standard_normal((N * H, L, S))
    kpm = np.zeros((N, S), dtype=bool)
    kpm[0, 4:] = True
    kpm[2, 1] = True
    cases = [
        (["attn_mask"], [bool_mask]),
        (["attn_mask"], [float_mask]),
        (["attn_mask"], [mask3]),
        (["key_padding_mask"], [kpm]),
        (["attn_mask", "key_padding_mask"], [bool_mask, kpm]),
        (["attn_mask", "key_padding_mask"], [float_mask, kpm]),
    ]
    for names, masks in cases:
        t_module = torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
        m_module = mf.nn.MultiheadAttention(E, H, batch_first=batch_first)
        inputs = [randn(*q_shape, seed=1), randn(*kv_shape, seed=2), randn(*kv_shape, seed=3)] + masks
        compare(t_module, m_module, inputs, call=mha_call(need_weights, masks=names), grad_inputs={0, 1, 2}, device=device)


def test_multihead_attention_unbatched(device):
    t_module = torch.nn.MultiheadAttention(6, 2)
    m_module = mf.nn.MultiheadAttention(6, 2)
    mask = np.triu(np.ones((4, 5), dtype=bool), 1)
    inputs = [randn(4, 6, seed=1), randn(5, 6, seed=2), randn(5, 6, seed=3), mask]
    _, m_out = compare(t_module, m_module, inputs, call=mha_call(masks=["attn_mask"]), grad_inputs={0, 1, 2}, device=device)
    assert tuple(m_out[0].shape) == (4, 6) and tuple(m_out[1].shape) == (4, 5)
    kpm = np.array([False, False, True, False, True])
    t_module, m_module = torch.nn.MultiheadAttention(6, 2), mf.nn.MultiheadAttention(6, 2)
    inputs = [randn(4, 6, seed=1), randn(5, 6, seed=2), randn(5, 6, seed=3), kpm]
    compare(t_module, m_module, inputs, call=mha_call(masks=["key_padding_mask"]), grad_inputs={0, 1, 2}, device=device)


def test_multihead_attention_masking_effect():
    m = mf.nn.MultiheadAttention(4, 1, batch_first=True)
    x = mf_from(randn(1, 3, 4).astype(np.float32))
    mask = mf.tensor(np.array([[False, True, True], [False, False, True], [False, False, False]]))
    _, w = m(x, x, x, attn_mask=mask)
    w = to_numpy(w)[0]
    assert np.all(w[np.triu_indices(3, 1)] == 0)
    np.testing.assert_allclose(w.sum(-1), np.ones(3), rtol=1e-6)


def test_multihead_attention_dropout_weights_are_the_applied_ones():
    mf.manual_seed(0)
    m = mf.nn.MultiheadAttention(8, 2, dropout=0.5)
    x = mf_from(randn(6, 2, 8).astype(np.float32))
    out, w = m(x, x, x, average_attn_weights=False)
    w = to_numpy(w)
    kept = w != 0
    assert 0.3 < 1 - kept.mean() < 0.7  # dropped entries show as zeros, as in torch
    # Each head's output is its (dropped, rescaled) weights times its values.
    v = to_numpy(x).transpose(1, 0, 2) @ to_numpy(m.in_proj_weight)[16:].T + to_numpy(m.in_proj_bias)[16:]
    heads = np.stack([w[:, h] @ v[:, :, 4 * h:4 * h + 4] for h in range(2)], axis=2)  # (N, L, H, D)
    expected = heads.reshape(2, 6, 8) @ to_numpy(m.out_proj.weight).T + to_numpy(m.out_proj.bias)
    np.testing.assert_allclose(to_numpy(out).transpose(1, 0, 2), expected, rtol=1e-4, atol=1e-5)
    m.eval()
    _, w = m(x, x, x)
    np.testing.assert_allclose(to_numpy(w).sum(-1), np.ones((2, 6)), rtol=1e-5)


TEL_CASES = [
    dict(activation="relu", norm_first=False, batch_first=False),
    dict(activation="gelu", norm_first=False, batch_first=True),
    dict(activation="relu", norm_first=True, batch_first=True),
    dict(activation="gelu", norm_first=True, batch_first=False),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kwargs", TEL_CASES)
@pytest.mark.parametrize("mask_kind", [None, "causal_float", "bool", "key_padding"])
def test_transformer_encoder_layer(kwargs, mask_kind, dtype, device):
    t_module = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kwargs)
    m_module = mf.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kwargs)
    assert repr(m_module) == repr(t_module)
    L, N = 5, 3
    shape = (N, L, 8) if kwargs["batch_first"] else (L, N, 8)
    inputs = [randn(*shape)]
    names = []
    if mask_kind == "causal_float":
        inputs.append(np.triu(np.full((L, L), -np.inf), 1))
        names = ["src_mask"]
    elif mask_kind == "bool":
        inputs.append(np.triu(np.ones((L, L), dtype=bool), 1))
        names = ["src_mask"]
    elif mask_kind == "key_padding":
        kpm = np.zeros((N, L), dtype=bool)
        kpm[1, 3:] = True
        inputs.append(kpm)
        names = ["src_key_padding_mask"]

    def call(m, x, *rest):
        return m(x, **dict(zip(names, rest)))
    compare(t_module, m_module, inputs, dtype, call=call, grad_inputs={0}, device=device)


def test_transformer_encoder_layer_eval_with_dropout(device):
    t_module = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.5)
    m_module = mf.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.5)
    t_module.eval()
    m_module.eval()
    assert all(not m.training for m in m_module.modules())
    compare(t_module, m_module, [randn(4, 2, 8)], "float64", device=device)


# --- losses ----------------------------------------------------------------------------------

def class_targets(shape, classes, seed=0, ignore=None):
    t = np.random.default_rng(seed).integers(0, classes, size=shape).astype(np.int64)
    if ignore is not None:
        t.flat[::3] = ignore
    return t


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", [{}, {"weight": True}, {"ignore_index": 2}, {"label_smoothing": 0.2},
                                     {"weight": True, "ignore_index": 1, "label_smoothing": 0.1}])
def test_cross_entropy_loss(options, reduction, dtype, device):
    kwargs = dict(options)
    weight = np.random.default_rng(3).random(5) + 0.5
    if kwargs.pop("weight", False):
        t_module = torch.nn.CrossEntropyLoss(weight=torch.tensor(weight), reduction=reduction, **kwargs)
        m_module = mf.nn.CrossEntropyLoss(weight=mf_from(weight), reduction=reduction, **kwargs)
    else:
        t_module = torch.nn.CrossEntropyLoss(reduction=reduction, **kwargs)
        m_module = mf.nn.CrossEntropyLoss(reduction=reduction, **kwargs)
    assert repr(m_module) == repr(t_module)
    compare(t_module, m_module, [randn(6, 5), class_targets((6,), 5)], dtype, device=device)
    compare(t_module, m_module, [randn(2, 5, 3, 2), class_targets((2, 3, 2), 5, seed=2)], dtype, device=device)
    # probabilities as targets
    if "ignore_index" not in kwargs:
        probs = np.random.default_rng(4).random((6, 5))
        compare(t_module, m_module, [randn(6, 5), probs / probs.sum(1, keepdims=True)], dtype, grad_inputs={0}, device=device)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction, device):
    weight = np.random.default_rng(3).random(4) + 0.5
    for kwargs in [{}, {"ignore_index": 0}]:
        t_module = torch.nn.NLLLoss(reduction=reduction, **kwargs)
        m_module = mf.nn.NLLLoss(reduction=reduction, **kwargs)
        compare(t_module, m_module, [randn(7, 4), class_targets((7,), 4)], device=device)
        t_module = torch.nn.NLLLoss(weight=torch.tensor(weight), reduction=reduction, **kwargs)
        m_module = mf.nn.NLLLoss(weight=mf_from(weight), reduction=reduction, **kwargs)
        compare(t_module, m_module, [randn(7, 4), class_targets((7,), 4)], device=device)
        compare(t_module, m_module, [randn(2, 4, 3), class_targets((2, 3), 4)], device=device)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_bce_losses(reduction, dtype, device):
    compare(torch.nn.MSELoss(reduction=reduction), mf.nn.MSELoss(reduction=reduction),
            [randn(4, 3), randn(4, 3, seed=2)], dtype, device=device)
    target = np.random.default_rng(0).random((4, 3))
    compare(torch.nn.BCEWithLogitsLoss(reduction=reduction), mf.nn.BCEWithLogitsLoss(reduction=reduction),
            [randn(4, 3) * 3, target], dtype, device=device)
    pos_weight = np.array([0.5, 2.0, 3.0])
    weight = np.array([1.0, 0.2, 2.0])
    t_module = torch.nn.BCEWithLogitsLoss(weight=torch.tensor(weight), pos_weight=torch.tensor(pos_weight),
                                          reduction=reduction)
    m_module = mf.nn.BCEWithLogitsLoss(weight=mf_from(weight), pos_weight=mf_from(pos_weight), reduction=reduction)
    compare(t_module, m_module, [randn(4, 3) * 3, target], dtype, device=device)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_smooth_l1_and_huber_losses(reduction, dtype, device):
    inputs = [randn(4, 3) * 2, randn(4, 3, seed=2)]
    compare(torch.nn.L1Loss(reduction=reduction), mf.nn.L1Loss(reduction=reduction), inputs, dtype, device=device)
    for beta in (1.0, 0.3, 0.0):
        compare(torch.nn.SmoothL1Loss(reduction=reduction, beta=beta),
                mf.nn.SmoothL1Loss(reduction=reduction, beta=beta), inputs, dtype, device=device)
    for delta in (1.0, 0.3):
        compare(torch.nn.HuberLoss(reduction=reduction, delta=delta), mf.nn.HuberLoss(reduction=reduction, delta=delta),
                inputs, dtype, device=device)
    compare(torch.nn.CosineSimilarity(dim=0), mf.nn.CosineSimilarity(dim=0), inputs, dtype, device=device)
    with pytest.raises(ValueError, match="reduction"):
        mf.nn.L1Loss(reduction="avg")
    with pytest.raises(ValueError, match="delta"):
        mf.nn.HuberLoss(delta=0.0)
    with pytest.raises(ValueError, match="min_val"):
        mf.nn.Hardtanh(2.0, 1.0)
    with pytest.raises(mf.errors.ShapeError, match="even"):
        mf.nn.GLU()(mf.ones(2, 3))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_and_kl_div_losses(reduction, dtype, device):
    rng = np.random.default_rng(3)
    probs, target = rng.uniform(0.02, 0.98, (4, 3)), rng.uniform(0, 1, (4, 3))
    compare(torch.nn.BCELoss(reduction=reduction), mf.nn.BCELoss(reduction=reduction), [probs, target], dtype, device=device)
    weight = np.array([1.0, 0.2, 2.0])
    compare(torch.nn.BCELoss(weight=torch.tensor(weight), reduction=reduction),
            mf.nn.BCELoss(weight=mf_from(weight), reduction=reduction), [probs, target], dtype, device=device)
    log_probs = np.log(rng.dirichlet(np.ones(3), 4))
    q = rng.dirichlet(np.ones(3), 4)  # zeros in q: test_bce_kl_div_and_xlogy_edges_as_torch
    for red in (reduction, "batchmean"):
        compare(torch.nn.KLDivLoss(reduction=red), mf.nn.KLDivLoss(reduction=red), [log_probs, q], dtype, device=device)
        compare(torch.nn.KLDivLoss(reduction=red, log_target=True), mf.nn.KLDivLoss(reduction=red, log_target=True),
                [log_probs, np.log(rng.dirichlet(np.ones(3), 4))], dtype, device=device)


def test_bce_kl_div_and_xlogy_edges_as_torch():
    for lib in (torch, mf):
        x = lib.tensor([0.0, 1.0, 0.5], dtype=lib.float64)
        t = lib.tensor([1.0, 1.0, 0.0], dtype=lib.float64)
        # log clamped at -100: a certain wrong answer costs 100, not inf
        assert lib.nn.functional.binary_cross_entropy(x, t, reduction="none").tolist() == pytest.approx(
            [100.0, 0.0, 0.6931471805599453])
        z = lib.xlogy(lib.tensor([0.0, 0.0, 2.0], dtype=lib.float64), lib.tensor([0.0, 5.0, float("nan")],
                                                                             dtype=lib.float64))
        assert z[:2].tolist() == [0.0, 0.0] and z[2].item() != z[2].item()
        kl = lib.nn.functional.kl_div(lib.tensor([-1.0, -2.0], dtype=lib.float64),
                                      lib.tensor([0.0, 0.5], dtype=lib.float64), reduction="none")
        assert kl.tolist() == pytest.approx([0.0, 0.5 * (np.log(0.5) + 2.0)])
    with pytest.raises(ValueError, match="between 0 and 1"):
        mf.nn.functional.binary_cross_entropy(mf.tensor([1.5]), mf.tensor([1.0]))
    with pytest.raises(ValueError, match="size"):
        mf.nn.functional.binary_cross_entropy(mf.tensor([0.5, 0.5]), mf.tensor([1.0]))
    with pytest.raises(ValueError, match="reduction"):
        mf.nn.KLDivLoss(reduction="avg")
    with pytest.raises(ValueError, match="reduction"):
        mf.nn.functional.kl_div(mf.zeros(2), mf.zeros(2), reduction="batch")


LAYERS_1D = [
    ("Conv1d", lambda lib: lib.nn.Conv1d(3, 4, 3), (2, 3, 9)),
    ("Conv1d-strided", lambda lib: lib.nn.Conv1d(4, 6, 2, stride=2, padding=1, dilation=2, groups=2), (2, 4, 11)),
    ("Conv1d-same", lambda lib: lib.nn.Conv1d(2, 3, 4, padding="same", bias=False), (3, 2, 7)),
    ("Conv1d-unbatched", lambda lib: lib.nn.Conv1d(2, 3, (3,), padding=(1,)), (2, 6)),
    ("MaxPool1d", lambda lib: lib.nn.MaxPool1d(3, stride=2, padding=1), (2, 3, 9)),
    ("MaxPool1d-ceil", lambda lib: lib.nn.MaxPool1d(2, ceil_mode=True, dilation=2), (2, 7)),
    ("AvgPool1d", lambda lib: lib.nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False), (2, 3, 8)),
    ("AdaptiveAvgPool1d", lambda lib: lib.nn.AdaptiveAvgPool1d(4), (2, 3, 10)),
    ("PixelShuffle", lambda lib: lib.nn.PixelShuffle(2), (2, 8, 3, 3)),
    ("PixelUnshuffle", lambda lib: lib.nn.PixelUnshuffle(2), (1, 2, 4, 6)),
    ("Unflatten", lambda lib: lib.nn.Unflatten(1, (2, 3)), (4, 6, 2)),
    ("Mish", lambda lib: lib.nn.Mish(), (3, 4)),
    ("ELU", lambda lib: lib.nn.ELU(alpha=0.5), (3, 4)),
    ("Softplus", lambda lib: lib.nn.Softplus(beta=0.5, threshold=1.5), (3, 4)),
    ("Softplus-defaults", lambda lib: lib.nn.Softplus(), (3, 4)),
    ("PReLU", lambda lib: lib.nn.PReLU(), (3, 4)),
    ("PReLU-channels", lambda lib: lib.nn.PReLU(3, init=0.1), (2, 3, 4)),
    ("InstanceNorm1d", lambda lib: lib.nn.InstanceNorm1d(3), (2, 3, 5)),
    ("InstanceNorm1d-unbatched", lambda lib: lib.nn.InstanceNorm1d(3, affine=True), (3, 5)),
    ("InstanceNorm2d", lambda lib: lib.nn.InstanceNorm2d(2, affine=True, eps=1e-3), (2, 2, 3, 4)),
    ("Dropout2d-eval", lambda lib: lib.nn.Dropout2d(0.3).eval(), (2, 3, 4, 4)),
]


@pytest.mark.parametrize("name,make,shape", LAYERS_1D, ids=[l[0] for l in LAYERS_1D])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_1d_shape_and_activation_layers(name, make, shape, dtype, device):
    torch.manual_seed(0)
    t_module, m_module = make(torch), make(mf)
    assert repr(m_module) == repr(t_module)
    compare(t_module, m_module, [np.random.default_rng(1).standard_normal(shape) * 2], dtype, device=device)


def test_1d_functional_forms_and_errors():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 4, 10)), rng.standard_normal((6, 2, 3))
    for kwargs in ({}, {"stride": 2, "padding": 1, "groups": 2}, {"padding": "same", "dilation": 2, "groups": 2},
                   {"padding": "valid", "groups": 2}):
        kwargs = {"groups": 2, **kwargs}
        t = torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w), **kwargs)
        m = mf.conv1d(mf.tensor(x), mf.tensor(w), **kwargs)
        np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)
    for f, kwargs in (("max_pool1d", {"kernel_size": 3}), ("avg_pool1d", {"kernel_size": 2, "stride": 1}),
                      ("adaptive_avg_pool1d", {"output_size": 3})):
        t = getattr(torch.nn.functional, f)(torch.tensor(x), **kwargs)
        np.testing.assert_allclose(getattr(mf.nn.functional, f)(mf.tensor(x), **kwargs).numpy(), t.numpy(),
                                   rtol=1e-12)
    y = rng.standard_normal((2, 9, 2, 3))
    np.testing.assert_allclose(mf.pixel_shuffle(mf.tensor(y), 3).numpy(),
                               torch.pixel_shuffle(torch.tensor(y), 3).numpy())
    np.testing.assert_allclose(mf.nn.functional.mish(mf.tensor(x)).numpy(),
                               torch.nn.functional.mish(torch.tensor(x)).numpy(), rtol=1e-12)
    with pytest.raises(mf.errors.ShapeError, match="divisible"):
        mf.pixel_shuffle(mf.ones(1, 3, 2, 2), 2)
    with pytest.raises(mf.errors.ShapeError, match="overflows"):  # r * r wrapped to 0 once: a division by 0
        mf.pixel_shuffle(mf.ones(3, 5, 1), 2 ** 40)
    with pytest.raises(mf.errors.ShapeError, match="overflows"):
        mf.conv1d(mf.ones(1, 1, 4), mf.ones(1, 1, 3), padding="same", dilation=2 ** 62)
    with pytest.raises(mf.errors.ShapeError, match="2-d"):
        mf.conv1d(mf.ones(2, 2, 2, 2), mf.ones(1, 2, 1))
    with pytest.raises(ValueError, match="strided"):
        mf.nn.Conv1d(2, 2, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="divisible"):
        mf.nn.Conv1d(3, 2, 3, groups=2)
    with pytest.raises(ValueError, match="sequence of one int"):
        mf.nn.MaxPool1d((2, 2))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_instance_norm_running_statistics_as_torch(dtype, device):
    rng = np.random.default_rng(4)
    for t_module, m_module in ((torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=0.3),
                                mf.nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=0.3)),
                               (torch.nn.InstanceNorm2d(2, track_running_stats=True),
                                mf.nn.InstanceNorm2d(2, track_running_stats=True))):
        shape = (4, 3, 6) if isinstance(t_module, torch.nn.InstanceNorm1d) else (3, 2, 4, 5)
        for _ in range(2):
            compare(t_module, m_module, [rng.standard_normal(shape) * 3 + 1], dtype, device=device)
        for name in ("running_mean", "running_var"):
            np.testing.assert_allclose(to_numpy(getattr(m_module, name)), getattr(t_module, name).detach().numpy(),
                                       rtol=1e-5 if dtype == "float32" else 1e-10)
        t_module.eval(), m_module.eval()
        compare(t_module, m_module, [rng.standard_normal(shape)], dtype, device=device)


def test_channel_dropout_as_torch():
    mf.manual_seed(0)
    x = mf.ones(200, 8, 3, 3)
    y = mf.nn.functional.dropout2d(x, 0.25)
    per_channel = y.numpy().reshape(200, 8, 9)
    assert ((per_channel == 0).all(-1) | (per_channel == 1 / 0.75).all(-1)).all()  # whole channels
    assert abs((per_channel[..., 0] == 0).mean() - 0.25) < 0.03
    for lib in (torch, mf):
        assert lib.nn.functional.dropout1d(lib.ones(2, 3, 4), 0.5, training=False).sum().item() == 24
        assert tuple(lib.nn.Dropout3d(0.5)(lib.ones(2, 2, 2, 2, 2)).shape) == (2, 2, 2, 2, 2)
        assert repr(lib.nn.Dropout1d(0.2)) == "Dropout1d(p=0.2, inplace=False)"
        assert lib.nn.functional.dropout2d(lib.ones(2, 3, 4, 4), 1.0).sum().item() == 0
    with pytest.raises(ValueError, match="between 0 and 1"):
        mf.nn.Dropout2d(1.5)
    with pytest.raises(mf.errors.ShapeError, match="input"):
        mf.nn.functional.dropout3d(mf.ones(2, 2), 0.5)
    with pytest.raises(mf.errors.ShapeError, match="channels"):
        mf.nn.InstanceNorm1d(4)(mf.ones(2, 3, 5))


def test_loss_bad_reduction():
    with pytest.raises(ValueError, match="reduction"):
        mf.nn.MSELoss(reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        mf.nn.CrossEntropyLoss(label_smoothing=1.5)


# --- default initialisation -------------------------------------------------------------

def assert_uniform(t, bound):
    a = to_numpy(t).astype(np.float64).ravel()
    assert a.min() >= -bound and a.max() <= bound
    assert a.max() > 0.95 * bound and a.min() < -0.95 * bound
    assert abs(a.mean()) < 0.05 * bound
    assert a.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)


def assert_normal(t, mean, std):
    a = to_numpy(t).astype(np.float64).ravel()
    assert a.mean() == pytest.approx(mean, abs=0.05 * std)
    assert a.std() == pytest.approx(std, rel=0.05)


def test_default_init_linear_conv_embedding():
    mf.manual_seed(0)
    lin = mf.nn.Linear(200, 300)
    assert lin.weight.dtype == mf.float32 and tuple(lin.weight.shape) == (300, 200)
    assert_uniform(lin.weight, 1 / math.sqrt(200))
    bias = to_numpy(lin.bias)
    assert np.abs(bias).max() <= 1 / math.sqrt(200) and bias.std() > 0.5 / math.sqrt(3 * 200)
    conv = mf.nn.Conv2d(16, 32, 3, groups=2)
    assert_uniform(conv.weight, 1 / math.sqrt(8 * 9))
    assert np.abs(to_numpy(conv.bias)).max() <= 1 / math.sqrt(8 * 9)
    emb = mf.nn.Embedding(300, 100)
    assert_normal(emb.weight, 0.0, 1.0)
    assert lin.weight.requires_grad and lin.weight.is_leaf and lin.weight.grad is None


def test_default_init_attention_and_norms():
    mf.manual_seed(0)
    mha = mf.nn.MultiheadAttention(64, 4)
    assert_uniform(mha.in_proj_weight, math.sqrt(6 / (64 + 3 * 64)))
    np.testing.assert_array_equal(to_numpy(mha.in_proj_bias), np.zeros(192))
    np.testing.assert_array_equal(to_numpy(mha.out_proj.bias), np.zeros(64))
    assert_uniform(mha.out_proj.weight, 1 / math.sqrt(64))
    for bn in [mf.nn.BatchNorm1d(5), mf.nn.BatchNorm2d(5)]:
        np.testing.assert_array_equal(to_numpy(bn.weight), np.ones(5))
        np.testing.assert_array_equal(to_numpy(bn.bias), np.zeros(5))
        np.testing.assert_array_equal(to_numpy(bn.running_mean), np.zeros(5))
        np.testing.assert_array_equal(to_numpy(bn.running_var), np.ones(5))
        assert bn.num_batches_tracked.item() == 0 and bn.num_batches_tracked.dtype == mf.int64
    ln = mf.nn.LayerNorm((3, 4))
    np.testing.assert_array_equal(to_numpy(ln.weight), np.ones((3, 4)))
    np.testing.assert_array_equal(to_numpy(ln.bias), np.zeros((3, 4)))
    gn = mf.nn.GroupNorm(2, 4)
    np.testing.assert_array_equal(to_numpy(gn.weight), np.ones(4))
    np.testing.assert_array_equal(to_numpy(gn.bias), np.zeros(4))


def test_manual_seed_makes_init_reproducible():
    mf.manual_seed(7)
    a = to_numpy(mf.nn.Linear(5, 5).weight).copy()
    mf.manual_seed(7)
    b = to_numpy(mf.nn.Linear(5, 5).weight)
    np.testing.assert_array_equal(a, b)


def test_layer_factory_dtype():
    lin = mf.nn.Linear(3, 2, dtype=mf.float64)
    assert lin.weight.dtype == mf.float64 and lin.bias.dtype == mf.float64
    bn = mf.nn.BatchNorm1d(3, dtype=mf.float64)
    assert bn.running_mean.dtype == mf.float64 and bn.num_batches_tracked.dtype == mf.int64


# --- nn.init ----------------------------------------------------------------------------

GAIN_CASES = [("linear", None), ("conv1d", None), ("conv2d", None), ("conv3d", None), ("conv_transpose1d", None),
              ("conv_transpose2d", None), ("conv_transpose3d", None), ("sigmoid", None), ("tanh", None),
              ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", 1.0), ("selu", None)]


@pytest.mark.parametrize("nonlinearity,param", GAIN_CASES)
def test_calculate_gain(nonlinearity, param):
    expected = torch.nn.init.calculate_gain(nonlinearity, param)
    assert mf.nn.init.calculate_gain(nonlinearity, param) == pytest.approx(expected, rel=1e-12)


def test_calculate_gain_unknown():
    with pytest.raises(ValueError, match="softsign"):
        mf.nn.init.calculate_gain("softsign")


@pytest.mark.parametrize("shape", [(3, 4), (8, 4, 3, 3), (2, 3, 5), (6, 1, 2, 2, 2)])
def test_fan_in_and_fan_out(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert tuple(mf.nn.init._calculate_fan_in_and_fan_out(mf.empty(*shape))) == expected


def test_init_errors():
    for fn in [mf.nn.init.xavier_uniform_, mf.nn.init.xavier_normal_, mf.nn.init.kaiming_uniform_,
               mf.nn.init.kaiming_normal_, mf.nn.init._calculate_fan_in_and_fan_out]:
        with pytest.raises(ValueError, match="fewer than 2 dimensions"):
            fn(mf.empty(5))
    with pytest.raises(ValueError, match="fan_avg"):
        mf.nn.init.kaiming_uniform_(mf.empty(3, 4), mode="fan_avg")
    with pytest.raises(ValueError, match="std"):
        mf.nn.init.trunc_normal_(mf.empty(3), std=0.0)


def test_init_distributions():
    mf.manual_seed(3)
    t = mf.empty(400, 300)
    mf.nn.init.uniform_(t, -2.0, 5.0)
    a = to_numpy(t)
    assert a.min() >= -2 and a.max() <= 5 and a.mean() == pytest.approx(1.5, abs=0.05)
    assert a.std() == pytest.approx(7 / math.sqrt(12), rel=0.02)
    mf.nn.init.normal_(t, 3.0, 0.5)
    assert_normal(t, 3.0, 0.5)
    mf.nn.init.constant_(t, 0.25)
    assert (to_numpy(t) == 0.25).all()
    mf.nn.init.ones_(t)
    assert (to_numpy(t) == 1).all()
    mf.nn.init.zeros_(t)
    assert (to_numpy(t) == 0).all()
    fan_in, fan_out = 300, 400
    mf.nn.init.xavier_uniform_(t, gain=2.0)
    assert_uniform(t, 2.0 * math.sqrt(6 / (fan_in + fan_out)))
    mf.nn.init.xavier_normal_(t, gain=0.5)
    assert_normal(t, 0.0, 0.5 * math.sqrt(2 / (fan_in + fan_out)))
    mf.nn.init.kaiming_uniform_(t, nonlinearity="relu")
    assert_uniform(t, math.sqrt(2) * math.sqrt(3 / fan_in))
    mf.nn.init.kaiming_uniform_(t, a=0.2, mode="fan_out")
    assert_uniform(t, math.sqrt(2 / (1 + 0.04)) * math.sqrt(3 / fan_out))
    mf.nn.init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu")
    assert_normal(t, 0.0, math.sqrt(2) / math.sqrt(fan_out))
    mf.nn.init.kaiming_normal_(t, nonlinearity="tanh")
    assert_normal(t, 0.0, (5 / 3) / math.sqrt(fan_in))
    conv = mf.empty(64, 16, 3, 3)
    mf.nn.init.kaiming_uniform_(conv, a=math.sqrt(5))
    assert_uniform(conv, 1 / math.sqrt(16 * 9))


@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (1.0, 2.0, -1.0, 2.0), (0.0, 0.02, -0.04, 0.04),
                                          (0.0, 1.0, 0.5, 3.0)])
def test_trunc_normal(mean, std, a, b):
    mf.manual_seed(4)
    t = mf.empty(300, 400)
    mf.nn.init.trunc_normal_(t, mean, std, a, b)
    x = to_numpy(t).astype(np.float64)
    assert x.min() >= a and x.max() <= b
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    cdf = lambda z: 0.5 * math.erfc(-z / math.sqrt(2))
    z = cdf(beta) - cdf(alpha)
    exp_mean = mean + std * (pdf(alpha) - pdf(beta)) / z
    exp_var = std ** 2 * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2)
    assert x.mean() == pytest.approx(exp_mean, abs=0.01 * std)
    assert x.std() == pytest.approx(math.sqrt(exp_var), rel=0.01)


def test_init_does_not_record_autograd():
    p = mf.nn.Parameter(mf.empty(4, 5))
    for fn in [mf.nn.init.normal_, mf.nn.init.xavier_uniform_, mf.nn.init.zeros_, mf.nn.init.trunc_normal_]:
        out = fn(p)
        assert p.is_leaf and p.requires_grad and p.grad_fn is None
        np.testing.assert_array_equal(to_numpy(out), to_numpy(p))


# --- the Module API, against a torch twin of the same classes -----------------------------

def make_model(lib):
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(3, 4)
            self.scale = nn.Parameter(lib.ones(4))
            self.register_buffer("running", lib.zeros(4))
            self.register_buffer("scratch", lib.zeros(2), persistent=False)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.proj(x)) * self.scale

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(lib.ones(4, 4))
            self.first = Block()
            self.register_buffer("steps", lib.zeros(1))
            self.body = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.LayerNorm(4))
            self.heads = nn.ModuleList([nn.Linear(4, 2), nn.Linear(4, 3)])
            self.bn = nn.BatchNorm1d(4)
            self.alias = self.first.proj          # a shared module
            self.heads[1].weight = self.heads[0].weight if False else self.heads[1].weight
            self.tied = nn.Linear(4, 4, bias=False)
            self.tied.weight = self.body[0].weight  # a shared parameter

        def forward(self, x):
            h = self.first(x) @ self.w
            h = self.bn(self.tied(self.body(h)))
            return self.heads[0](h).sum() + self.heads[1](h).sum()

    return Net()


def names(pairs):
    return [n for n, _ in pairs]


def test_traversal_order_matches_torch():
    t_model, m_model = make_model(torch), make_model(mf)
    assert names(m_model.named_parameters()) == names(t_model.named_parameters())
    assert len(list(m_model.parameters())) == len(list(t_model.parameters()))
    assert names(m_model.named_parameters(recurse=False)) == names(t_model.named_parameters(recurse=False))
    assert names(m_model.named_parameters(prefix="model")) == names(t_model.named_parameters(prefix="model"))
    assert names(m_model.named_buffers()) == names(t_model.named_buffers())
    assert len(list(m_model.buffers())) == len(list(t_model.buffers()))
    assert names(m_model.named_children()) == names(t_model.named_children())
    assert len(list(m_model.children())) == len(list(t_model.children()))
    assert names(m_model.named_modules()) == names(t_model.named_modules())
    assert [type(m).__name__ for m in m_model.modules()] == [type(m).__name__ for m in t_model.modules()]
    assert list(m_model.state_dict().keys()) == list(t_model.state_dict().keys())
    assert "first.scratch" not in m_model.state_dict()
    assert "first.scratch" in dict(m_model.named_buffers())


def test_shared_parameter_listed_once_and_tied():
    m_model = make_model(mf)
    params = list(m_model.parameters())
    assert len(params) == len({id(p) for p in params}) or len(params) == 15
    assert "tied.weight" not in dict(m_model.named_parameters())
    assert "tied.weight" in m_model.state_dict()
    assert m_model.alias is m_model.first.proj


def test_repr_matches_torch():
    assert repr(make_model(mf)) == repr(make_model(torch))
    seq = [mf.nn.Conv2d(3, 8, 3, padding=1), mf.nn.BatchNorm2d(8), mf.nn.ReLU(), mf.nn.MaxPool2d(2),
           mf.nn.AdaptiveAvgPool2d(1), mf.nn.Flatten(), mf.nn.Dropout(0.1), mf.nn.Linear(8, 10)]
    t_seq = [torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
             torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Dropout(0.1), torch.nn.Linear(8, 10)]
    assert repr(mf.nn.Sequential(*seq)) == repr(torch.nn.Sequential(*t_seq))
    d = collections.OrderedDict
    assert repr(mf.nn.ModuleDict(d(a=mf.nn.GELU(), b=mf.nn.Identity()))) == \
        repr(torch.nn.ModuleDict(d(a=torch.nn.GELU(), b=torch.nn.Identity())))
    assert repr(mf.nn.Module()) == "Module()"


def test_multihead_attention_repr():
    # out_proj prints as PyTorch's NonDynamicallyQuantizableLinear; a Python subclass prints its own name
    assert repr(mf.nn.MultiheadAttention(8, 2)) == repr(torch.nn.MultiheadAttention(8, 2))

    class MyLinear(mf.nn.Linear):
        pass

    assert repr(MyLinear(2, 3)) == "MyLinear(in_features=2, out_features=3, bias=True)"


def test_forward_and_backward_of_python_model_match_torch(device):
    t_model, m_model = make_model(torch).double(), make_model(mf).double()
    t_model.body[0].weight.data.normal_()  # not the identity-like init
    copy_state(t_model, m_model)
    compare(t_model, m_model, [randn(5, 3)], "float64", device=device)


def test_load_state_dict_strict_errors():
    m_model = make_model(mf)
    state = m_model.state_dict()
    missing = collections.OrderedDict((k, v) for k, v in state.items() if k not in ("w", "bn.running_var"))
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "w", "bn.running_var"'):
        m_model.load_state_dict(missing)
    extra = collections.OrderedDict(state)
    extra["first.bogus"] = mf.zeros(1)
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "first.bogus"'):
        m_model.load_state_dict(extra)
    bad = collections.OrderedDict(state)
    bad["first.proj.weight"] = mf.zeros(4, 4)
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=r"size mismatch for first.proj.weight.*\(4, 4\).*\(4, 3\)"):
            m_model.load_state_dict(bad, strict=strict)


def test_load_state_dict_non_strict_matches_torch():
    t_model, m_model = make_model(torch), make_model(mf)
    t_state = t_model.state_dict()
    for k in ("first.running", "heads.1.bias"):
        del t_state[k]
    t_state["zz_extra"] = torch.zeros(2)
    t_state["body.0.extra"] = torch.zeros(2)
    t_state["aa_extra"] = torch.zeros(2)
    t_state["heads.extra.weight"] = torch.zeros(2)
    m_state = collections.OrderedDict((k, mf_from(to_numpy(v))) for k, v in t_state.items())
    t_result = t_model.load_state_dict(t_state, strict=False)
    m_result = m_model.load_state_dict(m_state, strict=False)
    assert list(m_result.missing_keys) == list(t_result.missing_keys)
    assert list(m_result.unexpected_keys) == list(t_result.unexpected_keys)
    for k, v in t_model.state_dict().items():
        if k not in ("first.running", "heads.1.bias"):
            np.testing.assert_array_equal(to_numpy(m_model.state_dict()[k]), to_numpy(v), err_msg=k)


def test_state_dict_round_trip_and_dtype_conversion():
    a, b = make_model(mf), make_model(mf)
    b.load_state_dict(a.state_dict())
    for (k, v), (k2, v2) in zip(a.state_dict().items(), b.state_dict().items()):
        assert k == k2
        np.testing.assert_array_equal(to_numpy(v), to_numpy(v2))
    # Values load into a float64 model (converted).
    c = make_model(mf).double()
    c.load_state_dict(a.state_dict())
    assert c.w.dtype == mf.float64
    # state_dict entries are detached and share memory.
    sd = a.state_dict()
    assert not sd["w"].requires_grad
    mf.nn.init.zeros_(sd["w"])
    assert (to_numpy(a.w) == 0).all()


def test_setting_parameters_and_attributes():
    lin = mf.nn.Linear(3, 2)
    lin.bias = None
    assert names(lin.named_parameters()) == ["weight"]
    assert list(lin.state_dict()) == ["weight"]
    assert lin.bias is None
    assert repr(lin) == "Linear(in_features=3, out_features=2, bias=False)"
    x = mf_from(randn(4, 3).astype(np.float32))
    np.testing.assert_allclose(to_numpy(lin(x)), to_numpy(x) @ to_numpy(lin.weight).T, rtol=1e-5)
    with pytest.raises(TypeError, match="weight"):
        lin.weight = mf.zeros(2, 3)
    lin.weight = mf.nn.Parameter(mf.zeros(2, 3))
    assert (to_numpy(lin(x)) == 0).all()
    m = mf.nn.Module()
    m.plain = mf.zeros(2)  # a plain attribute, not a buffer or parameter
    assert list(m.state_dict()) == [] and list(m.parameters()) == []
    m.p = mf.nn.Parameter(mf.zeros(2))
    m.register_buffer("b", mf.ones(1))
    m.child = mf.nn.ReLU()
    assert names(m.named_parameters()) == ["p"] and names(m.named_buffers()) == ["b"]
    assert names(m.named_children()) == ["child"]
    m.again = m.child  # one module under two names: listed once, as in torch
    assert names(m.named_children()) == ["child"] and len(list(m.children())) == 1
    assert names(m.named_modules()) == ["", "child"]
    del m.child
    assert names(m.named_children()) == ["again"]
    del m.again
    assert names(m.named_children()) == []
    m.b = mf.full((1,), 3.0)
    assert to_numpy(m.state_dict()["b"]).tolist() == [3.0]
    with pytest.raises(AttributeError):
        m.missing_attribute


def test_parameter_class():
    lin = mf.nn.Linear(2, 2)
    assert isinstance(lin.weight, mf.nn.Parameter)
    assert isinstance(lin.weight, mf.Tensor)
    assert not isinstance(mf.zeros(2), mf.nn.Parameter)
    p = mf.nn.Parameter(mf.ones(3), requires_grad=False)
    assert isinstance(p, mf.nn.Parameter) and not p.requires_grad and p.is_leaf
    m = mf.nn.Module()
    m.p = p
    assert names(m.named_parameters()) == ["p"] and not m.p.requires_grad
    q = mf.nn.Parameter(mf_from(randn(3)))
    assert q.requires_grad


def test_train_eval_zero_grad_requires_grad():
    model = make_model(mf)
    assert model.training and all(m.training for m in model.modules())
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    model.body.train(False)
    assert model.training and not model.body[0].training
    model.train()
    model(mf_from(randn(5, 3).astype(np.float32))).backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=False)
    assert all((to_numpy(p.grad) == 0).all() for p in model.parameters())
    model.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())
    assert model.requires_grad_(False) is model
    assert not any(p.requires_grad for p in model.parameters())
    model.requires_grad_()
    assert all(p.requires_grad for p in model.parameters())


def test_to_dtype_keeps_parameter_identity():
    mf.manual_seed(0)
    model = mf.nn.Sequential(mf.nn.Linear(3, 4), mf.nn.BatchNorm1d(4), mf.nn.Linear(4, 1))
    params = list(model.parameters())
    opt = mf.optim.SGD(model.parameters(), lr=0.1)
    assert model.double() is model
    assert all(p.dtype == mf.float64 for p in model.parameters())
    assert model[1].running_mean.dtype == mf.float64 and model[1].num_batches_tracked.dtype == mf.int64
    assert all(a is b or a.data_ptr() == b.data_ptr() for a, b in zip(params, model.parameters()))
    before = [to_numpy(p).copy() for p in params]
    loss = model(mf_from(randn(8, 3))).square().mean()
    loss.backward()
    opt.step()
    for p, b in zip(params, before):
        assert p.dtype == mf.float64
        np.testing.assert_allclose(to_numpy(p), b - 0.1 * to_numpy(p.grad), rtol=1e-12)
    model.half()
    assert all(p.dtype == mf.float16 for p in model.parameters())
    model.to(mf.float32)
    assert all(p.dtype == mf.float32 for p in params)
    model.to(dtype=mf.float64)
    assert all(p.dtype == mf.float64 for p in params)
    model.float()
    assert all(p.dtype == mf.float32 for p in params)


def test_apply_order_matches_torch():
    seen_m, seen_t = [], []
    make_model(mf).apply(lambda m: seen_m.append(type(m).__name__))
    make_model(torch).apply(lambda m: seen_t.append(type(m).__name__))
    assert seen_m == seen_t


def test_apply_can_initialise():
    model = mf.nn.Sequential(mf.nn.Linear(3, 4), mf.nn.ReLU(), mf.nn.Linear(4, 2))

    def init(m):
        if isinstance(m, mf.nn.Linear):
            mf.nn.init.constant_(m.weight, 0.5)
            mf.nn.init.zeros_(m.bias)
    assert model.apply(init) is model
    assert all((to_numpy(p) == 0.5).all() for n, p in model.named_parameters() if n.endswith("weight"))


def test_forward_hooks():
    lin = mf.nn.Linear(3, 2)
    x = mf_from(randn(4, 3).astype(np.float32))
    base = to_numpy(lin(x)).copy()
    calls = []

    def pre(module, inputs):
        calls.append(("pre", module is lin, type(inputs).__name__, len(inputs)))
        return inputs[0] * 2

    def post(module, inputs, output):
        calls.append(("post", module is lin, len(inputs)))
        return output + 1

    h1 = lin.register_forward_pre_hook(pre)
    h2 = lin.register_forward_hook(post)
    expected = to_numpy(x) * 2 @ to_numpy(lin.weight).T + to_numpy(lin.bias) + 1
    np.testing.assert_allclose(to_numpy(lin(x)), expected, rtol=1e-5)
    assert calls == [("pre", True, "tuple", 1), ("post", True, 1)]
    h1.remove()
    np.testing.assert_allclose(to_numpy(lin(x)), base + 1, rtol=1e-5)
    h2.remove()
    np.testing.assert_allclose(to_numpy(lin(x)), base, rtol=1e-6)
    # A hook that returns None leaves the output; forward() bypasses hooks.
    seen = []
    lin.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    np.testing.assert_allclose(to_numpy(lin(x)), base, rtol=1e-6)
    lin.forward(x)
    assert seen == [(4, 2)]


def test_always_call_forward_hooks_run_when_forward_raises():
    seen = []
    lin = mf.nn.Linear(3, 2)
    lin.register_forward_hook(lambda m, i, o: seen.append(("always", o is None)), always_call=True)
    lin.register_forward_hook(lambda m, i, o: seen.append(("plain", o is None)))
    with pytest.raises(mf.errors.Error):
        lin(mf.ones(2, 5))
    assert seen == [("always", True)]
    seen.clear()
    lin(mf.ones(2, 3))
    assert seen == [("always", False), ("plain", False)]
    # Called from C++ (a Sequential's child) too.
    seq = mf.nn.Sequential(mf.nn.ReLU(), lin)
    seen.clear()
    with pytest.raises(mf.errors.Error):
        seq(mf.ones(2, 5))
    assert seen == [("always", True)]


def test_hooks_on_children_of_cpp_layers():
    # Children called from C++ (attention's out_proj, the encoder layer's
    # norms and linears) run Python hooks like any other call.
    layer = mf.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    seen = []
    layer.norm1.register_forward_hook(lambda m, i, o: seen.append(("norm1", tuple(o.shape))))
    layer.self_attn.out_proj.register_forward_pre_hook(lambda m, i: seen.append(("out_proj", type(m).__name__)))
    layer.linear2.register_forward_hook(lambda m, i, o: o * 0)
    x = mf_from(randn(5, 3, 8).astype(np.float32))
    y = layer(x)
    assert seen == [("out_proj", "Linear"), ("norm1", (5, 3, 8))]
    layer2 = mf.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    layer2.load_state_dict(layer.state_dict())
    # With linear2's output zeroed the feed-forward block adds nothing.
    h = layer2.norm1(x + layer2.self_attn(x, x, x, need_weights=False)[0])
    np.testing.assert_allclose(to_numpy(y), to_numpy(layer2.norm2(h)), rtol=1e-5, atol=1e-6)


def test_missing_forward():
    class NoForward(mf.nn.Module):
        pass
    with pytest.raises(NotImplementedError, match="forward"):
        NoForward()(mf.zeros(1))


def test_sequential():
    a, b, c = mf.nn.Linear(3, 4), mf.nn.ReLU(), mf.nn.Linear(4, 2)
    seq = mf.nn.Sequential(a, b, c)
    assert len(seq) == 3 and seq[0] is a and seq[-1] is c and list(seq) == [a, b, c]
    sub = seq[1:]
    assert isinstance(sub, mf.nn.Sequential) and len(sub) == 2 and sub[0] is b
    assert names(sub.named_children()) == ["1", "2"]
    assert names(seq[::2].named_children()) == ["0", "2"]
    with pytest.raises(IndexError):
        seq[3]
    x = mf_from(randn(5, 3).astype(np.float32))
    np.testing.assert_allclose(to_numpy(seq(x)), to_numpy(c(b(a(x)))), rtol=1e-6)
    assert seq.append(mf.nn.Tanh()) is seq and len(seq) == 4
    od = mf.nn.Sequential(collections.OrderedDict([("fc", mf.nn.Linear(3, 4)), ("act", mf.nn.GELU())]))
    assert names(od.named_parameters()) == ["fc.weight", "fc.bias"]
    assert isinstance(od.fc, mf.nn.Linear)
    t_od = torch.nn.Sequential(collections.OrderedDict([("fc", torch.nn.Linear(3, 4)), ("act", torch.nn.GELU())]))
    assert repr(od) == repr(t_od)


def test_python_module_inside_container_keeps_forward():
    import gc

    class Doubler(mf.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = mf.nn.Parameter(mf.full((1,), 2.0))

        def forward(self, x):
            return x * self.k

    seq = mf.nn.Sequential(Doubler(), mf.nn.Identity(), Doubler())
    lst = mf.nn.ModuleList([Doubler()])
    dct = mf.nn.ModuleDict({"d": Doubler()})
    holder = mf.nn.Module()
    holder.inner = Doubler()
    gc.collect()
    x = mf.ones(3)
    np.testing.assert_array_equal(to_numpy(seq(x)), np.full(3, 4.0))
    np.testing.assert_array_equal(to_numpy(lst[0](x)), np.full(3, 2.0))
    np.testing.assert_array_equal(to_numpy(dct["d"](x)), np.full(3, 2.0))
    np.testing.assert_array_equal(to_numpy(holder.inner(x)), np.full(3, 2.0))
    assert type(seq[0]).__name__ == "Doubler" and type(seq.get_submodule("2")).__name__ == "Doubler"
    assert [type(m).__name__ for m in holder.modules()] == ["Module", "Doubler"]


def test_module_list():
    t = [torch.nn.Linear(2, i + 1) for i in range(5)]
    ml = mf.nn.ModuleList([mf.nn.Linear(2, 1), mf.nn.Linear(2, 2)])
    tl = torch.nn.ModuleList(t[:2])
    ml.append(mf.nn.Linear(2, 3))
    tl.append(t[2])
    ml.extend([mf.nn.Linear(2, 4)])
    tl.extend([t[3]])
    ml.insert(1, mf.nn.Linear(2, 5))
    tl.insert(1, t[4])
    assert [m.out_features for m in ml] == [m.out_features for m in tl] == [1, 5, 2, 3, 4]
    assert names(ml.named_parameters()) == names(tl.named_parameters())
    del ml[0]
    del tl[0]
    assert [m.out_features for m in ml] == [m.out_features for m in tl]
    assert names(ml.named_parameters()) == names(tl.named_parameters())
    assert [m.out_features for m in ml[1:3]] == [2, 3] and isinstance(ml[1:3], mf.nn.ModuleList)
    assert names(ml[1:3].named_children()) == ["0", "1"]
    assert ml[-1].out_features == 4 and len(ml) == 4
    ml[0] = mf.nn.Tanh()
    assert type(ml[0]).__name__ == "Tanh"
    assert repr(mf.nn.ModuleList([mf.nn.ReLU()])) == repr(torch.nn.ModuleList([torch.nn.ReLU()]))


def test_module_dict():
    md = mf.nn.ModuleDict({"a": mf.nn.Linear(2, 3)})
    md["b"] = mf.nn.Linear(3, 1)
    md.update({"c": mf.nn.ReLU()})
    assert list(md.keys()) == ["a", "b", "c"] and len(md) == 3 and "b" in md and "z" not in md
    assert list(md) == ["a", "b", "c"]
    assert [k for k, _ in md.items()] == ["a", "b", "c"] and len(list(md.values())) == 3
    assert names(md.named_parameters()) == ["a.weight", "a.bias", "b.weight", "b.bias"]
    del md["a"]
    assert list(md.keys()) == ["b", "c"]
    with pytest.raises(KeyError):
        md["a"]


def test_get_submodule():
    model = make_model(mf)
    assert model.get_submodule("body.0") is model.body[0]
    assert model.get_submodule("first.proj") is model.first.proj
    assert model.get_submodule("") is model
    with pytest.raises(AttributeError, match="nothing"):
        model.get_submodule("body.nothing")


def test_sgd_over_parameters_generator():
    mf.manual_seed(0)
    model = mf.nn.Sequential(mf.nn.Linear(4, 8), mf.nn.Tanh(), mf.nn.Linear(8, 1))
    opt = mf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = mf_from(randn(32, 4).astype(np.float32))
    y = mf_from(randn(32, 1, seed=2).astype(np.float32))
    loss_fn = mf.nn.MSELoss()
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


# --- bad input --------------------------------------------------------------------------------

def test_bad_input():
    with pytest.raises(ValueError, match="expected 4D input \\(got 3D input\\)"):
        mf.nn.BatchNorm2d(3)(mf.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="expected 2D or 3D input \\(got 4D input\\)"):
        mf.nn.BatchNorm1d(3)(mf.zeros(2, 3, 4, 5))
    with pytest.raises(RuntimeError, match="channel"):
        mf.nn.Conv2d(3, 4, 3)(mf.zeros(1, 5, 8, 8))
    with pytest.raises(RuntimeError, match="5"):
        mf.nn.Linear(4, 2)(mf.zeros(3, 5))
    with pytest.raises(ValueError, match="divisible by groups"):
        mf.nn.Conv2d(4, 6, 3, groups=4)
    with pytest.raises(ValueError, match="divisible by groups"):
        mf.nn.Conv2d(3, 6, 3, groups=2)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        mf.nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="divisible by num_groups"):
        mf.nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="strided"):
        mf.nn.Conv2d(3, 3, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding"):
        mf.nn.Conv2d(3, 3, 3, padding="full")
    with pytest.raises(ValueError, match="approximate"):
        mf.nn.GELU("fast")
    with pytest.raises(ValueError, match="activation"):
        mf.nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError, match="padding_idx"):
        mf.nn.Embedding(5, 2, padding_idx=5)
    with pytest.raises(RuntimeError, match="embed_dim"):
        mf.nn.MultiheadAttention(8, 2)(mf.zeros(3, 2, 6), mf.zeros(3, 2, 6), mf.zeros(3, 2, 6))
    with pytest.raises(RuntimeError, match="attn_mask"):
        x = mf.zeros(3, 2, 8)
        mf.nn.MultiheadAttention(8, 2)(x, x, x, attn_mask=mf.zeros(3, 4))
    with pytest.raises(RuntimeError, match="key_padding_mask"):
        x = mf.zeros(3, 2, 8)
        mf.nn.MultiheadAttention(8, 2)(x, x, x, key_padding_mask=mf.zeros(2, 4, dtype=mf.bool))
    with pytest.raises(TypeError):
        mf.nn.Sequential(mf.nn.ReLU(), "relu")
    with pytest.raises(TypeError, match="dtype"):
        mf.nn.Linear(2, 2).to(mf.int32)


def test_attribute_assignment_before_init():
    class Broken(mf.nn.Module):
        def __init__(self):
            self.lin = mf.nn.Linear(2, 2)
            super().__init__()
    with pytest.raises((AttributeError, TypeError, RuntimeError)):
        Broken()


def test_clip_grad_value_and_parameter_vectors_match_torch():
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (4,), (2, 2, 2)]
    values = [rng.standard_normal(s) for s in shapes]
    grads = [rng.standard_normal(s) * 3 for s in shapes]
    tp = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    mp = [mf.nn.Parameter(mf.tensor(v)) for v in values]
    for t, m, g in zip(tp, mp, grads):
        t.grad, m.grad = torch.tensor(g), mf.tensor(g)
    torch.nn.utils.clip_grad_value_(tp, 0.7)
    mf.nn.utils.clip_grad_value_(mp, 0.7)
    for t, m in zip(tp, mp):
        np.testing.assert_array_equal(m.grad.numpy(), t.grad.numpy())
    tv, mv = torch.nn.utils.parameters_to_vector(tp), mf.nn.utils.parameters_to_vector(mp)
    np.testing.assert_array_equal(mv.detach().numpy(), tv.detach().numpy())
    mv.sum().backward()  # differentiable, as torch's
    new = rng.standard_normal(tv.numel())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), tp)
    mf.nn.utils.vector_to_parameters(mf.tensor(new), mp)
    for t, m in zip(tp, mp):
        np.testing.assert_array_equal(m.detach().numpy(), t.detach().numpy())
    with pytest.raises(ValueError, match="elements"):
        mf.nn.utils.vector_to_parameters(mf.zeros(3), mp)
    with pytest.raises(TypeError):
        mf.nn.utils.clip_grad_value_(5, 1.0)


def test_finfo_iinfo_inference_mode_and_cuda_guards():
    for m, t in ((mf.float32, torch.float32), (mf.float64, torch.float64), (mf.float16, torch.float16),
                 (mf.bfloat16, torch.bfloat16)):
        a, b = mf.finfo(m), torch.finfo(t)
        for key in ("bits", "eps", "max", "min", "tiny", "resolution", "smallest_normal"):
            assert getattr(a, key) == getattr(b, key), (m, key)
    assert mf.finfo().bits == 32
    for m, t in ((mf.int8, torch.int8), (mf.uint8, torch.uint8), (mf.int16, torch.int16), (mf.int32, torch.int32),
                 (mf.int64, torch.int64)):
        assert (mf.iinfo(m).min, mf.iinfo(m).max, mf.iinfo(m).bits) == (torch.iinfo(t).min, torch.iinfo(t).max,
                                                                          torch.iinfo(t).bits)
    with pytest.raises(TypeError):
        mf.finfo(mf.int32)
    with pytest.raises(TypeError):
        mf.iinfo(mf.float32)
    x = mf.ones(2, requires_grad=True)
    with mf.inference_mode():
        assert not (x * 2).requires_grad
    with mf.inference_mode(False):
        assert (x * 2).requires_grad

    @mf.inference_mode()
    def f(t):
        return t * 3
    assert not f(x).requires_grad and mf.is_grad_enabled()
    assert not mf.cuda.amp.GradScaler(enabled=False).is_enabled()
    # torch.amp.GradScaler's leading device.
    assert mf.amp.GradScaler("cpu", init_scale=4.0).get_scale() == 4.0 and mf.amp.GradScaler(8.0).get_scale() == 8.0
    assert not mf.amp.GradScaler("cuda", enabled=False).is_enabled()
    if mf.cuda.device_count() == 0:  # without a device (or the emulated one, tests/python/devices.py)
        assert mf.cuda.is_available() is False
        with pytest.raises(RuntimeError, match="CUDA"):
            mf.cuda.amp.GradScaler()
        with pytest.raises(RuntimeError, match="CUDA"):
            mf.amp.GradScaler("cuda")


@pytest.mark.parametrize("lib", [torch, mf], ids=["torch", "meshflow"])
def test_parameter_list_and_dict_as_torch(lib):
    plist = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2, 3)), lib.ones(3)])
    plist.append(lib.zeros(1))
    plist.extend([lib.ones(2)])
    assert len(plist) == 4 and all(isinstance(p, lib.nn.Parameter) for p in plist)
    assert [n for n, _ in plist.named_parameters()] == ["0", "1", "2", "3"]
    assert plist[-1] is plist[3] and len(plist[1:3]) == 2
    plist[0] = lib.full((2,), 5.0)
    assert plist[0].tolist() == [5.0, 5.0] and isinstance(plist[0], lib.nn.Parameter)
    pdict = lib.nn.ParameterDict({"a": lib.nn.Parameter(lib.ones(2)), "b": lib.ones(1)})
    pdict["c"] = lib.zeros(3)
    pdict.update([("d", lib.ones(1))])
    assert list(pdict.keys()) == ["a", "b", "c", "d"] and "c" in pdict and len(pdict) == 4
    assert isinstance(pdict["b"], lib.nn.Parameter) and pdict.get("zz") is None
    assert pdict.pop("d").tolist() == [1.0] and list(pdict) == ["a", "b", "c"]

    class Model(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = lib.nn.ParameterList([lib.ones(2) for _ in range(3)])
            self.extra = lib.nn.ParameterDict({"bias": lib.zeros(2)})

        def forward(self, x):
            for s in self.scales:
                x = x * s
            return x + self.extra["bias"]

    model = Model()
    assert list(model.state_dict()) == ["scales.0", "scales.1", "scales.2", "extra.bias"]
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    model(lib.full((2,), 2.0)).sum().backward()
    opt.step()
    assert model.scales[0].tolist() == pytest.approx([0.8, 0.8]) and model.extra["bias"].tolist() == pytest.approx([-0.1, -0.1])


def test_full_backward_hooks_as_torch():
    def run(lib):
        lib.manual_seed(0)

        class Pair(lib.nn.Module):
            def forward(self, a, b, scale):
                return a * b * scale, a + b

        m = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh())
        pair = Pair()
        with lib.no_grad():
            for p in m.parameters():
                p.copy_(lib.linspace(-1, 1, p.numel()).reshape(p.shape))
        log = []
        m.register_full_backward_hook(lambda mod, gi, go: log.append(("seq", [g.tolist() for g in gi],
                                                                      [g.tolist() for g in go])))
        m[0].register_full_backward_hook(lambda mod, gi, go: log.append(("lin", [g.tolist() for g in gi])))
        handle = pair.register_full_backward_hook(
            lambda mod, gi, go: (log.append(("pair", [None if g is None else g.tolist() for g in gi],
                                                  [g.tolist() for g in go])), (gi[0] * 3, gi[1], gi[2]))[1])
        x = lib.linspace(0, 1, 6).reshape(2, 3).requires_grad_()
        b = lib.ones(2, 4)
        y, z = pair(m(x), b, 2.0)
        (y.sum() + (z * z).sum()).backward()
        first = x.grad.tolist()
        handle.remove()
        x.grad = None
        y, z = pair(m(x), b, 2.0)
        (y.sum() + z.sum()).backward()
        return log, first, x.grad.tolist()

    (t_log, t_first, t_second), (m_log, m_first, m_second) = run(torch), run(mf)
    assert [entry[0] for entry in m_log] == [entry[0] for entry in t_log]
    for m_entry, t_entry in zip(m_log, t_log):
        for m_part, t_part in zip(m_entry[1:], t_entry[1:]):
            for a, b in zip(m_part, t_part):
                assert (a is None and b is None) or np.allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(m_first, t_first, rtol=1e-6)
    np.testing.assert_allclose(m_second, t_second, rtol=1e-6)


def test_embedding_from_pretrained_as_torch():
    table = np.arange(12.0).reshape(4, 3)
    for lib in (torch, mf):
        frozen = lib.nn.Embedding.from_pretrained(lib.tensor(table), padding_idx=2)
        assert repr(frozen) == "Embedding(4, 3, padding_idx=2)" and not frozen.weight.requires_grad
        assert frozen(lib.tensor([3, 0])).tolist() == [[9.0, 10.0, 11.0], [0.0, 1.0, 2.0]]
        assert frozen.weight.dtype == lib.float64
        trained = lib.nn.Embedding.from_pretrained(lib.tensor(table, dtype=lib.float32), freeze=False)
        trained(lib.tensor([1, 1])).sum().backward()
        assert trained.weight.grad[1].tolist() == [2.0, 2.0, 2.0]
        with pytest.raises((ValueError, AssertionError)):
            lib.nn.Embedding.from_pretrained(lib.ones(3))


def test_parameter_repr_like_torch():
    assert repr(mf.nn.Parameter(mf.ones(2))) == repr(torch.nn.Parameter(torch.ones(2)))
    assert repr(mf.nn.Parameter(mf.ones(2), requires_grad=False)) == repr(
        torch.nn.Parameter(torch.ones(2), requires_grad=False))
    assert repr(mf.nn.Linear(2, 1).weight).startswith("Parameter containing:\ntensor(")
    assert repr(mf.ones(2)) == repr(torch.ones(2))
