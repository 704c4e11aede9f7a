"""meshflow.nn.Parameter: a tensor that modules register as a parameter."""
from meshflow._C import Tensor, _modules


class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and _modules.is_parameter(obj)


class Parameter(metaclass=_ParameterMeta):
    """Parameter(data=None, requires_grad=True) -> Tensor

    A leaf tensor sharing data's memory, marked as a parameter: assigning it
    to a Module attribute registers it. ``isinstance(t, Parameter)`` is true
    for such tensors (and for every parameter a layer creates).
    """

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            from meshflow import empty
            data = empty(0)
        return _modules.make_parameter(data, requires_grad)
