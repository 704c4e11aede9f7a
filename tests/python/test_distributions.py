"""meshflow.distributions against torch.distributions (PyTorch 1.13), float64.

Every distribution is built in both libraries from the same parameter values
(scalars, batches, broadcast shapes, Python numbers mixed with tensors); its
shapes, moments, log_prob, entropy, cdf/icdf, KL divergences and the
gradients of those with respect to the parameters (and the value) are
compared. Sampling is checked for shapes, dtypes, reproducibility under
meshflow.manual_seed, moments over many draws and reparameterised gradients.
Argument and support validation must raise ValueError where torch does.
"""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.distributions as TD

import meshflow as mf
import meshflow.distributions as MD
from meshflow.distributions import constraints as mc

RTOL = 1e-10
ATOL = 1e-12


# ----------------------------------------------------------------------------
# helpers

def tensor(lib, data, grad=False, dtype="float64"):
    arr = np.asarray(data, dtype=dtype)
    if lib is torch:
        t = torch.tensor(arr)
    else:
        t = mf.tensor(arr)
    if grad:
        t.requires_grad_(True)
    return t


def numpy(t):
    return t.detach().numpy()


def assert_close(ours, ref, rtol=RTOL, atol=ATOL, what=""):
    ref_np = numpy(ref) if isinstance(ref, torch.Tensor) else np.asarray(ref)
    ours_np = numpy(ours) if mf.is_tensor(ours) else np.asarray(ours)
    assert tuple(ours_np.shape) == tuple(ref_np.shape), f"{what}: shape {ours_np.shape} vs {ref_np.shape}"
    np.testing.assert_allclose(ours_np, ref_np, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def grads(lib, out, inputs, weight):
    """d (out * weight).sum() / d inputs; None (unused) becomes zeros."""
    w = tensor(lib, weight)
    loss = (out * w).sum()
    if lib is torch:
        gs = torch.autograd.grad(loss, inputs, allow_unused=True, retain_graph=True)
    else:
        gs = mf.autograd.grad(loss, inputs, allow_unused=True, retain_graph=True)
    result = []
    for g, x in zip(gs, inputs):
        result.append(np.zeros(tuple(x.shape)) if g is None else numpy(g))
    return result


RNG = np.random.default_rng(1234)


def real(*shape):
    return RNG.normal(size=shape)


def pos(*shape):
    return RNG.uniform(0.5, 2.5, size=shape)


def unit(*shape):
    return RNG.uniform(0.1, 0.9, size=shape)


def simplex(*shape):
    p = RNG.uniform(0.1, 1.0, size=shape)
    return p / p.sum(-1, keepdims=True)


# ----------------------------------------------------------------------------
# the cases: a name, a builder make(D, **params) for D = torch.distributions or
# meshflow.distributions, the parameter values (arrays become leaf tensors that
# require grad, Python numbers stay numbers), a generator of log_prob values
# for a batch + event shape, whether cdf/icdf exist, whether values are
# continuous (then gradients wrt the value are compared too)

class Case:
    def __init__(self, name, make, params, value, icdf=False, cdf=False, continuous=True, rtol=RTOL):
        self.rtol = rtol
        self.name = name
        self.make = make
        self.params = params
        self.value = value
        self.icdf = icdf
        self.cdf = cdf
        self.continuous = continuous

    def __repr__(self):
        return self.name

    def build(self, lib, grad=True):
        D = TD if lib is torch else MD
        kwargs, leaves = {}, []
        for name, v in self.params.items():
            if isinstance(v, (float, int)):
                kwargs[name] = v
            else:
                t = tensor(lib, v, grad=grad)
                kwargs[name] = t
                leaves.append(t)
        return self.make(D, **kwargs), leaves


def normal_value(shape):
    return real(4, *shape) * 1.5


def uniform_value(low, high):
    def value(shape):
        u = RNG.uniform(0.05, 0.95, size=(4,) + tuple(shape))
        return low + u * (high - low)
    return value


def boolean_value(shape):
    return RNG.integers(0, 2, size=(4,) + tuple(shape)).astype(np.float64)


def count_value(shape):
    return RNG.integers(0, 6, size=(4,) + tuple(shape)).astype(np.float64)


def positive_value(shape):
    return RNG.uniform(0.0, 3.0, size=(4,) + tuple(shape))


def class_value(k):
    def value(shape):
        return RNG.integers(0, k, size=(4,) + tuple(shape)).astype(np.int64)
    return value


def one_hot_value(k):
    def value(shape):
        idx = RNG.integers(0, k, size=(4,) + tuple(shape[:-1]))
        return np.eye(k)[idx]
    return value


_u_low = real(2, 3)
_u_high = _u_low + pos(2, 3)
_u_low_b = real(2, 1)
_u_high_b = _u_low_b.max() + pos(3)

CASES = [
    Case("normal-scalar", lambda D, loc, scale: D.Normal(loc, scale),
         dict(loc=np.array(0.3), scale=np.array(1.7)), normal_value, icdf=True, cdf=True),
    Case("normal-batch", lambda D, loc, scale: D.Normal(loc, scale),
         dict(loc=real(2, 3), scale=pos(2, 3)), normal_value, icdf=True, cdf=True),
    Case("normal-broadcast", lambda D, loc, scale: D.Normal(loc, scale),
         dict(loc=real(2, 1), scale=pos(3)), normal_value, icdf=True, cdf=True),
    Case("normal-number-scale", lambda D, loc, scale: D.Normal(loc, scale),
         dict(loc=real(3), scale=0.7), normal_value, icdf=True, cdf=True),
    Case("normal-numbers", lambda D, loc, scale: D.Normal(loc, scale),
         dict(loc=-0.4, scale=2.0), normal_value, icdf=True, cdf=True, rtol=1e-6),
    Case("uniform-scalar", lambda D, low, high: D.Uniform(low, high),
         dict(low=np.array(-1.0), high=np.array(2.5)), uniform_value(-1.0, 2.5), icdf=True, cdf=True),
    Case("uniform-batch", lambda D, low, high: D.Uniform(low, high),
         dict(low=_u_low, high=_u_high), uniform_value(_u_low, _u_high), icdf=True, cdf=True),
    Case("uniform-broadcast", lambda D, low, high: D.Uniform(low, high),
         dict(low=_u_low_b, high=_u_high_b), uniform_value(_u_low_b, _u_high_b), icdf=True, cdf=True),
    Case("uniform-number-low", lambda D, low, high: D.Uniform(low, high),
         dict(low=-3.0, high=np.array([1.0, 2.0, 0.5])), uniform_value(-3.0, np.array([1.0, 2.0, 0.5])),
         icdf=True, cdf=True),
    Case("bernoulli-probs-scalar", lambda D, probs: D.Bernoulli(probs=probs),
         dict(probs=np.array(0.3)), boolean_value, continuous=False),
    Case("bernoulli-probs-batch", lambda D, probs: D.Bernoulli(probs=probs),
         dict(probs=unit(2, 3)), boolean_value, continuous=False),
    Case("bernoulli-logits-batch", lambda D, logits: D.Bernoulli(logits=logits),
         dict(logits=real(3)), boolean_value, continuous=False),
    Case("bernoulli-number", lambda D, probs: D.Bernoulli(probs),
         dict(probs=0.8), boolean_value, continuous=False, rtol=1e-6),
    Case("categorical-probs-1d", lambda D, probs: D.Categorical(probs=probs),
         dict(probs=simplex(4)), class_value(4), continuous=False),
    Case("categorical-probs-batch", lambda D, probs: D.Categorical(probs=probs),
         dict(probs=RNG.uniform(0.1, 2.0, size=(2, 3, 4))), class_value(4), continuous=False),
    Case("categorical-logits-batch", lambda D, logits: D.Categorical(logits=logits),
         dict(logits=real(3, 5)), class_value(5), continuous=False),
    Case("onehot-probs", lambda D, probs: D.OneHotCategorical(probs=probs),
         dict(probs=simplex(2, 4)), one_hot_value(4), continuous=False),
    Case("onehot-logits", lambda D, logits: D.OneHotCategorical(logits=logits),
         dict(logits=real(3)), one_hot_value(3), continuous=False),
    Case("independent-normal-1", lambda D, loc, scale: D.Independent(D.Normal(loc, scale), 1),
         dict(loc=real(2, 3), scale=pos(2, 3)), normal_value),
    Case("independent-normal-2", lambda D, loc, scale: D.Independent(D.Normal(loc, scale), 2),
         dict(loc=real(2, 3), scale=pos(2, 3)), normal_value),
    Case("independent-bernoulli", lambda D, probs: D.Independent(D.Bernoulli(probs), 1),
         dict(probs=unit(2, 3)), boolean_value, continuous=False),
    Case("exponential-batch", lambda D, rate: D.Exponential(rate),
         dict(rate=pos(2, 3)), positive_value, icdf=True, cdf=True),
    Case("exponential-number", lambda D, rate: D.Exponential(rate),
         dict(rate=1.5), positive_value, icdf=True, cdf=True, rtol=1e-6),
    Case("laplace-broadcast", lambda D, loc, scale: D.Laplace(loc, scale),
         dict(loc=real(2, 1), scale=pos(3)), normal_value, icdf=True, cdf=True),
    Case("geometric-probs", lambda D, probs: D.Geometric(probs=probs),
         dict(probs=unit(2, 3)), count_value, continuous=False),
    Case("geometric-logits", lambda D, logits: D.Geometric(logits=logits),
         dict(logits=real(3)), count_value, continuous=False),
]


def value_pair(case, dist):
    shape = tuple(dist.batch_shape) + tuple(dist.event_shape)
    arr = case.value(shape)
    dtype = "int64" if arr.dtype == np.int64 else "float64"
    grad = case.continuous
    return tensor(torch, arr, grad=grad, dtype=dtype), tensor(mf, arr, grad=grad, dtype=dtype)


# ----------------------------------------------------------------------------
# values and gradients against torch

@pytest.mark.parametrize("case", CASES, ids=repr)
def test_values_and_gradients_match_torch(case):
    td, tleaves = case.build(torch)
    md, mleaves = case.build(mf)
    assert tuple(md.batch_shape) == tuple(td.batch_shape)
    assert tuple(md.event_shape) == tuple(td.event_shape)
    assert isinstance(md.batch_shape, mf.Size) and isinstance(md.event_shape, mf.Size)
    assert md.has_rsample == td.has_rsample
    assert md.has_enumerate_support == td.has_enumerate_support

    tv, mv = value_pair(case, td)
    tq = tensor(torch, RNG.uniform(0.05, 0.95, size=(3,) + tuple(td.batch_shape)), grad=True)
    mq = tensor(mf, numpy(tq), grad=True)

    quantities = {
        "mean": lambda d, v, q: d.mean,
        "variance": lambda d, v, q: d.variance,
        "stddev": lambda d, v, q: d.stddev,
        "mode": lambda d, v, q: d.mode,
        "entropy": lambda d, v, q: d.entropy(),
        "perplexity": lambda d, v, q: d.perplexity(),
        "log_prob": lambda d, v, q: d.log_prob(v),
    }
    if case.cdf:
        quantities["cdf"] = lambda d, v, q: d.cdf(v)
    if case.icdf:
        quantities["icdf"] = lambda d, v, q: d.icdf(q)

    for name, fn in quantities.items():
        ref = fn(td, tv, tq)
        ours = fn(md, mv, mq)
        assert ours.dtype == getattr(mf, str(ref.dtype).split(".")[1]), f"{case}.{name} dtype"
        assert_close(ours, ref, rtol=case.rtol, atol=case.rtol * 1e-2, what=f"{case}.{name}")
        inputs_t = list(tleaves) + ([tv] if case.continuous else []) + ([tq] if name == "icdf" else [])
        inputs_m = list(mleaves) + ([mv] if case.continuous else []) + ([mq] if name == "icdf" else [])
        if not inputs_t or not ref.requires_grad:
            assert not ours.requires_grad or name == "mode", f"{case}.{name} requires_grad"
            continue
        weight = RNG.uniform(0.5, 1.5, size=tuple(ref.shape))
        for i, (gm, gt) in enumerate(zip(grads(mf, ours, inputs_m, weight), grads(torch, ref, inputs_t, weight))):
            assert_close(gm, gt, rtol=case.rtol, atol=case.rtol * 1e-2, what=f"{case}.{name} grad {i}")


def test_normal_icdf_inverts_cdf():
    d = MD.Normal(mf.tensor([0.5, -1.0], dtype=mf.float64), mf.tensor([2.0, 0.3], dtype=mf.float64))
    q = mf.tensor([0.01, 0.97], dtype=mf.float64)
    assert_close(d.cdf(d.icdf(q)), torch.tensor([0.01, 0.97], dtype=torch.float64), rtol=1e-12, what="cdf(icdf)")


def test_parameters_are_broadcast_as_torch():
    for low, high in [(0., 1.), (mf.zeros(3, dtype=mf.float64), 2.), (-1., mf.ones(2, 1, dtype=mf.float64) * 3)]:
        d = MD.Uniform(low, high)
        ref = TD.Uniform(*[torch.tensor(numpy(x)) if mf.is_tensor(x) else x for x in (low, high)])
        assert tuple(d.batch_shape) == tuple(ref.batch_shape)
        assert tuple(d.low.shape) == tuple(ref.low.shape) and d.low.dtype == getattr(mf, str(ref.low.dtype)[6:])
    # numbers alone take the default dtype, numbers next to a tensor take its dtype
    assert MD.Normal(0., 1.).loc.dtype == mf.float32
    assert MD.Normal(mf.zeros(2, dtype=mf.float64), 1.).scale.dtype == mf.float64
    loc, scale = MD.utils.broadcast_all(mf.zeros(2, 1, dtype=mf.float64), mf.ones(3, dtype=mf.float64))
    assert tuple(loc.shape) == tuple(scale.shape) == (2, 3)
    with pytest.raises(ValueError):
        MD.utils.broadcast_all(mf.zeros(2), "x")
    with pytest.raises(ValueError):
        TD.utils.broadcast_all(torch.zeros(2), "x")


def test_float32_parameters_give_float32_results():
    d = MD.Normal(mf.zeros(3), mf.ones(3))
    assert d.log_prob(mf.zeros(3)).dtype == mf.float32
    assert d.sample().dtype == mf.float32
    c = MD.Categorical(logits=mf.zeros(3))
    assert c.sample((2,)).dtype == mf.int64
    assert c.entropy().dtype == mf.float32


# ----------------------------------------------------------------------------
# KL divergences

KL_PAIRS = [
    ("normal-normal", lambda D, a, b, c, d: (D.Normal(a, b), D.Normal(c, d)),
     (real(2, 3), pos(2, 3), real(3), pos(2, 1))),
    ("normal-normal-scalar", lambda D, a, b, c, d: (D.Normal(a, b), D.Normal(c, d)),
     (np.array(0.2), np.array(1.3), np.array(-0.5), np.array(0.6))),
    ("uniform-uniform", lambda D, a, b, c, d: (D.Uniform(a, a + b), D.Uniform(c, c + d)),
     (RNG.uniform(0, 1, (4,)), RNG.uniform(0.1, 1, (4,)), np.array([-0.5, 0.3, -0.2, 0.0]),
      np.array([3.0, 3.0, 0.5, 3.0]))),
    ("bernoulli-bernoulli", lambda D, a, b, c, d: (D.Bernoulli(a), D.Bernoulli(logits=b)),
     (unit(2, 3), real(2, 3), None, None)),
    ("bernoulli-bernoulli-edges", lambda D, a, b, c, d: (D.Bernoulli(a), D.Bernoulli(b)),
     (np.array([0.0, 1.0, 0.3, 0.0, 1.0]), np.array([0.4, 0.6, 0.0, 0.0, 1.0]), None, None)),
    ("categorical-categorical", lambda D, a, b, c, d: (D.Categorical(probs=a), D.Categorical(logits=b)),
     (simplex(2, 3, 4), real(3, 4), None, None)),
    ("categorical-categorical-zeros", lambda D, a, b, c, d: (D.Categorical(probs=a), D.Categorical(probs=b)),
     (np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]), np.array([[0.3, 0.3, 0.4], [0.5, 0.0, 0.5]]), None, None)),
    ("onehot-onehot", lambda D, a, b, c, d: (D.OneHotCategorical(a), D.OneHotCategorical(logits=b)),
     (simplex(3, 4), real(4), None, None)),
    ("independent-independent", lambda D, a, b, c, d: (D.Independent(D.Normal(a, b), 1),
                                                       D.Independent(D.Normal(c, d), 1)),
     (real(2, 3), pos(2, 3), real(2, 3), pos(3))),
    ("independent-independent-2", lambda D, a, b, c, d: (D.Independent(D.Bernoulli(a), 2),
                                                         D.Independent(D.Bernoulli(b), 2)),
     (unit(2, 3), unit(2, 3), None, None)),
    ("exponential-exponential", lambda D, a, b, c, d: (D.Exponential(a), D.Exponential(b)),
     (pos(3), pos(2, 1), None, None)),
    ("laplace-laplace", lambda D, a, b, c, d: (D.Laplace(a, b), D.Laplace(c, d)),
     (real(3), pos(3), real(3), pos(3))),
    ("geometric-geometric", lambda D, a, b, c, d: (D.Geometric(a), D.Geometric(logits=b)),
     (unit(3), real(3), None, None)),
    ("uniform-normal", lambda D, a, b, c, d: (D.Uniform(a, a + b), D.Normal(c, d)),
     (real(3), pos(3), real(3), pos(3))),
    ("uniform-exponential", lambda D, a, b, c, d: (D.Uniform(a, a + b), D.Exponential(c)),
     (np.array([0.5, -0.5, 1.0]), pos(3), pos(3), None)),
    ("exponential-normal", lambda D, a, b, c, d: (D.Exponential(a), D.Normal(b, c)),
     (pos(3), real(3), pos(3), None)),
    ("laplace-normal", lambda D, a, b, c, d: (D.Laplace(a, b), D.Normal(c, d)),
     (real(3), pos(3), real(3), pos(3))),
    ("normal-laplace", lambda D, a, b, c, d: (D.Normal(a, b), D.Laplace(c, d)),
     (real(3), pos(3), real(3), pos(3))),
    ("normal-uniform-infinite", lambda D, a, b, c, d: (D.Normal(a, b), D.Uniform(c, c + d)),
     (real(3), pos(3), real(3), pos(3))),
    ("exponential-uniform-infinite", lambda D, a, b, c, d: (D.Exponential(a), D.Uniform(b, b + c)),
     (pos(3), real(3), pos(3), None)),
    ("laplace-exponential-infinite", lambda D, a, b, c, d: (D.Laplace(a, b), D.Exponential(c)),
     (real(3), pos(3), pos(3), None)),
]


@pytest.mark.parametrize("name,make,arrays", KL_PAIRS, ids=[p[0] for p in KL_PAIRS])
def test_kl_divergence_matches_torch(name, make, arrays):
    results = {}
    for lib in (torch, mf):
        D = TD if lib is torch else MD
        leaves = [tensor(lib, a, grad=True) if a is not None else None for a in arrays]
        p, q = make(D, *leaves)
        kl = (TD.kl_divergence if lib is torch else MD.kl_divergence)(p, q)
        used = [x for x in leaves if x is not None]
        results[lib] = (kl, used)
    ref, tleaves = results[torch]
    ours, mleaves = results[mf]
    assert_close(ours, ref, what=name)
    if not ref.requires_grad:
        return
    weight = RNG.uniform(0.5, 1.5, size=tuple(ref.shape))
    finite = np.isfinite(numpy(ref))
    weight = np.where(finite, weight, 0.0)  # inf entries: compare the finite ones' gradients
    for i, (gm, gt) in enumerate(zip(grads(mf, ours, mleaves, weight), grads(torch, ref, tleaves, weight))):
        assert_close(gm, gt, what=f"{name} grad {i}")


def test_kl_unregistered_pairs_raise_not_implemented():
    b = MD.Bernoulli(0.3)
    c = MD.Categorical(probs=mf.tensor([0.5, 0.5]))
    with pytest.raises(NotImplementedError):
        MD.kl_divergence(b, c)
    with pytest.raises(NotImplementedError):
        TD.kl_divergence(TD.Bernoulli(0.3), TD.Categorical(probs=torch.tensor([0.5, 0.5])))
    # two different exponential families reach the Bregman fallback, which refuses, as torch
    with pytest.raises(NotImplementedError):
        MD.kl_divergence(MD.Normal(0., 1.), b)
    with pytest.raises(NotImplementedError):
        TD.kl_divergence(TD.Normal(0., 1.), TD.Bernoulli(0.3))
    n = MD.Normal(mf.zeros(2, 3), mf.ones(2, 3))
    with pytest.raises(NotImplementedError):
        MD.kl_divergence(MD.Independent(n, 1), MD.Independent(n, 2))
    with pytest.raises(NotImplementedError):
        MD.kl_divergence(MD.Uniform(0., 1.), MD.Laplace(0., 1.))


def test_register_kl_dispatches_to_the_most_specific_match():
    from meshflow.distributions import kl as klmod

    class MyNormal(MD.Normal):
        pass

    class MyOtherNormal(MD.Normal):
        pass

    before = dict(klmod._KL_REGISTRY)
    try:
        p, q = MD.Normal(0., 1.), MD.Normal(1., 2.)
        mp, mq = MyNormal(0., 1.), MyNormal(1., 2.)
        expected = MD.kl_divergence(p, q)
        # the Normal-Normal function serves subclasses until a more specific one is registered
        assert_close(MD.kl_divergence(mp, mq), numpy(expected))

        @MD.register_kl(MyNormal, MD.Normal)
        def _mine(p, q):
            return mf.full_like(p.loc, 42.)

        assert float(MD.kl_divergence(mp, q)) == 42.
        assert float(MD.kl_divergence(mp, mq)) == 42.
        assert_close(MD.kl_divergence(p, q), numpy(expected))
        assert_close(MD.kl_divergence(p, mq), numpy(expected))

        # (Normal, MyOtherNormal) vs (MyNormal, Normal) for (MyNormal, MyOtherNormal) is ambiguous
        @MD.register_kl(MD.Normal, MyOtherNormal)
        def _other(p, q):
            return mf.full_like(p.loc, 7.)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            MD.kl_divergence(mp, MyOtherNormal(0., 1.))
        assert any(issubclass(w.category, RuntimeWarning) and "Ambiguous" in str(w.message) for w in caught)
    finally:
        klmod._KL_REGISTRY.clear()
        klmod._KL_REGISTRY.update(before)
        klmod._KL_MEMOIZE.clear()


def test_exponential_family_bregman_entropy_and_kl_match_closed_forms():
    from meshflow.distributions import kl as klmod
    loc = mf.tensor(real(3), requires_grad=True)
    scale = mf.tensor(pos(3), requires_grad=True)
    for d in (MD.Normal(loc, scale), MD.Bernoulli(mf.tensor(unit(3))), MD.Exponential(mf.tensor(pos(3)))):
        assert_close(MD.ExponentialFamily.entropy(d), numpy(d.entropy()), rtol=1e-9)
    p, q = MD.Normal(loc, scale), MD.Normal(mf.tensor(real(3)), mf.tensor(pos(3)))
    qloc = mf.tensor(real(3), requires_grad=True)
    qscale = mf.tensor(pos(3), requires_grad=True)
    q = MD.Normal(qloc, qscale)
    bregman = klmod._kl_expfamily_expfamily(p, q)
    assert_close(bregman, numpy(MD.kl_divergence(p, q)), rtol=1e-9)
    # as in torch, p's natural parameters are detached: gradients reach q only
    gl, gs = mf.autograd.grad(bregman.sum(), [qloc, qscale])
    rl, rs = mf.autograd.grad(MD.kl_divergence(p, q).sum(), [qloc, qscale])
    assert_close(gl, numpy(rl), rtol=1e-9)
    assert_close(gs, numpy(rs), rtol=1e-9)


# ----------------------------------------------------------------------------
# sampling

SAMPLERS = [
    ("normal", lambda: MD.Normal(mf.tensor(real(2, 3)), mf.tensor(pos(3))), mf.float64),
    ("normal-numbers", lambda: MD.Normal(0., 1.), mf.float32),
    ("uniform", lambda: MD.Uniform(mf.tensor(_u_low), mf.tensor(_u_high)), mf.float64),
    ("bernoulli", lambda: MD.Bernoulli(mf.tensor(unit(2, 3))), mf.float64),
    ("categorical", lambda: MD.Categorical(mf.tensor(simplex(2, 3, 4))), mf.int64),
    ("categorical-1d", lambda: MD.Categorical(logits=mf.tensor(real(5))), mf.int64),
    ("onehot", lambda: MD.OneHotCategorical(mf.tensor(simplex(3, 4))), mf.float64),
    ("onehot-st", lambda: MD.OneHotCategoricalStraightThrough(mf.tensor(simplex(3, 4))), mf.float64),
    ("independent", lambda: MD.Independent(MD.Normal(mf.tensor(real(2, 3)), 1.), 1), mf.float64),
    ("exponential", lambda: MD.Exponential(mf.tensor(pos(3))), mf.float64),
    ("laplace", lambda: MD.Laplace(mf.tensor(real(3)), 2.), mf.float64),
    ("geometric", lambda: MD.Geometric(mf.tensor(unit(3))), mf.float64),
]


@pytest.mark.parametrize("name,make,dtype", SAMPLERS, ids=[s[0] for s in SAMPLERS])
def test_sample_shapes_dtypes_and_seed(name, make, dtype):
    d = make()
    for sample_shape in [(), (3,), (2, 3), mf.Size([4])]:
        expected = tuple(sample_shape) + tuple(d.batch_shape) + tuple(d.event_shape)
        methods = [d.sample] + ([d.rsample] if d.has_rsample else [])
        for method in methods:
            s = method(sample_shape)
            assert tuple(s.shape) == expected, (name, method.__name__, sample_shape)
            assert s.dtype == dtype
            assert tuple(d._extended_shape(sample_shape)) == expected
        assert not d.sample(sample_shape).requires_grad
    assert tuple(d.sample().shape) == tuple(d.batch_shape) + tuple(d.event_shape)
    mf.manual_seed(7)
    a = d.sample((5,))
    mf.manual_seed(7)
    b = d.sample((5,))
    assert mf.equal(a, b)
    if d.support is not None and not mc.is_dependent(type(d).support) and not isinstance(d, MD.Independent):
        assert bool(d.support.check(d.sample((50,))).all())


def test_samples_lie_in_the_support():
    mf.manual_seed(3)
    u = MD.Uniform(mf.tensor(_u_low), mf.tensor(_u_high))
    assert bool(u.support.check(u.sample((200,))).all())
    ind = MD.Independent(MD.Bernoulli(mf.tensor(unit(2, 3))), 1)
    assert bool(ind.support.check(ind.sample((20,))).all())


N = 20000


def _moments(x):
    x = numpy(x).astype(np.float64)
    return x.mean(0), x.var(0)


@pytest.mark.parametrize("name,make", [
    ("normal", lambda: MD.Normal(mf.tensor([[0.5, -1.0, 2.0]]), mf.tensor([[1.0], [0.3]]))),
    ("uniform", lambda: MD.Uniform(mf.tensor([-1.0, 0.0, 2.0]), mf.tensor([1.0, 0.1, 5.0]))),
    ("bernoulli", lambda: MD.Bernoulli(mf.tensor([[0.05, 0.5], [0.7, 0.99]]))),
    ("exponential", lambda: MD.Exponential(mf.tensor([0.5, 2.0]))),
    ("laplace", lambda: MD.Laplace(mf.tensor([0.0, 3.0]), mf.tensor([1.0, 0.5]))),
    ("geometric", lambda: MD.Geometric(mf.tensor([0.3, 0.8]))),
])
def test_sample_moments(name, make):
    d = make()
    mf.manual_seed(2024)
    mean, var = _moments(d.sample((N,)))
    true_mean, true_var = numpy(d.mean).astype(np.float64), numpy(d.variance).astype(np.float64)
    true_mean = np.broadcast_to(true_mean, mean.shape)
    true_var = np.broadcast_to(true_var, var.shape)
    se = np.sqrt(true_var / N)
    assert np.all(np.abs(mean - true_mean) < 5 * se + 1e-12), (mean, true_mean)
    # the variance of a sample variance is about (m4 - var^2)/N; 10% is far outside it for these
    assert np.allclose(var, true_var, rtol=0.1), (var, true_var)


def test_categorical_sample_frequencies_for_any_batch_shape():
    probs = simplex(2, 3, 4)
    probs[0, 1] = [0.0, 0.5, 0.0, 0.5]  # zero-probability classes are never drawn
    probs[1, 2] = [0.0, 0.0, 0.0, 1.0]
    for d in (MD.Categorical(probs=mf.tensor(probs)), MD.Categorical(logits=mf.tensor(np.log(probs + 1e-300)))):
        mf.manual_seed(11)
        s = numpy(d.sample((N,)))
        assert s.shape == (N, 2, 3)
        freq = np.stack([(s == k).mean(0) for k in range(4)], -1)
        se = np.sqrt(probs * (1 - probs) / N)
        assert np.all(np.abs(freq - probs) <= 5 * se + 1e-12)
        assert np.all(freq[probs == 0] == 0)
    # unnormalised probabilities and a single category
    d = MD.Categorical(probs=mf.tensor([3.0, 1.0]))
    mf.manual_seed(0)
    assert abs(float((d.sample((N,)) == 0).double().mean()) - 0.75) < 0.02
    assert bool((MD.Categorical(probs=mf.tensor([[1.0], [2.0]])).sample((10,)) == 0).all())


def test_onehot_sample_frequencies():
    probs = simplex(3, 4)
    d = MD.OneHotCategorical(mf.tensor(probs))
    mf.manual_seed(5)
    s = numpy(d.sample((N,)))
    assert np.all(s.sum(-1) == 1)
    assert np.all(np.abs(s.mean(0) - probs) < 5 * np.sqrt(probs * (1 - probs) / N))


def test_rsample_gradients_normal():
    loc = mf.tensor(real(2, 3), requires_grad=True)
    scale = mf.tensor(pos(3), requires_grad=True)
    d = MD.Normal(loc, scale)
    mf.manual_seed(9)
    x = d.rsample((5,))
    assert x.requires_grad
    eps = ((x - loc) / scale).detach()
    mf.manual_seed(9)
    assert mf.allclose(eps, mf.randn((5, 2, 3), dtype=mf.float64))  # the draw is meshflow's randn
    gl, gs = mf.autograd.grad(x.sum(), [loc, scale])
    assert_close(gl, np.full((2, 3), 5.0))  # d x / d loc == 1 for each of the 5 draws
    assert_close(gs, numpy(eps).sum((0, 1)))  # d x / d scale == eps


def test_rsample_gradients_uniform():
    low = mf.tensor(_u_low, requires_grad=True)
    high = mf.tensor(_u_high, requires_grad=True)
    x = MD.Uniform(low, high).rsample((4,))
    u = numpy((x - low) / (high - low))
    assert np.all((u >= 0) & (u < 1))
    gl, gh = mf.autograd.grad(x.sum(), [low, high])
    assert_close(gl, (1 - u).sum(0), rtol=1e-9)
    assert_close(gh, u.sum(0), rtol=1e-9)


def test_rsample_gradients_exponential_laplace_independent():
    rate = mf.tensor(pos(3), requires_grad=True)
    x = MD.Exponential(rate).rsample((6,))
    (g,) = mf.autograd.grad(x.sum(), [rate])
    assert_close(g, (-numpy(x) / numpy(rate)).sum(0))  # x = E / rate

    loc = mf.tensor(real(3), requires_grad=True)
    scale = mf.tensor(pos(3), requires_grad=True)
    x = MD.Laplace(loc, scale).rsample((6,))
    gl, gs = mf.autograd.grad(x.sum(), [loc, scale])
    assert_close(gl, np.full(3, 6.0))
    assert_close(gs, ((numpy(x) - numpy(loc)) / numpy(scale)).sum(0))

    x = MD.Independent(MD.Normal(loc, scale), 1).rsample((2,))
    (gl,) = mf.autograd.grad(x.sum(), [loc])
    assert_close(gl, np.full(3, 2.0))

    probs = mf.tensor(simplex(3), requires_grad=True)
    x = MD.OneHotCategoricalStraightThrough(probs).rsample()
    (gp,) = mf.autograd.grad((x * mf.tensor([1.0, 2.0, 3.0], dtype=mf.float64)).sum(), [probs])
    assert x.requires_grad and gp is not None


def test_no_rsample_for_discrete():
    for d in (MD.Bernoulli(0.5), MD.Categorical(mf.tensor([0.5, 0.5])), MD.Geometric(0.5)):
        assert not d.has_rsample
        with pytest.raises(NotImplementedError):
            d.rsample()


# ----------------------------------------------------------------------------
# validation

BAD_ARGS = [
    ("Normal", lambda D, T: D.Normal(0., -1.)),
    ("Normal zero scale", lambda D, T: D.Normal(T([0., 1.]), T([1., 0.]))),
    ("Normal nan loc", lambda D, T: D.Normal(float("nan"), 1.)),
    ("Uniform low>=high", lambda D, T: D.Uniform(1., 0.)),
    ("Uniform equal", lambda D, T: D.Uniform(T([0., 1.]), T([1., 1.]))),
    ("Bernoulli probs>1", lambda D, T: D.Bernoulli(probs=1.5)),
    ("Bernoulli probs<0", lambda D, T: D.Bernoulli(probs=T([0.2, -0.1]))),
    ("Bernoulli both", lambda D, T: D.Bernoulli(probs=0.3, logits=0.1)),
    ("Bernoulli neither", lambda D, T: D.Bernoulli()),
    ("Categorical negative", lambda D, T: D.Categorical(probs=T([-0.1, 1.1]))),
    ("Categorical 0-d", lambda D, T: D.Categorical(probs=T(0.5))),
    ("Categorical 0-d logits", lambda D, T: D.Categorical(logits=T(0.5))),
    ("Categorical neither", lambda D, T: D.Categorical()),
    ("Categorical nan logits", lambda D, T: D.Categorical(logits=T([0., float("nan")]))),
    ("Independent too many dims", lambda D, T: D.Independent(D.Normal(T([0.]), T([1.])), 2)),
    ("Exponential", lambda D, T: D.Exponential(T([1., -1.]))),
    ("Laplace", lambda D, T: D.Laplace(0., 0.)),
    ("Geometric zero", lambda D, T: D.Geometric(probs=0.)),
    ("Geometric >1", lambda D, T: D.Geometric(probs=1.2)),
]


@pytest.mark.parametrize("name,make", BAD_ARGS, ids=[b[0] for b in BAD_ARGS])
def test_bad_arguments_raise_value_error_as_torch(name, make):
    with pytest.raises(ValueError):
        make(TD, lambda x: torch.tensor(x, dtype=torch.float64))
    with pytest.raises(ValueError):
        make(MD, lambda x: mf.tensor(x, dtype=mf.float64))


BAD_VALUES = [
    ("Normal nan", lambda D, T: D.Normal(0., 1.).log_prob(T(float("nan")))),
    ("Normal not a tensor", lambda D, T: D.Normal(0., 1.).log_prob(0.5)),
    ("Normal shape", lambda D, T: D.Normal(T([0., 1., 2.]), 1.).log_prob(T([0., 1.]))),
    ("Normal cdf nan", lambda D, T: D.Normal(0., 1.).cdf(T(float("nan")))),
    ("Uniform above", lambda D, T: D.Uniform(0., 1.).log_prob(T(2.))),
    ("Uniform below", lambda D, T: D.Uniform(T([0., 0.]), 1.).log_prob(T([0.5, -0.1]))),
    ("Uniform cdf", lambda D, T: D.Uniform(0., 1.).cdf(T(1.5))),
    ("Bernoulli 0.5", lambda D, T: D.Bernoulli(0.3).log_prob(T(0.5))),
    ("Bernoulli 2", lambda D, T: D.Bernoulli(T([0.3, 0.4])).log_prob(T([1., 2.]))),
    ("Categorical too big", lambda D, T: D.Categorical(T([0.5, 0.5])).log_prob(T(2.))),
    ("Categorical negative", lambda D, T: D.Categorical(T([0.5, 0.5])).log_prob(T(-1.))),
    ("Categorical fraction", lambda D, T: D.Categorical(T([0.5, 0.5])).log_prob(T(0.5))),
    ("OneHot not one-hot", lambda D, T: D.OneHotCategorical(T([0.5, 0.5])).log_prob(T([1., 1.]))),
    ("OneHot event shape", lambda D, T: D.OneHotCategorical(T([0.5, 0.5])).log_prob(T([1., 0., 0.]))),
    ("Independent event", lambda D, T: D.Independent(D.Bernoulli(T([0.5, 0.5])), 1).log_prob(T([1., 0.5]))),
    ("Exponential negative", lambda D, T: D.Exponential(1.).log_prob(T(-1.))),
    ("Geometric fraction", lambda D, T: D.Geometric(0.5).log_prob(T(1.5))),
    ("Laplace nan", lambda D, T: D.Laplace(0., 1.).log_prob(T(float("nan")))),
]


@pytest.mark.parametrize("name,make", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_out_of_support_values_raise_value_error_as_torch(name, make):
    with pytest.raises(ValueError):
        make(TD, lambda x: torch.tensor(x, dtype=torch.float64))
    with pytest.raises(ValueError):
        make(MD, lambda x: mf.tensor(x, dtype=mf.float64))


def test_validation_can_be_switched_off():
    assert MD.Distribution._validate_args is True  # torch's default (python without -O)
    d = MD.Normal(0., -1., validate_args=False)
    assert not d._validate_args
    u = MD.Uniform(mf.tensor([0., 0.], dtype=mf.float64), 1., validate_args=False)
    ref = TD.Uniform(torch.tensor([0., 0.], dtype=torch.float64), 1., validate_args=False)
    value = [0.5, 2.0]
    assert_close(u.log_prob(mf.tensor(value, dtype=mf.float64)), ref.log_prob(torch.tensor(value, dtype=torch.float64)))
    assert_close(MD.Bernoulli(0.3, validate_args=False).log_prob(mf.tensor(0.5)),
                 TD.Bernoulli(0.3, validate_args=False).log_prob(torch.tensor(0.5)), rtol=1e-6)
    try:
        MD.Distribution.set_default_validate_args(False)
        MD.Normal(0., -1.)
        MD.Uniform(1., 0.)
        assert MD.Normal(0., 1., validate_args=True)._validate_args
        with pytest.raises(ValueError):
            MD.Normal(0., -1., validate_args=True)
    finally:
        MD.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        MD.Normal(0., -1.)
    with pytest.raises(ValueError):
        MD.Distribution.set_default_validate_args("yes")


def test_error_messages_name_the_parameter_and_constraint():
    with pytest.raises(ValueError, match=r"Expected parameter scale .* GreaterThan\(lower_bound=0.0\)"):
        MD.Normal(0., -1.)
    with pytest.raises(ValueError, match=r"within the support \(Boolean\(\)\)"):
        MD.Bernoulli(0.3).log_prob(mf.tensor(0.5))
    with pytest.raises(ValueError, match="must be a Tensor"):
        MD.Normal(0., 1.).log_prob(1.0)


# ----------------------------------------------------------------------------
# expand, enumerate_support, constraints, the rest of the interface

EXPANDABLE = [
    ("normal", lambda D, T, a=real(3), b=pos(3): D.Normal(T(a), T(b)), (2, 3), lambda T, v=real(2, 3): T(v)),
    ("uniform", lambda D, T: D.Uniform(T(_u_low[0]), T(_u_high[0])), (4, 3), lambda T: T(_u_low[0] + 0.1)),
    ("bernoulli-probs", lambda D, T, a=unit(1, 3): D.Bernoulli(T(a)), (2, 3),
     lambda T: T([[0., 1., 1.], [1., 0., 0.]])),
    ("bernoulli-logits", lambda D, T, a=real(3): D.Bernoulli(logits=T(a)), (2, 3), lambda T: T([1., 0., 1.])),
    ("categorical", lambda D, T, a=simplex(3, 4): D.Categorical(T(a)), (2, 3), lambda T: T([[0, 1, 3], [2, 2, 0]])),
    ("categorical-logits", lambda D, T, a=real(4): D.Categorical(logits=T(a)), (5,), lambda T: T([0, 1, 3, 2, 2])),
    ("onehot", lambda D, T, a=simplex(4): D.OneHotCategorical(T(a)), (2,), lambda T: T([[0., 1., 0., 0.]])),
    ("independent", lambda D, T, a=real(3), b=pos(3): D.Independent(D.Normal(T(a), T(b)), 1), (2,),
     lambda T, v=real(2, 3): T(v)),
    ("exponential", lambda D, T, a=pos(3): D.Exponential(T(a)), (2, 3), lambda T, v=pos(2, 3): T(v)),
    ("laplace", lambda D, T, a=real(3): D.Laplace(T(a), 1.5), (2, 3), lambda T, v=real(3): T(v)),
    ("geometric", lambda D, T, a=unit(3): D.Geometric(T(a)), (2, 3), lambda T: T([[0., 1., 4.], [2., 2., 0.]])),
]


@pytest.mark.parametrize("name,make,shape,value", EXPANDABLE, ids=[e[0] for e in EXPANDABLE])
def test_expand_matches_torch(name, make, shape, value):
    pairs = []
    for lib, D in ((torch, TD), (mf, MD)):
        def T(x, lib=lib):
            arr = np.asarray(x)
            return tensor(lib, arr, dtype="int64" if arr.dtype.kind == "i" else "float64")
        d = make(D, T)
        e = d.expand(shape)
        pairs.append((d, e, e.log_prob(value(T)), e.entropy()))
    (td, te, tlp, tent), (md, me, mlp, ment) = pairs
    assert type(me) is type(md)
    assert tuple(me.batch_shape) == tuple(te.batch_shape)
    assert tuple(me.event_shape) == tuple(te.event_shape)
    assert me._validate_args == md._validate_args
    assert_close(mlp, tlp, what=name)
    assert_close(ment, tent, what=name)
    assert tuple(me.sample((2,)).shape) == tuple(te.sample((2,)).shape)
    assert tuple(me.mean.shape) == tuple(te.mean.shape)


def test_expand_of_a_subclass_with_its_own_init_needs_its_own_expand():
    class Shifted(MD.Normal):
        def __init__(self, loc):
            super().__init__(loc, 1.)

    with pytest.raises(NotImplementedError):
        Shifted(mf.zeros(3)).expand((2, 3))

    class Plain(MD.Normal):
        pass

    e = Plain(mf.zeros(3), 1.).expand((2, 3))
    assert type(e) is Plain and tuple(e.batch_shape) == (2, 3)


@pytest.mark.parametrize("name,make", [
    ("bernoulli", lambda D, T, a=unit(2, 3): D.Bernoulli(T(a))),
    ("bernoulli-scalar", lambda D, T: D.Bernoulli(0.4)),
    ("categorical", lambda D, T, a=simplex(2, 3, 4): D.Categorical(T(a))),
    ("categorical-1d", lambda D, T, a=simplex(4): D.Categorical(T(a))),
    ("onehot", lambda D, T, a=simplex(3, 4): D.OneHotCategorical(T(a))),
    ("independent-0", lambda D, T, a=unit(3): D.Independent(D.Bernoulli(T(a)), 0)),
], ids=["bernoulli", "bernoulli-scalar", "categorical", "categorical-1d", "onehot", "independent-0"])
def test_enumerate_support_matches_torch(name, make):
    td = make(TD, lambda x: torch.tensor(x))
    md = make(MD, lambda x: mf.tensor(x))
    for expand in (True, False):
        ref = td.enumerate_support(expand=expand)
        ours = md.enumerate_support(expand=expand)
        assert ours.dtype == getattr(mf, str(ref.dtype)[6:])
        assert_close(ours, ref, what=f"{name} expand={expand}")
        # every enumerated value is scored like torch
        lp = td.log_prob(ref)
        rtol = 1e-6 if lp.dtype == torch.float32 else RTOL
        assert_close(md.log_prob(ours), lp, rtol=rtol)


def test_independent_enumerate_support_over_event_dims_is_not_implemented():
    d = MD.Independent(MD.Bernoulli(mf.tensor(unit(3))), 1)
    assert not d.has_enumerate_support
    with pytest.raises(NotImplementedError):
        d.enumerate_support()


def test_independent_support_and_repr():
    d = MD.Independent(MD.Normal(mf.zeros(2, 3), mf.ones(2, 3)), 1)
    assert isinstance(d.support, mc._IndependentConstraint)
    assert d.support.event_dim == 1
    assert repr(d) == "Independent(Normal(loc: meshflow.Size([2, 3]), scale: meshflow.Size([2, 3])), 1)"
    assert repr(MD.Normal(0., 1.)) == repr(TD.Normal(0., 1.))
    assert repr(MD.Bernoulli(0.25)) == repr(TD.Bernoulli(0.25))


def test_base_class_interface():
    assert MD.Normal.arg_constraints["scale"] is mc.positive
    assert MD.Normal(0., 1.).support is mc.real
    assert MD.Bernoulli(0.5).support is mc.boolean
    assert mc.is_dependent(MD.Uniform.support) and MD.Uniform.support.event_dim == 0
    assert isinstance(MD.Uniform(0., 2.).support, mc._Interval)
    c = MD.Categorical(mf.tensor([0.2, 0.8]))
    assert MD.Categorical.support.is_discrete
    assert c.support.upper_bound == 1
    assert tuple(c.param_shape) == (2,)
    with pytest.warns(UserWarning, match="does not define `arg_constraints`"):
        MD.Distribution()  # torch warns the same way
    base = MD.Distribution(validate_args=False)
    for attribute in ("mean", "mode", "variance", "support", "arg_constraints"):
        with pytest.raises(NotImplementedError):
            getattr(base, attribute)
    with pytest.raises(NotImplementedError):
        base.log_prob(mf.zeros(1))
    with pytest.raises(NotImplementedError):
        base.expand((2,))
    with pytest.raises(NotImplementedError):
        MD.Categorical(mf.tensor([0.5, 0.5])).cdf(mf.tensor(0))
    assert tuple(base.batch_shape) == () and tuple(base.event_shape) == ()
    with pytest.warns(UserWarning):
        s = MD.Normal(mf.zeros(2), 1.).sample_n(3)
    assert tuple(s.shape) == (3, 2)
    # lazily computed parameters: logits from probs and back, not re-validated
    b = MD.Bernoulli(probs=mf.tensor([0.25], dtype=mf.float64))
    assert "logits" not in b.__dict__
    assert_close(b.logits, np.log([1 / 3]))
    assert "logits" in b.__dict__
    assert_close(MD.Bernoulli(logits=mf.tensor([0.0], dtype=mf.float64)).probs, [0.5])


def test_bernoulli_mode_is_nan_at_one_half():
    probs = [0.2, 0.5, 0.7]
    assert_close(MD.Bernoulli(mf.tensor(probs, dtype=mf.float64)).mode,
                 TD.Bernoulli(torch.tensor(probs, dtype=torch.float64)).mode)


def test_categorical_log_prob_broadcasts_values_as_torch():
    probs = simplex(3, 4)
    value = np.array([[0], [3]])
    ref = TD.Categorical(torch.tensor(probs)).log_prob(torch.tensor(value))
    ours = MD.Categorical(mf.tensor(probs)).log_prob(mf.tensor(value))
    assert_close(ours, ref)
    assert tuple(ours.shape) == (2, 3)


def test_categorical_entropy_with_zero_probabilities():
    probs = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    p = mf.tensor(probs, requires_grad=True)
    tp = torch.tensor(probs, requires_grad=True)
    ours, ref = MD.Categorical(p).entropy(), TD.Categorical(tp).entropy()
    assert_close(ours, ref)
    (g,) = mf.autograd.grad(ours.sum(), [p])
    (tg,) = torch.autograd.grad(ref.sum(), [tp])
    assert_close(g, tg)


CONSTRAINT_CHECKS = [
    ("real", lambda C: C.real, [0., float("nan"), float("inf")]),
    ("positive", lambda C: C.positive, [-1., 0., 2.]),
    ("nonnegative", lambda C: C.nonnegative, [-1., 0., 2.]),
    ("unit_interval", lambda C: C.unit_interval, [-0.1, 0., 1., 1.1]),
    ("interval", lambda C: C.interval(-1., 2.), [-1., 2., 2.1]),
    ("half_open_interval", lambda C: C.half_open_interval(-1., 2.), [-1., 2., 1.9]),
    ("greater_than", lambda C: C.greater_than(1.), [1., 1.5]),
    ("greater_than_eq", lambda C: C.greater_than_eq(1.), [1., 0.5]),
    ("less_than", lambda C: C.less_than(1.), [1., 0.5]),
    ("boolean", lambda C: C.boolean, [0., 1., 0.5]),
    ("integer_interval", lambda C: C.integer_interval(0, 3), [0., 3., 4., 1.5]),
    ("nonnegative_integer", lambda C: C.nonnegative_integer, [0., -1., 2.5, 7.]),
    ("positive_integer", lambda C: C.positive_integer, [0., 1., 2.5]),
    ("simplex", lambda C: C.simplex, [[0.5, 0.5], [0.7, 0.7], [-0.5, 1.5]]),
    ("real_vector", lambda C: C.real_vector, [[0., 1.], [float("nan"), 0.]]),
    ("one_hot", lambda C: C.one_hot, [[0., 1.], [1., 1.]]),
    ("independent", lambda C: C.independent(C.positive, 1), [[1., 2.], [1., -2.]]),
    ("lower_triangular", lambda C: C.lower_triangular, [[[1., 0.], [2., 3.]], [[1., 1.], [2., 3.]]]),
    ("lower_cholesky", lambda C: C.lower_cholesky, [[[1., 0.], [2., 3.]], [[1., 0.], [2., -3.]]]),
    ("corr_cholesky", lambda C: C.corr_cholesky, [[[1., 0.], [0.6, 0.8]], [[1., 0.], [2., 3.]]]),
    ("square", lambda C: C.square, [[[1., 0.], [2., 3.]]]),
    ("symmetric", lambda C: C.symmetric, [[[1., 2.], [2., 3.]], [[1., 0.], [2., 3.]]]),
    ("multinomial", lambda C: C.multinomial(3), [[1., 2.], [3., 2.]]),
    ("cat", lambda C: C.cat([C.positive, C.real], dim=-1, lengths=[1, 2]), [[1., -2., 3.], [-1., 0., 0.]]),
    ("stack", lambda C: C.stack([C.positive, C.real], dim=-1), [[1., -2.], [-1., 0.]]),
]


@pytest.mark.parametrize("name,make,values", CONSTRAINT_CHECKS, ids=[c[0] for c in CONSTRAINT_CHECKS])
def test_constraints_match_torch(name, make, values):
    tc, mcon = make(TD.constraints), make(mc)
    ref = tc.check(torch.tensor(values, dtype=torch.float64))
    ours = mcon.check(mf.tensor(values, dtype=mf.float64))
    assert ours.dtype == mf.bool
    assert numpy(ours).tolist() == ref.numpy().tolist()
    assert mcon.event_dim == tc.event_dim and mcon.is_discrete == tc.is_discrete
    assert repr(mcon) == repr(tc)


def test_matrix_constraints_like_torch():
    for value in ([[2., 0.], [0., 1.]], [[1., 2.], [2., 1.]], [[1., 1.], [1., 1.]], [[1., 2.], [0., 1.]]):
        for name in ("positive_definite", "positive_semidefinite"):
            ours = getattr(mc, name).check(mf.tensor(value, dtype=mf.float64))
            ref = getattr(torch.distributions.constraints, name).check(torch.tensor(value, dtype=torch.float64))
            assert bool(ours) == bool(ref), (name, value)
    spd = mf.tensor([[2., 0.], [0., 1.]], dtype=mf.float64)
    with pytest.raises(ValueError):
        mc.dependent.check(spd)


def test_log_prob_values_with_sample_dims_broadcast_against_batch():
    loc, scale = real(2, 3), pos(3)
    value = real(5, 1, 3)
    ref = TD.Normal(torch.tensor(loc), torch.tensor(scale)).log_prob(torch.tensor(value))
    ours = MD.Normal(mf.tensor(loc), mf.tensor(scale)).log_prob(mf.tensor(value))
    assert_close(ours, ref)
    assert tuple(ours.shape) == (5, 2, 3)


def test_entropy_of_normal_closed_form():
    scale = 1.7
    assert math.isclose(float(MD.Normal(0., scale).entropy()), 0.5 + 0.5 * math.log(2 * math.pi) + math.log(scale),
                        rel_tol=1e-6)
