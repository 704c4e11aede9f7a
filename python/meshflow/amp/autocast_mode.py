"""The autocast region: a context manager and decorator over the C++ state."""
import functools

from meshflow import _C

_LOW_PRECISION = (_C.bfloat16, _C.float16)


class autocast:
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=True).

    Inside the region, ops on `device_type` tensors run in the precision
    their autocast policy gives: matmul, linear, conv2d and attention in
    `dtype` (default bfloat16 on cpu), losses and prod in float32, the rest in
    their inputs' dtype. `enabled=False` switches autocast off inside an
    enclosing region. Casts of parameters are cached until the outermost
    region ends unless cache_enabled is False."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=True):
        if not isinstance(device_type, str):
            raise TypeError(f"autocast: device_type must be a str ('cpu' or 'cuda'), got {type(device_type).__name__}")
        # Checks the device type (ValueError for an unknown one).
        default = _C._autocast_default_dtype(device_type)
        self.device = device_type
        self.fast_dtype = default if dtype is None else dtype
        if self.fast_dtype not in _LOW_PRECISION:
            raise TypeError(f"autocast: dtype must be meshflow.bfloat16 or meshflow.float16, got {self.fast_dtype!r}")
        self._enabled = bool(enabled)
        self._cache_enabled = bool(cache_enabled)

    def __enter__(self):
        self._prev = (_C.is_autocast_enabled(self.device), _C.get_autocast_dtype(self.device),
                      _C.is_autocast_cache_enabled())
        _C.set_autocast_dtype(self.device, self.fast_dtype)
        _C.set_autocast_enabled(self.device, self._enabled)
        _C.set_autocast_cache_enabled(self._cache_enabled)
        _C.autocast_increment_nesting()
        return self

    def __exit__(self, *exc_info):
        if _C.autocast_decrement_nesting() == 0:
            _C.clear_autocast_cache()
        enabled, dtype, cache_enabled = self._prev
        _C.set_autocast_enabled(self.device, enabled)
        _C.set_autocast_dtype(self.device, dtype)
        _C.set_autocast_cache_enabled(cache_enabled)
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def run_autocast(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return function(*args, **kwargs)

        return run_autocast
