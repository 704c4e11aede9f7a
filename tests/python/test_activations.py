"""The activation layers Hardswish, Hardsigmoid, SELU, CELU, Softsign, Tanhshrink, LogSigmoid,
Threshold, Softshrink, Hardshrink, Softmin and Softmax2d against torch: outputs, gradients, in-place
forms and repr (their functional forms are in opinfo_nn.py)."""
import numpy as np
import pytest
import torch

import meshflow as mf
from test_nn import compare, randn

LAYERS = [("Hardswish", (), {}), ("Hardsigmoid", (), {}), ("SELU", (), {}), ("CELU", (), {"alpha": 0.7}),
          ("Softsign", (), {}), ("Tanhshrink", (), {}), ("LogSigmoid", (), {}), ("Threshold", (0.1, 20.5), {}),
          ("Softshrink", (), {"lambd": 0.3}), ("Hardshrink", (0.4,), {}), ("Softmin", (), {"dim": 1}),
          ("Softmin", (), {}), ("Softmax2d", (), {})]


@pytest.mark.parametrize("name,args,kwargs", LAYERS, ids=[f"{n}{i}" for i, (n, _, _) in enumerate(LAYERS)])
def test_layer_matches_torch(name, args, kwargs, device):
    t, m = getattr(torch.nn, name)(*args, **kwargs), getattr(mf.nn, name)(*args, **kwargs)
    assert repr(m) == repr(t)
    x = randn(2, 3, 4, 5) * 3
    # torch's Hardsigmoid and CELU backward use float constants (1.0f / 6.0f, ...) even in float64
    loose = name in ("Hardsigmoid", "CELU")
    compare(t, m, [x], tol=dict(rtol=1e-6, atol=1e-9) if loose else None, device=device)
    if name != "Softmax2d":
        compare(t, m, [randn(3, 4) * 3], dtype="float32", device=device)


@pytest.mark.parametrize("name,args", [("Hardswish", ()), ("SELU", ()), ("CELU", (1.5,)), ("Threshold", (0.0, -1.0))])
def test_in_place_forms(name, args):
    x = randn(4, 3) * 2
    t_x, m_x = torch.tensor(x), mf.tensor(x)
    t_y = getattr(torch.nn, name)(*args, inplace=True)(t_x)
    m_y = getattr(mf.nn, name)(*args, inplace=True)(m_x)
    np.testing.assert_allclose(m_x.numpy(), t_x.numpy(), rtol=1e-12)
    np.testing.assert_allclose(m_y.numpy(), t_y.numpy(), rtol=1e-12)
    assert repr(getattr(mf.nn, name)(*args, inplace=True)) == repr(getattr(torch.nn, name)(*args, inplace=True))


def test_errors():
    with pytest.raises(ValueError, match="3D or 4D"):
        mf.nn.Softmax2d()(mf.zeros(2, 3))
    with pytest.raises(ValueError, match="lambda"):
        mf.nn.functional.softshrink(mf.zeros(2), -1.0)
    with pytest.raises(TypeError):
        mf.nn.functional.softsign(mf.zeros(2, dtype=mf.int64))
