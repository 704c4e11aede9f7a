"""meshflow.cpu: CPU-specific entry points (as torch.cpu)."""
from meshflow.cpu import amp

__all__ = ["amp"]
