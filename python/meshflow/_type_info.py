"""finfo and iinfo: the numerical limits of meshflow's dtypes, as torch.finfo / torch.iinfo."""
import numpy as _np

from meshflow import _C

# bits, eps, max, tiny (smallest normal), resolution (10**-digits)
_BFLOAT16 = (16, 0.0078125, 3.3895313892515355e38, 1.1754943508222875e-38, 0.01)


class finfo:
    """finfo(dtype=None): bits, eps, max, min, tiny (smallest_normal), resolution of a floating dtype
    (default: float32)."""

    def __init__(self, type=None):
        dtype = _C.float32 if type is None else type
        if not isinstance(dtype, _C.dtype) or not dtype.is_floating_point:
            raise TypeError(f"finfo: expected a floating-point meshflow.dtype, got {dtype!r}")
        name = str(dtype).replace("meshflow.", "")
        if name == "bfloat16":
            self.bits, self.eps, self.max, self.tiny, self.resolution = _BFLOAT16
        else:
            info = _np.finfo(name)
            self.bits, self.eps, self.max = int(info.bits), float(info.eps), float(info.max)
            self.tiny, self.resolution = float(info.tiny), 10.0 ** -int(info.precision)
        self.min = -self.max
        self.smallest_normal = self.tiny
        self.dtype = name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.tiny:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """iinfo(dtype): bits, min and max of an integer dtype."""

    def __init__(self, type):
        if not isinstance(type, _C.dtype) or type.is_floating_point or type == _C.bool:
            raise TypeError(f"iinfo: expected an integer meshflow.dtype, got {type!r}")
        name = str(type).replace("meshflow.", "")
        info = _np.iinfo(name)
        self.bits, self.min, self.max, self.dtype = int(info.bits), int(info.min), int(info.max), name

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
