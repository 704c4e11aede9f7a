"""meshflow.utils: data loading (meshflow.utils.data) and activation
checkpointing (meshflow.utils.checkpoint), as torch.utils."""
from meshflow.utils import checkpoint, data  # noqa: F401

__all__ = ["checkpoint", "data"]
