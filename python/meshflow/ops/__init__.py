"""meshflow.ops: the op registry as data."""
from meshflow import _C

__all__ = ["coverage"]


def coverage():
    """A dict mapping each device type ("cpu", "cuda") to the sorted names of
    the registered ops that have no kernel there (OpRegistry::validate; view
    ops run on every device). A device type whose backend is not built lists
    the ops it would still need."""
    return _C._op_coverage()
