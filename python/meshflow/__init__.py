"""meshflow: a deep-learning framework with a C++ core.

The package reads like PyTorch (`import meshflow as mf`): tensors, dtypes,
ops as functions and Tensor methods, autograd and nn.functional. Every op
runs in C++ (meshflow._C); this package only adds PyTorch's argument forms.
"""
import os as _os

# Note [One thread pool] (CMakeLists.txt): idle OpenMP workers sleep rather
# than spin unless the user chose a policy. libgomp reads this once, when it
# is first loaded (here, unless another library loaded it earlier).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from meshflow import _C  # noqa: E402
from meshflow._C import *  # noqa: F401,F403  (ops, Tensor, dtype, device, ...)
from meshflow._C import Tensor, dtype, device
from meshflow._C import _standard_gamma, _standard_gamma_grad  # noqa: F401  (torch's private ops)
from meshflow._grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled
from meshflow._type_info import finfo, iinfo
from meshflow._size import Size
from meshflow.return_types import ValuesIndices
from meshflow import autograd, datasets, errors, io, linalg, nn, optim, return_types, testing, utils  # noqa: F401
from meshflow import distributed, env  # noqa: F401
from meshflow import amp, backends, cpu, cuda, distributions, one_embedding, ops, profiler  # noqa: F401
from meshflow.amp import autocast  # noqa: F401
from meshflow.errors import OutOfMemoryError  # noqa: F401  (torch.OutOfMemoryError)
from meshflow.io import load, save  # noqa: F401
from meshflow.nn.functional import (  # noqa: F401  (also torch.<name>)
    adaptive_avg_pool1d, avg_pool1d, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d,
    group_norm, layer_norm, log_softmax, max_pool1d, max_pool2d, max_pool3d, pixel_shuffle, pixel_unshuffle, softmax,
)
# torch.adaptive_max_pool1d(input, output_size) returns (values, indices).
from meshflow.nn.functional import adaptive_max_pool1d_with_indices as adaptive_max_pool1d  # noqa: F401,E402

_C._set_size_type(Size)
_C._set_values_indices_type(ValuesIndices)
for _type in (Tensor, dtype, device, _C.Generator):
    _type.__module__ = "meshflow"
del _type

# PyTorch's dtype aliases.
float = float32
double = float64
half = float16
long = int64
int = int32
short = int16


def is_tensor(obj):
    """True for meshflow tensors."""
    return isinstance(obj, Tensor)


def is_floating_point(input):
    return input.is_floating_point()


def numel(input):
    return input.numel()


def slogdet(input):
    """(sign, logabsdet) of det(input), as torch.slogdet (torch.return_types.slogdet)."""
    return return_types.slogdet(*_C._linalg.slogdet(input))


def get_rng_state():
    """The default generator's state as a uint8 tensor (its Philox seed and
    offset, 16 bytes little-endian), as torch.get_rng_state."""
    import struct
    seed, offset = _C.default_generator.get_state()
    return tensor(list(struct.pack("<QQ", seed, offset)), dtype=uint8)


def seed():
    """Seeds the default generator from the operating system's entropy and
    returns that seed (a non-negative 63-bit int), as torch.seed."""
    import builtins
    import os
    value = builtins.int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)  # int is meshflow.int here
    _C.manual_seed(value)
    return value


def set_rng_state(new_state):
    """Restores a state from get_rng_state()."""
    import struct
    if not isinstance(new_state, Tensor) or new_state.dtype != uint8 or tuple(new_state.shape) != (16,):
        got = (f"{new_state.dtype} tensor of shape {tuple(new_state.shape)}" if isinstance(new_state, Tensor)
               else type(new_state).__name__)
        raise TypeError(f"set_rng_state: expected a uint8 tensor of 16 bytes (from get_rng_state()), got {got}")
    _C.default_generator.set_state(struct.unpack("<QQ", bytes(new_state.tolist())))


def _format(self, spec):
    if self.dim() == 0:
        return self.item().__format__(spec)
    if spec:  # as torch: only a 0-d tensor takes a format spec
        raise TypeError(f"unsupported format string passed to Tensor.__format__: {spec!r} (format a 0-d tensor, "
                        "or t.item())")
    return object.__format__(self, spec)


def _new_factory(factory):
    def new(self, size, *, dtype=None, requires_grad=False):
        return factory(size, dtype=self.dtype if dtype is None else dtype, requires_grad=requires_grad)

    new.__name__ = "new_" + factory.__name__
    new.__qualname__ = "Tensor." + new.__name__
    return new


def _new_full(self, size, fill_value, *, dtype=None, requires_grad=False):
    return full(size, fill_value, dtype=self.dtype if dtype is None else dtype, requires_grad=requires_grad)


def _new_tensor(self, data, *, dtype=None, requires_grad=False):
    return tensor(data, dtype=self.dtype if dtype is None else dtype, requires_grad=requires_grad)


def _deepcopy(self, memo):
    if self.requires_grad and not self.is_leaf:
        raise RuntimeError("deepcopy: only tensors created by the user (graph leaves) can be deep-copied")
    copy = self.detach().clone()
    if _C._modules.is_parameter(self):  # a Parameter's copy has no .grad, as torch's
        copy = _C._modules.make_parameter(copy, self.requires_grad)
        memo[id(self)] = copy
        return copy
    if self.requires_grad:
        copy.requires_grad_()
    memo[id(self)] = copy
    if self.grad is not None:
        import copy as _copy
        copy.grad = _copy.deepcopy(self.grad, memo)
    return copy


def _global_factory(factory):
    """factory(..., placement=p, sbp=s): the same values as the local
    factory, laid out over p by s (values do not depend on s or on the
    world size: every rank makes the full tensor and keeps its part)."""
    import functools

    @functools.wraps(factory)
    def make(*args, placement=None, sbp=None, **kwargs):
        if placement is None and sbp is None:
            return factory(*args, **kwargs)
        if placement is None or sbp is None:
            raise ValueError(f"{factory.__name__}: a global tensor needs both placement= and sbp=")
        if kwargs.get("requires_grad"):
            raise RuntimeError(f"{factory.__name__}: autograd of global tensors is not built yet")
        return _C._global_from_full(factory(*args, **kwargs), placement, sbp)

    return make


for _name in ("empty", "zeros", "ones", "full", "rand", "randn", "randint", "arange", "tensor"):
    globals()[_name] = _global_factory(getattr(_C, _name))
del _name

Tensor.__format__ = _format
Tensor.__deepcopy__ = _deepcopy
Tensor.new_zeros = _new_factory(zeros)
Tensor.new_ones = _new_factory(ones)
Tensor.new_empty = _new_factory(empty)
Tensor.new_full = _new_full
Tensor.new_tensor = _new_tensor
Tensor.slogdet = slogdet
for _f, _n in ((_new_full, "new_full"), (_new_tensor, "new_tensor"), (_deepcopy, "__deepcopy__"),
               (_format, "__format__")):
    _f.__name__, _f.__qualname__ = _n, "Tensor." + _n
del _f, _n
Tensor.__module__ = "meshflow"

# The CMake project version, plus the commit when built from a checkout
# (a PEP 440 local version: "0.10.0+g856efd6aa1b2").
__version__ = _C._version + (f"+g{_C._git_revision}" if _C._git_revision else "")


def _rebuild_tensor(data, dtype, shape, requires_grad):
    """Unpickles a tensor (Note [Tensor pickle] in python/bindings/tensor.cpp)."""
    return _C._rebuild_tensor(data, dtype, shape, requires_grad)
