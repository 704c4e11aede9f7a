"""The Dirichlet distribution (torch.distributions.dirichlet)."""
import meshflow as mf
from meshflow.distributions import constraints
from meshflow.distributions.exp_family import ExponentialFamily

__all__ = ["Dirichlet"]


def _sample_dirichlet(concentration):
    """Normalised gamma samples: x_k = g_k / sum_j g_j with g_k ~ Gamma(a_k, 1).
    Differentiable in ``concentration`` through the gamma sampler's gradient
    and the normalisation (torch uses the same draws but differentiates them
    with ``_dirichlet_grad``, the implicit gradient of each marginal)."""
    gammas = mf._standard_gamma(concentration)
    return gammas / gammas.sum(-1, keepdim=True)


class Dirichlet(ExponentialFamily):
    r"""A Dirichlet distribution over the probability simplex, with
    ``concentration`` (alpha) over the last dimension; leading dimensions are
    batch dimensions.

    Args:
        concentration (Tensor): concentration parameters, positive, at least
            one-dimensional.
    """
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if not mf.is_tensor(concentration):  # torch fails with an AttributeError here
            raise TypeError(f"`concentration` must be a Tensor, got {type(concentration).__name__}")
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        batch_shape, event_shape = concentration.shape[:-1], concentration.shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Dirichlet, _instance)
        batch_shape = mf.Size(batch_shape)
        new.concentration = self.concentration.expand(tuple(batch_shape) + tuple(self.event_shape))
        super(Dirichlet, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        return _sample_dirichlet(self.concentration.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return ((mf.log(value) * (self.concentration - 1.0)).sum(-1) +
                mf.lgamma(self.concentration.sum(-1)) -
                mf.lgamma(self.concentration).sum(-1))

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        concentrationm1 = (self.concentration - 1).clamp(min=0.)
        mode = concentrationm1 / concentrationm1.sum(-1, True)
        # where every concentration is below 1 the density peaks at the vertex of the largest one
        mask = (self.concentration < 1).all(-1, keepdim=True)
        vertex = mf.nn.functional.one_hot(mode.argmax(-1), concentrationm1.shape[-1]).to(mode.dtype)
        return mf.where(mask, vertex, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        k = self.concentration.size(-1)
        a0 = self.concentration.sum(-1)
        return (mf.lgamma(self.concentration).sum(-1) - mf.lgamma(a0) -
                (k - a0) * mf.digamma(a0) -
                ((self.concentration - 1.0) * mf.digamma(self.concentration)).sum(-1))

    @property
    def _natural_params(self):
        return (self.concentration, )

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - mf.lgamma(x.sum(-1))
