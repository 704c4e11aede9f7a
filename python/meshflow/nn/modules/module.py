"""meshflow.nn.modules.module: Module and the global module hooks of torch.nn.modules.module.

register_module_forward_pre_hook(hook) and register_module_forward_hook(hook) add hooks that every
module call runs, before the module's own (hook(module, args) and hook(module, args, output); a
non-None result replaces the input or the output); register_module_full_backward_hook(hook) runs
hook(module, grad_input, grad_output) in the backward of every module call. Each returns a handle
whose remove() takes the hook out (Note [Global module hooks] in python/bindings/nn_module.cpp).
"""
from meshflow._C import _modules
from meshflow.nn.backward_hooks import register_module_full_backward_hook

Module = _modules.Module

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_hook"]


class RemovableHandle:
    """The handle of a global forward hook."""

    def __init__(self, hook_id):
        self.id = hook_id

    def remove(self):
        _modules._remove_global_hook(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_module_forward_pre_hook(hook):
    """hook(module, args) before every module's forward; a non-None result replaces args."""
    return RemovableHandle(_modules._add_global_hook(hook, True))


def register_module_forward_hook(hook):
    """hook(module, args, output) after every module's forward; a non-None result replaces output."""
    return RemovableHandle(_modules._add_global_hook(hook, False))
