"""The categorical distribution (torch.distributions.categorical)."""
import meshflow as mf
from meshflow.distributions import constraints
from meshflow.distributions.distribution import Distribution
from meshflow.distributions.utils import _broadcast_tensors, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Categorical"]

nan = float("nan")


def _inverse_cdf_sample(probs, sample_shape):
    """Class indices drawn with probabilities ``probs`` (last dim, any batch
    shape), ``sample_shape + probs.shape[:-1]`` of them, from one uniform draw
    ``u`` in [0, 1) each: the index is the number of cumulative probabilities
    (in float64, scaled by their total so that unnormalised rows work too) at
    or below ``u * total``. A zero-probability class spans an empty interval and
    is never drawn; the result is capped at the last class of positive
    probability against rounding at the top."""
    num_events = probs.size(-1)
    cdf = probs.double().cumsum(-1)
    total = cdf.narrow(-1, num_events - 1, 1)
    u = mf.rand(tuple(sample_shape) + tuple(probs.shape[:-1]) + (1,), dtype=mf.float64, device=probs.device)
    index = (cdf <= u * total).sum(-1).long()
    classes = mf.arange(num_events, dtype=mf.long, device=probs.device)
    last_positive = ((probs > 0).long() * classes).amax(-1)
    return mf.minimum(index, last_positive)


class Categorical(Distribution):
    r"""A categorical distribution over ``{0, ..., K-1}`` parameterised by
    ``probs`` or ``logits`` (not both), with ``K = probs.size(-1)``; leading
    dimensions are batch dimensions.

    ``probs`` must be non-negative, finite, with a non-zero sum; it is
    normalised to sum to 1 over the last dimension. ``logits`` are unnormalised
    log-probabilities and are normalised likewise.

    Sampling draws one uniform number per sample and inverts the cumulative
    distribution (meshflow has no ``multinomial``); it consumes meshflow's
    generator, so ``meshflow.manual_seed`` makes it reproducible.

    Args:
        probs (Tensor): event probabilities.
        logits (Tensor): event log-probabilities (unnormalised).
    """
    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch_shape = self._param.size()[:-1] if self._param.ndimension() > 1 else mf.Size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Categorical, _instance)
        batch_shape = mf.Size(batch_shape)
        param_shape = mf.Size(tuple(batch_shape) + (self._num_events,))
        if "probs" in self.__dict__:
            new.probs = self.probs.expand(param_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = self.logits.expand(param_shape)
            new._param = new.logits
        new._num_events = self._num_events
        super(Categorical, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return self._param.size()

    @property
    def mean(self):
        return mf.full(tuple(self._extended_shape()), nan, dtype=self.probs.dtype, device=self.probs.device)

    @property
    def mode(self):
        return self.probs.argmax(dim=-1)

    @property
    def variance(self):
        return mf.full(tuple(self._extended_shape()), nan, dtype=self.probs.dtype, device=self.probs.device)

    def sample(self, sample_shape=mf.Size()):
        if not isinstance(sample_shape, mf.Size):
            sample_shape = mf.Size(sample_shape)
        with mf.no_grad():
            samples = _inverse_cdf_sample(self.probs.detach(), sample_shape)
        return samples.reshape(tuple(self._extended_shape(sample_shape)))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = _broadcast_tensors(value, self.logits)
        value = value[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = mf.finfo(self.logits.dtype).min
        logits = mf.clamp(self.logits, min=min_real)
        p_log_p = logits * self.probs
        return -p_log_p.sum(-1)

    def enumerate_support(self, expand=True):
        num_events = self._num_events
        values = mf.arange(num_events, dtype=mf.long, device=self._param.device)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values
