"""meshflow.autograd.Function: differentiable functions with a hand-written
backward, as torch.autograd.Function.

    class Exp(mf.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    y = Exp.apply(x)

forward runs without recording; the outputs are then linked to one node
of the autograd graph whose backward calls the class's backward (Note
[Custom functions] in include/meshflow/autograd.h). Tensors saved with
save_for_backward are version-checked and go through saved_tensors_hooks
like the saves of built-in ops. backward is written with meshflow ops, so
a backward with create_graph=True differentiates it again.
"""
import functools

from meshflow import _C
from meshflow._grad_mode import no_grad

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ctx argument of forward and backward."""

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, _C.Tensor):
                raise TypeError(f"save_for_backward can only save tensors or None, got {type(t).__name__}")
        self.to_save = tensors

    @property
    def saved_tensors(self):
        saved = self.__dict__.get("_saved")
        if saved is not None:
            return saved
        if self.__dict__.get("_linked"):
            raise RuntimeError("saved_tensors: the saved tensors are only available inside backward")
        return tuple(self.__dict__.get("to_save", ()))

    def mark_non_differentiable(self, *tensors):
        for t in tensors:
            if not isinstance(t, _C.Tensor):
                raise TypeError(f"mark_non_differentiable: expected Tensors, got {type(t).__name__}")
        self.non_differentiable = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        raise NotImplementedError("Function: in-place forwards (ctx.mark_dirty) are not supported; return a new "
                                  "tensor from forward instead")


class BackwardCFunction(FunctionCtx):
    """The ctx of one application (PyTorch's name for it)."""


def _is_overridden(cls, name):
    return getattr(cls, name) is not getattr(Function, name)


class Function:
    """Subclass and define forward(ctx, *args) and backward(ctx, *grads), as
    static methods; call it with Function.apply(*args). forward may instead
    take only the arguments and leave ctx to setup_context(ctx, inputs,
    output)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__}: autograd functions are not instantiated; call "
                           f"{type(self).__name__}.apply(...)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not defined for this autograd.Function")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = BackwardCFunction()
        positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, _C.Tensor) and a.requires_grad for a in args)
        with no_grad():
            if _is_overridden(cls, "setup_context"):
                output = cls.forward(*args, **kwargs)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        if _is_overridden(cls, "setup_context"):
            cls.setup_context(ctx, args, output)
        is_tuple = isinstance(output, tuple)
        outputs = output if is_tuple else (output,)
        tensor_at = [i for i, o in enumerate(outputs) if isinstance(o, _C.Tensor)]
        tensor_outputs = [outputs[i] for i in tensor_at]
        marked = {id(t) for t in getattr(ctx, "non_differentiable", ())}
        backward = _backward_of(cls, ctx, len(args), positions, len(outputs), tensor_at)
        linked = _C._autograd_function_link(
            cls.__name__ + "Backward", [args[i] for i in positions], tensor_outputs,
            list(getattr(ctx, "to_save", ())), [id(t) in marked for t in tensor_outputs],
            getattr(ctx, "materialize_grads", True), backward)
        ctx._linked = True
        ctx.__dict__.pop("to_save", None)
        result = list(outputs)
        for i, t in zip(tensor_at, linked):
            result[i] = t
        return tuple(result) if is_tuple else result[0]


def _backward_of(cls, ctx, num_args, positions, num_outputs, tensor_at):
    """The callable the node runs: maps the tensors' gradients to the
    class's backward (one gradient per forward output, None for non-tensor
    ones) and its results back to the tensor inputs."""
    name = cls.__name__ + "Backward"

    def backward(grads, needs_input_grad, saved):
        full = [None] * num_outputs
        for i, g in zip(tensor_at, grads):
            full[i] = g
        ctx._saved = saved
        try:
            result = cls.backward(ctx, *full)
        finally:
            ctx._saved = None
        result = result if isinstance(result, tuple) else (result,)
        if len(result) > num_args and all(r is None for r in result[num_args:]):
            result = result[:num_args]
        if len(result) != num_args:
            raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected {num_args}, "
                               f"got {len(result)})")
        tensor_positions = set(positions)
        for i, r in enumerate(result):
            if r is not None and i not in tensor_positions:
                raise RuntimeError(f"function {name} returned a gradient different than None at position {i + 1}, "
                                   "but the corresponding forward input was not a Tensor")
            if r is not None and not isinstance(r, _C.Tensor):
                raise TypeError(f"function {name} returned a gradient of type {type(r).__name__} at position "
                                f"{i + 1}; expected a Tensor or None")
        return [result[i] for i in positions]

    return backward


def _raise_on_double_backward(grads, needs_input_grad, saved):
    raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def once_differentiable(fn):
    """Decorates a backward that is not itself differentiable: it runs
    without recording, and a backward through its results (create_graph)
    raises instead of silently giving a zero gradient."""

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        grads_needing = [a for a in args if isinstance(a, _C.Tensor) and a.requires_grad]
        if not _C.is_grad_enabled() or not grads_needing:
            return outputs
        is_tuple = isinstance(outputs, tuple)
        items = list(outputs) if is_tuple else [outputs]
        at = [i for i, o in enumerate(items) if isinstance(o, _C.Tensor)]
        linked = _C._autograd_function_link("DelayedError", grads_needing, [items[i] for i in at], [],
                                            [False] * len(at), True, _raise_on_double_backward)
        for i, t in zip(at, linked):
            items[i] = t
        return tuple(items) if is_tuple else items[0]

    return wrapper
