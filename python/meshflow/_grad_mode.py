"""Grad-mode switches usable as context managers and as decorators."""
import functools

from meshflow import _C


class _GradMode:
    _enabled = None

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc_info):
        _C._set_grad_enabled(self._previous)

    def __call__(self, function):
        @functools.wraps(function)
        def run_in_mode(*args, **kwargs):
            with self.__class__():
                return function(*args, **kwargs)

        return run_in_mode


class no_grad(_GradMode):
    """Ops inside record no autograd graph: `with mf.no_grad():` or `@mf.no_grad()`."""

    _enabled = False


class enable_grad(_GradMode):
    """Turns gradient recording back on inside a no_grad region."""

    _enabled = True


class set_grad_enabled:
    """Sets grad mode now; used in a `with` block, restores the previous mode on exit."""

    def __init__(self, mode):
        self._previous = _C.is_grad_enabled()
        _C._set_grad_enabled(bool(mode))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        _C._set_grad_enabled(self._previous)
