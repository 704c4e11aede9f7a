"""distributions.MultivariateNormal against torch 1.13 in float64: log_prob, entropy, the three
parameterisations, batch broadcasting, expand, KL, rsample's shape and gradients, moments, and
argument validation."""
import numpy as np
import pytest
import torch

import meshflow as mf
from meshflow import distributions as D

TOL = dict(rtol=1e-9, atol=1e-10)


def spd(rng, *batch, n=3):
    a = rng.standard_normal(batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def both(array, grad=False):
    t = torch.tensor(array, requires_grad=grad)
    m = mf.tensor(array)
    if grad:
        m.requires_grad_(True)
    return t, m


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_log_prob_entropy_and_gradients_match_torch(param):
    rng = np.random.default_rng(0)
    cov = spd(rng, 2)
    matrix = {"covariance_matrix": cov, "precision_matrix": np.linalg.inv(cov),
              "scale_tril": np.linalg.cholesky(cov)}[param]
    t_loc, m_loc = both(rng.standard_normal((2, 3)), grad=True)
    t_mat, m_mat = both(matrix, grad=True)
    mf_dist = D.MultivariateNormal(m_loc, **{param: m_mat})
    torch_dist = torch.distributions.MultivariateNormal(t_loc, **{param: t_mat})
    value = rng.standard_normal((4, 2, 3))
    np.testing.assert_allclose(mf_dist.log_prob(mf.tensor(value)).detach().numpy(),
                               torch_dist.log_prob(torch.tensor(value)).detach().numpy(), **TOL)
    np.testing.assert_allclose(mf_dist.entropy().detach().numpy(), torch_dist.entropy().detach().numpy(), **TOL)
    for name in ("covariance_matrix", "precision_matrix", "scale_tril", "variance", "mean"):
        np.testing.assert_allclose(getattr(mf_dist, name).detach().numpy(),
                                   getattr(torch_dist, name).detach().numpy(), err_msg=name, **TOL)
    (mf_dist.log_prob(mf.tensor(value)).sum() + mf_dist.entropy().sum()).backward()
    (torch_dist.log_prob(torch.tensor(value)).sum() + torch_dist.entropy().sum()).backward()
    np.testing.assert_allclose(m_loc.grad.numpy(), t_loc.grad.numpy(), **TOL)
    np.testing.assert_allclose(m_mat.grad.numpy(), t_mat.grad.numpy(), rtol=1e-7, atol=1e-9)


def test_broadcasting_expand_and_kl():
    rng = np.random.default_rng(1)
    loc_p, loc_q = rng.standard_normal((4, 3)), rng.standard_normal(3)
    cov_p, cov_q = spd(rng), spd(rng, 4)
    p = D.MultivariateNormal(mf.tensor(loc_p), covariance_matrix=mf.tensor(cov_p))
    q = D.MultivariateNormal(mf.tensor(loc_q), scale_tril=mf.tensor(np.linalg.cholesky(cov_q)))
    tp = torch.distributions.MultivariateNormal(torch.tensor(loc_p), covariance_matrix=torch.tensor(cov_p))
    tq = torch.distributions.MultivariateNormal(torch.tensor(loc_q), scale_tril=torch.tensor(np.linalg.cholesky(cov_q)))
    assert tuple(p.batch_shape) == (4,) and tuple(p.event_shape) == (3,) and tuple(q.batch_shape) == (4,)
    np.testing.assert_allclose(D.kl_divergence(p, q).numpy(), torch.distributions.kl_divergence(tp, tq).numpy(),
                               **TOL)
    e = p.expand((2, 4))
    assert tuple(e.batch_shape) == (2, 4)
    np.testing.assert_allclose(e.log_prob(mf.tensor(loc_q)).numpy(),
                               tp.expand((2, 4)).log_prob(torch.tensor(loc_q)).numpy(), **TOL)


def test_rsample_shapes_moments_and_gradient():
    rng = np.random.default_rng(2)
    cov = spd(rng)
    loc = mf.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    dist = D.MultivariateNormal(loc, covariance_matrix=mf.tensor(cov))
    mf.manual_seed(0)
    x = dist.rsample((20000,))
    assert tuple(x.shape) == (20000, 3)
    samples = x.detach().numpy()
    np.testing.assert_allclose(samples.mean(0), [1.0, -2.0, 0.5], atol=0.1)
    np.testing.assert_allclose(np.cov(samples.T), cov, rtol=0.1, atol=0.15)
    x.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [20000.0] * 3)
    assert tuple(dist.sample((2, 5)).shape) == (2, 5, 3)


def test_validation_like_torch():
    with pytest.raises(ValueError, match="Exactly one"):
        D.MultivariateNormal(mf.zeros(2))
    with pytest.raises(ValueError, match="Exactly one"):
        D.MultivariateNormal(mf.zeros(2), covariance_matrix=mf.eye(2), scale_tril=mf.eye(2))
    with pytest.raises(ValueError):
        D.MultivariateNormal(mf.zeros(2), covariance_matrix=mf.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="at least one-dimensional"):
        D.MultivariateNormal(mf.tensor(0.0), covariance_matrix=mf.eye(1))
    assert D.constraints.positive_definite.check(mf.eye(2)).item()
    assert not D.constraints.positive_definite.check(mf.tensor([[1.0, 2.0], [2.0, 1.0]])).item()
    assert D.constraints.positive_semidefinite.check(mf.zeros(2, 2)).item()
