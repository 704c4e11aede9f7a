"""Resampling against torch 1.13: the Upsample and padding layers (outputs,
gradients, repr, attributes), interpolate's and F.pad's errors (torch's
exception classes), deprecation warnings, double backward and a randomised
sweep of interpolate's index arithmetic. Op-level forward/backward checks
are the OpInfo entries (tests/python/opinfo_nn.py)."""
import numpy as np
import pytest
import torch

import meshflow as mf
from test_nn import compare, randn

LAYERS = [
    ("Upsample", lambda lib: lib.nn.Upsample(scale_factor=2), (2, 3, 4)),
    ("Upsample-size", lambda lib: lib.nn.Upsample(size=(5, 3), mode="bilinear"), (1, 2, 3, 4)),
    ("Upsample-tuple", lambda lib: lib.nn.Upsample(scale_factor=(1.5, 2.0), mode="bicubic", align_corners=True),
     (1, 2, 3, 4)),
    ("Upsample-trilinear", lambda lib: lib.nn.Upsample(size=4, mode="trilinear"), (1, 1, 2, 3, 3)),
    ("Upsample-exact", lambda lib: lib.nn.Upsample(scale_factor=1.7, mode="nearest-exact"), (2, 1, 5)),
    ("Upsample-recompute", lambda lib: lib.nn.Upsample(scale_factor=2.3, mode="linear", recompute_scale_factor=True),
     (2, 2, 4)),
    ("UpsamplingNearest2d", lambda lib: lib.nn.UpsamplingNearest2d(scale_factor=2), (2, 3, 3, 4)),
    ("UpsamplingNearest2d-size", lambda lib: lib.nn.UpsamplingNearest2d(size=(5, 2)), (1, 2, 3, 4)),
    ("UpsamplingBilinear2d", lambda lib: lib.nn.UpsamplingBilinear2d(scale_factor=1.5), (2, 2, 3, 4)),
    ("UpsamplingBilinear2d-size", lambda lib: lib.nn.UpsamplingBilinear2d((7, 2)), (1, 2, 3, 4)),
    ("ReflectionPad1d", lambda lib: lib.nn.ReflectionPad1d(2), (2, 3, 5)),
    ("ReflectionPad1d-pair", lambda lib: lib.nn.ReflectionPad1d((3, 1)), (3, 5)),
    ("ReflectionPad2d", lambda lib: lib.nn.ReflectionPad2d((1, 2, 0, 3)), (2, 1, 4, 5)),
    ("ReflectionPad3d", lambda lib: lib.nn.ReflectionPad3d(1), (1, 2, 3, 3, 4)),
    ("ReplicationPad1d", lambda lib: lib.nn.ReplicationPad1d((4, 6)), (2, 3, 2)),
    ("ReplicationPad2d", lambda lib: lib.nn.ReplicationPad2d(2), (3, 4, 5)),
    ("ReplicationPad3d", lambda lib: lib.nn.ReplicationPad3d((1, 0, 2, 1, 0, 3)), (2, 1, 2, 3, 4)),
    ("ZeroPad2d", lambda lib: lib.nn.ZeroPad2d((1, 2, -1, 3)), (2, 3, 4, 5)),
    ("ZeroPad2d-int", lambda lib: lib.nn.ZeroPad2d(2), (3, 4, 5)),
    ("ConstantPad1d", lambda lib: lib.nn.ConstantPad1d(2, 3.5), (2, 3, 4)),
    ("ConstantPad1d-int", lambda lib: lib.nn.ConstantPad1d((1, 3), 2), (2, 4)),
    ("ConstantPad2d", lambda lib: lib.nn.ConstantPad2d((1, 0, 2, 1), -1.0), (1, 2, 3, 4)),
    ("ConstantPad3d", lambda lib: lib.nn.ConstantPad3d(1, 0.5), (1, 2, 2, 3, 3)),
    ("ReflectionPad1d-four", lambda lib: lib.nn.ReflectionPad1d((1, 1, 2, 0)), (2, 3, 4)),
]


@pytest.mark.parametrize("name,make,shape", LAYERS, ids=[case[0] for case in LAYERS])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_layer_matches_torch(name, make, shape, dtype, device):
    t_module, m_module = make(torch), make(mf)
    assert repr(m_module) == repr(t_module)
    compare(t_module, m_module, [randn(*shape)], dtype, device=device)


def test_layer_attributes_match_torch():
    for make in (lambda lib: lib.nn.Upsample(scale_factor=(2, 3), mode="bilinear", align_corners=False),
                 lambda lib: lib.nn.Upsample(size=5, recompute_scale_factor=False),
                 lambda lib: lib.nn.UpsamplingBilinear2d(size=(3, 4)), lambda lib: lib.nn.Upsample(scale_factor=0)):
        t, m = make(torch), make(mf)
        for attr in ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "name"):
            assert getattr(m, attr) == getattr(t, attr), attr
        assert repr(m) == repr(t)
    for make in (lambda lib: lib.nn.ReflectionPad2d(3), lambda lib: lib.nn.ConstantPad3d((1, 2, 3, 4, 5, 6), 2),
                 lambda lib: lib.nn.ZeroPad2d([1, 2, 3, 4]), lambda lib: lib.nn.ReplicationPad1d([2, 3])):
        t, m = make(torch), make(mf)
        assert m.padding == t.padding and repr(m) == repr(t)
        if hasattr(t, "value"):
            assert m.value == t.value and type(m.value) is type(t.value)
    assert isinstance(mf.nn.UpsamplingNearest2d(scale_factor=2), mf.nn.Upsample)


def test_layers_keep_working_after_deepcopy_and_dtype_change():
    import copy
    m = copy.deepcopy(mf.nn.ReflectionPad2d((1, 0, 2, 1)))
    x = randn(1, 2, 3, 3)
    expected = torch.nn.ReflectionPad2d((1, 0, 2, 1))(torch.tensor(x)).numpy()
    np.testing.assert_allclose(m(mf.tensor(x)).numpy(), expected)
    up = copy.deepcopy(mf.nn.Upsample(scale_factor=2, mode="bilinear")).float()
    assert repr(up) == "Upsample(scale_factor=2.0, mode=bilinear)"


def test_upsample_zero_scale_factor_is_none_as_in_torch():
    t, m = torch.nn.Upsample(scale_factor=0), mf.nn.Upsample(scale_factor=0)
    assert repr(m) == repr(t) == "Upsample(size=None, mode=nearest)"
    with pytest.raises(ValueError, match="either size or scale_factor"):
        t(torch.ones(1, 1, 2))
    with pytest.raises(ValueError, match="either size or scale_factor"):
        m(mf.ones(1, 1, 2))


def test_deprecated_upsample_functions_warn():
    F = mf.nn.functional
    x = randn(1, 2, 3, 4)
    for name, kwargs in (("upsample", {"scale_factor": 2}), ("upsample_nearest", {"size": (5, 6)}),
                         ("upsample_bilinear", {"scale_factor": 1.5})):
        with pytest.warns(UserWarning, match=f"nn.functional.{name} is deprecated"):
            out = getattr(F, name)(mf.tensor(x), **kwargs)
        with pytest.warns(UserWarning):
            expected = getattr(torch.nn.functional, name)(torch.tensor(x), **kwargs)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)


# --- errors: torch's exception class (mf's errors subclass it) ---------------------------

ERRORS = [
    # interpolate
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2, mode="bilinear"),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2, mode="bicubic"),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3, 3), size=2, mode="trilinear"),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3, 3, 3), size=2, mode="linear"),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 3), size=2),
    lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2, 2, 2), size=2),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3, 3), size=2, mode="bogus"),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2, scale_factor=2.0),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3)),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2, align_corners=True),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2, mode="area", align_corners=False),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2, recompute_scale_factor=True),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3, 3), size=(2,)),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3, 3), scale_factor=(2.0, 2.0, 2.0)),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2, mode="linear", antialias=True),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=0),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=-2),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), scale_factor=0.2),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), scale_factor=-1.0),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), scale_factor=float("nan")),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), scale_factor=1e300),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 0, 3), size=4),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 0), size=4),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3, dtype=lib.int64), size=4, mode="linear"),
    lambda lib: lib.nn.functional.interpolate(lib.ones(2, 1, 3), size=2.5),
    # pad
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (4, 0), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (1, 5), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (-2, -2), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (-2, -2), mode="replicate"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (5, 0), mode="circular"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (-3, -2), mode="circular"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 0), (1, 1), mode="circular"),
    lambda lib: lib.nn.functional.pad(lib.ones(4), (1, 1), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (1, 1, 1, 1, 1, 1), mode="replicate"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4, 5), (1, 1), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(1, 1, 1, 2, 2, 2), (1, 1), mode="circular"),
    lambda lib: lib.nn.functional.pad(lib.ones(3, 4), (1, 1), mode="circular"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (1, 1, 1, 1), mode="circular"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (1,), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(3), (1, 1, 1, 1), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (1, 1), mode="reflect", value=1.0),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (1, 1), mode="bogus"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 3, 4), (), mode="replicate"),
    lambda lib: lib.nn.functional.pad(lib.ones(2, 0, 4), (1, 1), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(0, 4), (1, 1), mode="replicate"),
    lambda lib: lib.nn.functional.pad(lib.ones(0, 2, 2, 2), (1, 1, 1, 1, 1, 1), mode="reflect"),
    lambda lib: lib.nn.functional.pad(lib.ones(1, 1, 5), (2 ** 62, 2 ** 62), mode="replicate"),
    lambda lib: lib.nn.functional.pad(lib.ones(1, 1, 5), (1.5, 1), mode="reflect"),
    # layers
    lambda lib: lib.nn.ReflectionPad2d(3)(lib.ones(1, 1, 3, 3)),
    lambda lib: lib.nn.Upsample(scale_factor=2, mode="bilinear")(lib.ones(1, 2, 3)),
    lambda lib: lib.nn.UpsamplingNearest2d()(lib.ones(1, 2, 3, 3)),
]


def error_of(fn, lib):
    try:
        fn(lib)
    except Exception as e:  # noqa: BLE001 (the class is what is compared)
        return e
    return None


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_match_torch_classes(case):
    t_error, m_error = error_of(ERRORS[case], torch), error_of(ERRORS[case], mf)
    assert t_error is not None, "torch accepts the call"
    assert m_error is not None, f"meshflow accepts a call torch refuses with {t_error!r}"
    assert isinstance(m_error, type(t_error)), f"{type(m_error)} is not a {type(t_error)}: {m_error}"
    assert isinstance(m_error, (mf.errors.Error, TypeError)), type(m_error)


def test_error_messages_name_the_problem():
    F = mf.nn.functional
    with pytest.raises(mf.errors.NotImplementedError, match="Got 3D input, but bilinear mode needs 4D input"):
        F.interpolate(mf.ones(2, 1, 3), size=2, mode="bilinear")
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(mf.ones(2, 1, 3), size=2, scale_factor=2.0)
    with pytest.raises(mf.errors.NotImplementedError, match="antialias"):
        F.interpolate(mf.ones(2, 1, 3, 3), size=2, mode="bilinear", antialias=True)
    with pytest.raises(ValueError, match=r"padding size should be less than .* \(4, 0\) at dimension 2"):
        F.pad(mf.ones(2, 3, 4), (4, 0), mode="reflect")
    # torch 1.13 reads what it has not written here (or, for some layouts, raises an overlap error)
    with pytest.raises(ValueError, match="wraps around"):
        F.pad(mf.ones(2, 3, 4), (-2, 4), mode="circular")
    with pytest.raises(mf.errors.ShapeError, match="greater than 0"):
        F.interpolate(mf.ones(2, 1, 3), scale_factor=0.2)


# --- numerics beyond the OpInfo samples ---------------------------------------------------------

def layouts(lib, x, dtype):
    """x (numpy) as a contiguous leaf, a channels-last one and one with its last two dims
    transposed: (leaf, the tensor to call with)."""
    def leaf(data):
        return lib.tensor(np.ascontiguousarray(data)).to(getattr(lib, dtype)).requires_grad_(True)

    perm = (0,) + tuple(range(2, x.ndim)) + (1,)
    inverse = tuple(int(i) for i in np.argsort(perm))
    plain, last, swapped = leaf(x), leaf(x.transpose(perm)), leaf(np.swapaxes(x, -1, -2))
    return [(plain, plain), (last, last.permute(*inverse)), (swapped, swapped.transpose(-1, -2))]


def test_interpolate_index_arithmetic_sweep():
    """Many sizes, scale factors, channel counts and layouts, forward and backward, in float32
    and float64: the index rounding (float for nearest, the dtype's for linear and cubic) and
    the kernel PyTorch picks by layout (Note [PyTorch's upsample kernels]) must agree with torch
    everywhere, not only on the OpInfo samples."""
    rng = np.random.default_rng(7)
    cases = [("nearest", 3), ("nearest", 4), ("nearest", 5), ("nearest-exact", 4), ("linear", 3), ("bilinear", 4),
             ("bicubic", 4), ("trilinear", 5)]
    for mode, nd in cases:
        for _ in range(25):
            shape = (int(rng.integers(0, 3)), int(rng.integers(1, 4))) + tuple(int(rng.integers(1, 8))
                                                                             for _ in range(nd - 2))
            kwargs = {"mode": mode}
            if rng.random() < 0.6:
                kwargs["scale_factor"] = float(rng.choice([0.5, 0.75, 1.05, 1.1, 1.3, 1.5, 1.7, 2.0, 2.05, 2.2, 2.5,
                                                           3.0, 1 / 3, 0.9]))
                kwargs["recompute_scale_factor"] = bool(rng.random() < 0.3)
                if any(int(s * kwargs["scale_factor"]) < 1 for s in shape[2:]):
                    continue
            else:
                kwargs["size"] = tuple(int(rng.integers(1, 12)) for _ in range(nd - 2))
            if mode not in ("nearest", "nearest-exact"):
                kwargs["align_corners"] = bool(rng.random() < 0.5)
            for dtype, tol in (("float64", 1e-12), ("float32", 2e-5)):
                x = rng.standard_normal(shape)
                for (t_leaf, t), (m_leaf, m) in zip(layouts(torch, x, dtype), layouts(mf, x, dtype)):
                    what = f"{shape} {kwargs} {dtype} strides {t.stride()}"
                    t_out = torch.nn.functional.interpolate(t, **kwargs)
                    m_out = mf.nn.functional.interpolate(m, **kwargs)
                    np.testing.assert_allclose(m_out.detach().numpy(), t_out.detach().numpy(), rtol=tol, atol=tol,
                                               err_msg=what)
                    w = rng.standard_normal(tuple(t_out.shape))
                    t_grad, = torch.autograd.grad((t_out * torch.tensor(w, dtype=t.dtype)).sum(), t_leaf)
                    m_grad, = mf.autograd.grad((m_out * mf.tensor(w).to(m.dtype)).sum(), m_leaf)
                    np.testing.assert_allclose(m_grad.numpy(), t_grad.numpy(), rtol=tol, atol=tol,
                                               err_msg="grad " + what)


def test_nearest_follows_the_kernel_torch_picks_by_layout():
    """An unchanged dim with a scale factor: PyTorch's generic forward kernel reads index
    floor(j / 1.05), its channels-last one (one channel, or a channels-last layout) copies."""
    x = np.arange(20.0).reshape(1, 2, 1, 10)
    kwargs = {"scale_factor": (1.0, 1.05), "recompute_scale_factor": False}
    for lib_x in (x, x[:, :1]):
        for (_, t), (_, m) in zip(layouts(torch, lib_x, "float64"), layouts(mf, lib_x, "float64")):
            expected = torch.nn.functional.interpolate(t, **kwargs).detach().numpy()
            np.testing.assert_array_equal(mf.nn.functional.interpolate(m, **kwargs).detach().numpy(), expected)
    generic = mf.nn.functional.interpolate(mf.tensor(x), **kwargs).numpy()[0, 0, 0]
    np.testing.assert_array_equal(generic, [0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    np.testing.assert_array_equal(mf.nn.functional.interpolate(mf.tensor(x[:, :1]), **kwargs).numpy()[0, 0, 0],
                                  np.arange(10.0))


@pytest.mark.parametrize("call", [
    lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=False),
    lambda lib, x: lib.nn.functional.interpolate(x, size=(5, 3), mode="bicubic"),
    lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2.5),
    lambda lib, x: lib.nn.functional.pad(x, (2, 1, 1, 2), mode="reflect"),
    lambda lib, x: lib.nn.functional.pad(x, (3, -1, 4, 0), mode="replicate"),
    lambda lib, x: lib.nn.functional.pad(x, (2, 1, -1, 2), mode="circular"),
])
def test_double_backward_matches_torch(call):
    """The ops are linear: the gradient of x's gradient with respect to the output's
    cotangent v runs each backward op's own backward (the forward op)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 2, 3, 4))
    y_shape = tuple(call(torch, torch.tensor(x)).shape)
    v, u = rng.standard_normal(y_shape), rng.standard_normal(x.shape)
    results = []
    for lib in (torch, mf):
        xt, vt = lib.tensor(x).requires_grad_(True), lib.tensor(v).requires_grad_(True)
        (g,) = lib.autograd.grad((call(lib, xt) * vt).sum(), xt, create_graph=True)
        (gv,) = lib.autograd.grad((g * lib.tensor(u)).sum(), vt)
        results.append((g.detach().numpy(), gv.detach().numpy()))
    for m, t in zip(results[1], results[0]):
        np.testing.assert_allclose(m, t, rtol=1e-10, atol=1e-10)


def test_pad_modes_keep_integer_and_bool_values():
    """meshflow's reflect and replicate also take integer and bool tensors (torch 1.13
    refuses them; its circular mode takes them): values as torch's on float64."""
    x = np.arange(24).reshape(2, 3, 4)
    for mode in ("reflect", "replicate", "circular"):
        expected = torch.nn.functional.pad(torch.tensor(x, dtype=torch.float64), (2, 1), mode=mode).numpy()
        m = mf.nn.functional.pad(mf.tensor(x), (2, 1), mode=mode)
        assert m.dtype == mf.int64
        np.testing.assert_array_equal(m.numpy(), expected.astype(np.int64))
        b = mf.nn.functional.pad(mf.tensor(x % 2 == 0), (2, 1), mode=mode)
        assert b.dtype == mf.bool
        np.testing.assert_array_equal(b.numpy(), expected.astype(np.int64) % 2 == 0)


def test_empty_batches_with_huge_sizes_need_no_maps():
    """An empty batch gives an empty result at once, whatever the sizes (the per-dim maps,
    as long as the output dims, are never built); sizes past int64 are refused."""
    F = mf.nn.functional
    x = mf.ones(0, 1, 3).requires_grad_(True)
    y = F.interpolate(x, size=2 ** 40, mode="linear")
    assert tuple(y.shape) == (0, 1, 2 ** 40)
    (g,) = mf.autograd.grad([y.sum()], [x])
    assert tuple(g.shape) == (0, 1, 3)
    assert tuple(F.pad(mf.ones(0, 2, 3), (2 ** 40, 2 ** 40), mode="replicate").shape) == (0, 2, 2 ** 41 + 3)
    with pytest.raises(mf.errors.ShapeError, match="overflows"):
        F.pad(mf.ones(1, 2, 3), (2 ** 62, 2 ** 62), mode="replicate")
    with pytest.raises(ValueError, match="not a representable integer"):
        F.interpolate(mf.ones(1, 1, 3), scale_factor=float("inf"))
