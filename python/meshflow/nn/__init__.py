"""meshflow.nn: neural-network ops (meshflow.nn.functional) and utilities."""
from meshflow.nn import functional, utils

__all__ = ["functional", "utils"]
