"""meshflow.distributed.optim: ZeroRedundancyOptimizer (ZeRO stage 1), as
torch.distributed.optim.

    model = DistributedDataParallel(net)
    opt = ZeroRedundancyOptimizer(model.parameters(), mf.optim.AdamW, lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()

The parameters are split over the ranks of the group (greedily by size,
largest first, within each parameter group, as PyTorch does); each rank
keeps the optimizer state of its own share only and updates only those
parameters from the full gradients (which DistributedDataParallel has
already reduced), then every rank's updated parameters are broadcast, one
flat buffer per owner and dtype. With AdamW that is 8 bytes of state per
parameter over N ranks instead of on each. Results equal the wrapped
optimizer's on one process (docs/memory.md). Learning rates set on its
param_groups reach the local optimizer at each step, and the
meshflow.optim.lr_scheduler classes take a ZeroRedundancyOptimizer.

state_dict() follows PyTorch: consolidate_state_dict(to=r) on every rank
first gathers the shards on rank r, whose state_dict() then is the
ordinary optimizer state dict (loadable by the optimizer class in one
process, and by load_state_dict here on any number of ranks).
"""
import collections.abc as _abc

import meshflow as _mf
from meshflow import distributed as _dist

__all__ = ["ZeroRedundancyOptimizer"]


class _Group(_abc.MutableMapping):
    """One parameter group: its parameter list here, every option in the
    group of an optimizer over all the parameters that never steps (so the
    lr_scheduler classes, which take meshflow's optimizers, drive it)."""

    def __init__(self, params, options):
        self._params, self._options = params, options

    def __getitem__(self, key):
        return self._params if key == "params" else self._options[key]

    def __setitem__(self, key, value):
        if key == "params":
            raise ValueError("ZeroRedundancyOptimizer: a group's params cannot be replaced (use add_param_group)")
        self._options[key] = value

    def __delitem__(self, key):
        raise ValueError(f"ZeroRedundancyOptimizer: a group's {key!r} cannot be removed")

    def __iter__(self):
        return iter(list(self._options.keys()))

    def __len__(self):
        return len(list(self._options.keys()))

    def __repr__(self):
        return repr(dict(self.items()))


def _groups(params, optimizer_class, defaults):
    """The optimizer over all the parameters (every option resolved as the
    class resolves it; it keeps no state) and its groups."""
    params = list(params)
    if not params:
        raise ValueError("ZeroRedundancyOptimizer: optimizer got an empty parameter list")
    groups = params if isinstance(params[0], dict) else [{"params": params}]
    groups = [dict(g, params=list(g["params"])) for g in groups]
    whole = optimizer_class(groups, **defaults)
    return whole, [_Group(g["params"], live) for g, live in zip(groups, whole.param_groups)]


class ZeroRedundancyOptimizer:
    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view=False,
                 overlap_with_ddp=False, **defaults):
        if overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer: overlap_with_ddp=True is not supported; the "
                                      "step runs after backward")
        self.optimizer_class = optimizer_class
        self.process_group = process_group
        self._defaults = defaults
        # _whole: the options of every group, for schedulers (_Group).
        self._lr_target, self.param_groups = _groups(params, optimizer_class, defaults)
        self._rank = _dist.get_rank(process_group)
        self._world = _dist.get_world_size(process_group)
        self._partition()
        self._consolidated = None

    # --- partition ---------------------------------------------------------------------------------
    def _partition(self):
        """owner[i]: the group rank updating global parameter i (in order
        over the groups), largest parameters first to the least loaded rank."""
        self._params = [p for group in self.param_groups for p in group["params"]]
        seen = set()
        for i, p in enumerate(self._params):
            if p.is_global:
                raise ValueError(f"ZeroRedundancyOptimizer: parameter {i} is a global tensor; ZeroRedundancyOptimizer "
                                 "shards the optimizer state of a replicated (DistributedDataParallel) model")
            if id(p) in seen:
                raise ValueError("ZeroRedundancyOptimizer: a parameter appears twice in the parameter groups")
            seen.add(id(p))
        self._owner = [0] * len(self._params)
        start = 0
        for group in self.param_groups:
            load = [0] * self._world
            indices = range(start, start + len(group["params"]))
            for i in sorted(indices, key=lambda i: -self._params[i].numel()):
                r = min(range(self._world), key=lambda r: load[r])
                self._owner[i] = r
                load[r] += self._params[i].numel()
            start += len(group["params"])
        local = []
        for group in self.param_groups:
            mine = [p for p in group["params"] if self._owner[self._index(p)] == self._rank]
            local.append(dict(group, params=mine))
        self._local_groups = local
        has_any = any(g["params"] for g in local)
        self.optim = self.optimizer_class(local, **self._defaults) if has_any else None

    def _index(self, p):
        for i, q in enumerate(self._params):
            if q is p:
                return i
        raise KeyError("parameter not in this optimizer")

    # --- optimizer API -----------------------------------------------------------------------------
    @property
    def state(self):
        """{parameter: state} of this rank's parameters."""
        if self.optim is None:
            return {}
        mine = [p for i, p in enumerate(self._params) if self._owner[i] == self._rank]
        return {mine[k]: value for k, value in self.optim.state_dict()["state"].items()}

    def _sync_hyperparameters(self):
        if self.optim is None:
            return
        for group, local in zip(self.param_groups, self.optim.param_groups):
            for key, value in group.items():
                if key != "params":
                    local[key] = value

    def zero_grad(self, set_to_none=True):
        for p in self._params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with _mf.enable_grad():
                loss = closure()
        self._sync_hyperparameters()
        if self.optim is not None:
            self.optim.step()
        self._broadcast_parameters()
        return loss

    def _broadcast_parameters(self):
        """Every owner's updated parameters to every rank: one flat buffer
        per (owner, dtype)."""
        if self._world == 1:
            return
        ranks = _group_ranks(self.process_group, self._world)
        with _mf.no_grad():
            for r in range(self._world):
                by_dtype = {}
                for i, p in enumerate(self._params):
                    if self._owner[i] == r:
                        by_dtype.setdefault(str(p.dtype), []).append(p)
                for params in by_dtype.values():
                    if r == self._rank:
                        flat = _mf.cat([p.detach().reshape(-1) for p in params])
                    else:
                        flat = _mf.empty(sum(p.numel() for p in params), dtype=params[0].dtype)
                    _dist.broadcast(flat, ranks[r], group=self.process_group)
                    if r != self._rank:
                        offset = 0
                        for p in params:
                            p.detach().copy_(flat[offset: offset + p.numel()].reshape(p.shape))
                            offset += p.numel()

    def add_param_group(self, param_group):
        """Adds a group (re-partitions: this rank's state is kept for the
        parameters it still owns)."""
        saved = self._local_state_by_index()
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, _mf.Tensor) else list(params)
        self._lr_target.add_param_group(group)
        self.param_groups.append(_Group(group["params"], self._lr_target.param_groups[-1]))
        self._partition()
        self._load_local_state(saved)

    # --- state dicts ---------------------------------------------------------------------------------
    def _local_state_by_index(self):
        """{global index: state} of this rank's parameters."""
        if self.optim is None:
            return {}
        local = self.optim.state_dict()["state"]
        mine = [i for i in range(len(self._params)) if self._owner[i] == self._rank]
        return {mine[k]: value for k, value in local.items()}

    def _load_local_state(self, states):
        if self.optim is None:
            return
        local = self.optim.state_dict()
        mine = [i for i in range(len(self._params)) if self._owner[i] == self._rank]
        local["state"] = {k: states[i] for k, i in enumerate(mine) if i in states}
        self.optim.load_state_dict(local)

    def consolidate_state_dict(self, to=0):
        """Gathers every rank's optimizer state on world rank `to` (call it
        on every rank)."""
        gathered = [None] * self._world
        _dist.all_gather_object(gathered, self._local_state_by_index(), group=self.process_group)
        if _dist.get_rank() == to:
            state = {}
            for part in gathered:
                state.update(part)
            self._consolidated = state
        else:
            self._consolidated = None

    def state_dict(self):
        if self._consolidated is None:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Please call "
                               "`consolidate_state_dict(to)` on all ranks beforehand if you meant to save the "
                               "global state.")
        groups = []
        start = 0
        for group in self.param_groups:
            entry = {k: v for k, v in group.items() if k != "params"}
            entry["params"] = list(range(start, start + len(group["params"])))
            start += len(group["params"])
            groups.append(entry)
        return {"state": dict(sorted(self._consolidated.items())), "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Loads an ordinary optimizer state dict (every rank passes the same
        one): each rank keeps the state of the parameters it owns."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"ZeroRedundancyOptimizer.load_state_dict: {len(groups)} parameter groups in the "
                             f"state dict, {len(self.param_groups)} in the optimizer")
        for saved, group in zip(groups, self.param_groups):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError("ZeroRedundancyOptimizer.load_state_dict: loaded state dict contains a parameter "
                                 "group that doesn't match the size of optimizer's group")
            for key, value in saved.items():
                if key != "params":
                    group[key] = value
        self._sync_hyperparameters()
        self._load_local_state({int(k): v for k, v in state_dict["state"].items()})


def _group_ranks(group, size):
    """World rank of each group rank."""
    if group is None:
        return list(range(size))
    ranks = [None] * size
    _dist.all_gather_object(ranks, _dist.get_rank(), group=group)
    return ranks
