"""GradScaler with torch.cuda.amp.GradScaler's semantics (PyTorch 1.13).

The unscale-and-check of each gradient and the scale update are fused C++
ops (amp_unscale, amp_update_scale; include/meshflow/amp.h); this class
only keeps the per-optimizer bookkeeping."""
from collections import abc

from meshflow import _C

_READY, _UNSCALED, _STEPPED = 0, 1, 2


def _new_state():
    return {"stage": _READY, "found_inf": None}


class GradScaler:
    def __init__(self, *args, **kwargs):
        """GradScaler(init_scale=2**16, growth_factor=2.0, backoff_factor=0.5,
        growth_interval=2000, enabled=True), or with a leading device as
        torch.amp.GradScaler("cpu", ...) takes it (device= too)."""
        device = kwargs.pop("device", None)
        if args and isinstance(args[0], str):
            if device is not None:
                raise TypeError("GradScaler: device given twice")
            device, args = args[0], args[1:]
        if device is not None and str(device) not in ("cpu", "cuda"):
            raise ValueError(f"GradScaler: device must be 'cpu' or 'cuda', got {device!r}")
        self._setup(*args, **kwargs)
        if str(device) == "cuda" and self._enabled:
            from meshflow import cuda
            if not cuda.is_available():
                raise RuntimeError("GradScaler: no CUDA device is available; use device='cpu' (or enabled=False)")

    def _setup(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
               enabled=True):
        self._enabled = bool(enabled)
        if self._enabled:
            if growth_factor <= 1.0:
                raise ValueError(f"GradScaler: growth_factor must be > 1.0, got {growth_factor}")
            if backoff_factor >= 1.0:
                raise ValueError(f"GradScaler: backoff_factor must be < 1.0, got {backoff_factor}")
        self._init_scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._init_growth_tracker = 0
        self._scale = None
        self._growth_tracker = None
        self._per_optimizer_states = {}
        # The name of the graph whose build() is being traced with this
        # scaler set (nn.Graph.set_grad_scaler), which scales the loss itself.
        self._graph_scaled = None

    def _lazy_init(self, device=None):
        """Makes the scale and growth tracker, on the device of the first
        outputs scaled (as torch's GradScaler does)."""
        if self._scale is None:
            self._scale = _C.full((1,), self._init_scale, dtype=_C.float32, device=device)
            self._growth_tracker = _C.full((1,), self._init_growth_tracker, dtype=_C.int32, device=device)

    def _state(self, optimizer):
        return self._per_optimizer_states.setdefault(id(optimizer), _new_state())

    def _check_scale(self, funcname):
        if self._scale is None:
            raise RuntimeError(f"GradScaler: attempted {funcname} but the scale is not set yet; "
                               "call scaler.scale(loss) earlier in the iteration")

    def scale(self, outputs):
        """outputs * scale (a tensor, or tensors in nested lists/tuples)."""
        if not self._enabled:
            return outputs
        if self._graph_scaled is not None:
            raise RuntimeError(f"GradScaler.scale: {self._graph_scaled} has this scaler (set_grad_scaler) and scales "
                               "the loss itself; call loss.backward() in build() without scale()")
        self._lazy_init(_first_device(outputs))

        def apply(value):
            if isinstance(value, _C.Tensor):
                return value * self._scale
            if isinstance(value, abc.Iterable) and not isinstance(value, (str, bytes)):
                scaled = [apply(v) for v in value]
                return type(value)(scaled) if isinstance(value, (list, tuple)) else scaled
            raise ValueError("GradScaler.scale: outputs must be a tensor or an iterable of tensors")

        return apply(outputs)

    def unscale_(self, optimizer):
        """Divides optimizer's gradients by the scale in place and records
        whether any is inf or NaN; once per optimizer between update() calls."""
        if not self._enabled:
            return
        self._check_scale("unscale_")
        state = self._state(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # On the scale's device, with no host read: float32(1 / double(scale)).
        inv_scale = self._scale.double().reciprocal().float()
        found_inf = _C.zeros((1,), dtype=_C.float32, device=self._scale.device)
        grads = []
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if grad.dtype == _C.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                grads.append(grad)
        _C._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        from meshflow import one_embedding
        if one_embedding._unscale(optimizer, inv_scale):  # the sparse gradients of its embeddings
            found_inf.fill_(1.0)
        state["found_inf"] = found_inf
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscales (unless unscale_ ran) and steps optimizer unless a gradient
        was inf or NaN. Returns optimizer.step()'s value, None when skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale("step")
        state = self._state(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        retval = None
        if self._skips_on_device(optimizer):
            # The updates read the flag themselves: no host read (Note [Skipped updates]).
            with _C._optim._SkipUpdatesIf(state["found_inf"]):
                retval = optimizer.step(*args, **kwargs)
        elif state["found_inf"].item() == 0.0:
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return retval

    @staticmethod
    def _skips_on_device(optimizer):
        """Whether optimizer's update ops take the found_inf flag themselves
        (as torch's fused optimizers do): meshflow's own optimizers over
        local parameters without embedding tables. Others are stepped only
        after the flag is read on the host."""
        from meshflow import one_embedding, optim
        if type(optimizer) not in (optim.SGD, optim.Adam, optim.AdamW, optim.RMSprop, optim.Adagrad):
            return False
        params = [p for group in optimizer.param_groups for p in group["params"]]
        return not any(p.is_global for p in params) and not one_embedding._holds_embeddings(optimizer)

    def update(self, new_scale=None):
        """Backs the scale off after a non-finite step, grows it after
        growth_interval finite steps in a row, or sets new_scale."""
        if not self._enabled:
            return
        self._check_scale("update")
        if new_scale is not None:
            if isinstance(new_scale, _C.Tensor):
                if new_scale.numel() != 1 or new_scale.requires_grad:
                    raise ValueError("new_scale should be a float or a 1-element tensor with requires_grad=False.")
                self._scale.copy_(new_scale.reshape(1))
            else:
                self._scale.fill_(float(new_scale))
        else:
            found_infs = [s["found_inf"] for s in self._per_optimizer_states.values() if s["found_inf"] is not None]
            if not found_infs:
                raise RuntimeError("No inf checks were recorded prior to update.")
            found_inf = found_infs[0]
            for other in found_infs[1:]:
                found_inf = found_inf + other
            _C._amp_update_scale_(self._scale, self._growth_tracker, found_inf, self._growth_factor,
                                  self._backoff_factor, self._growth_interval)
        self._per_optimizer_states = {}

    def get_scale(self):
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale.item()

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self):
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale.fill_(self._init_scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(self._init_growth_tracker)


def _first_device(value):
    """The device of the first tensor in value (nested lists and tuples), or None."""
    if isinstance(value, _C.Tensor):
        return value.device
    if isinstance(value, (list, tuple)):
        for v in value:
            device = _first_device(v)
            if device is not None:
                return device
    return None
