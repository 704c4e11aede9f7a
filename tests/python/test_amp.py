"""Automatic mixed precision: mf.autocast against torch 1.13's CPU autocast
(the dtype each op returns on the same inputs), regions (nesting,
enabled=False, decorator, cache), training under bfloat16 autocast against
float32, and GradScaler against torch.cuda.amp.GradScaler's algorithm."""
import math
import os
import sys

import numpy as np
import pytest
import torch

import meshflow as mf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import models  # noqa: E402

RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 8)).astype(np.float32)
B = RNG.standard_normal((8, 6)).astype(np.float32)
W = RNG.standard_normal((6, 8)).astype(np.float32)
BIAS = RNG.standard_normal((6,)).astype(np.float32)
V = RNG.standard_normal((8,)).astype(np.float32)
A3 = RNG.standard_normal((2, 4, 8)).astype(np.float32)
B3 = RNG.standard_normal((2, 8, 3)).astype(np.float32)
C3 = RNG.standard_normal((2, 4, 3)).astype(np.float32)
IMG = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
CW = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
CB = RNG.standard_normal((4,)).astype(np.float32)
TARGET = np.array([1, 0, 7, 3])
POS = np.abs(A) + 0.5


def as_lib(lib, arr, dtype=None):
    t = lib.tensor(arr)
    if dtype == "bf16":
        t = t.to(lib.bfloat16)
    elif dtype == "f64":
        t = t.to(lib.float64)
    return t


# name: f(lib, F, T) with T(array, dtype=None) making the library's tensor;
# the same expression runs in both libraries.
OPS = {
    "mm": lambda L, F, T: L.mm(T(A), T(B)),
    "matmul_2d": lambda L, F, T: L.matmul(T(A), T(B)),
    "matmul_3d_2d": lambda L, F, T: L.matmul(T(A3), T(B)),
    "matmul_batched": lambda L, F, T: L.matmul(T(A3), T(B3)),
    "matmul_2d_1d": lambda L, F, T: L.matmul(T(A), T(V)),
    "matmul_1d_1d": lambda L, F, T: L.matmul(T(V), T(V)),
    "matmul_bf16_f32": lambda L, F, T: L.matmul(T(A, "bf16"), T(B)),
    "matmul_f64": lambda L, F, T: L.matmul(T(A, "f64"), T(B, "f64")),
    "bmm": lambda L, F, T: L.bmm(T(A3), T(B3)),
    "baddbmm": lambda L, F, T: L.baddbmm(T(C3), T(A3), T(B3)),
    "addmm": lambda L, F, T: L.addmm(T(A @ B), T(A), T(B)),
    "mv": lambda L, F, T: L.mv(T(A), T(V)),
    "dot": lambda L, F, T: L.dot(T(V), T(V)),
    "outer": lambda L, F, T: L.outer(T(V), T(V)),
    "linear": lambda L, F, T: F.linear(T(A), T(W), T(BIAS)),
    "linear_nobias": lambda L, F, T: F.linear(T(A), T(W)),
    "linear_bf16_input": lambda L, F, T: F.linear(T(A, "bf16"), T(W), T(BIAS)),
    "conv2d": lambda L, F, T: F.conv2d(T(IMG), T(CW), T(CB), padding=1),
    "conv2d_bf16_input": lambda L, F, T: F.conv2d(T(IMG, "bf16"), T(CW)),
    "softmax": lambda L, F, T: F.softmax(T(A), -1),
    "softmax_bf16": lambda L, F, T: F.softmax(T(A, "bf16"), -1),
    "log_softmax_bf16": lambda L, F, T: F.log_softmax(T(A, "bf16"), -1),
    "layer_norm": lambda L, F, T: F.layer_norm(T(A), (8,), T(np.ones(8, np.float32)), T(np.zeros(8, np.float32))),
    "layer_norm_bf16": lambda L, F, T: F.layer_norm(T(A, "bf16"), (8,)),
    "group_norm_bf16": lambda L, F, T: F.group_norm(T(IMG, "bf16"), 3),
    "exp_bf16": lambda L, F, T: L.exp(T(A, "bf16")),
    "log_bf16": lambda L, F, T: L.log(T(POS, "bf16")),
    "tanh_bf16": lambda L, F, T: L.tanh(T(A, "bf16")),
    "sigmoid_bf16": lambda L, F, T: L.sigmoid(T(A, "bf16")),
    "gelu_bf16": lambda L, F, T: F.gelu(T(A, "bf16")),
    "relu_bf16": lambda L, F, T: F.relu(T(A, "bf16")),
    "sum_bf16": lambda L, F, T: T(A, "bf16").sum(),
    "mean_bf16": lambda L, F, T: T(A, "bf16").mean(),
    "prod_bf16": lambda L, F, T: T(A, "bf16").prod(),
    "prod_f32": lambda L, F, T: T(A).prod(),
    "var_bf16": lambda L, F, T: T(A, "bf16").var(),
    "norm_bf16": lambda L, F, T: T(A, "bf16").norm(),
    "logsumexp_bf16": lambda L, F, T: L.logsumexp(T(A, "bf16"), -1),
    "cumsum_bf16": lambda L, F, T: L.cumsum(T(A, "bf16"), 0),
    "cross_entropy_bf16": lambda L, F, T: F.cross_entropy(T(A, "bf16"), T(TARGET)),
    "cross_entropy_f32": lambda L, F, T: F.cross_entropy(T(A), T(TARGET)),
    "cross_entropy_f64": lambda L, F, T: F.cross_entropy(T(A, "f64"), T(TARGET)),
    "nll_loss_bf16": lambda L, F, T: F.nll_loss(T(A, "bf16"), T(TARGET)),
    "mse_loss_bf16": lambda L, F, T: F.mse_loss(T(A, "bf16"), T(A, "bf16")),
    "mse_loss_mixed": lambda L, F, T: F.mse_loss(T(A, "bf16"), T(A)),
    "bce_with_logits_bf16": lambda L, F, T: F.binary_cross_entropy_with_logits(T(A, "bf16"), T((A > 0).astype(np.float32), "bf16")),
    "add_bf16_f32": lambda L, F, T: T(A, "bf16") + T(A),
    "mul_bf16_bf16": lambda L, F, T: T(A, "bf16") * T(A, "bf16"),
    "cat_bf16_f32": lambda L, F, T: L.cat([T(A, "bf16"), T(A)]),
    "where_bf16_f32": lambda L, F, T: L.where(T(A > 0), T(A, "bf16"), T(A)),
    "max_pool2d_bf16": lambda L, F, T: F.max_pool2d(T(IMG, "bf16"), 2),
    "avg_pool2d_bf16": lambda L, F, T: F.avg_pool2d(T(IMG, "bf16"), 2),
    "adaptive_avg_pool2d_bf16": lambda L, F, T: F.adaptive_avg_pool2d(T(IMG, "bf16"), 1),
    "embedding": lambda L, F, T: F.embedding(T(TARGET % 6), T(W)),
    "dropout_bf16": lambda L, F, T: F.dropout(T(A, "bf16"), 0.5),
    "matmul_int": lambda L, F, T: L.matmul(T(np.ones((2, 2), np.int64)), T(np.ones((2, 2), np.int64))),
}


def run_op(lib, name, enabled=True):
    F = lib.nn.functional
    if lib is torch:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            return OPS[name](torch, F, lambda a, d=None: as_lib(torch, a, d))
    with mf.autocast("cpu", dtype=mf.bfloat16, enabled=enabled):
        return OPS[name](mf, F, lambda a, d=None: as_lib(mf, a, d))


def dtype_name(t):
    return str(t.dtype).split(".")[-1]


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_dtype_matches_torch_autocast(name):
    expected = dtype_name(run_op(torch, name))
    got = run_op(mf, name)
    assert dtype_name(got) == expected
    # Outside autocast both give the inputs' (promoted) dtype, where torch has
    # the op for them (it refuses mixed matmul operands and bfloat16 prod).
    try:
        expected = dtype_name(run_op(torch, name, enabled=False))
    except RuntimeError:
        return
    assert dtype_name(run_op(mf, name, enabled=False)) == expected


def test_low_precision_values_match_torch():
    for name in ("mm", "linear", "conv2d", "bmm", "addmm"):
        got = run_op(mf, name).float().numpy()
        ref = run_op(torch, name).float().numpy()
        np.testing.assert_allclose(got, ref, rtol=2e-2, atol=5e-2, err_msg=name)


def test_multihead_attention_dtype_matches_torch():
    x = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    dtypes = []
    for lib in (torch, mf):
        lib.manual_seed(0)
        m = lib.nn.MultiheadAttention(8, 2, batch_first=True)
        t = lib.tensor(x)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            dtypes.append(dtype_name(m(t, t, t)[0]))
    assert dtypes[0] == dtypes[1] == "bfloat16"


# float16: torch 1.13 CPU autocast accepts only bfloat16, so meshflow's
# float16 regions are checked against the documented lists (docs/amp.md).
FLOAT16_LISTS = {
    "float16": ["mm", "matmul_2d", "matmul_3d_2d", "bmm", "baddbmm", "addmm", "linear", "linear_nobias", "conv2d"],
    "float32": ["prod_f32", "cross_entropy_f32"],
    "float64": ["matmul_f64", "cross_entropy_f64"],
}


@pytest.mark.parametrize("expected", sorted(FLOAT16_LISTS))
def test_float16_lists(expected):
    F = mf.nn.functional
    for name in FLOAT16_LISTS[expected]:
        with mf.autocast("cpu", dtype=mf.float16):
            out = OPS[name](mf, F, lambda a, d=None: as_lib(mf, a, d))
        assert dtype_name(out) == expected, name


def test_torch_refuses_cpu_float16():
    with pytest.raises(RuntimeError):
        with torch.autocast("cpu", dtype=torch.float16):
            pass


def test_nesting_enabled_false_and_state_restored():
    a, b = mf.tensor(A), mf.tensor(B)
    assert not mf.is_autocast_enabled("cpu")
    with mf.autocast("cpu"):
        assert mf.get_autocast_dtype("cpu") == mf.bfloat16
        assert mf.mm(a, b).dtype == mf.bfloat16
        with mf.autocast("cpu", dtype=mf.float16):
            assert mf.mm(a, b).dtype == mf.float16
            with mf.autocast("cpu", enabled=False):
                assert mf.mm(a, b).dtype == mf.float32
            assert mf.mm(a, b).dtype == mf.float16
        assert mf.mm(a, b).dtype == mf.bfloat16
        with pytest.raises(ZeroDivisionError):
            with mf.autocast("cpu", enabled=False):
                1 / 0
        assert mf.mm(a, b).dtype == mf.bfloat16
    assert not mf.is_autocast_enabled("cpu")
    assert mf.mm(a, b).dtype == mf.float32


def test_decorator_and_aliases():
    a, b = mf.tensor(A), mf.tensor(B)

    @mf.autocast("cpu")
    def f():
        return mf.mm(a, b)

    @mf.cpu.amp.autocast()
    def g():
        return mf.mm(a, b)

    assert f().dtype == mf.bfloat16 and g().dtype == mf.bfloat16
    assert mf.mm(a, b).dtype == mf.float32
    with mf.amp.autocast("cpu", dtype=mf.float16):
        assert mf.mm(a, b).dtype == mf.float16
    with mf.cpu.amp.autocast(dtype=mf.float16):
        assert mf.mm(a, b).dtype == mf.float16
    assert mf.amp.autocast is mf.autocast


def test_cast_cache_reuses_weight_within_region():
    lin = mf.nn.Linear(8, 6)
    x = mf.tensor(A)
    with mf.autocast("cpu"):
        y1 = lin(x)
        y2 = lin(x)
        # weight and bias: one cached cast each, shared by both calls
        assert mf._C._autocast_cache_size() == 2
        with mf.autocast("cpu"):
            lin(x)
            assert mf._C._autocast_cache_size() == 2
        (y1.float().sum() + y2.float().sum()).backward()
    assert mf._C._autocast_cache_size() == 0
    assert lin.weight.grad.dtype == mf.float32
    # d/dW of sum(y1) + sum(y2) = 2 * column sums of x (in bfloat16).
    xb = A.astype(np.float32)
    expected = 2 * np.tile(xb.sum(0), (6, 1))
    np.testing.assert_allclose(lin.weight.grad.numpy(), expected, rtol=2e-2, atol=5e-2)
    with mf.autocast("cpu", cache_enabled=False):
        lin(x)
        assert mf._C._autocast_cache_size() == 0


def test_backward_grads_are_float32_on_float32_params(device):
    mf.manual_seed(0)
    conv = mf.nn.Conv2d(3, 4, 3).to(device)
    lin = mf.nn.Linear(4 * 6 * 6, 10).to(device)
    with mf.autocast(device):  # bfloat16 on the CPU, float16 on CUDA (PyTorch's defaults)
        h = conv(mf.tensor(IMG, device=device))
        assert h.dtype == (mf.bfloat16 if device == "cpu" else mf.float16)
        out = lin(h.flatten(1))
        loss = mf.nn.functional.cross_entropy(out, mf.tensor(np.array([1, 2]), device=device))
        assert loss.dtype == mf.float32
    loss.backward()
    for p in list(conv.parameters()) + list(lin.parameters()):
        assert p.dtype == mf.float32 and p.grad.dtype == mf.float32


def test_global_tensors_are_autocast():
    # The layer sits above the global interpreter: one-rank global tensors.
    placement, broadcast = mf.placement("cpu", [0]), mf.sbp.broadcast
    x = mf.tensor(A).to_global(placement=placement, sbp=broadcast)
    w = mf.tensor(W).to_global(placement=placement, sbp=broadcast).requires_grad_()
    target = mf.tensor(TARGET % 6).to_global(placement=placement, sbp=broadcast)
    with mf.autocast("cpu"):
        y = mf.nn.functional.linear(x, w)
        loss = mf.nn.functional.cross_entropy(y, target)
    assert y.is_global and y.dtype == mf.bfloat16
    assert loss.dtype == mf.float32
    loss.backward()
    assert w.grad.is_global and w.grad.dtype == mf.float32
    ref = run_op(torch, "linear_nobias").float().numpy()
    np.testing.assert_allclose(y.detach().to_local().float().numpy(), ref, rtol=2e-2, atol=5e-2)


def test_bad_arguments():
    with pytest.raises(TypeError, match="float32"):
        mf.autocast("cpu", dtype=mf.float32)
    with pytest.raises(TypeError, match="int64"):
        mf.autocast("cpu", dtype=mf.int64)
    with pytest.raises(ValueError, match="tpu"):
        mf.autocast("tpu")
    with pytest.raises(TypeError):
        mf.set_autocast_dtype("cpu", mf.float64)
    assert not mf.is_autocast_enabled("cpu")


# --- training under autocast ------------------------------------------------------


def train_losses(name, steps, autocast, batch, build_kwargs, batch_kwargs, lr, device="cpu"):
    torch.manual_seed(0)
    ref = models.build(name, torch, **build_kwargs)
    net = models.build(name, mf, **build_kwargs)
    models.copy_state(ref, net, mf)
    net.to(device)
    opt = mf.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    x, y = models.random_batch(name, batch, np.random.default_rng(1), **batch_kwargs)
    x, y = mf.tensor(x, device=device), mf.tensor(y, device=device)
    mf.manual_seed(0)  # the same dropout masks in both runs
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with mf.autocast(device, dtype=mf.bfloat16, enabled=autocast):
            loss = models.loss_fn(name, mf, net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    for p in net.parameters():
        assert p.dtype == mf.float32 and p.grad.dtype == mf.float32
    return np.array(losses)


@pytest.mark.parametrize("name", ["fashion_cnn", "gpt"])
def test_training_follows_float32_loss_curve(name, device):
    if name == "gpt":
        kwargs = dict(vocab=64, d_model=32, heads=2, layers=2, seq=16)
        setup = dict(batch=4, build_kwargs=kwargs, batch_kwargs=dict(vocab=64, seq=16), lr=0.05)
    else:
        setup = dict(batch=16, build_kwargs={}, batch_kwargs={}, lr=0.005)
    fp32 = train_losses(name, 20, False, device=device, **setup)
    bf16 = train_losses(name, 20, True, device=device, **setup)
    assert fp32[-1] < 0.7 * fp32[0]  # the curve goes somewhere
    np.testing.assert_allclose(bf16, fp32, rtol=0.05, atol=0.03)


# --- GradScaler -------------------------------------------------------------------


def torch_scaler_reference(init_scale, growth_factor, backoff_factor, growth_interval, overflow):
    """torch.cuda.amp.GradScaler's documented update (torch._amp_update_scale_),
    step by step: the scale after each update and whether each step ran."""
    scale, tracker, scales, stepped = init_scale, 0, [], []
    for inf in overflow:
        stepped.append(not inf)
        if inf:
            scale *= backoff_factor
            tracker = 0
        else:
            tracker += 1
            if tracker == growth_interval:
                if math.isfinite(scale * growth_factor):
                    scale *= growth_factor
                tracker = 0
        scales.append(scale)
    return scales, stepped


def test_grad_scaler_matches_torch_algorithm():
    overflow = [False, False, False, True, False, False, False, True, True, False, False, False, False]
    cfg = dict(init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    expected_scales, expected_stepped = torch_scaler_reference(overflow=overflow, **cfg)
    p = mf.tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    opt = mf.optim.SGD([p], lr=0.1)
    scaler = mf.amp.GradScaler(**cfg)
    for i, inf in enumerate(overflow):
        opt.zero_grad()
        before = p.detach().numpy().copy()
        scale = scaler.get_scale()
        scaled = scaler.scale((p * p).sum())
        scaled.backward()
        np.testing.assert_allclose(p.grad.numpy(), 2 * before * scale, rtol=1e-6)
        if inf:
            p.grad[1] = math.inf if i % 2 else math.nan
        result = scaler.step(opt)
        if expected_stepped[i]:
            np.testing.assert_allclose(p.detach().numpy(), before - 0.1 * 2 * before, rtol=1e-5)
        else:
            assert result is None
            np.testing.assert_array_equal(p.detach().numpy(), before)  # a skipped step changes nothing
        scaler.update()
        assert scaler.get_scale() == expected_scales[i], i


def test_grad_scaler_unscale_and_misuse():
    p = mf.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    opt = mf.optim.SGD([p], lr=0.5)
    scaler = mf.amp.GradScaler(init_scale=8.0)
    scaler.scale(p.sum()).backward()
    np.testing.assert_allclose(p.grad.numpy(), [8.0, 8.0])
    scaler.unscale_(opt)
    np.testing.assert_allclose(p.grad.numpy(), [1.0, 1.0])
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)  # uses the already-unscaled grads
    np.testing.assert_allclose(p.detach().numpy(), [0.5, 1.5])
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update(new_scale=2.0)
    assert scaler.get_scale() == 2.0
    scaler.update(new_scale=mf.tensor([4.0]))
    assert scaler.get_scale() == 4.0
    with pytest.raises(RuntimeError, match="No inf checks"):
        scaler.update()


def test_grad_scaler_state_dict_and_disabled():
    scaler = mf.amp.GradScaler(init_scale=16.0, growth_interval=5)
    p = mf.tensor(np.array([1.0], np.float32), requires_grad=True)
    opt = mf.optim.SGD([p], lr=0.1)
    scaler.scale(p.sum()).backward()
    scaler.step(opt)
    scaler.update()
    state = scaler.state_dict()
    assert state == {"scale": 16.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 5,
                     "_growth_tracker": 1}
    other = mf.amp.GradScaler()
    other.load_state_dict(state)
    assert other.get_scale() == 16.0 and other._get_growth_tracker() == 1 and other.get_growth_interval() == 5
    off = mf.amp.GradScaler(enabled=False)
    assert not off.is_enabled() and off.get_scale() == 1.0 and off.state_dict() == {}
    loss = p.sum()
    assert off.scale(loss) is loss
    with pytest.raises(RuntimeError, match="empty"):
        other.load_state_dict({})
    with pytest.raises(ValueError):
        mf.amp.GradScaler(growth_factor=1.0)


def test_grad_scaler_with_autocast_training(device):
    mf.manual_seed(0)
    net = mf.nn.Sequential(mf.nn.Linear(8, 16), mf.nn.ReLU(), mf.nn.Linear(16, 4)).to(device)
    opt = mf.optim.SGD(net.parameters(), lr=0.1)
    scaler = mf.amp.GradScaler(init_scale=2.0**8)
    x, y = mf.tensor(A, device=device), mf.tensor(TARGET % 4, device=device)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        with mf.autocast(device):
            loss = mf.nn.functional.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    for p in net.parameters():
        assert p.dtype == mf.float32


@pytest.mark.parametrize("make", [lambda ps: mf.optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: mf.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5),
                                  lambda ps: mf.optim.Adam(ps, lr=0.01), lambda ps: mf.optim.AdamW(ps, lr=0.01),
                                  lambda ps: mf.optim.RMSprop(ps, lr=0.01, momentum=0.5),
                                  lambda ps: mf.optim.Adagrad(ps, lr=0.1)],
                         ids=["sgd", "sgd-dampening", "adam", "adamw", "rmsprop", "adagrad"])
def test_grad_scaler_skips_on_the_flag_without_reading_it(make, monkeypatch):
    """Note [Skipped updates]: scaler.step gives meshflow's optimizers the
    found_inf flag instead of reading it on the host; the parameters, the
    optimizer state and the scale equal those of the host-read path, with
    a skipped first step and a skipped later one."""
    overflow = [True, False, False, True, False]

    def train(on_device):
        monkeypatch.setattr(mf.amp.GradScaler, "_skips_on_device",
                            staticmethod(lambda opt: on_device and type(opt).__module__ == "meshflow.optim"))
        mf.manual_seed(0)
        model = mf.nn.Linear(4, 3)
        opt = make(list(model.parameters()))
        scaler = mf.amp.GradScaler(init_scale=2.0**8, growth_interval=2)
        x = mf.randn(5, 4)
        reads = []
        item = mf.Tensor.item
        for inf in overflow:
            opt.zero_grad()
            loss = model(x).square().mean() * (math.inf if inf else 1.0)
            scaler.scale(loss).backward()
            monkeypatch.setattr(mf.Tensor, "item", lambda t: reads.append(1) or item(t))
            scaler.step(opt)
            monkeypatch.setattr(mf.Tensor, "item", item)
            scaler.update()
        state = [v.numpy().copy() for entry in opt.state_dict()["state"].values() for v in entry.values()
                 if isinstance(v, mf.Tensor) and v.dim() > 0]
        return [p.detach().numpy().copy() for p in model.parameters()], state, scaler.get_scale(), len(reads)

    params, state, scale, reads = train(True)
    want_params, want_state, want_scale, want_reads = train(False)
    assert reads == 0 and want_reads == len(overflow)
    assert scale == want_scale
    for got, want in zip(params, want_params):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(state, want_state):
        np.testing.assert_array_equal(got, want)
