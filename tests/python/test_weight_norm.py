"""nn.utils.weight_norm / spectral_norm (and their remove_*) against PyTorch 1.13, float64.

The same modules are built in both libraries with identical values (for
spectral_norm torch's random u and v buffers are copied into meshflow), the
reparametrization applied, and a few SGD steps run on the same data; the
outputs, the new parameters (g, v, orig) and buffers (u, v), the parameter and
state_dict keys and the errors must be torch's. C++ layers (Linear, Conv2d,
inside a Sequential) and a Python Module subclass that reads self.weight in
forward are covered.
"""
import numpy as np
import pytest
import torch

import meshflow as mf
from meshflow import nn

RTOL = 1e-10
ATOL = 1e-12

rng = np.random.default_rng(0)


def to_np(t):
    return t.detach().numpy()


def close(a, b):
    np.testing.assert_allclose(to_np(a), to_np(b), rtol=RTOL, atol=ATOL)


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(3, 4, dtype=torch.float64))
        self.bias = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))

    def forward(self, x):
        return (x @ self.weight.t()).tanh() + self.bias


class MfNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(mf.zeros((3, 4), dtype=mf.float64))
        self.bias = nn.Parameter(mf.zeros(3, dtype=mf.float64))

    def forward(self, x):
        return (x @ self.weight.t()).tanh() + self.bias


def make(kind):
    """(torch module, meshflow module, input shape) with the same parameter values."""
    if kind == "linear":
        t, m, shape = torch.nn.Linear(4, 3).double(), nn.Linear(4, 3).double(), (5, 4)
    elif kind == "conv":
        t, m, shape = torch.nn.Conv2d(2, 3, 3, padding=1).double(), nn.Conv2d(2, 3, 3, padding=1).double(), (2, 2, 5, 5)
    elif kind == "python":
        t, m, shape = TorchNet(), MfNet(), (5, 4)
    else:
        t = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
        m = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
        shape = (5, 4)
    with torch.no_grad():
        for (name, tp), (mname, mp) in zip(t.named_parameters(), m.named_parameters()):
            assert name == mname
            value = rng.standard_normal(tuple(tp.shape)) * 0.5
            tp.copy_(torch.tensor(value))
            with mf.no_grad():
                mp.copy_(mf.tensor(value))
    return t, m, shape


def names(pairs):
    return [n for n, _ in pairs]


def same_keys(t, m):
    assert names(m.named_parameters()) == names(t.named_parameters())
    assert names(m.named_buffers()) == names(t.named_buffers())
    assert list(m.state_dict().keys()) == list(t.state_dict().keys())


def same_state(t, m):
    for (name, tv), (mname, mv) in zip(t.state_dict().items(), m.state_dict().items()):
        assert name == mname
        close(mv, tv)


def train(t, m, shape, steps=3):
    """SGD steps on the same data; the outputs must agree at every step."""
    tparams, mparams = dict(t.named_parameters()), dict(m.named_parameters())
    assert sorted(tparams) == sorted(mparams)
    topt = torch.optim.SGD([tparams[n] for n in tparams], lr=0.1, momentum=0.5)
    mopt = mf.optim.SGD([mparams[n] for n in tparams], lr=0.1, momentum=0.5)
    for step in range(steps):
        x = np.random.default_rng(10 + step).standard_normal(shape)
        tout, mout = t(torch.tensor(x)), m(mf.tensor(x))
        close(mout, tout)
        tloss, mloss = (tout.tanh() ** 2).sum(), (mout.tanh() ** 2).sum()
        topt.zero_grad()
        mopt.zero_grad()
        tloss.backward()
        mloss.backward()
        for name, tp in tparams.items():
            assert mparams[name].grad is not None, name
            close(mparams[name].grad, tp.grad)
        topt.step()
        mopt.step()


def targets(t, m, kind):
    """The reparametrized (torch, meshflow) modules."""
    if kind == "sequential":
        return [(t[0], m[0]), (t[2], m[2])]
    return [(t, m)]


# --- weight_norm -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,dim", [("linear", 0), ("linear", 1), ("linear", None), ("conv", 0), ("conv", 1),
                                      ("conv", 2), ("conv", 3), ("conv", None), ("conv", -1), ("python", 0),
                                      ("sequential", 0)])
def test_weight_norm_trains_as_torch(kind, dim):
    t, m, shape = make(kind)
    for tt, mm in targets(t, m, kind):
        assert torch.nn.utils.weight_norm(tt, dim=dim) is tt
        assert nn.utils.weight_norm(mm, dim=dim) is mm
        close(mm.weight_g, tt.weight_g)
        assert tuple(mm.weight_g.shape) == tuple(tt.weight_g.shape)
        close(mm.weight_v, tt.weight_v)
        assert mm.weight.requires_grad and mm.weight.grad_fn is not None
        close(mm.weight, tt.weight)
        assert isinstance(mm.weight_g, nn.Parameter) and isinstance(mm.weight_v, nn.Parameter)
        assert not isinstance(mm.weight, nn.Parameter)
    same_keys(t, m)
    train(t, m, shape)
    same_keys(t, m)  # the computed weight is not left among the parameters by a forward
    same_state(t, m)
    for tt, mm in targets(t, m, kind):
        close(mm.weight, tt.weight)
        torch.nn.utils.remove_weight_norm(tt)
        assert nn.utils.remove_weight_norm(mm) is mm
        assert isinstance(mm.weight, nn.Parameter) and mm.weight.is_leaf and mm.weight.requires_grad
        close(mm.weight, tt.weight)
    # the same parameters again (a C++ layer keeps the slot's place: weight before bias)
    assert sorted(names(m.named_parameters())) == sorted(names(t.named_parameters()))
    assert sorted(m.state_dict().keys()) == sorted(t.state_dict().keys())
    train(t, m, shape, steps=1)


def test_weight_norm_matches_the_formula():
    t, m, shape = make("conv")
    w = m.weight.detach().clone()
    nn.utils.weight_norm(m, dim=None)
    assert tuple(m.weight_g.shape) == ()
    np.testing.assert_allclose(float(m.weight_g), np.linalg.norm(w.numpy()), rtol=RTOL)
    nn.utils.remove_weight_norm(m)
    close(m.weight, w)


def test_weight_norm_other_name_and_hooks_removed():
    t, m, shape = make("linear")
    torch.nn.utils.weight_norm(t, name="bias")
    nn.utils.weight_norm(m, name="bias")
    same_keys(t, m)
    train(t, m, shape, steps=2)
    torch.nn.utils.remove_weight_norm(t, name="bias")
    nn.utils.remove_weight_norm(m, name="bias")
    close(m.bias, t.bias)
    # no hook left: a forward no longer recomputes bias
    with mf.no_grad():
        m.bias.fill_(0.25)
    x = mf.tensor(np.ones((1, 4)))
    close(m(x).reshape(3), m.weight @ x.reshape(4) + 0.25)


def test_state_dict_round_trip_with_torch():
    t, m, shape = make("linear")
    torch.nn.utils.weight_norm(t)
    nn.utils.weight_norm(m)
    with torch.no_grad():
        t.weight_g.mul_(1.5)
    result = m.load_state_dict({k: mf.tensor(v.numpy()) for k, v in t.state_dict().items()})
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    x = np.random.default_rng(3).standard_normal(shape)
    close(m(mf.tensor(x)), t(torch.tensor(x)))


def test_a_raising_forward_leaves_no_computed_parameter():
    m = nn.utils.weight_norm(nn.Linear(4, 3))
    with pytest.raises(Exception):
        m(mf.zeros((2, 5)))
    assert names(m.named_parameters()) == ["bias", "weight_g", "weight_v"]
    assert m(mf.zeros((2, 4))).shape == (2, 3)


# --- spectral_norm -------------------------------------------------------------------------------------


def copy_uv(t, m, kind):
    with mf.no_grad():
        for tt, mm in targets(t, m, kind):
            mm.weight_u.copy_(mf.tensor(tt.weight_u.numpy()))
            mm.weight_v.copy_(mf.tensor(tt.weight_v.numpy()))


def same_buffers(t, m):
    for (name, tb), (mname, mb) in zip(t.named_buffers(), m.named_buffers()):
        assert name == mname
        close(mb, tb)


@pytest.mark.parametrize("kind,iterations,dim", [("linear", 1, None), ("linear", 3, 1), ("conv", 1, None),
                                                 ("conv", 2, 1), ("conv", 1, 3), ("python", 1, None),
                                                 ("sequential", 2, None)])
def test_spectral_norm_trains_as_torch(kind, iterations, dim):
    t, m, shape = make(kind)
    for tt, mm in targets(t, m, kind):
        assert torch.nn.utils.spectral_norm(tt, n_power_iterations=iterations, dim=dim) is tt
        assert nn.utils.spectral_norm(mm, n_power_iterations=iterations, dim=dim) is mm
        close(mm.weight_orig, tt.weight_orig)
        assert isinstance(mm.weight_orig, nn.Parameter)
        assert not mm.weight.requires_grad  # the plain tensor until the first forward, as torch's
        close(mm.weight, tt.weight)
        assert tuple(mm.weight_u.shape) == tuple(tt.weight_u.shape)
        assert tuple(mm.weight_v.shape) == tuple(tt.weight_v.shape)
        np.testing.assert_allclose(np.linalg.norm(mm.weight_u.numpy()), 1.0, rtol=1e-12)
    copy_uv(t, m, kind)
    same_keys(t, m)
    train(t, m, shape)
    same_keys(t, m)
    same_state(t, m)
    same_buffers(t, m)
    for tt, mm in targets(t, m, kind):
        close(mm.weight, tt.weight)
    # eval mode: no power iteration, u and v stay
    t.eval()
    m.eval()
    u = [mm.weight_u.clone() for _, mm in targets(t, m, kind)]
    x = np.random.default_rng(7).standard_normal(shape)
    close(m(mf.tensor(x)), t(torch.tensor(x)))
    for (tt, mm), u0 in zip(targets(t, m, kind), u):
        close(mm.weight_u, u0)
    t.train()
    m.train()
    for tt, mm in targets(t, m, kind):
        torch.nn.utils.remove_spectral_norm(tt)
        assert nn.utils.remove_spectral_norm(mm) is mm
        assert isinstance(mm.weight, nn.Parameter) and mm.weight.is_leaf and mm.weight.requires_grad
        close(mm.weight, tt.weight)
    assert sorted(names(m.named_parameters())) == sorted(names(t.named_parameters()))
    assert sorted(m.state_dict().keys()) == sorted(t.state_dict().keys())
    assert names(m.named_buffers()) == names(t.named_buffers())
    train(t, m, shape, steps=1)


def test_spectral_norm_divides_by_the_largest_singular_value():
    m = nn.utils.spectral_norm(nn.Linear(6, 4).double(), n_power_iterations=200)
    w = m.weight_orig.detach().numpy()
    m(mf.zeros((1, 6), dtype=mf.float64))
    np.testing.assert_allclose(np.linalg.svd(m.weight.detach().numpy(), compute_uv=False)[0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(m.weight.detach().numpy() * np.linalg.svd(w, compute_uv=False)[0], w, rtol=1e-6)


def test_spectral_norm_two_forwards_one_backward():
    # the GAN pattern: u and v are cloned after the in-place update, so a backward through both
    # forwards works and matches torch
    t, m, shape = make("linear")
    torch.nn.utils.spectral_norm(t)
    nn.utils.spectral_norm(m)
    copy_uv(t, m, "linear")
    x1, x2 = rng.standard_normal(shape), rng.standard_normal(shape)
    (t(torch.tensor(x1)).sum() - t(torch.tensor(x2)).sum()).backward()
    (m(mf.tensor(x1)).sum() - m(mf.tensor(x2)).sum()).backward()
    close(m.weight_orig.grad, t.weight_orig.grad)
    same_buffers(t, m)


# --- errors --------------------------------------------------------------------------------------------


def error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.type, str(info.value)


def same_error(call):
    """call(torch.nn, meshflow.nn or torch's, module) raises alike in both libraries."""
    ref = error(lambda: call(torch.nn, make("linear")[0]))
    mine = error(lambda: call(nn, make("linear")[1]))
    assert mine[0] is ref[0]
    return mine[1], ref[1]


def test_errors_as_torch():
    def twice(lib, module):
        lib.utils.weight_norm(module)
        lib.utils.weight_norm(module)
    mine, ref = same_error(twice)
    assert mine == ref == "Cannot register two weight_norm hooks on the same parameter weight"

    def twice_spectral(lib, module):
        lib.utils.spectral_norm(module)
        lib.utils.spectral_norm(module, n_power_iterations=2)
    mine, ref = same_error(twice_spectral)
    assert mine == ref

    # removing what is not there
    mine, ref = same_error(lambda lib, module: lib.utils.remove_weight_norm(module))
    assert mine.startswith("weight_norm of 'weight' not found in ") and ref.startswith(mine[:30])
    mine, ref = same_error(lambda lib, module: lib.utils.remove_spectral_norm(module))
    assert mine.startswith("spectral_norm of 'weight' not found in ")
    # remove_spectral_norm of a weight_norm'ed module (and the reverse) finds nothing
    same_error(lambda lib, module: lib.utils.remove_spectral_norm(lib.utils.weight_norm(module)))
    same_error(lambda lib, module: lib.utils.remove_weight_norm(lib.utils.spectral_norm(module)))
    # no such attribute; not a parameter
    same_error(lambda lib, module: lib.utils.weight_norm(module, name="nothing"))
    same_error(lambda lib, module: lib.utils.spectral_norm(module, name="nothing"))

    def buffer_name(lib, module):
        module.register_buffer("running", (torch if lib is torch.nn else mf).zeros(3))
        lib.utils.weight_norm(module, name="running")
    same_error(buffer_name)
    # bad n_power_iterations
    mine, ref = same_error(lambda lib, module: lib.utils.spectral_norm(module, n_power_iterations=0))
    assert mine == ref
    # a parameter set to None
    mine, ref = same_error(lambda lib, module: lib.utils.spectral_norm(lib.Linear(4, 3, bias=False), name="bias"))
    assert mine == ref == "`SpectralNorm` cannot be applied as parameter `bias` is None"


def test_both_reparametrizations_on_different_names():
    t, m, shape = make("linear")
    for lib, mod in ((torch.nn, t), (nn, m)):
        lib.utils.spectral_norm(mod)
        lib.utils.weight_norm(mod, name="bias", dim=None)
    copy_uv(t, m, "linear")
    same_keys(t, m)
    train(t, m, shape)
    same_state(t, m)
