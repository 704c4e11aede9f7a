"""meshflow.autograd: gradients of outputs with respect to inputs, custom
differentiable functions (Function), hooks on saved tensors (graph) and
jacobian / hessian / vjp / jvp / vhp / hvp of functions (functional)."""
from meshflow import _C
from meshflow._C import Node
from meshflow._grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled
from meshflow.autograd import functional, graph, profiler  # noqa: F401
from meshflow.autograd.function import Function, FunctionCtx, once_differentiable  # noqa: F401

__all__ = ["backward", "grad", "Node", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "Function",
           "FunctionCtx",
           "once_differentiable", "graph", "functional"]


def _as_list(tensors):
    if tensors is None:
        return None
    if isinstance(tensors, _C.Tensor):
        return [tensors]
    return list(tensors)


def _grad_list(grads, count):
    grads = _as_list(grads)
    return [None] * count if grads is None else grads


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False):
    """Accumulates d(sum(tensors[i] * grad_tensors[i])) / d(leaf) into each leaf's .grad."""
    tensors = _as_list(tensors)
    _C._autograd_backward(tensors, _grad_list(grad_tensors, len(tensors)), retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """Returns the gradients of outputs with respect to inputs (a tuple), leaving .grad alone."""
    outputs = _as_list(outputs)
    return _C._autograd_grad(outputs, _as_list(inputs), _grad_list(grad_outputs, len(outputs)), retain_graph,
                             create_graph, allow_unused)
