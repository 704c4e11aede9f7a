"""The exceptions meshflow raises, one per C++ error class (include/meshflow/error.h).

Every class derives from Error, a RuntimeError, as most of PyTorch's errors
are; TypeError, IndexError, ValueError and NotImplementedError also derive
from the builtin of the same name. `except RuntimeError`, `except TypeError` and
`except meshflow.errors.TypeError` all catch a meshflow.errors.TypeError.
"""
from meshflow._C import _errors

Error = _errors.Error
ShapeError = _errors.ShapeError
TypeError = _errors.TypeError
IndexError = _errors.IndexError
ValueError = _errors.ValueError
NotImplementedError = _errors.NotImplementedError
DistributedError = _errors.DistributedError
OutOfMemoryError = _errors.OutOfMemoryError
CheckpointError = _errors.CheckpointError
LinAlgError = _errors.LinAlgError

__all__ = ["Error", "ShapeError", "TypeError", "IndexError", "ValueError", "NotImplementedError", "DistributedError",
           "OutOfMemoryError", "CheckpointError", "LinAlgError"]
