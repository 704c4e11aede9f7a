"""meshflow.autograd.graph: hooks on the tensors autograd saves for
backward, as torch.autograd.graph (Note [Saved tensor hooks] in
include/meshflow/autograd.h)."""
from meshflow import _C
from meshflow._C import Node

__all__ = ["saved_tensors_hooks", "save_on_cpu", "Node"]


class saved_tensors_hooks:
    """Within this context every tensor an op saves for backward is given to
    pack_hook, and the graph keeps what it returns (any object); backward
    calls unpack_hook on that object and uses the tensor it returns, which
    must have the saved tensor's shape and dtype. Contexts nest; the
    innermost one's hooks apply. A pack hook must not modify its argument
    in place."""

    def __init__(self, pack_hook, unpack_hook):
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("saved_tensors_hooks: pack_hook and unpack_hook must be callable")
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        _C._push_saved_tensors_hooks(self.pack_hook, self.unpack_hook)
        return self

    def __exit__(self, *exc_info):
        _C._pop_saved_tensors_hooks()


class save_on_cpu(saved_tensors_hooks):
    """Keeps saved tensors in host memory until backward. Every device
    meshflow runs on today is the CPU, so the saved tensor is kept as a copy
    only where it is not on the CPU already."""

    def __init__(self, pin_memory=False, device_type="cpu"):
        def pack(t):
            return (t.device, t if t.device.type == "cpu" else t.to("cpu"))

        def unpack(packed):
            device, t = packed
            return t if t.device == device else t.to(device)

        super().__init__(pack, unpack)
