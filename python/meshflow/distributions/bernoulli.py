"""The Bernoulli distribution (torch.distributions.bernoulli)."""
from numbers import Number

import meshflow as mf
from meshflow.distributions import constraints
from meshflow.distributions.exp_family import ExponentialFamily
from meshflow.distributions.utils import broadcast_all, lazy_property, logits_to_probs, probs_to_logits
from meshflow.nn.functional import binary_cross_entropy_with_logits

__all__ = ["Bernoulli"]

nan = float("nan")


class Bernoulli(ExponentialFamily):
    r"""A Bernoulli distribution parameterised by ``probs`` or ``logits`` (not
    both). Samples are 0 or 1 (in the parameter's dtype), 1 with probability
    ``probs``.

    Args:
        probs (Number, Tensor): the probability of sampling ``1``.
        logits (Number, Tensor): the log-odds of sampling ``1``.
    """
    arg_constraints = {"probs": constraints.unit_interval,
                       "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            is_scalar = isinstance(probs, Number)
            self.probs, = broadcast_all(probs)
        else:
            is_scalar = isinstance(logits, Number)
            self.logits, = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        if is_scalar:
            batch_shape = mf.Size()
        else:
            batch_shape = self._param.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Bernoulli, _instance)
        batch_shape = mf.Size(batch_shape)
        if "probs" in self.__dict__:
            new.probs = self.probs.expand(batch_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = self.logits.expand(batch_shape)
            new._param = new.logits
        super(Bernoulli, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs)
        return mf.where(self.probs == 0.5, mf.full_like(mode, nan), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.size()

    def sample(self, sample_shape=mf.Size()):
        shape = self._extended_shape(sample_shape)
        with mf.no_grad():
            return mf.bernoulli(self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        if logits.dtype != value.dtype:  # torch's type promotion of the loss
            dtype = mf.promote_types(logits.dtype, value.dtype)
            logits, value = logits.to(dtype), value.to(dtype)
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        values = mf.arange(2, dtype=self._param.dtype, device=self._param.device)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values

    @property
    def _natural_params(self):
        return (mf.log(self.probs / (1 - self.probs)), )

    def _log_normalizer(self, x):
        return mf.log(1 + mf.exp(x))
