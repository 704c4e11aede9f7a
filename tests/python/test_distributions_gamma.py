"""Gamma, Chi2, Beta and Dirichlet, and the gamma sampler under them
(meshflow._standard_gamma and its gradient), against PyTorch 1.13 in float64.

The distributions go through the same checks as those of
test_distributions.py (values and gradients of every quantity, KL pairs,
expand, validation, sampling shapes and moments). The sampler is checked for
its distribution (a Kolmogorov-Smirnov test against torch.special.gammainc),
for counter-based reproducibility (element i depends only on the seed, the
offset and i), and its gradient d sample / d concentration against values
computed with mpmath (or, without mpmath, against torch's approximation) and
for unbiasedness (the mean gradient of many samples is the gradient of the
mean).
"""
import math

import numpy as np
import pytest
import torch
import torch.distributions as TD

import meshflow as mf
import meshflow.distributions as MD
import test_distributions as base
from test_distributions import Case, assert_close, numpy, tensor

RNG = np.random.default_rng(4321)
N = 20000


def pos(*shape, low=0.5, high=2.5):
    return RNG.uniform(low, high, size=shape)


def simplex(*shape):
    p = RNG.uniform(0.1, 1.0, size=shape)
    return p / p.sum(-1, keepdims=True)


def positive_value(shape):
    return RNG.uniform(0.05, 4.0, size=(4,) + tuple(shape))


def unit_value(shape):
    return RNG.uniform(0.05, 0.95, size=(4,) + tuple(shape))


def simplex_value(shape):
    return simplex(4, *shape)


# ----------------------------------------------------------------------------
# values and gradients of mean, variance, mode, entropy, log_prob, ... against torch

CASES = [
    Case("gamma-scalar", lambda D, c, r: D.Gamma(c, r), dict(c=np.array(0.7), r=np.array(1.9)), positive_value),
    Case("gamma-batch", lambda D, c, r: D.Gamma(c, r), dict(c=pos(2, 3, low=0.2, high=4), r=pos(2, 3)),
         positive_value),
    Case("gamma-broadcast", lambda D, c, r: D.Gamma(c, r), dict(c=pos(2, 1), r=pos(3)), positive_value),
    Case("gamma-number-rate", lambda D, c, r: D.Gamma(c, r), dict(c=pos(3, low=1.5, high=3), r=2.0),
         positive_value),
    Case("gamma-numbers", lambda D, c, r: D.Gamma(c, r), dict(c=2.5, r=0.5), positive_value, rtol=1e-6),
    Case("chi2-batch", lambda D, df: D.Chi2(df), dict(df=pos(2, 3, low=0.5, high=6)), positive_value),
    Case("chi2-number", lambda D, df: D.Chi2(df), dict(df=3.0), positive_value, rtol=1e-6),
    Case("beta-scalar", lambda D, a, b: D.Beta(a, b), dict(a=np.array(0.6), b=np.array(2.3)), unit_value),
    Case("beta-batch", lambda D, a, b: D.Beta(a, b), dict(a=pos(2, 3, low=0.3, high=3), b=pos(2, 3, low=0.3, high=3)),
         unit_value),
    Case("beta-broadcast", lambda D, a, b: D.Beta(a, b), dict(a=pos(2, 1, low=1.2), b=pos(3, low=1.2)), unit_value),
    # float32: meshflow evaluates lgamma and digamma in double, torch in float; the entropy cancels
    Case("beta-numbers", lambda D, a, b: D.Beta(a, b), dict(a=2.0, b=3.0), unit_value, rtol=1e-5),
    Case("dirichlet-1d", lambda D, c: D.Dirichlet(c), dict(c=pos(4, low=0.3, high=3)), simplex_value),
    Case("dirichlet-batch", lambda D, c: D.Dirichlet(c), dict(c=pos(2, 3, 3, low=1.1, high=3)), simplex_value),
    Case("dirichlet-below-one", lambda D, c: D.Dirichlet(c), dict(c=np.array([[0.3, 0.5, 0.9], [0.4, 2.0, 3.0]])),
         simplex_value),
]


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_values_and_gradients_match_torch(case):
    base.test_values_and_gradients_match_torch(case)


def test_gamma_log_prob_takes_numbers_and_other_dtypes_as_torch():
    d, ref = MD.Gamma(mf.tensor([1.5, 2.0]), 2.0), TD.Gamma(torch.tensor([1.5, 2.0]), 2.0)
    assert_close(d.log_prob(1.25), ref.log_prob(1.25), rtol=1e-6)
    ours = d.log_prob(mf.tensor(0.5, dtype=mf.float64))
    assert ours.dtype == mf.float32
    assert_close(ours, ref.log_prob(torch.tensor(0.5, dtype=torch.float64)), rtol=1e-6)


def test_no_cdf_as_in_torch_1_13():
    with pytest.raises(NotImplementedError):
        MD.Gamma(1., 1.).cdf(mf.tensor(0.5))
    with pytest.raises(NotImplementedError):
        TD.Gamma(1., 1.).cdf(torch.tensor(0.5))


def test_parameters_and_shapes():
    assert tuple(MD.Beta(0.5, 1.5).concentration1.shape) == tuple(TD.Beta(0.5, 1.5).concentration1.shape) == ()
    assert MD.Beta(0.5, 1.5)._dirichlet.concentration.dtype == mf.float32
    d = MD.Dirichlet(mf.ones(2, 3))
    assert tuple(d.batch_shape) == (2,) and tuple(d.event_shape) == (3,)
    assert_close(MD.Chi2(mf.tensor([1.0, 4.0], dtype=mf.float64)).df, np.array([1.0, 4.0]))
    assert MD.Chi2.arg_constraints == {"df": MD.constraints.positive}
    assert MD.Gamma(1., 1.).support is MD.constraints.nonnegative
    assert MD.Beta(1., 1.).support is MD.constraints.unit_interval
    assert MD.Dirichlet(mf.ones(2)).support is MD.constraints.simplex
    assert all(c.has_rsample for c in (MD.Gamma, MD.Chi2, MD.Beta, MD.Dirichlet))
    assert repr(MD.Gamma(1., 2.)) == repr(TD.Gamma(1., 2.))
    assert repr(MD.Chi2(2.)) == repr(TD.Chi2(2.))
    assert repr(MD.Beta(mf.ones(2), 2.)) == repr(TD.Beta(torch.ones(2), 2.)).replace("torch", "meshflow")
    assert repr(MD.Dirichlet(mf.ones(2, 3))) == repr(TD.Dirichlet(torch.ones(2, 3))).replace("torch", "meshflow")


def test_exponential_family_bregman_forms_match_closed_forms():
    from meshflow.distributions import kl as klmod
    gamma = MD.Gamma(mf.tensor(pos(3)), mf.tensor(pos(3)))
    assert_close(MD.ExponentialFamily.entropy(gamma), numpy(gamma.entropy()), rtol=1e-9)
    # (torch's Beta and Dirichlet have no carrier measure, so only their KL has a Bregman form)
    pairs = [(MD.Gamma(mf.tensor(pos(3)), mf.tensor(pos(3))), MD.Gamma(mf.tensor(pos(3)), mf.tensor(pos(3)))),
             (MD.Beta(mf.tensor(pos(3)), mf.tensor(pos(3))), MD.Beta(mf.tensor(pos(3)), mf.tensor(pos(3)))),
             (MD.Dirichlet(mf.tensor(pos(2, 4))), MD.Dirichlet(mf.tensor(pos(2, 4))))]
    for p, q in pairs:
        assert_close(klmod._kl_expfamily_expfamily(p, q), numpy(MD.kl_divergence(p, q)), rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------
# KL divergences: the pairs torch registers among the distributions meshflow has

KL_PAIRS = [
    ("gamma-gamma", lambda D, a, b, c, d: (D.Gamma(a, b), D.Gamma(c, d)), (pos(2, 3), pos(2, 3), pos(3), pos(2, 1))),
    ("chi2-gamma", lambda D, a, b, c, d: (D.Chi2(a), D.Gamma(b, c)), (pos(3, low=1), pos(3), pos(3), None)),
    ("beta-beta", lambda D, a, b, c, d: (D.Beta(a, b), D.Beta(c, d)), (pos(2, 3), pos(2, 3), pos(3), pos(3))),
    ("dirichlet-dirichlet", lambda D, a, b, c, d: (D.Dirichlet(a), D.Dirichlet(b)), (pos(2, 4), pos(4), None, None)),
    ("beta-exponential", lambda D, a, b, c, d: (D.Beta(a, b), D.Exponential(c)), (pos(3), pos(3), pos(3), None)),
    ("beta-gamma", lambda D, a, b, c, d: (D.Beta(a, b), D.Gamma(c, d)), (pos(3), pos(3), pos(3), pos(3))),
    ("beta-normal", lambda D, a, b, c, d: (D.Beta(a, b), D.Normal(c, d)), (pos(3), pos(3), base.real(3), pos(3))),
    ("beta-uniform", lambda D, a, b, c, d: (D.Beta(a, b), D.Uniform(c, c + d)),
     (pos(4), pos(4), np.array([-0.5, 0.0, 0.2, -1.0]), np.array([2.0, 1.0, 1.0, 0.5]))),
    ("exponential-beta-infinite", lambda D, a, b, c, d: (D.Exponential(a), D.Beta(b, c)),
     (pos(3), pos(3), pos(3), None)),
    ("exponential-gamma", lambda D, a, b, c, d: (D.Exponential(a), D.Gamma(b, c)), (pos(3), pos(3), pos(3), None)),
    ("gamma-beta-infinite", lambda D, a, b, c, d: (D.Gamma(a, b), D.Beta(c, d)), (pos(3), pos(3), pos(3), pos(3))),
    ("gamma-uniform-infinite", lambda D, a, b, c, d: (D.Gamma(a, b), D.Uniform(c, c + d)),
     (pos(3), pos(3), pos(3), pos(3))),
    ("gamma-exponential", lambda D, a, b, c, d: (D.Gamma(a, b), D.Exponential(c)), (pos(3), pos(3), pos(3), None)),
    ("gamma-normal", lambda D, a, b, c, d: (D.Gamma(a, b), D.Normal(c, d)), (pos(3), pos(3), base.real(3), pos(3))),
    ("laplace-beta-infinite", lambda D, a, b, c, d: (D.Laplace(a, b), D.Beta(c, d)),
     (base.real(3), pos(3), pos(3), pos(3))),
    ("laplace-gamma-infinite", lambda D, a, b, c, d: (D.Laplace(a, b), D.Gamma(c, d)),
     (base.real(3), pos(3), pos(3), pos(3))),
    ("normal-beta-infinite", lambda D, a, b, c, d: (D.Normal(a, b), D.Beta(c, d)),
     (base.real(3), pos(3), pos(3), pos(3))),
    ("normal-gamma-infinite", lambda D, a, b, c, d: (D.Normal(a, b), D.Gamma(c, d)),
     (base.real(3), pos(3), pos(3), pos(3))),
    ("uniform-beta", lambda D, a, b, c, d: (D.Uniform(a, a + b), D.Beta(c, d)),
     (np.array([0.1, 0.3, -0.2, 0.5]), np.array([0.5, 0.2, 0.5, 0.7]), pos(4), pos(4))),
    ("uniform-gamma", lambda D, a, b, c, d: (D.Uniform(a, a + b), D.Gamma(c, d)),
     (np.array([0.1, 2.0, -0.5]), pos(3), pos(3), pos(3))),
]


@pytest.mark.parametrize("name,make,arrays", KL_PAIRS, ids=[p[0] for p in KL_PAIRS])
def test_kl_divergence_matches_torch(name, make, arrays):
    base.test_kl_divergence_matches_torch(name, make, arrays)


# ----------------------------------------------------------------------------
# expand and validation

EXPANDABLE = [
    ("gamma", lambda D, T, a=pos(3), b=pos(3): D.Gamma(T(a), T(b)), (2, 3), lambda T, v=pos(2, 3): T(v)),
    ("chi2", lambda D, T, a=pos(3): D.Chi2(T(a)), (2, 3), lambda T, v=pos(3): T(v)),
    ("beta", lambda D, T, a=pos(1, 3), b=pos(3): D.Beta(T(a), T(b)), (2, 3), lambda T, v=RNG.uniform(0, 1, 3): T(v)),
    ("dirichlet", lambda D, T, a=pos(3): D.Dirichlet(T(a)), (2,), lambda T, v=simplex(2, 3): T(v)),
]


@pytest.mark.parametrize("name,make,shape,value", EXPANDABLE, ids=[e[0] for e in EXPANDABLE])
def test_expand_matches_torch(name, make, shape, value):
    base.test_expand_matches_torch(name, make, shape, value)


BAD_ARGS = [
    ("Gamma zero concentration", lambda D, T: D.Gamma(0., 1.)),
    ("Gamma negative rate", lambda D, T: D.Gamma(T([1., 2.]), T([1., -1.]))),
    ("Gamma nan", lambda D, T: D.Gamma(float("nan"), 1.)),
    ("Chi2 negative", lambda D, T: D.Chi2(T([-1., 2.]))),
    ("Beta zero", lambda D, T: D.Beta(0., 1.)),
    ("Beta negative", lambda D, T: D.Beta(T([1., 2.]), T([-0.5, 1.]))),
    ("Dirichlet zero", lambda D, T: D.Dirichlet(T([1., 0., 2.]))),
    ("Dirichlet 0-d", lambda D, T: D.Dirichlet(T(1.))),
]


@pytest.mark.parametrize("name,make", BAD_ARGS, ids=[b[0] for b in BAD_ARGS])
def test_bad_arguments_raise_value_error_as_torch(name, make):
    base.test_bad_arguments_raise_value_error_as_torch(name, make)


BAD_VALUES = [
    ("Gamma negative", lambda D, T: D.Gamma(1., 1.).log_prob(T(-0.5))),
    ("Gamma nan", lambda D, T: D.Gamma(T([1., 2.]), 1.).log_prob(T([1., float("nan")]))),
    ("Beta above one", lambda D, T: D.Beta(1., 2.).log_prob(T(1.5))),
    ("Beta not a tensor", lambda D, T: D.Beta(1., 2.).log_prob(0.5)),
    ("Dirichlet off the simplex", lambda D, T: D.Dirichlet(T([1., 2.])).log_prob(T([0.5, 0.7]))),
    ("Dirichlet event shape", lambda D, T: D.Dirichlet(T([1., 2.])).log_prob(T([0.2, 0.3, 0.5]))),
]


@pytest.mark.parametrize("name,make", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_out_of_support_values_raise_value_error_as_torch(name, make):
    base.test_out_of_support_values_raise_value_error_as_torch(name, make)


def test_dirichlet_of_a_list_is_a_type_error():
    with pytest.raises(TypeError, match="must be a Tensor"):
        MD.Dirichlet([1.0, 2.0])


# ----------------------------------------------------------------------------
# sampling through the distributions

SAMPLERS = [
    ("gamma", lambda: MD.Gamma(mf.tensor(pos(2, 3, low=0.05)), mf.tensor(pos(3))), mf.float64),
    ("gamma-numbers", lambda: MD.Gamma(0.5, 2.0), mf.float32),
    ("chi2", lambda: MD.Chi2(mf.tensor(pos(3))), mf.float64),
    ("beta", lambda: MD.Beta(mf.tensor(pos(2, 3, low=0.1)), mf.tensor(pos(3))), mf.float64),
    ("beta-numbers", lambda: MD.Beta(0.5, 0.5), mf.float32),
    ("dirichlet", lambda: MD.Dirichlet(mf.tensor(pos(2, 4, low=0.1))), mf.float64),
]


@pytest.mark.parametrize("name,make,dtype", SAMPLERS, ids=[s[0] for s in SAMPLERS])
def test_sample_shapes_dtypes_and_seed(name, make, dtype):
    base.test_sample_shapes_dtypes_and_seed(name, make, dtype)


MOMENTS = [
    ("gamma", lambda: MD.Gamma(mf.tensor([0.05, 0.7, 3.0, 250.0]), mf.tensor([1.0, 2.0, 0.5, 4.0]))),
    ("gamma-float64", lambda: MD.Gamma(mf.tensor([[0.3], [12.0]], dtype=mf.float64),
                                       mf.tensor([1.5, 0.25], dtype=mf.float64))),
    ("chi2", lambda: MD.Chi2(mf.tensor([1.0, 7.0]))),
    ("beta", lambda: MD.Beta(mf.tensor([0.2, 1.0, 4.0]), mf.tensor([0.5, 1.0, 9.0]))),
    ("dirichlet", lambda: MD.Dirichlet(mf.tensor([[0.1, 0.5, 2.0], [3.0, 3.0, 30.0]], dtype=mf.float64))),
]


@pytest.mark.parametrize("name,make", MOMENTS, ids=[m[0] for m in MOMENTS])
def test_sample_moments(name, make):
    base.test_sample_moments(name, make)


def test_dirichlet_samples_lie_on_the_simplex():
    d = MD.Dirichlet(mf.tensor([[0.05, 0.05, 0.1], [1.0, 2.0, 3.0]], dtype=mf.float64))
    s = d.rsample((1000,))
    assert bool(d.support.check(s).all())
    assert (numpy(s) > 0).all()


def test_rsample_gradients_are_the_samplers():
    # Gamma: x = g / rate with g = _standard_gamma(concentration)
    c = mf.tensor(pos(2, 3, low=0.1, high=20), requires_grad=True)
    r = mf.tensor(pos(3), requires_grad=True)
    mf.manual_seed(13)
    x = MD.Gamma(c, r).rsample((5,))
    assert x.requires_grad
    mf.manual_seed(13)
    g = mf._standard_gamma(c.detach().expand((5, 2, 3)))
    assert_close(x, numpy(g / r.detach()))
    gc, gr = mf.autograd.grad(x.sum(), [c, r])
    assert_close(gc, (numpy(mf._standard_gamma_grad(c.detach().expand((5, 2, 3)), g)) / numpy(r)).sum(0))
    assert_close(gr, (-numpy(x) / numpy(r)).sum((0, 1)))
    # Chi2 through Gamma, Beta through Dirichlet: gradients reach the parameters
    df = mf.tensor(pos(3), requires_grad=True)
    (gdf,) = mf.autograd.grad(MD.Chi2(df).rsample((4,)).sum(), [df])
    assert np.isfinite(numpy(gdf)).all() and (numpy(gdf) > 0).all()
    a, b = mf.tensor(pos(3), requires_grad=True), mf.tensor(pos(3), requires_grad=True)
    ga, gb = mf.autograd.grad(MD.Beta(a, b).rsample((4,)).sum(), [a, b])
    assert (numpy(ga) > 0).all() and (numpy(gb) < 0).all()  # more alpha moves a beta sample up, more beta down


def _mean_within(samples, expected, what):
    samples = np.asarray(samples)
    se = samples.std(0) / math.sqrt(samples.shape[0])
    assert np.all(np.abs(samples.mean(0) - expected) < 5 * se + 1e-12), (what, samples.mean(0), expected, se)


@pytest.mark.parametrize("alpha", [0.02, 0.4, 1.0, 3.5, 60.0])
def test_reparameterised_gradients_are_unbiased(alpha):
    """E[d x / d parameter] = d E[x] / d parameter, per sample."""
    rate = 1.7
    c = mf.full((N,), alpha, dtype=mf.float64, requires_grad=True)
    r = mf.full((N,), rate, dtype=mf.float64, requires_grad=True)
    mf.manual_seed(21)
    MD.Gamma(c, r).rsample().sum().backward()
    _mean_within(numpy(c.grad), 1 / rate, "d gamma / d concentration")  # E[x] = alpha / rate
    _mean_within(numpy(r.grad), -alpha / rate ** 2, "d gamma / d rate")

    a = mf.full((N,), alpha, dtype=mf.float64, requires_grad=True)
    b = mf.full((N,), 2.0, dtype=mf.float64, requires_grad=True)
    MD.Beta(a, b).rsample().sum().backward()  # E[x] = a / (a + b)
    _mean_within(numpy(a.grad), 2.0 / (alpha + 2.0) ** 2, "d beta / d concentration1")
    _mean_within(numpy(b.grad), -alpha / (alpha + 2.0) ** 2, "d beta / d concentration0")

    conc = np.array([alpha, 0.5, 3.0])
    k = mf.tensor(np.tile(conc, (N, 1)), requires_grad=True)
    w = np.array([1.0, -2.0, 0.5])
    (MD.Dirichlet(k).rsample() * mf.tensor(w)).sum().backward()
    total = conc.sum()
    _mean_within(numpy(k.grad), (w - (w * conc).sum() / total) / total, "d dirichlet / d concentration")


# ----------------------------------------------------------------------------
# the sampler op

def _ks_statistic(values, cdf, smallest):
    """sqrt(n) times the Kolmogorov-Smirnov distance between the empirical
    distribution of ``values`` and ``cdf`` raised to ``smallest`` (samples are
    clamped there, which puts the mass below it on that one point: the
    distribution the sampler promises). Ties count once, at their value."""
    points, counts = np.unique(values, return_counts=True)
    n = values.size
    above = np.cumsum(counts) / n  # empirical CDF at each point
    below = above - counts / n  # and just below it
    expected = cdf(points)
    expected_below = np.where(points > smallest, expected, 0.0)
    return math.sqrt(n) * max(np.max(np.abs(above - expected)), np.max(np.abs(below - expected_below)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("alpha", [0.01, 0.3, 1.0, 2.7, 45.0, 1e5])
def test_samples_follow_the_gamma_distribution(alpha, dtype):
    mf.manual_seed(int(alpha * 1000) % 9973)
    x = mf._standard_gamma(mf.full((N,), alpha, dtype=getattr(mf, dtype)))
    assert x.dtype == getattr(mf, dtype)
    values = numpy(x).astype(np.float64)
    smallest = float(mf.finfo(x.dtype).tiny)
    assert (values >= smallest).all() and np.isfinite(values).all()

    def cdf(t):
        return torch.special.gammainc(torch.full(t.shape, alpha, dtype=torch.float64), torch.tensor(t)).numpy()

    # the 0.1% critical value of the asymptotic Kolmogorov distribution is 1.95
    assert _ks_statistic(values, cdf, smallest) < 1.95


def test_tiny_shapes_give_the_smallest_normal_number_as_torch():
    for dtype in ("float32", "float64"):
        a = mf.tensor([0.0, 1e-30, float("inf")], dtype=getattr(mf, dtype))
        ours = mf._standard_gamma(a)
        ref = torch._standard_gamma(torch.tensor(numpy(a)))
        assert numpy(ours).tolist() == ref.numpy().tolist()
    assert math.isnan(float(mf._standard_gamma(mf.tensor([float("nan")]))))  # torch gives the smallest number


def test_each_element_depends_only_on_seed_offset_and_index():
    alphas = RNG.uniform(0.05, 30, size=50000)
    threads = mf.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            mf.set_num_threads(n)
            mf.manual_seed(77)
            results.append(numpy(mf._standard_gamma(mf.tensor(alphas))))
        assert np.array_equal(results[0], results[1])
    finally:
        mf.set_num_threads(threads)
    # a prefix of the same draw, and other shapes elsewhere in the tensor, change nothing at i
    mf.manual_seed(77)
    prefix = numpy(mf._standard_gamma(mf.tensor(alphas[:1000])))
    assert np.array_equal(prefix, results[0][:1000])
    changed = alphas.copy()
    changed[1000:] = 5.0
    mf.manual_seed(77)
    assert np.array_equal(numpy(mf._standard_gamma(mf.tensor(changed)))[:1000], prefix)
    # one counter per element: the next op starts after them
    mf.manual_seed(77)
    mf._standard_gamma(mf.tensor(alphas[:10]))
    after = mf.rand(3)
    mf.manual_seed(77)
    mf.rand(40)  # 40 float uniforms = 10 counters
    assert mf.equal(after, mf.rand(3))


def test_generator_argument_and_layouts():
    g = mf.Generator()
    g.manual_seed(3)
    a = mf._standard_gamma(mf.full((2, 3), 1.5), generator=g)
    g.manual_seed(3)
    b = mf._standard_gamma(mf.full((3, 2), 1.5).t(), generator=g)  # non-contiguous input: row-major elements
    assert mf.equal(a, b.contiguous())
    assert tuple(mf._standard_gamma(mf.ones(0, 4)).shape) == (0, 4)
    assert tuple(mf._standard_gamma(mf.tensor(2.0)).shape) == ()


def test_errors():
    with pytest.raises(ValueError, match="concentration must be >= 0"):
        mf._standard_gamma(mf.tensor([1.0, -0.5]))
    with pytest.raises(TypeError):
        mf._standard_gamma(mf.ones(3, dtype=mf.int64))
    with pytest.raises(TypeError):
        mf._standard_gamma(mf.ones(3, dtype=mf.float16))
    # torch does not differentiate its gradient either
    a = mf.tensor([1.5, 0.5], dtype=mf.float64, requires_grad=True)
    (g,) = mf.autograd.grad(mf._standard_gamma(a).sum(), [a], create_graph=True)
    with pytest.raises(RuntimeError, match="derivative for '_standard_gamma_grad' is not implemented"):
        g.sum().backward()


# ----------------------------------------------------------------------------
# the gradient op: d x / d a of a Gamma(a, 1) sample x

# (a, x): small and large shapes, both tails and the bulk; every branch of the
# evaluation (series, continued fraction, integral) and the switches between them
GRAD_POINTS = [(0.001, 1e-300), (0.001, 2.4e-5), (0.001, 5.1), (0.1, 6e-21), (0.1, 0.0006), (0.1, 1.6), (0.1, 9.5),
               (0.5, 1e-12), (0.5, 0.23), (0.5, 3.3), (0.5, 60.0), (1.0, 1e-6), (1.0, 0.69), (1.0, 13.8),
               (2.5, 0.01), (2.5, 2.2), (2.5, 9.0), (2.5, 70.0), (9.99, 4.1), (9.99, 9.7), (9.99, 32.7), (10.0, 1.3),
               (10.0, 9.67), (10.0, 32.7), (37.0, 25.0), (37.0, 36.7), (37.0, 55.0), (1000.0, 930.0),
               (1000.0, 999.7), (1000.0, 1080.0)]
# large shapes, where mpmath's incomplete gamma converges too slowly: the
# derivative under the integral sign, integrated by mpmath
LARGE_GRAD_POINTS = [(1e5, 99265.8), (1e5, 99999.67), (1e5, 101510.4), (1e9, 1e9 - 1e5), (1e9, 1e9 + 2e4),
                     (1e15, 1e15 + 1e7)]


def _reference_grad(mpmath, a, x):
    mpmath.mp.dps = 40
    a, x = mpmath.mpf(a), mpmath.mpf(x)
    density = mpmath.exp((a - 1) * mpmath.log(x) - x - mpmath.loggamma(a))
    if a < 2000:
        d_cdf = mpmath.diff(lambda s: mpmath.gammainc(s, 0, x, regularized=True), a)
    else:  # d P / d a = integral_0^x (log t - psi(a)) t^(a-1) e^-t / Gamma(a) dt, over the last 60 sds below x
        psi, width = mpmath.digamma(a), mpmath.sqrt(a)
        log_norm = -mpmath.loggamma(a)

        def integrand(t):
            return (mpmath.log(t) - psi) * mpmath.exp((a - 1) * mpmath.log(t) - t + log_norm)

        points = [max(x - k * width, x / 2) for k in (60, 20, 8, 4, 2, 1, 0.5, 0)]
        d_cdf = mpmath.quad(integrand, points)
    return float(-d_cdf / density)


def _ours(a, x, dtype="float64"):
    return float(mf._standard_gamma_grad(mf.tensor([a], dtype=getattr(mf, dtype)),
                                         mf.tensor([x], dtype=getattr(mf, dtype))))


@pytest.mark.parametrize("a,x", GRAD_POINTS + LARGE_GRAD_POINTS)
def test_gradient_matches_mpmath(a, x):
    mpmath = pytest.importorskip("mpmath")
    assert _ours(a, x) == pytest.approx(_reference_grad(mpmath, a, x), rel=1e-10, abs=0)


@pytest.mark.parametrize("a,x", GRAD_POINTS + LARGE_GRAD_POINTS)
def test_gradient_is_close_to_torchs_approximation(a, x):
    """torch's _standard_gamma_grad approximates (2e-2 relative at worst on these points)."""
    a_t, x_t = torch.tensor([a], dtype=torch.float64), torch.tensor([x], dtype=torch.float64)
    ref = float(torch._standard_gamma_grad(a_t, x_t))
    assert _ours(a, x) == pytest.approx(ref, rel=2.5e-2)


def test_gradient_is_minus_the_ratio_of_the_cdf_derivatives():
    """dx/da = -(dF/da) / (dF/dx) with F = torch.special.gammainc, by central differences."""
    a = np.array([0.3, 1.0, 2.5, 7.0, 12.0, 40.0])
    x = a * np.array([0.5, 1.3, 0.8, 1.1, 0.9, 1.05])
    h = 1e-5 * a
    F = lambda s, t: torch.special.gammainc(torch.tensor(s), torch.tensor(t)).numpy()  # noqa: E731
    d_a = (F(a + h, x) - F(a - h, x)) / (2 * h)
    d_x = (F(a, x + h) - F(a, x - h)) / (2 * h)
    ours = numpy(mf._standard_gamma_grad(mf.tensor(a), mf.tensor(x)))
    np.testing.assert_allclose(ours, -d_a / d_x, rtol=1e-6)


def test_gradient_float32_and_edges():
    a, x = 2.5, 2.2
    assert _ours(a, x, "float32") == pytest.approx(_ours(a, x), rel=1e-6)
    assert _ours(2.0, 0.0) == 0.0
    for bad in [(0.0, 1.0), (-1.0, 1.0), (1.0, -1.0), (float("nan"), 1.0), (1.0, float("inf"))]:
        assert math.isnan(_ours(*bad))
    # broadcasting and promotion
    out = mf._standard_gamma_grad(mf.tensor([1.0, 2.0], dtype=mf.float64), mf.tensor([[0.5], [1.5]]))
    assert tuple(out.shape) == (2, 2) and out.dtype == mf.float64
    assert_close(out[1, 0], np.array(_ours(1.0, 1.5)))
