"""meshflow.utils: data loading (meshflow.utils.data), as torch.utils."""
from meshflow.utils import data  # noqa: F401

__all__ = ["data"]
