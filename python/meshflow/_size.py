"""meshflow.Size: the type of Tensor.shape, a tuple of ints like torch.Size."""
import math


class Size(tuple):
    """A tensor shape: a tuple of ints with numel()."""

    __slots__ = ()

    def numel(self):
        return math.prod(self)

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return Size(item) if isinstance(index, slice) else item

    def __repr__(self):
        return f"meshflow.Size({list(self)})"
