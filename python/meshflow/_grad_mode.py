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


class inference_mode(_GradMode):
    """torch.inference_mode: no autograd graph inside (mode=False: leaves
    grad mode as it is). meshflow has no separate inference tensors, so
    tensors made inside may be used with autograd later, as no_grad's."""

    def __init__(self, mode=True):
        self._mode = bool(mode)
        self._enabled = False if self._mode else None

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        if self._mode:
            _C._set_grad_enabled(False)
        return self

    def __call__(self, function):
        @functools.wraps(function)
        def run_in_mode(*args, **kwargs):
            with inference_mode(self._mode):
                return function(*args, **kwargs)

        return run_in_mode


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
