"""meshflow.nn.utils: gradient clipping, flat parameter vectors, weight_norm and spectral_norm, and
(in meshflow.nn.utils.rnn) packed sequences, as torch.nn.utils."""
from meshflow._C import _optim
from meshflow.nn.utils import rnn  # noqa: F401

clip_grad_norm_ = _optim.clip_grad_norm_

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters",
           "weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]


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


# --- weight_norm / spectral_norm ---------------------------------------------------------------------
#
# As torch.nn.utils' hook-based versions: the parameter `name` is replaced by
# others (weight_g and weight_v; weight_orig and the buffers weight_u and
# weight_v) and recomputed from them by a forward pre-hook. A C++ layer reads
# its parameter slot in forward, and a parameter slot holding a tensor is
# listed by named_parameters() and state_dict(); so the slot `name` is kept
# None (unlisted, as torch's deleted entry) except during a forward, when the
# pre-hook puts the computed tensor there (_swap_parameter) and a forward hook
# (always_call) takes it out again. Between forwards the computed tensor is
# the module's plain attribute `name` (in its __dict__, ahead of parameter
# lookup), which a Python forward reading self.weight sees, as in torch.

_NORM_HOOKS = "_norm_hooks"  # module.__dict__ entry: {(kind, name): hook object}


def _norm_hooks(module):
    return module.__dict__.setdefault(_NORM_HOOKS, {})


def _own_parameters(module):
    return dict(module.named_parameters(recurse=False))


def _set_computed(module, name, tensor):
    """The value of the reparametrized `name`: the plain attribute, and the parameter slot that a
    C++ layer's forward reads (taken out again by _clear_slot after the forward)."""
    module.__dict__[name] = tensor
    module._swap_parameter(name, tensor)


def _register(fn, module, kind):
    def pre_hook(mod, inputs):
        fn(mod, inputs)

    def post_hook(mod, inputs, output):
        mod._swap_parameter(fn.name, None)

    fn._handles = (module.register_forward_pre_hook(pre_hook),
                   module.register_forward_hook(post_hook, always_call=True))
    _norm_hooks(module)[(kind, fn.name)] = fn


def _unregister(module, kind, name, what):
    fn = module.__dict__.get(_NORM_HOOKS, {}).get((kind, name))
    if fn is None:
        raise ValueError(f"{what} of '{name}' not found in {module}")
    fn.remove(module)
    for handle in fn._handles:
        handle.remove()
    del module.__dict__[_NORM_HOOKS][(kind, name)]
    return module


def _weight_parameter(module, name, attribute_first):
    """The parameter `name` (None when set to None) as torch's `module._parameters[name]`: KeyError
    when `name` is not a parameter; with attribute_first (weight_norm's getattr before that),
    AttributeError when it is not an attribute either."""
    params = _own_parameters(module)
    if name in params:
        return params[name]
    missing = object()
    value = getattr(module, name, missing)
    if value is missing:
        if attribute_first:
            raise AttributeError(f"'{type(module).__name__}' object has no attribute '{name}'")
        raise KeyError(name)
    if value is None and name not in dict(module.named_buffers(recurse=False)) and name not in module.__dict__:
        return None  # a parameter slot set to None
    raise KeyError(name)


def _norm_except_dim(v, dim):
    """torch.norm_except_dim(v, 2, dim): the 2-norm over every dimension but dim (dim=-1: the whole
    tensor's, a 0-d tensor), kept as size-1 dimensions."""
    if dim == -1:
        return v.norm()
    if dim == 0:
        shape = (v.shape[0],) + (1,) * (v.dim() - 1)
        return v.contiguous().reshape(v.shape[0], -1).norm(2, 1).reshape(shape)
    if dim == v.dim() - 1:
        shape = (1,) * (v.dim() - 1) + (v.shape[-1],)
        return v.contiguous().reshape(-1, v.shape[-1]).norm(2, 0).reshape(shape)
    return _norm_except_dim(v.transpose(0, dim), 0).transpose(0, dim)


class WeightNorm:
    """The forward pre-hook of weight_norm: `name` = g * v / ||v||."""

    def __init__(self, name, dim):
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / _norm_except_dim(v, self.dim))

    @staticmethod
    def apply(module, name, dim):
        import meshflow as mf
        from meshflow.nn.parameter import Parameter
        if ("weight_norm", name) in module.__dict__.get(_NORM_HOOKS, {}):
            raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        fn = WeightNorm(name, dim)
        weight = _weight_parameter(module, name, True)
        if weight is None:
            raise TypeError(f"weight_norm: parameter `{name}` is None")
        # remove w from the parameters; g and v are new ones, w = g / ||v|| * v
        delattr(module, name)
        with mf.no_grad():
            g = _norm_except_dim(weight, fn.dim)
        module.register_parameter(name + "_g", Parameter(g))
        module.register_parameter(name + "_v", Parameter(weight))
        module.__dict__[name] = fn.compute_weight(module)
        _register(fn, module, "weight_norm")
        return fn

    def remove(self, module):
        from meshflow.nn.parameter import Parameter
        weight = self.compute_weight(module)
        module.__dict__.pop(self.name, None)
        module._swap_parameter(self.name, None)
        delattr(module, self.name + "_g")
        delattr(module, self.name + "_v")
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs):
        _set_computed(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """Replaces parameter `name` by `name`_g (its norm over every dimension but dim; dim=None: the
    whole tensor's) and `name`_v (its direction), recomputing `name` = g * v / ||v|| before every
    forward, so that gradients reach g and v (torch.nn.utils.weight_norm). Returns the module."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name="weight"):
    """Undoes weight_norm: `name` is a plain parameter again, with the current g * v / ||v||."""
    return _unregister(module, "weight_norm", name, "weight_norm")


class SpectralNorm:
    """The forward pre-hook of spectral_norm: `name` = `name`_orig / sigma, sigma estimated by power
    iteration on the buffers `name`_u and `name`_v (updated in place in training mode)."""

    _version = 1

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but "
                             f"got n_power_iterations={n_power_iterations}")
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight):
        weight_mat = weight
        if self.dim != 0:
            weight_mat = weight_mat.permute(self.dim, *[d for d in range(weight_mat.dim()) if d != self.dim])
        height = weight_mat.size(0)
        return weight_mat.reshape(height, -1)

    def compute_weight(self, module, do_power_iteration):
        import meshflow as mf
        from meshflow.nn import functional as F
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with mf.no_grad():
                for _ in range(self.n_power_iterations):
                    # u and v approach the first left and right singular vectors; the buffers are
                    # updated in place.
                    v.copy_(F.normalize(mf.mv(weight_mat.t(), u), dim=0, eps=self.eps))
                    u.copy_(F.normalize(mf.mv(weight_mat, v), dim=0, eps=self.eps))
                # copies, so that a backward through an earlier forward still sees its u and v
                u = u.clone()
                v = v.clone()
        sigma = mf.dot(u, mf.mv(weight_mat, v))
        return weight / sigma

    def remove(self, module):
        import meshflow as mf
        from meshflow.nn.parameter import Parameter
        with mf.no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        module.__dict__.pop(self.name, None)
        module._swap_parameter(self.name, None)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs):
        _set_computed(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module, name, n_power_iterations, dim, eps):
        import meshflow as mf
        from meshflow.nn import functional as F
        if ("spectral_norm", name) in module.__dict__.get(_NORM_HOOKS, {}):
            raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = _weight_parameter(module, name, False)
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with mf.no_grad():
            h, w = fn.reshape_weight_to_matrix(weight).shape
            u = F.normalize(mf.randn(h, dtype=weight.dtype), dim=0, eps=fn.eps)
            v = F.normalize(mf.randn(w, dtype=weight.dtype), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        # `name` stays an attribute (initialisation code may read it): the plain tensor.
        module.__dict__[fn.name] = weight.detach()
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        _register(fn, module, "spectral_norm")
        return fn


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divides parameter `name` by its spectral norm, estimated by n_power_iterations steps of power
    iteration before every forward in training mode (torch.nn.utils.spectral_norm): the parameter
    becomes `name`_orig, the singular-vector estimates the buffers `name`_u and `name`_v. dim is the
    output dimension (default 0; 1 for transposed convolutions). Returns the module."""
    if dim is None:
        from meshflow import nn
        transposed = tuple(getattr(nn, n) for n in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
                           if hasattr(nn, n))
        dim = 1 if transposed and isinstance(module, transposed) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module, name="weight"):
    """Undoes spectral_norm: `name` is a plain parameter again, with the current `name`_orig / sigma
    (no power iteration)."""
    return _unregister(module, "spectral_norm", name, "spectral_norm")
