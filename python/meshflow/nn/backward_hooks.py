"""Module.register_full_backward_hook, as torch.nn's (1.13).

hook(module, grad_input, grad_output) runs when the gradients with respect
to the module's positional tensor inputs are computed; grad_input holds
them (None for an input that is not a tensor or needs no gradient) and
grad_output the gradients of the outputs. A non-None return replaces
grad_input. It is built from the forward pre-hook and forward hook a module
already has: the inputs and the outputs of each call pass through identity
autograd Functions whose backward collects the gradients and runs the hooks.
"""
from meshflow._C import Tensor, _modules
from meshflow.autograd.function import Function

Module = _modules.Module


class _Call:
    """One forward call's state: the hooks, the gradients of its outputs."""

    def __init__(self, module, hooks, num_inputs):
        self.module = module
        self.hooks = hooks
        self.num_inputs = num_inputs
        self.grad_outputs = None
        self.input_positions = []
        self.requiring = set()

    def run(self, grad_input):
        for hook in self.hooks:
            result = hook(self.module, grad_input, self.grad_outputs)
            if result is not None:
                result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
                if len(result) != len(grad_input):
                    raise RuntimeError(f"backward hook returned {len(result)} gradients, expected {len(grad_input)}")
                grad_input = result
        return grad_input


class _InputsHook(Function):
    @staticmethod
    def forward(ctx, call, *tensors):
        ctx.call = call
        ctx.set_materialize_grads(False)  # an unused gradient stays None, as torch's
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        grad_input = [None] * call.num_inputs
        for position, g in zip(call.input_positions, grads):
            # an input that needed no gradient reports zeros, as torch's
            grad_input[position] = g if position in call.requiring or g is None else g.new_zeros(g.shape)
        grad_input = call.run(tuple(grad_input))
        return (None,) + tuple(grad_input[p] for p in call.input_positions)


class _OutputsHook(Function):
    @staticmethod
    def forward(ctx, call, *tensors):
        ctx.call = call
        ctx.set_materialize_grads(False)
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        call.grad_outputs = grads
        if not call.input_positions:  # no input needs a gradient: the hooks run now, as torch's
            call.run((None,) * max(call.num_inputs, 1))
        return (None,) + grads


def _wrap_inputs(module, args, hooks, calls_key):
    if not hooks:
        return None
    call = _Call(module, hooks, len(args))
    module.__dict__.setdefault(calls_key, []).append(call)
    # Every tensor argument passes through, once one needs a gradient (torch's
    # BackwardHook): the others then get gradients for grad_input too.
    tensors = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not any(args[i].requires_grad for i in tensors):
        return None
    call.input_positions = tensors
    call.requiring = {i for i in tensors if args[i].requires_grad}
    wrapped = _InputsHook.apply(call, *[args[i] for i in call.input_positions])
    args = list(args)
    for i, t in zip(call.input_positions, wrapped):
        args[i] = t
    return tuple(args)


def _wrap_outputs(module, output, calls_key):
    calls = module.__dict__.get(calls_key)
    if not calls:
        return None
    call = calls.pop()
    if output is None:  # forward raised (always_call)
        return None
    outputs = output if isinstance(output, tuple) else (output,)
    positions = [i for i, o in enumerate(outputs) if isinstance(o, Tensor) and o.requires_grad]
    if not positions:
        return None
    wrapped = _OutputsHook.apply(call, *[outputs[i] for i in positions])
    result = list(outputs)
    for i, t in zip(positions, wrapped):
        result[i] = t
    return tuple(result) if isinstance(output, tuple) else result[0]


def _pre_hook(module, args):
    return _wrap_inputs(module, args, list(module.__dict__.get("_full_backward_hooks", {}).values()),
                        "_backward_hook_calls")


def _post_hook(module, args, output):
    return _wrap_outputs(module, output, "_backward_hook_calls")


# register_module_full_backward_hook: hooks for every module, run through a
# global forward pre-hook and forward hook pair (Note [Global module hooks] in
# python/bindings/nn_module.cpp). A module with hooks of its own wraps its
# inputs and outputs twice, the global pair outermost.
_global_backward_hooks = {}
_global_pair = []


def _global_pre_hook(module, args):
    return _wrap_inputs(module, args, list(_global_backward_hooks.values()), "_global_backward_hook_calls")


def _global_post_hook(module, args, output):
    return _wrap_outputs(module, output, "_global_backward_hook_calls")


class _GlobalHandle:
    def __init__(self, key):
        self.id = key

    def remove(self):
        _global_backward_hooks.pop(self.id, None)
        if not _global_backward_hooks and _global_pair:
            for hook_id in _global_pair:
                _modules._remove_global_hook(hook_id)
            _global_pair.clear()


def register_module_full_backward_hook(hook):
    """Runs hook(module, grad_input, grad_output) in the backward of every module call."""
    if not _global_pair:
        _global_pair.extend([_modules._add_global_hook(_global_pre_hook, True),
                             _modules._add_global_hook(_global_post_hook, False, True)])
    key = max(_global_backward_hooks, default=-1) + 1
    _global_backward_hooks[key] = hook
    return _GlobalHandle(key)


class _Handle:
    def __init__(self, hooks, key):
        self._hooks, self.id = hooks, key

    def remove(self):
        self._hooks.pop(self.id, None)


def register_full_backward_hook(self, hook):
    """Runs hook(module, grad_input, grad_output) in backward (see the module's doc)."""
    hooks = self.__dict__.get("_full_backward_hooks")
    if hooks is None:
        hooks = self.__dict__["_full_backward_hooks"] = {}
        self.register_forward_pre_hook(_pre_hook)
        self.register_forward_hook(_post_hook, always_call=True)
    key = max(hooks, default=-1) + 1
    hooks[key] = hook
    return _Handle(hooks, key)


Module.register_full_backward_hook = register_full_backward_hook
