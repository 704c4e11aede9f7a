"""Conv3d, ConvTranspose1d/2d/3d and AdaptiveMaxPool1d/2d against torch.nn:
outputs, input and parameter gradients, repr and attributes, the output_size
argument of the transposed convolutions, PyTorch's default initialisation,
the exception types torch raises for bad arguments, double backward, and the
layers inside an nn.Graph."""
import copy
import math

import numpy as np
import pytest
import torch

import meshflow as mf
from test_nn import assert_uniform, compare, randn, to_numpy

LAYERS = [
    ("Conv3d", (3, 4, 3), {}, (2, 3, 5, 6, 5)),
    ("Conv3d", (4, 6, (3, 2, 1)), {"stride": (2, 1, 2), "padding": 1, "dilation": (1, 2, 1), "groups": 2},
     (2, 4, 7, 6, 5)),
    ("Conv3d", (2, 4, 2), {"padding": "same", "dilation": 2, "bias": False}, (1, 2, 5, 4, 6)),
    ("Conv3d", (2, 3, (1, 2, 3)), {"padding": "valid"}, (2, 4, 5, 6)),
    ("ConvTranspose1d", (3, 4, 3), {}, (2, 3, 7)),
    ("ConvTranspose1d", (4, 6, 2), {"stride": 3, "padding": 1, "output_padding": 2, "groups": 2, "dilation": 2},
     (2, 4, 5)),
    ("ConvTranspose1d", (2, 3, 3), {"bias": False}, (2, 6)),
    ("ConvTranspose2d", (3, 4, 3), {}, (2, 3, 5, 6)),
    ("ConvTranspose2d", (4, 6, (3, 2)), {"stride": 2, "padding": (1, 0), "output_padding": 1, "groups": 2},
     (2, 4, 4, 5)),
    ("ConvTranspose2d", (2, 2, 3), {"dilation": (2, 1), "output_padding": (1, 0), "bias": False}, (1, 2, 4, 4)),
    ("ConvTranspose2d", (3, 2, 2), {"stride": (1, 2)}, (3, 4, 4)),
    ("ConvTranspose3d", (2, 3, 2), {}, (2, 2, 3, 4, 3)),
    ("ConvTranspose3d", (4, 2, (2, 3, 1)), {"stride": (2, 1, 3), "padding": (1, 1, 0), "output_padding": (1, 0, 2),
                                             "groups": 2}, (1, 4, 3, 3, 2)),
    ("AdaptiveMaxPool1d", (3,), {}, (2, 3, 8)),
    ("AdaptiveMaxPool1d", ((5,),), {"return_indices": True}, (3, 4)),
    ("AdaptiveMaxPool2d", (3,), {}, (2, 3, 7, 5)),
    ("AdaptiveMaxPool2d", ((None, 2),), {"return_indices": True}, (2, 3, 4, 6)),
    ("AdaptiveMaxPool2d", ((4, 3),), {}, (2, 3, 3)),
    ("MaxPool3d", (2,), {}, (2, 3, 4, 5, 4)),
    ("MaxPool3d", ((2, 1, 3),), {"stride": (1, 2, 1), "padding": (1, 0, 1), "dilation": (1, 2, 1), "ceil_mode": True},
     (1, 2, 5, 6, 7)),
    ("MaxPool3d", (3,), {"stride": 2, "return_indices": True}, (2, 5, 6, 5)),
    ("AvgPool3d", (2,), {}, (2, 3, 4, 5, 4)),
    ("AvgPool3d", ((3, 2, 3),), {"stride": 2, "padding": 1, "count_include_pad": False, "ceil_mode": True},
     (1, 2, 6, 5, 7)),
    ("AvgPool3d", (2,), {"stride": (1, 2, 1)}, (2, 4, 4, 3)),
    ("AdaptiveAvgPool3d", (3,), {}, (2, 3, 5, 6, 4)),
    ("AdaptiveAvgPool3d", ((None, 2, 5),), {}, (2, 4, 3, 4)),
]
IDS = [f"{name}-{i}" for i, (name, *_) in enumerate(LAYERS)]
_CONV_ATTRIBUTES = ["in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "output_padding",
                    "groups", "transposed", "padding_mode"]
ATTRIBUTES = {"ConvNd": _CONV_ATTRIBUTES, "ConvTransposeNd": _CONV_ATTRIBUTES,
              "AdaptiveMaxPoolNd": ["output_size", "return_indices"], "AdaptiveAvgPoolNd": ["output_size"],
              "MaxPoolNd": ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"],
              "AvgPoolNd": ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"]}


def distinct(shape, seed):
    """Values with no ties, so that max pooling picks one element in both libraries."""
    rng = np.random.default_rng(seed)
    return rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 3.0


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,args,kwargs,shape", LAYERS, ids=IDS)
def test_layer_matches_torch(name, args, kwargs, shape, dtype, device):
    torch.manual_seed(0)
    t_module, m_module = getattr(torch.nn, name)(*args, **kwargs), getattr(mf.nn, name)(*args, **kwargs)
    x = distinct(shape, 1) if "Max" in name else randn(*shape, seed=1)
    t_out, m_out = compare(t_module, m_module, [x], dtype, device=device)
    if kwargs.get("return_indices"):
        np.testing.assert_array_equal(m_out[1].cpu().numpy(), t_out[1].numpy())
        assert m_out[1].dtype == mf.int64


@pytest.mark.parametrize("name,args,kwargs,shape", LAYERS, ids=IDS)
def test_repr_and_attributes_match_torch(name, args, kwargs, shape):
    t_module, m_module = getattr(torch.nn, name)(*args, **kwargs), getattr(mf.nn, name)(*args, **kwargs)
    assert repr(m_module) == repr(t_module)
    attributes = ATTRIBUTES[name.replace("1d", "Nd").replace("2d", "Nd").replace("3d", "Nd")]
    for attr in attributes:
        assert getattr(m_module, attr) == getattr(t_module, attr), attr


def test_unbatched_input_of_each_layer(device):
    rng = np.random.default_rng(5)
    for t_module, m_module, shape in (
            (torch.nn.Conv3d(2, 3, 2), mf.nn.Conv3d(2, 3, 2), (2, 4, 3, 3)),
            (torch.nn.ConvTranspose3d(2, 3, 2, stride=2), mf.nn.ConvTranspose3d(2, 3, 2, stride=2), (2, 2, 3, 2)),
            (torch.nn.AdaptiveMaxPool2d(2), mf.nn.AdaptiveMaxPool2d(2), (3, 5, 4))):
        compare(t_module, m_module, [rng.standard_normal(shape)], device=device)


@pytest.mark.parametrize("output_size", [[10, 11], (10, 12), (2, 3, 9, 12), torch.Size([9, 11])])
def test_conv_transpose_output_size_picks_the_output_padding(output_size, device):
    t_module = torch.nn.ConvTranspose2d(3, 2, 3, stride=(2, 3), padding=1)
    m_module = mf.nn.ConvTranspose2d(3, 2, 3, stride=(2, 3), padding=1)
    t_out, m_out = compare(t_module, m_module, [randn(2, 3, 5, 4)], call=lambda m, x: m(x, output_size=output_size), device=device)
    assert tuple(m_out[0].shape) == tuple(t_out[0].shape)


def test_conv_transpose_output_size_errors_as_torch():
    x = np.zeros((1, 2, 4))
    for lib in (torch, mf):
        layer = lib.nn.ConvTranspose1d(2, 2, 3, stride=2)
        assert tuple(layer(lib.tensor(x, dtype=lib.float32), output_size=[10]).shape) == (1, 2, 10)
        assert tuple(layer(lib.tensor(x[0], dtype=lib.float32), output_size=[2, 9]).shape) == (2, 9)
        with pytest.raises(ValueError, match="valid sizes range from"):
            layer(lib.tensor(x, dtype=lib.float32), output_size=[11])
        with pytest.raises(ValueError, match="output_size must have"):
            layer(lib.tensor(x, dtype=lib.float32), output_size=[1, 2, 9, 10])


def test_default_init_matches_torch_bounds():
    mf.manual_seed(0)
    conv = mf.nn.Conv3d(8, 32, 3, groups=2)
    assert tuple(conv.weight.shape) == (32, 4, 3, 3, 3)
    assert_uniform(conv.weight, 1 / math.sqrt(4 * 27))
    assert np.abs(to_numpy(conv.bias)).max() <= 1 / math.sqrt(4 * 27)
    # Transposed: weight (in, out / groups, k...), fan_in = out / groups * k (torch's rule).
    deconv = mf.nn.ConvTranspose2d(64, 24, 5, groups=4)
    assert tuple(deconv.weight.shape) == (64, 6, 5, 5)
    assert_uniform(deconv.weight, 1 / math.sqrt(6 * 25))
    assert np.abs(to_numpy(deconv.bias)).max() <= 1 / math.sqrt(6 * 25)
    assert deconv.weight.requires_grad and deconv.bias.is_leaf


def test_layer_factory_arguments_and_deepcopy():
    layer = mf.nn.ConvTranspose1d(2, 3, 2, dtype=mf.float64, bias=False)
    assert layer.weight.dtype == mf.float64 and layer.bias is None
    clone = copy.deepcopy(layer)
    assert type(clone) is mf.nn.ConvTranspose1d and repr(clone) == repr(layer)
    np.testing.assert_array_equal(to_numpy(clone.weight), to_numpy(layer.weight))
    assert clone.weight.data_ptr() != layer.weight.data_ptr()


def run_both(fn):
    """fn(lib) in both libraries; both raise (torch's exception types, which
    meshflow's errors derive from) or neither does."""
    outcomes = []
    for lib in (torch, mf):
        try:
            fn(lib)
            outcomes.append(None)
        except Exception as error:  # noqa: BLE001 (compared below)
            outcomes.append(error)
    t_error, m_error = outcomes
    assert (t_error is None) == (m_error is None), (t_error, m_error)
    if t_error is not None:
        assert isinstance(m_error, type(t_error)), (t_error, m_error)


def ones(lib, *shape):
    return lib.ones(*shape, dtype=lib.float32)


BAD_FUNCTIONAL = [
    ("output_padding >= stride and dilation", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 1, 2, 4, 4), ones(lib, 2, 2, 3, 3), stride=2, output_padding=2)),
    ("output_padding not below stride", lambda lib: lib.nn.functional.conv_transpose1d(
        ones(lib, 1, 2, 4), ones(lib, 2, 2, 3), output_padding=1)),
    ("negative output_padding", lambda lib: lib.nn.functional.conv_transpose1d(
        ones(lib, 1, 2, 4), ones(lib, 2, 2, 3), output_padding=-1)),
    ("groups not dividing the input channels", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 1, 4, 4, 4), ones(lib, 4, 2, 3, 3), groups=3)),
    ("weight channels", lambda lib: lib.nn.functional.conv_transpose2d(ones(lib, 1, 3, 4, 4), ones(lib, 2, 2, 3, 3))),
    ("bias size", lambda lib: lib.nn.functional.conv_transpose3d(
        ones(lib, 1, 2, 3, 3, 3), ones(lib, 2, 2, 2, 2, 2), ones(lib, 3))),
    ("output too small", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 1, 2, 2, 2), ones(lib, 2, 2, 3, 3), padding=3)),
    ("negative padding", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 1, 2, 2, 2), ones(lib, 2, 2, 3, 3), padding=-1)),
    ("zero stride", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 1, 2, 2, 2), ones(lib, 2, 2, 3, 3), stride=0)),
    ("wrong input rank", lambda lib: lib.nn.functional.conv_transpose3d(ones(lib, 2, 2, 3, 3), ones(lib, 2, 2, 2, 2))),
    ("stride entries", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 1, 2, 4, 4), ones(lib, 2, 2, 3, 3), stride=(1, 2, 3))),
    ("dtype mismatch", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 1, 2, 4, 4), lib.ones(2, 2, 3, 3, dtype=lib.float64))),
    ("empty spatial input", lambda lib: lib.nn.functional.conv_transpose2d(
        ones(lib, 2, 2, 0, 4), ones(lib, 2, 2, 3, 3))),
    ("conv3d groups", lambda lib: lib.nn.functional.conv3d(ones(lib, 1, 4, 3, 3, 3), ones(lib, 3, 2, 1, 1, 1),
                                                           groups=2)),
    ("conv3d kernel larger than input", lambda lib: lib.nn.functional.conv3d(
        ones(lib, 1, 2, 2, 3, 3), ones(lib, 3, 2, 3, 1, 1))),
    ("conv3d strided same", lambda lib: lib.nn.functional.conv3d(
        ones(lib, 1, 2, 4, 4, 4), ones(lib, 3, 2, 3, 3, 3), stride=2, padding="same")),
    ("conv3d 4-d weight", lambda lib: lib.nn.functional.conv3d(ones(lib, 1, 2, 4, 4, 4), ones(lib, 3, 2, 3, 3))),
    ("adaptive max pool empty plane", lambda lib: lib.nn.functional.adaptive_max_pool2d(ones(lib, 2, 3, 0, 4), 2)),
    ("adaptive max pool 2-d input", lambda lib: lib.nn.functional.adaptive_max_pool2d(ones(lib, 3, 4), 2)),
    ("adaptive max pool negative size", lambda lib: lib.nn.functional.adaptive_max_pool2d(ones(lib, 1, 3, 4, 4), -1)),
    ("adaptive max pool 3 sizes", lambda lib: lib.nn.functional.adaptive_max_pool2d(
        ones(lib, 1, 3, 4, 4), (1, 2, 3))),
    ("adaptive max pool 1-d input", lambda lib: lib.nn.functional.adaptive_max_pool1d(ones(lib, 4), 2)),
    ("adaptive max pool1d two sizes", lambda lib: lib.nn.functional.adaptive_max_pool1d(ones(lib, 2, 4), (2, 2))),
    ("adaptive max pool1d None", lambda lib: lib.nn.functional.adaptive_max_pool1d(ones(lib, 2, 4), None)),
    ("max_pool3d padding above half the kernel", lambda lib: lib.nn.functional.max_pool3d(
        ones(lib, 1, 2, 4, 4, 4), 2, padding=2)),
    ("max_pool3d output too small", lambda lib: lib.nn.functional.max_pool3d(ones(lib, 1, 2, 2, 4, 4), 3)),
    ("max_pool3d 2 kernel sizes", lambda lib: lib.nn.functional.max_pool3d(ones(lib, 1, 2, 4, 4, 4), (2, 2))),
    ("max_pool3d zero stride", lambda lib: lib.nn.functional.max_pool3d(ones(lib, 1, 2, 4, 4, 4), 2, stride=0)),
    ("max_pool3d 3-d input", lambda lib: lib.nn.functional.max_pool3d(ones(lib, 2, 4, 4), 2)),
    ("avg_pool3d empty volume", lambda lib: lib.nn.functional.avg_pool3d(ones(lib, 1, 2, 0, 4, 4), 2)),
    ("adaptive_avg_pool3d negative size", lambda lib: lib.nn.functional.adaptive_avg_pool3d(
        ones(lib, 1, 2, 4, 4, 4), (2, -1, 2))),
    ("adaptive_avg_pool3d 2 sizes", lambda lib: lib.nn.functional.adaptive_avg_pool3d(
        ones(lib, 1, 2, 4, 4, 4), (2, 2))),
]

BAD_LAYERS = [
    ("groups not dividing in_channels", lambda lib: lib.nn.ConvTranspose2d(3, 4, 3, groups=2)),
    ("groups not dividing out_channels", lambda lib: lib.nn.Conv3d(4, 3, 3, groups=2)),
    ("zero groups", lambda lib: lib.nn.ConvTranspose1d(4, 4, 3, groups=0)),
    ("bad padding string", lambda lib: lib.nn.Conv3d(2, 2, 3, padding="full")),
    ("strided same", lambda lib: lib.nn.Conv3d(2, 2, 3, stride=2, padding="same")),
    ("transposed padding mode", lambda lib: lib.nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")),
    ("output_padding >= stride at forward", lambda lib: lib.nn.ConvTranspose2d(2, 2, 3, output_padding=1)(
        ones(lib, 1, 2, 4, 4))),
]


@pytest.mark.parametrize("what,fn", BAD_FUNCTIONAL + BAD_LAYERS, ids=[w for w, _ in BAD_FUNCTIONAL + BAD_LAYERS])
def test_bad_arguments_raise_torchs_exception_types(what, fn):
    run_both(fn)


def test_refused_padding_modes_say_so():
    with pytest.raises(ValueError, match="padding_mode 'reflect' is not supported"):
        mf.nn.Conv3d(2, 2, 3, padding_mode="reflect")


def test_output_padding_above_padding_leaves_zeros_as_torch():
    # stride 1, dilation 3: output_padding 2 > padding 0, so the last two
    # output columns come from no input (only the bias).
    x, w, b = randn(1, 2, 5, seed=3), randn(2, 3, 2, seed=4), randn(3, seed=5)
    t = torch.nn.functional.conv_transpose1d(torch.tensor(x), torch.tensor(w), torch.tensor(b), dilation=3,
                                             output_padding=2)
    m = mf.nn.functional.conv_transpose1d(mf.tensor(x), mf.tensor(w), mf.tensor(b), dilation=3, output_padding=2)
    np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m.numpy()[..., -2:], np.broadcast_to(b[:, None], (1, 3, 2)), rtol=1e-12)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_transpose_double_backward_matches_torch(dims):
    rng = np.random.default_rng(dims)
    x = rng.standard_normal((2, 4) + (3,) * dims)
    w = rng.standard_normal((4, 3) + (2,) * dims)
    b = rng.standard_normal(6)
    results = []
    for lib in (torch, mf):
        xs, ws, bs = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        f = getattr(lib.nn.functional, f"conv_transpose{dims}d")
        y = f(xs, ws, bs, stride=2, output_padding=1, groups=2)
        gx, gw = lib.autograd.grad((y * y).sum(), (xs, ws), create_graph=True)
        (gx.sin().sum() + (gw * gw).sum()).backward()
        results.append([to_numpy(t) for t in (y, gx, gw, xs.grad, ws.grad, bs.grad)])
    for t, m in zip(*results):
        np.testing.assert_allclose(m, t, rtol=1e-9, atol=1e-10)


def test_adaptive_max_pool_indices_and_nan_as_torch():
    nan = float("nan")
    x = np.array([[[[1.0, nan, 3.0], [nan, 2.0, 2.0]], [[5.0, 1.0, 5.0], [-np.inf, 0.0, 5.0]]]])
    for size in (1, (1, 2), (2, 2), (None, 1)):
        t = torch.nn.functional.adaptive_max_pool2d(torch.tensor(x), size, return_indices=True)
        m = mf.nn.functional.adaptive_max_pool2d(mf.tensor(x), size, return_indices=True)
        np.testing.assert_array_equal(m[0].numpy(), t[0].numpy())
        np.testing.assert_array_equal(m[1].numpy(), t[1].numpy())
    values, indices = mf.adaptive_max_pool1d(mf.tensor(x[0, :, 1]), 2)
    expected = torch.adaptive_max_pool1d(torch.tensor(x[0, :, 1]), 2)
    np.testing.assert_array_equal(indices.numpy(), expected[1].numpy())


def test_layers_train_in_a_graph_as_eager():
    class Net(mf.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = mf.nn.ConvTranspose2d(2, 4, 3, stride=2, output_padding=1)
            self.conv = mf.nn.Conv3d(1, 2, 2, padding="same")
            self.pool = mf.nn.AdaptiveMaxPool2d((3, None))

        def forward(self, x):
            y = self.pool(self.up(x))  # (N, 4, 3, 10)
            return self.conv(y.unsqueeze(1)).sum((1, 2))

    class Step(mf.nn.Graph):
        def __init__(self, model, optimizer):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)
            self.config.enable_exact_mode(True)

        def build(self, x):
            loss = (self.model(x) ** 2).mean()
            loss.backward()
            return loss

    mf.manual_seed(0)
    eager, traced = Net(), Net()
    traced.load_state_dict(eager.state_dict())
    eager_opt = mf.optim.SGD(eager.parameters(), lr=0.1)
    step = Step(traced, mf.optim.SGD(traced.parameters(), lr=0.1))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = mf.tensor(rng.standard_normal((2, 2, 4, 4)).astype(np.float32))
        eager_opt.zero_grad()
        loss = (eager(x) ** 2).mean()
        loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(to_numpy(step(x)), to_numpy(loss), rtol=1e-6)
    for k, v in eager.state_dict().items():
        np.testing.assert_allclose(to_numpy(traced.state_dict()[k]), to_numpy(v), rtol=1e-6, atol=1e-7, err_msg=k)


def test_adaptive_pools_to_empty_outputs_as_torch():
    # Forward only: PyTorch has no backward for an empty adaptive max pool.
    x = distinct((2, 3, 4, 5), 2)
    for size in (0, (0, 3), (2, 0)):
        t = torch.nn.functional.adaptive_max_pool2d(torch.tensor(x), size, return_indices=True)
        m = mf.nn.functional.adaptive_max_pool2d(mf.tensor(x), size, return_indices=True)
        assert tuple(m[0].shape) == tuple(t[0].shape) and tuple(m[1].shape) == tuple(t[1].shape)
    t = torch.nn.functional.adaptive_avg_pool3d(torch.tensor(x), (0, 2, 2))
    assert tuple(mf.nn.functional.adaptive_avg_pool3d(mf.tensor(x), (0, 2, 2)).shape) == tuple(t.shape)


# Depthwise convolutions (groups == in == out channels) take their own loops
# for backward (but oneDNN's for 3x3 kernels), and for the forward in float64
# and where the padding spans the input (Note [Depthwise convolution]).
DEPTHWISE = [  # N, C, H, W, kernel, stride, padding, dilation
    (2, 3, 9, 11, 3, 1, 1, 1), (2, 4, 16, 16, 7, 1, 3, 1), (1, 5, 8, 7, 3, 2, 1, 1), (2, 3, 10, 10, 5, 2, 0, 1),
    (1, 2, 12, 13, 3, 1, 2, 2), (3, 6, 5, 5, 7, 1, 3, 1), (2, 4, 2, 2, 7, 1, 3, 1), (1, 3, 6, 9, 4, 3, 2, 1),
    (70, 2, 4, 4, 3, 1, 1, 1),
    (2, 70, 6, 6, 7, 1, 3, 1),  # 16-channel blocks with a partial last block
    (2, 64, 5, 5, 5, 2, 2, 1),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", DEPTHWISE)
@pytest.mark.parametrize("channels_last", [False, True])
def test_depthwise_convolution_matches_torch(shape, dtype, channels_last):
    N, C, H, W, K, s, p, d = shape
    rng = np.random.default_rng(N * 100 + H)
    x, w, b = rng.standard_normal((N, C, H, W)), rng.standard_normal((C, 1, K, K)), rng.standard_normal(C)
    if channels_last:  # x and the output's gradient arrive as permuted views
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    results = []
    for lib in (torch, mf):
        tx, tw, tb = (lib.tensor(a, dtype=getattr(lib, dtype), requires_grad=True) for a in (x, w, b))
        inp = tx.permute(0, 3, 1, 2) if channels_last else tx
        y = lib.nn.functional.conv2d(inp, tw, tb, stride=s, padding=p, dilation=d, groups=C)
        if channels_last:
            y = y.permute(0, 2, 3, 1)
        g = np.random.default_rng(7).standard_normal(tuple(y.shape))
        y.backward(lib.tensor(g, dtype=getattr(lib, dtype)))
        results.append([to_numpy(t) for t in (y.detach(), tx.grad, tw.grad, tb.grad)])
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-4, atol=1e-4)
    for name, a, e in zip(("out", "grad_x", "grad_w", "grad_b"), results[1], results[0]):
        np.testing.assert_allclose(a, e, err_msg=name, **tol)
