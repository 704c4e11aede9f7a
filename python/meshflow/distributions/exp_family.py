"""ExponentialFamily (torch.distributions.exp_family)."""
import meshflow as mf
from meshflow.distributions.distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    r"""Base class of distributions whose density has the form

    .. math:: p_F(x; \theta) = \exp(\langle t(x), \theta\rangle - F(\theta) + k(x))

    with natural parameters :math:`\theta`, sufficient statistic :math:`t(x)`,
    log normaliser :math:`F` and carrier measure :math:`k`. The default
    :meth:`entropy` (and the ExponentialFamily KL divergence) use the Bregman
    divergence of the log normaliser, differentiated with meshflow.autograd.
    """

    @property
    def _natural_params(self):
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError

    def entropy(self):
        """Entropy from the Bregman divergence of the log normaliser."""
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        gradients = mf.autograd.grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for np, g in zip(nparams, gradients):
            result = result - (np * g).reshape(tuple(self._batch_shape) + (-1,)).sum(-1)
        return result
