"""meshflow.cuda: the device guards of torch.cuda. This build runs on the
CPU only, so no CUDA device is available; code that checks
`mf.cuda.is_available()` takes its CPU path."""
from meshflow.cuda import amp

__all__ = ["amp", "is_available", "device_count"]


def is_available():
    return False


def device_count():
    return 0
