"""The Distribution base class (torch.distributions.distribution)."""
import warnings

import meshflow as mf
from meshflow.distributions import constraints
from meshflow.distributions.utils import lazy_property

__all__ = ["Distribution"]


class Distribution:
    r"""Abstract base class for probability distributions.

    Argument validation is on by default (off under ``python -O``), as in
    torch; :meth:`set_default_validate_args` changes the default and the
    ``validate_args`` argument of each constructor overrides it.
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value):
        """Sets whether validation is enabled (True) or disabled (False)."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=mf.Size(), event_shape=mf.Size(), validate_args=None):
        self._batch_shape = mf.Size(batch_shape)
        self._event_shape = mf.Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. "
                              "Please set `arg_constraints = {}` or initialize the distribution "
                              "with `validate_args=False` to turn off validation.")
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue  # cannot be checked
                if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                    continue  # lazily computed from another argument
                value = getattr(self, param)
                valid = constraint.check(value)
                if not valid.all():
                    raise ValueError(
                        f"Expected parameter {param} "
                        f"({type(value).__name__} of shape {tuple(value.shape)}) "
                        f"of distribution {repr(self)} "
                        f"to satisfy the constraint {repr(constraint)}, "
                        f"but found invalid values:\n{value}"
                    )
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A new distribution with the batch dimensions expanded to
        ``batch_shape`` (parameters are expanded views; no validation is
        repeated)."""
        raise NotImplementedError

    @property
    def batch_shape(self):
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self):
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def arg_constraints(self):
        """A dict from argument names to :class:`Constraint` objects."""
        raise NotImplementedError

    @property
    def support(self):
        """The :class:`Constraint` of the distribution's support."""
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=mf.Size()):
        """A sample of shape ``sample_shape + batch_shape + event_shape``
        (no gradient)."""
        with mf.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=mf.Size()):
        """A reparameterised sample: gradients flow to the parameters."""
        raise NotImplementedError

    def sample_n(self, n):
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning)
        return self.sample(mf.Size((n,)))

    def log_prob(self, value):
        """The log of the density / mass function at ``value``."""
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        """All values of a discrete distribution's support along dimension 0:
        shape ``(cardinality,) + batch_shape + event_shape`` (batch dims of
        size 1 with ``expand=False``)."""
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        return mf.exp(self.entropy())

    def _extended_shape(self, sample_shape=mf.Size()):
        """``sample_shape + batch_shape + event_shape``."""
        return mf.Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    def _validate_sample(self, value):
        """Checks that ``value`` is a tensor whose rightmost dims match the
        event shape, that broadcasts with ``batch_shape + event_shape`` and that
        lies in the support; raises ValueError otherwise."""
        if not mf.is_tensor(value):
            raise ValueError("The value argument to log_prob must be a Tensor")

        event_dim_start = len(value.size()) - len(self._event_shape)
        if tuple(value.size()[event_dim_start:]) != tuple(self._event_shape):
            raise ValueError("The right-most size of value must match event_shape: {} vs {}.".format(
                value.size(), self._event_shape))

        actual_shape = value.size()
        expected_shape = tuple(self._batch_shape) + tuple(self._event_shape)
        for i, j in zip(reversed(actual_shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError("Value is not broadcastable with batch_shape+event_shape: {} vs {}.".format(
                    actual_shape, mf.Size(expected_shape)))
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable "
                          "sample validation. Please initialize the distribution with "
                          "`validate_args=False` to turn off validation.")
            return
        assert support is not None
        valid = support.check(value)
        if not valid.all():
            raise ValueError(
                "Expected value argument "
                f"({type(value).__name__} of shape {tuple(value.shape)}) "
                f"to be within the support ({repr(support)}) "
                f"of the distribution {repr(self)}, "
                f"but found invalid values:\n{value}"
            )

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError("Subclass {} of {} that defines a custom __init__ method "
                                      "must also define a custom .expand() method.".format(
                                          self.__class__.__name__, cls.__name__))
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self):
        param_names = [k for k, _ in self.arg_constraints.items() if k in self.__dict__]
        args_string = ", ".join(["{}: {}".format(p, self.__dict__[p] if self.__dict__[p].numel() == 1
                                                 else self.__dict__[p].size()) for p in param_names])
        return self.__class__.__name__ + "(" + args_string + ")"
