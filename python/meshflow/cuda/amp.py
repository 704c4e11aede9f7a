"""meshflow.cuda.amp: torch.cuda.amp's names. Without a CUDA device only a
disabled GradScaler (enabled=False, a no-op as in PyTorch) can be made."""
import meshflow.amp as _amp

__all__ = ["GradScaler"]


class GradScaler(_amp.GradScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        if enabled:
            raise RuntimeError("meshflow.cuda.amp.GradScaler: no CUDA device is available in this build; use "
                               "meshflow.amp.GradScaler (or enabled=False)")
        super().__init__(init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=False)
