"""nn.ParameterList and nn.ParameterDict: modules that hold parameters
under their index ("0", "1", ...) or key, as torch.nn's (1.13). They are
Module subclasses whose entries are ordinary registered parameters, so
parameters(), state_dict(), to() and optimizers see them."""
from meshflow._C import Tensor, _modules
from meshflow.nn.parameter import Parameter

Module = _modules.Module


def _as_parameter(value):
    """A tensor that is not a Parameter becomes one (torch wraps it)."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _describe(p):
    size = "x".join(str(s) for s in p.shape)
    return f"Parameter containing: [meshflow.{str(p.dtype).split('.')[-1]} of size {size}]"


class ParameterList(Module):
    """ParameterList(values=None): a list of parameters, indexable like a list."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def _key(self, idx):
        if not isinstance(idx, int):
            raise TypeError(f"ParameterList indices must be integers or slices, not {type(idx).__name__}")
        if not -self._size <= idx < self._size:
            raise IndexError(f"index {idx} is out of range")
        return str(idx % self._size)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(self._size)[idx]])
        return getattr(self, self._key(idx))

    def __setitem__(self, idx, value):
        setattr(self, self._key(idx), _as_parameter(value))

    def __len__(self):
        return self._size

    def __iter__(self):
        return iter(self[i] for i in range(self._size))

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, value):
        setattr(self, str(self._size), _as_parameter(value))
        self._size += 1
        return self

    def extend(self, values):
        if isinstance(values, Tensor) or not hasattr(values, "__iter__"):
            raise TypeError("ParameterList.extend should be called with an iterable, but got " +
                            type(values).__name__)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self):
        return "\n".join(f"({i}): " + (_describe(p) if isinstance(p, Tensor) else f"Object of type: {type(p).__name__}")
                         for i, p in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """ParameterDict(parameters=None): an ordered dict of parameters by string key."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    def _check(self, key):
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys must be strings, got {type(key).__name__}")
        return key

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key, value):
        self._keys[self._check(key)] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, key)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(list(self._keys))

    def __contains__(self, key):
        return key in self._keys

    def keys(self):
        return list(self._keys)

    def values(self):
        return [self[k] for k in self._keys]

    def items(self):
        return [(k, self[k]) for k in self._keys]

    def get(self, key, default=None):
        return self[key] if key in self else default

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        key = list(self._keys)[-1]
        return key, self.pop(key)

    def clear(self):
        for key in list(self._keys):
            del self[key]

    def copy(self):
        return ParameterDict(self.items())

    def update(self, parameters):
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for entry in items:
            if not hasattr(entry, "__len__") or len(entry) != 2:
                raise ValueError("ParameterDict.update: expected a mapping or an iterable of (key, value) pairs")
            self[entry[0]] = entry[1]

    def extra_repr(self):
        return "\n".join(f"({k}): " + (_describe(p) if isinstance(p, Tensor) else f"Object of type: {type(p).__name__}")
                         for k, p in self.items())

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterDict should not be called.")
