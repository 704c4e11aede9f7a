"""meshflow.cpu.amp: torch.cpu.amp's autocast for the CPU device type."""
from meshflow import _C
from meshflow.amp.autocast_mode import autocast as _autocast


class autocast(_autocast):
    """torch.cpu.amp.autocast(enabled=True, dtype=meshflow.bfloat16, cache_enabled=True)."""

    def __init__(self, enabled=True, dtype=_C.bfloat16, cache_enabled=True):
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def __call__(self, function):
        return _autocast("cpu", self.fast_dtype, self._enabled, self._cache_enabled)(function)


__all__ = ["autocast"]
