"""The gamma distribution (torch.distributions.gamma)."""
from numbers import Number

import meshflow as mf
from meshflow.distributions import constraints
from meshflow.distributions.exp_family import ExponentialFamily
from meshflow.distributions.utils import broadcast_all

__all__ = ["Gamma"]


def _standard_gamma(concentration):
    return mf._standard_gamma(concentration)


def _as_tensor(value, like):
    """torch.as_tensor(value, dtype=like.dtype): numbers and tensors of
    another dtype become tensors of ``like``'s dtype."""
    if mf.is_tensor(value):
        return value if value.dtype == like.dtype else value.to(like.dtype)
    return mf.tensor(value, dtype=like.dtype, device=like.device)


class Gamma(ExponentialFamily):
    r"""A gamma distribution with shape ``concentration`` and ``rate``
    (inverse scale).

    Samples are Marsaglia and Tsang's (``meshflow._standard_gamma``) divided
    by ``rate``; ``rsample`` is differentiable in both parameters, through
    the implicit reparameterisation gradient of the sampler.

    Args:
        concentration (float or Tensor): shape parameter (alpha), positive.
        rate (float or Tensor): rate = 1 / scale (beta), positive.
    """
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        if isinstance(concentration, Number) and isinstance(rate, Number):
            batch_shape = mf.Size()
        else:
            batch_shape = self.concentration.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gamma, _instance)
        batch_shape = mf.Size(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.rate = self.rate.expand(batch_shape)
        super(Gamma, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=mf.Size()):
        shape = tuple(self._extended_shape(sample_shape))
        value = _standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)
        value.detach().clamp_(min=mf.finfo(value.dtype).tiny)  # do not record in autograd graph
        return value

    def log_prob(self, value):
        value = _as_tensor(value, self.rate)
        if self._validate_args:
            self._validate_sample(value)
        return (mf.xlogy(self.concentration, self.rate) + mf.xlogy(self.concentration - 1, value) -
                self.rate * value - mf.lgamma(self.concentration))

    def entropy(self):
        return (self.concentration - mf.log(self.rate) + mf.lgamma(self.concentration) +
                (1.0 - self.concentration) * mf.digamma(self.concentration))

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return mf.lgamma(x + 1) + (x + 1) * mf.log(-y.reciprocal())
