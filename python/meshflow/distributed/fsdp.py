"""meshflow.distributed.fsdp: fully_shard (ZeRO-3), as torch.distributed.fsdp.

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = mf.optim.AdamW(model.parameters(), lr=1e-3)   # after fully_shard
    for x, y in loader:                                # each rank its own batch part
        loss = F.cross_entropy(model(x), y)
        loss.backward()                                # .grad: sharded means over ranks
        opt.step(); opt.zero_grad()

fully_shard(module) makes the module a unit: every parameter of its
subtree not already in a unit below it becomes a global tensor split S(0)
over the mesh (one that has fewer rows than ranks, or no dims, stays
replicated), so each rank keeps 1/N of the parameters, of their gradients
and (with an optimizer built on them) of the optimizer state. Before the
unit's forward each parameter is all-gathered into a whole local tensor that
the layers use in place of the shard; after it the whole tensors are
dropped (reshard_after_forward=True: what backward needs of them is gathered
again when backward first reads it, Note [Gathering for backward]) or kept
until backward (False, ZeRO-2's memory). In backward each whole parameter's
gradient is reduce-scattered (all-reduced for a replicated one) into its
shard and divided by the number of ranks, so `.grad` is the mean over ranks
as under DistributedDataParallel. Inputs and outputs are local tensors.

The parameters are global tensors, so clip_grad_norm_ takes the norm over
all shards, state_dict() holds the shards (mf.save and
meshflow.distributed.checkpoint write them once; load_state_dict lays a
whole state dict out), and the optimizer updates each rank's rows only.
"""
import weakref as _weakref

import meshflow as _mf
from meshflow.autograd import Function as _Function

import sys as _sys

from meshflow.distributed import sharded_grad_scaler
from meshflow.distributed.sharded_grad_scaler import ShardedGradScaler

# torch's path: torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler
_sys.modules[__name__ + ".sharded_grad_scaler"] = sharded_grad_scaler

__all__ = ["fully_shard", "FSDPModule", "MixedPrecisionPolicy", "ShardedGradScaler"]

_B, _S, _P = _mf.sbp.broadcast, _mf.sbp.split, _mf.sbp.partial_sum

# _impl_id of every parameter a unit replaced or made -> the unit: ties across
# units are refused. Nothing here keeps a unit (or its module) alive: a unit
# lives in its module's __dict__ and holds its modules by weak reference.
_claimed = _weakref.WeakValueDictionary()
# data_ptr of a whole parameter gathered for a running forward -> (end, unit, index, tensor).
_gathered = {}
# Units whose forward is running, innermost last.
_active = []


class _FSDPMeta(type):
    def __instancecheck__(cls, obj):
        return getattr(obj, "_fsdp_unit", None) is not None or super().__instancecheck__(obj)


class FSDPModule(metaclass=_FSDPMeta):
    """What fully_shard adds to a module (isinstance(m, FSDPModule) holds for
    every module fully_shard was applied to)."""

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """With False, backward accumulates each whole parameter's gradient
        on this rank instead of reducing it (gradient accumulation); the
        first backward with True reduces what accumulated."""
        for unit in _units(self, recurse):
            unit.sync = bool(requires_gradient_sync)

    def set_reshard_after_forward(self, reshard_after_forward, *, recurse=True):
        for unit in _units(self, recurse):
            unit.reshard_after_forward = bool(reshard_after_forward)


class MixedPrecisionPolicy:
    """Accepted for PyTorch's signature; only the default (no casts) is
    supported: use mf.autocast for low-precision compute."""

    def __init__(self, param_dtype=None, reduce_dtype=None, output_dtype=None, cast_forward_inputs=True):
        if param_dtype is not None or reduce_dtype is not None or output_dtype is not None:
            raise NotImplementedError("MixedPrecisionPolicy: only the default policy is supported; run the "
                                      "forward under mf.autocast for bfloat16 compute")


def _units(module, recurse):
    mods = [m for _, m in _subtree(module, stop_at_units=False)] if recurse else [module]
    return [m._fsdp_unit for m in mods if getattr(m, "_fsdp_unit", None) is not None]


def _subtree(module, stop_at_units, prefix=""):
    """(dotted name, module) of module and its descendants, depth first;
    with stop_at_units, not below another unit's root."""
    yield prefix, module
    for name, child in module.named_children():
        if stop_at_units and getattr(child, "_fsdp_unit", None) is not None:
            continue
        yield from _subtree(child, stop_at_units, f"{prefix}.{name}" if prefix else name)


class _Unshard(_Function):
    """shard -> the whole local parameter; backward reduces its gradient
    into the shard's layout."""

    @staticmethod
    def forward(ctx, param, unit, index):
        ctx.unit, ctx.index = unit, index
        return unit.gather(index)

    @staticmethod
    def backward(ctx, grad):
        ctx.unit.regathered.pop(ctx.index, None)  # backward is done with the whole parameter
        return ctx.unit.reduce(ctx.index, grad), None, None


class _Unit:
    def __init__(self, placement, reshard_after_forward):
        self.placement = placement
        self.world = len(placement.ranks)
        self.reshard_after_forward = reshard_after_forward
        self.sync = True
        self.params, self.slots, self.sharded = [], [], []
        self.full, self.regathered, self.accumulated = [], {}, []
        self.hooks_pushed = False
        self.resolved = None

    def gather(self, i):
        with _mf.no_grad():
            p = self.params[i].detach()
            if not self.sharded[i] or self.world == 1:  # the shard is the whole parameter
                return p.to_local()
            return p.to_global(sbp=_B).to_local()

    def regather(self, i):
        if i not in self.regathered:
            self.regathered[i] = self.gather(i)
        return self.regathered[i]

    def reduce(self, i, grad):
        if self.accumulated[i] is not None:
            grad = grad + self.accumulated[i]
            self.accumulated[i] = None
        if not self.sync:
            self.accumulated[i] = grad.detach().clone()
            return None
        with _mf.no_grad():
            layout = _S(0) if self.sharded[i] else _B
            if self.world == 1:
                return grad.detach().to_global(placement=self.placement, sbp=layout)
            g = (grad.detach() / float(self.world)).to_global(placement=self.placement, sbp=_P)
            return g.to_global(sbp=layout)

    # --- forward hooks ---------------------------------------------------------------------------
    def pre_forward(self, module):
        if self in _active:  # a forward of this unit raised before its end: undo what it left
            _unwind(self)
        self.regathered.clear()
        # The modules holding each slot, for this forward (paths: Python
        # wrappers of a C++ layer's children come and go).
        self.resolved = [[(module.get_submodule(path) if path else module, name) for path, name in slots]
                         for slots in self.slots]
        track = _mf.is_grad_enabled()
        for i, p in enumerate(self.params):
            full = _Unshard.apply(p, self, i) if track and p.requires_grad else self.gather(i)
            self.full[i] = full
            for mod, name in self.resolved[i]:
                mod._swap_parameter(name, full)
            if full.numel() > 0:
                _gathered[full.data_ptr()] = (full.data_ptr() + full.numel() * full.element_size(), self, i, full)
        if track and self.reshard_after_forward:
            _mf._C._push_saved_tensors_hooks(_pack, _unpack)
            self.hooks_pushed = True
        _active.append(self)

    def end_forward(self):
        for i, p in enumerate(self.params):
            for mod, name in (self.resolved[i] if self.resolved else ()):
                mod._swap_parameter(name, p)
            full = self.full[i]
            if full is not None and full.numel() > 0:
                _gathered.pop(full.data_ptr(), None)
            self.full[i] = None
        self.resolved = None
        if self.hooks_pushed:
            _mf._C._pop_saved_tensors_hooks()
            self.hooks_pushed = False
        if self in _active:
            _active.remove(self)


def _pre_forward_hook(module, args):
    module._fsdp_unit.pre_forward(module)


def _post_forward_hook(module, args, output):  # also when forward raised (always_call)
    module._fsdp_unit.end_forward()


def _unwind(unit):
    """Ends the forwards a raised exception left open, innermost first, down to unit."""
    while _active:
        top = _active[-1]
        top.end_forward()
        if top is unit:
            return


# Note [Gathering for backward]: inside a unit's forward (with
# reshard_after_forward), every tensor an op saves for backward goes through
# _pack. A tensor in the memory of a whole parameter gathered for this
# forward (the parameter, or a view such as linear's weight.t()) is kept as
# (unit, index, sizes, strides, offset) instead, so the graph does not hold
# the whole parameter; _unpack gathers it again when backward first reads it
# and the view is rebuilt on it. The gathered copy is shared by the unit's
# backward reads and dropped when the parameter's gradient has been reduced.
_PACKED = object()


def _pack(t):
    if _gathered and t.numel() > 0:
        ptr = t.data_ptr()
        for start, (end, unit, i, full) in _gathered.items():
            if start <= ptr < end and t.dtype == full.dtype:
                offset = (ptr - start) // full.element_size()
                return (_PACKED, unit, i, tuple(t.shape), tuple(t.stride()), offset)
    return t


def _unpack(packed):
    if isinstance(packed, tuple) and len(packed) == 6 and packed[0] is _PACKED:
        _, unit, i, sizes, strides, offset = packed
        full = unit.regather(i)
        return full.as_strided(sizes, strides, full.storage_offset() + offset)
    return packed


def _placement_of(mesh):
    world = _mf.env.get_world_size()
    if mesh is None:
        return _mf.placement("cpu", list(range(world)))
    placement = getattr(mesh, "placement", mesh)
    if not isinstance(placement, _mf.placement):
        raise TypeError(f"fully_shard: mesh must be a DeviceMesh or a meshflow.placement, got {type(mesh).__name__}")
    if len(placement.hierarchy) != 1:
        raise NotImplementedError(f"fully_shard: a {len(placement.hierarchy)}-D mesh (hybrid sharding) is not "
                                  "supported; pass a 1-D mesh")
    if _mf.env.get_rank() not in placement.ranks:
        raise ValueError(f"fully_shard: this rank ({_mf.env.get_rank()}) is not in the mesh {placement.ranks}")
    return placement


def fully_shard(module, *, mesh=None, reshard_after_forward=True, shard_placement_fn=None, mp_policy=None,
                offload_policy=None, ignored_params=None):
    """Shards module's parameters over mesh (a 1-D DeviceMesh or placement;
    default all ranks) and returns module, now also an FSDPModule. Apply it
    to submodules first, then to the root. Every rank calls it, with the
    same model; the parameters start as rank 0's values."""
    from meshflow.nn import Module
    from meshflow.nn.parallel import DistributedDataParallel
    if not isinstance(module, Module):
        raise TypeError(f"fully_shard: expected a meshflow.nn.Module, got {type(module).__name__}")
    if isinstance(module, DistributedDataParallel) or any(
            getattr(m, "_ddp_wrapped", False) for _, m in _subtree(module, stop_at_units=False)):
        raise ValueError("fully_shard: the module is wrapped by DistributedDataParallel; apply fully_shard to the "
                         "plain module instead (it already averages gradients over the ranks)")
    if getattr(module, "_fsdp_unit", None) is not None:
        raise ValueError("fully_shard: fully_shard was already applied to this module")
    for name, value in (("shard_placement_fn", shard_placement_fn), ("offload_policy", offload_policy)):
        if value is not None:
            raise NotImplementedError(f"fully_shard: {name} is not supported (pass None)")
    if mp_policy is not None and not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"fully_shard: mp_policy must be a MixedPrecisionPolicy, got {type(mp_policy).__name__}")
    placement = _placement_of(mesh)
    ignored = {p._impl_id for p in (ignored_params or ())}
    unit = _Unit(placement, bool(reshard_after_forward))

    # Every slot of every parameter the unit manages (a tied parameter has several).
    order, slots = [], {}
    for prefix, mod in _subtree(module, stop_at_units=True):
        for name, p in list(mod.named_parameters(recurse=False)):
            if p is None or p._impl_id in ignored:
                continue
            full_name = f"{prefix}.{name}" if prefix else name
            if p.is_global:
                owner = _claimed.get(p._impl_id)
                if owner is not None and owner is not unit:
                    raise ValueError(f"fully_shard: parameter '{full_name}' belongs to another fully_shard unit "
                                     "(tied weights must be in one unit: apply fully_shard to a module holding "
                                     "both uses)")
                raise ValueError(f"fully_shard: parameter '{full_name}' is a global tensor (sbp {p.sbp}); "
                                 "fully_shard shards a replicated local model")
            if p._impl_id in _claimed:
                raise ValueError(f"fully_shard: parameter '{full_name}' is also used by another fully_shard unit "
                                 "(tied weights must be in one unit: apply fully_shard to a module holding both "
                                 "uses)")
            if p._impl_id not in slots:
                slots[p._impl_id] = []
                order.append((full_name, p))
            slots[p._impl_id].append((prefix, name, mod))

    world = len(placement.ranks)
    with _mf.no_grad():
        for full_name, p in order:
            if world > 1:
                _mf.distributed.broadcast(p.detach().contiguous() if not p.is_contiguous() else p.detach(),
                                          placement.ranks[0])
            whole = p.detach().to_global(placement=placement, sbp=_B)
            sharded = p.dim() > 0 and p.shape[0] >= world
            shard = whole.to_global(sbp=_S(0)) if sharded else whole
            new = _mf.nn.Parameter(shard.detach().clone() if sharded else shard.detach(),
                                   requires_grad=p.requires_grad)
            for _, name, mod in slots[p._impl_id]:
                setattr(mod, name, new)
            _claimed[p._impl_id] = unit
            _claimed[new._impl_id] = unit
            unit.params.append(new)
            unit.slots.append([(path, name) for path, name, _ in slots[p._impl_id]])
            unit.sharded.append(sharded)
            unit.full.append(None)
            unit.accumulated.append(None)
        if world > 1:
            for _, mod in _subtree(module, stop_at_units=True):
                for b in mod.buffers(recurse=False):
                    if b is not None and not b.is_global:
                        _mf.distributed.broadcast(b.detach(), placement.ranks[0])
    # The replaced parameters stay alive (so their _impl_id in _claimed names
    # no other tensor) but give their memory back.
    unit.originals = [p for _, p in order]
    with _mf.no_grad():
        for p in unit.originals:
            p.data = _mf.empty(0, dtype=p.dtype)
    module._fsdp_unit = unit
    module.register_forward_pre_hook(_pre_forward_hook)
    module.register_forward_hook(_post_forward_hook, always_call=True)
    _become_fsdp_module(module)
    return module


def _become_fsdp_module(module):
    cls = type(module)
    if issubclass(cls, FSDPModule):
        return
    try:
        module.__class__ = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    except TypeError:  # a built-in layer: its layout is fixed, so the methods go on the instance
        for name in ("set_requires_gradient_sync", "set_reshard_after_forward"):
            setattr(module, name, _weak_method(getattr(FSDPModule, name), module))


def _weak_method(fn, module):
    """fn bound to module through a weak reference (a bound method in the
    module's own __dict__ would keep it alive)."""
    ref = _weakref.ref(module)

    def method(*args, **kwargs):
        return fn(ref(), *args, **kwargs)

    method.__name__ = method.__qualname__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method
