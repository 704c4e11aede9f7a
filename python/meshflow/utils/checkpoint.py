"""meshflow.utils.checkpoint: activation checkpointing, as torch.utils.checkpoint.

checkpoint(fn, *args, use_reentrant=False) runs fn without keeping the
tensors its ops save for backward; backward recomputes them, with the same
random numbers (the default generator's Philox seed and offset), the same
autocast state and no second update of BatchNorm's running statistics
(Note [Activation checkpointing] in include/meshflow/autograd.h). Memory
falls from every activation inside fn to fn's inputs, for one more
forward of fn in backward.

use_reentrant=True is the older form (a Function whose backward reruns fn
and calls backward inside backward); as in PyTorch it needs an input that
requires grad, and does not support autograd.grad.
"""
import contextlib
import warnings

from meshflow import _C
from meshflow._grad_mode import enable_grad
from meshflow.autograd.function import Function
from meshflow.errors import CheckpointError

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError"]


def _resolve_reentrant(use_reentrant):
    if use_reentrant is None:
        warnings.warn("meshflow.utils.checkpoint: the use_reentrant parameter should be passed explicitly; "
                      "use_reentrant=False is recommended (the default is True, as in PyTorch)", stacklevel=3)
        return True
    return bool(use_reentrant)


def _warn_if_nothing_requires_grad(output):
    if not _C.is_grad_enabled():
        return
    items = output if isinstance(output, (tuple, list)) else (output,)
    if not any(isinstance(o, _C.Tensor) and o.requires_grad for o in items):
        warnings.warn("checkpoint: none of the outputs requires grad; the checkpointed part gets no gradients",
                      stacklevel=3)


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state=True, **kwargs):
    """Runs function(*args, **kwargs) and recomputes it in backward instead of
    keeping its activations. determinism_check="default" raises
    CheckpointError when the recomputation saves tensors of other shapes or
    dtypes; "none" skips the comparison."""
    if determinism_check not in ("default", "none"):
        raise ValueError(f"checkpoint: determinism_check must be 'default' or 'none', got {determinism_check!r}")
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if _resolve_reentrant(use_reentrant):
        if context_fn is not None:
            raise ValueError("checkpoint: passing context_fn is only supported with use_reentrant=False")
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        output = _ReentrantCheckpoint.apply(function, preserve_rng_state, *args)
        _warn_if_nothing_requires_grad(output)
        return output
    forward_context, recompute_context = context_fn() if context_fn is not None else (None, None)
    positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
    state = {"ran": False, "output": None}

    def run(tensors):
        full = list(args)
        for i, t in zip(positions, tensors):
            full[i] = t
        context = recompute_context if state["ran"] else forward_context
        with context if context is not None else contextlib.nullcontext():
            output = function(*full, **kwargs)
        if not state["ran"]:
            state["ran"], state["output"] = True, output
        return []

    _C._checkpoint(run, [args[i] for i in positions], preserve_rng_state, determinism_check == "default")
    # The closure lives as long as the graph: it must not keep the outputs
    # (they hold the graph: a cycle through C++ no collector sees).
    output, state["output"] = state["output"], None
    _warn_if_nothing_requires_grad(output)
    return output


class _ReentrantCheckpoint(Function):
    @staticmethod
    def forward(ctx, function, preserve_rng_state, *args):
        ctx.function = function
        ctx.rng_state = _C.default_generator.get_state() if preserve_rng_state else None
        ctx.autocast = (_C.is_autocast_enabled("cpu"), _C.get_autocast_dtype("cpu"), _C.is_autocast_cache_enabled())
        ctx.positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        ctx.args = [None if isinstance(a, _C.Tensor) else a for a in args]
        ctx.save_for_backward(*(args[i] for i in ctx.positions))
        return function(*args)

    @staticmethod
    def backward(ctx, *grads):
        from meshflow.amp import autocast
        from meshflow.autograd import backward

        full = list(ctx.args)
        inputs = []
        for i, t in zip(ctx.positions, ctx.saved_tensors):
            d = t.detach()
            d.requires_grad_(t.requires_grad)
            full[i] = d
            inputs.append(d)
        current = _C.default_generator.get_state()
        enabled, dtype, cache = ctx.autocast
        try:
            if ctx.rng_state is not None:
                _C.default_generator.set_state(ctx.rng_state)
            with enable_grad(), _C._Recomputation(), autocast("cpu", dtype=dtype, enabled=enabled,
                                                                 cache_enabled=cache):
                outputs = ctx.function(*full)
        finally:
            _C.default_generator.set_state(current)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads)
                 if isinstance(o, _C.Tensor) and o.requires_grad and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        backward([o for o, _ in pairs], [g for _, g in pairs])
        grads_in = iter(d.grad if d.requires_grad else None for d in inputs)
        tensor_positions = set(ctx.positions)
        return (None, None) + tuple(next(grads_in) if i in tensor_positions else None for i in range(len(full)))


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs a sequential model (nn.Sequential or a list of modules/functions)
    in `segments` pieces, checkpointing each but the last."""
    use_reentrant = _resolve_reentrant(use_reentrant)
    if hasattr(functions, "children") and callable(functions.children):
        functions = list(functions.children())
    functions = list(functions)
    if not isinstance(segments, int) or isinstance(segments, bool) or segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be a positive integer, got {segments!r}")
    if segments > len(functions):
        raise ValueError(f"checkpoint_sequential: {segments} segments for {len(functions)} functions")

    def run_segment(start, end):
        def forward(x):
            for fn in functions[start:end]:
                x = fn(x)
            return x
        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run_segment(start, end + 1), input, use_reentrant=use_reentrant, **kwargs)
    return run_segment(end + 1, len(functions))(input)
