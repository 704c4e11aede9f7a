"""meshflow.nn: neural-network ops (see meshflow.nn.functional)."""
from meshflow.nn import functional

__all__ = ["functional"]
