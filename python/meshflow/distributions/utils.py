"""Helpers shared by the distributions (torch.distributions.utils)."""
from functools import update_wrapper
from numbers import Number

import meshflow as mf

__all__ = ["broadcast_all", "clamp_probs", "euler_constant", "lazy_property", "logits_to_probs",
           "probs_to_logits"]

euler_constant = 0.57721566490153286060  # Euler-Mascheroni constant


def _broadcast_tensors(*tensors):
    """torch.broadcast_tensors: every tensor expanded (a view) to the common shape."""
    shape = mf.broadcast_shapes(*[tuple(t.shape) for t in tensors])
    return tuple(t.expand(shape) for t in tensors)


def broadcast_all(*values):
    r"""Broadcasts numbers and tensors against each other as torch does.

    Tensors are broadcast to their common shape; Python numbers become tensors
    with the dtype and device of the first tensor among ``values`` (the default
    dtype if there is none) and are broadcast with them.

    Raises:
        ValueError: if a value is neither a ``numbers.Number`` nor a tensor.
    """
    if not all(mf.is_tensor(v) or isinstance(v, Number) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, "
                         "meshflow.Tensor or objects implementing __torch_function__.")
    if not all(mf.is_tensor(v) for v in values):
        options = dict(dtype=mf.get_default_dtype())
        for value in values:
            if mf.is_tensor(value):
                options = dict(dtype=value.dtype, device=value.device)
                break
        values = [v if mf.is_tensor(v) else mf.tensor(v, **options) for v in values]
    return _broadcast_tensors(*values)


def _standard_normal(shape, dtype, device):
    return mf.randn(tuple(shape), dtype=dtype, device=device)


def _sum_rightmost(value, dim):
    r"""Sums out the ``dim`` rightmost dimensions of ``value``."""
    if dim == 0:
        return value
    required_shape = tuple(value.shape[:-dim]) + (-1,)
    return value.reshape(required_shape).sum(-1)


def logits_to_probs(logits, is_binary=False):
    r"""Logits to probabilities: the sigmoid of log-odds in the binary case,
    a softmax over the last dimension otherwise."""
    if is_binary:
        return mf.sigmoid(logits)
    return mf.nn.functional.softmax(logits, dim=-1)


def clamp_probs(probs):
    eps = mf.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    r"""Probabilities to logits: log-odds in the binary case, log-probabilities
    otherwise (probabilities clamped to [eps, 1 - eps] first)."""
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return mf.log(ps_clamped) - mf.log1p(-ps_clamped)
    return mf.log(ps_clamped)


class lazy_property:
    r"""A non-data descriptor that computes the wrapped method on first access
    (with gradients enabled) and then stores the result as an instance
    attribute."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return _lazy_property_and_property(self.wrapped)
        with mf.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class _lazy_property_and_property(lazy_property, property):
    """Looks like a property to documentation tools and like a lazy_property to
    the argument validation of Distribution."""

    def __init__(self, wrapped):
        property.__init__(self, wrapped)
