"""meshflow.nn.utils: gradient clipping and flat parameter vectors, as torch.nn.utils."""
from meshflow._C import _optim

clip_grad_norm_ = _optim.clip_grad_norm_

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def _tensors(parameters, op):
    import meshflow as mf
    if isinstance(parameters, mf.Tensor):
        return [parameters]
    try:
        out = list(parameters)
    except TypeError:
        raise TypeError(f"{op}: expected a tensor or an iterable of tensors, got {type(parameters).__name__}") from None
    for p in out:
        if not isinstance(p, mf.Tensor):
            raise TypeError(f"{op}: expected tensors, got {type(p).__name__}")
    return out


def clip_grad_value_(parameters, clip_value):
    """Clamps every gradient into [-clip_value, clip_value], in place."""
    import meshflow as mf
    clip_value = float(clip_value)
    with mf.no_grad():
        for p in _tensors(parameters, "clip_grad_value_"):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one 1-d tensor."""
    import meshflow as mf
    return mf.cat([p.reshape(-1) for p in _tensors(parameters, "parameters_to_vector")])


def vector_to_parameters(vec, parameters):
    """Copies consecutive slices of the 1-d vec into the parameters (their data)."""
    import meshflow as mf
    if not isinstance(vec, mf.Tensor):
        raise TypeError(f"vector_to_parameters: expected vec to be a Tensor, got {type(vec).__name__}")
    params = _tensors(parameters, "vector_to_parameters")
    total = sum(p.numel() for p in params)
    if vec.dim() != 1 or vec.numel() != total:
        raise ValueError(f"vector_to_parameters: vec must be 1-d with {total} elements (the parameters' count), "
                         f"got shape {tuple(vec.shape)}")
    offset = 0
    with mf.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vec[offset:offset + n].reshape(p.shape))
            offset += n
