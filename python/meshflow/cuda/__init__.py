"""meshflow.cuda: torch.cuda's names for meshflow's CUDA backend.

The backend (src/backend/cuda/) is compiled in when the CUDA toolkit was
found at build time (`meshflow.backends.cuda.is_built()`); it loads the
driver only when first asked, so importing meshflow works without one.
`is_available()` is true when it is built and sees a device. Functions that
need a device raise a RuntimeError naming what is missing; the memory
statistics read 0 before any CUDA memory is used, as PyTorch's do.
"""
import contextlib

from meshflow import _C
from meshflow.cuda import amp

__all__ = ["amp", "is_available", "device_count", "is_initialized", "init", "current_device", "set_device", "device",
           "synchronize", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "memory_stats", "reset_peak_memory_stats", "empty_cache", "mem_get_info", "get_device_name",
           "get_device_capability", "get_device_properties", "is_bf16_supported", "get_arch_list", "manual_seed",
           "manual_seed_all", "seed", "seed_all", "initial_seed", "Stream", "Event", "current_stream",
           "default_stream", "set_stream", "stream"]

_current = 0


def is_available():
    """True when meshflow's CUDA backend is built and sees at least one device."""
    return _C._device_count("cuda") > 0


def device_count():
    """The number of CUDA devices (0 without the backend, a driver or a device)."""
    return _C._device_count("cuda")


def is_initialized():
    return is_available()


def _device(device, op):
    """The meshflow.device of a device argument (None: the current device), checked to exist."""
    if device is None:
        index = _current
    elif isinstance(device, int):
        index = device
    else:
        d = _C.device(device) if isinstance(device, str) else device
        if d.type != "cuda":
            raise ValueError(f"meshflow.cuda.{op}: expected a cuda device, got {d}")
        index = d.index
    d = _C.device("cuda", index)
    if not _C._backend_built("cuda"):
        raise _C._errors.Error(f"meshflow.cuda.{op}: meshflow was built without the CUDA backend")
    _C._check_device(d, f"meshflow.cuda.{op}")
    return d


def current_device():
    _device(None, "current_device")
    return _current


def set_device(device):
    global _current
    _current = _device(device, "set_device").index


class device:
    """Context manager that makes a device current (torch.cuda.device)."""

    def __init__(self, device):
        self.idx = -1 if device is None else _device(device, "device").index
        self.prev_idx = -1

    def __enter__(self):
        global _current
        if self.idx >= 0:
            self.prev_idx, _current = _current, self.idx
        return self

    def __exit__(self, *exc):
        global _current
        if self.idx >= 0:
            _current = self.prev_idx
        return False


def init():
    """Checks that a CUDA device can be used (the backend loads the driver on first use)."""
    _device(None, "init")


class _Properties:
    def __init__(self, d):
        self.__dict__.update(d)

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2**20}MB, multi_processor_count={self.multi_processor_count})")


def get_device_properties(device=None):
    return _Properties(_C._device_properties(_device(device, "get_device_properties")))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    p = get_device_properties(device)
    return p.major, p.minor


def is_bf16_supported():
    """bfloat16 math needs compute capability 8.0 (Ampere) or newer."""
    return get_device_capability()[0] >= 8


def get_arch_list():
    """The architectures meshflow's CUDA kernels are compiled for (none yet: the backend has no kernels)."""
    return []


def mem_get_info(device=None):
    """(free, total) bytes of the device's memory."""
    return tuple(_C._memory_info(_device(device, "mem_get_info")))


# Note [CUDA seeds]: the seeds of CUDA random ops. They are kept, and read
# lazily as PyTorch's are, so seeding scripts run on machines without a GPU.
# The CUDA backend has no random kernels yet to use them.
_seed = None


def manual_seed(seed):
    global _seed
    _seed = int(seed) & ((1 << 64) - 1)


def manual_seed_all(seed):
    manual_seed(seed)


def seed():
    import random
    manual_seed(random.getrandbits(63))


def seed_all():
    seed()


def initial_seed():
    _device(None, "initial_seed")
    return _seed if _seed is not None else _C.initial_seed()


def synchronize(device=None):
    """Waits for all work queued on the device."""
    _C._synchronize(_device(device, "synchronize"))


def _stats(device):
    """The allocator's statistics, or None before CUDA is usable (PyTorch's zeros)."""
    if not is_available():
        return None
    return _C.memory_stats(_device(device, "memory_stats"))


def memory_stats(device=None):
    s = _stats(device)
    return {} if s is None else s


def memory_allocated(device=None):
    s = _stats(device)
    return 0 if s is None else s["allocated_bytes"]


def max_memory_allocated(device=None):
    s = _stats(device)
    return 0 if s is None else s["peak_allocated_bytes"]


def memory_reserved(device=None):
    s = _stats(device)
    return 0 if s is None else s["reserved_bytes"]


def max_memory_reserved(device=None):
    """A lower bound of the peak reserved bytes: the allocator keeps the peak
    of allocated bytes, not of reserved ones."""
    s = _stats(device)
    return 0 if s is None else max(s["reserved_bytes"], s["peak_allocated_bytes"])


def reset_peak_memory_stats(device=None):
    if is_available():
        _C.reset_peak_memory_stats(_device(device, "reset_peak_memory_stats"))


def empty_cache():
    """Returns the cached blocks of the current device to the driver."""
    if is_available():
        _C.empty_cache(_device(None, "empty_cache"))


class Stream:
    """An ordered queue of work on a CUDA device (torch.cuda.Stream)."""

    def __init__(self, device=None, priority=0, **kwargs):
        self._stream = _C._Stream(_device(device, "Stream"))

    @classmethod
    def _wrap(cls, handle):
        s = cls.__new__(cls)
        s._stream = handle
        return s

    @property
    def device(self):
        return self._stream.device

    @property
    def stream_id(self):
        return self._stream.stream_id

    def synchronize(self):
        self._stream.synchronize()

    def wait_event(self, event):
        event.wait(self)

    def wait_stream(self, stream):
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self):
        return self.record_event().query()

    def __eq__(self, other):
        return isinstance(other, Stream) and self._stream == other._stream

    def __hash__(self):
        return hash(self._stream)

    def __repr__(self):
        return f"<meshflow.cuda.Stream device={self.device} id={self.stream_id}>"


class Event:
    """A marker in a stream's work (torch.cuda.Event)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self._device = _device(None, "Event")
        self._event = _C._Event(self._device, bool(enable_timing))

    def record(self, stream=None):
        self._event.record((stream or current_stream(self._device))._stream)

    def wait(self, stream=None):
        self._event.block((stream or current_stream(self._device))._stream)

    def query(self):
        return self._event.query()

    def synchronize(self):
        self._event.synchronize()

    def elapsed_time(self, end_event):
        return self._event.elapsed_ms(end_event._event)


def current_stream(device=None):
    return Stream._wrap(_C._Stream.current(_device(device, "current_stream")))


def default_stream(device=None):
    return Stream._wrap(_C._Stream.default(_device(device, "default_stream")))


def set_stream(stream):
    if stream is not None:
        stream._stream.set_current()


@contextlib.contextmanager
def stream(stream):
    """Makes `stream` current on its device for the block (None: no change)."""
    if stream is None:
        yield
        return
    previous = current_stream(stream.device)
    stream._stream.set_current()
    try:
        yield
    finally:
        previous._stream.set_current()
