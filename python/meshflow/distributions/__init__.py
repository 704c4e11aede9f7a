r"""Parameterizable probability distributions and sampling functions, after
``torch.distributions`` (PyTorch 1.13): the same class names, constructor
signatures, properties, argument validation and KL registry, computed with
meshflow tensor ops so gradients flow through ``log_prob``, ``rsample``,
``entropy`` and ``kl_divergence``. Sampling draws from meshflow's generator
(``meshflow.manual_seed``).

See docs/distributions.md for what exists and what differs from torch.
"""
from meshflow.distributions import constraints  # noqa: F401  (torch.distributions.constraints)
from meshflow.distributions.bernoulli import Bernoulli
from meshflow.distributions.beta import Beta
from meshflow.distributions.categorical import Categorical
from meshflow.distributions.chi2 import Chi2
from meshflow.distributions.dirichlet import Dirichlet
from meshflow.distributions.distribution import Distribution
from meshflow.distributions.exp_family import ExponentialFamily
from meshflow.distributions.exponential import Exponential
from meshflow.distributions.gamma import Gamma
from meshflow.distributions.geometric import Geometric
from meshflow.distributions.independent import Independent
from meshflow.distributions.kl import kl_divergence, register_kl
from meshflow.distributions.laplace import Laplace
from meshflow.distributions.multivariate_normal import MultivariateNormal
from meshflow.distributions.normal import Normal
from meshflow.distributions.one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from meshflow.distributions.uniform import Uniform

__all__ = [
    "Bernoulli",
    "Beta",
    "Categorical",
    "Chi2",
    "Dirichlet",
    "Distribution",
    "Exponential",
    "ExponentialFamily",
    "Gamma",
    "Geometric",
    "Independent",
    "Laplace",
    "MultivariateNormal",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Uniform",
    "kl_divergence",
    "register_kl",
]
