"""meshflow.one_embedding: embedding tables of arbitrary 64-bit ids with
sparse, fused optimizer updates, with OneFlow's OneEmbedding names
(docs/embedding.md).

    tables = [mf.one_embedding.make_table_options(mf.one_embedding.make_uniform_initializer(-0.05, 0.05))
              for _ in range(26)]
    embedding = mf.one_embedding.MultiTableEmbedding(
        "sparse", embedding_dim=16, dtype=mf.float32, key_type=mf.int64, tables=tables,
        store_options=mf.one_embedding.make_device_mem_store_options("/tmp/emb", capacity=1 << 20))
    opt = mf.optim.Adam(model.parameters(), lr=1e-3)   # model holds `embedding`
    out = embedding(ids)          # ids (batch, 26), any int64 values -> (batch, 26, 16)
    loss.backward(); opt.step(); opt.zero_grad()

A row exists once its id is looked up, with initial values that depend
only on the id (Note [Embedding rows] in include/meshflow/one_embedding.h).
backward() sums the gradient of each distinct id; the optimizer that holds
the embedding's parameters (its one `shadow` parameter, as OneFlow's) then
updates the touched rows only, by its own rule and hyper-parameters (SGD
with momentum, Adagrad, Adam, AdamW), keeping the rule's state in the row.
Learning-rate schedulers work as for dense parameters.

In a job of several processes the rows are sharded over the ranks by a
hash of the id (Note [Sharded lookups] in include/meshflow/one_embedding.h);
each rank's optimizer updates the rows it owns. GradScaler unscales and checks the sparse gradients with the
dense ones. `Ftrl` (OneFlow's) updates embeddings and dense parameters.
save_snapshot / load_snapshot write and read every row crash-safely, across
rank counts (Note [Embedding snapshots]). make_cached_ssd_store_options
keeps the rows in a file behind an LRU cache in memory. Lookups, gradient
accumulation and updates are ops (Note [Embedding ops]): an embedding,
sharded or not, trains in mf.nn.Graph too (docs/embedding.md).
"""
import json as _json
import os as _os
import shutil as _shutil
import time as _time
import weakref as _weakref

import numpy as _np

import meshflow as _mf
from meshflow._C import _one_embedding

__all__ = ["MultiTableEmbedding", "Ftrl", "make_table_options", "make_uniform_initializer",
           "make_normal_initializer", "make_device_mem_store_options", "make_cached_ssd_store_options"]


def make_uniform_initializer(low, high):
    """New rows uniform in [low, high)."""
    if not low <= high:
        raise ValueError(f"make_uniform_initializer: low must be <= high, got {low} and {high}")
    return {"type": "uniform", "low": float(low), "high": float(high)}


def make_normal_initializer(mean, std):
    """New rows normal(mean, std)."""
    if not std >= 0:
        raise ValueError(f"make_normal_initializer: std must be >= 0, got {std}")
    return {"type": "normal", "mean": float(mean), "std": float(std)}


def make_table_options(initializer):
    """One table (one feature column of the ids) and how its rows start."""
    if not isinstance(initializer, dict) or initializer.get("type") not in ("uniform", "normal"):
        raise TypeError("make_table_options: expected an initializer from make_uniform_initializer or "
                        f"make_normal_initializer, got {initializer!r}")
    return {"initializer": initializer}


def make_device_mem_store_options(persistent_path, capacity, size_factor=1, physical_block_size=512):
    """The whole table in memory (capacity: the rows expected, a sizing hint)."""
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
        raise ValueError(f"make_device_mem_store_options: capacity must be a positive int, got {capacity!r}")
    return {"kind": "device_mem", "persistent_path": str(persistent_path), "capacity": capacity}


def make_cached_ssd_store_options(cache_budget_mb, persistent_path, capacity=None, size_factor=1,
                                  physical_block_size=512, host_cache_budget_mb=0):
    """Rows in a file under persistent_path, with an LRU cache of
    cache_budget_mb MiB in memory (Note [Cached rows] in
    src/one_embedding/row_store.h): tables larger than memory. The cache
    must hold at least the distinct ids of one lookup."""
    if isinstance(cache_budget_mb, bool) or not isinstance(cache_budget_mb, (int, float)) or not cache_budget_mb > 0:
        raise ValueError(f"make_cached_ssd_store_options: cache_budget_mb must be a positive number, got "
                         f"{cache_budget_mb!r}")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"make_cached_ssd_store_options: capacity must be a positive int, got {capacity!r}")
    return {"kind": "cached_ssd", "persistent_path": str(persistent_path), "capacity": capacity,
            "cache_budget_mb": float(cache_budget_mb)}


# Embeddings by their shadow parameter (Optimizer.step finds them here),
# and by the file of their cached store (one embedding per file).
_by_shadow = _weakref.WeakValueDictionary()
_store_files = _weakref.WeakValueDictionary()


def _splitmix64(x):
    x = x + _np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _np.uint64(30))) * _np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _np.uint64(27))) * _np.uint64(0x94D049BB133111EB)
    return x ^ (x >> _np.uint64(31))


def _owner(ids, tables, n):
    """The rank that keeps each (id, table) row: a hash of both, mod n."""
    with _np.errstate(over="ignore"):
        h = _splitmix64(ids.astype(_np.uint64) ^ _splitmix64(tables.astype(_np.uint64) + _np.uint64(1)))
    return (h % _np.uint64(n)).astype(_np.int64)


class MultiTableEmbedding(_mf.nn.Module):
    def __init__(self, name, embedding_dim, dtype, key_type, tables, store_options, default_initializer=None,
                 padding_idx=None, seed=0):
        super().__init__()
        if not isinstance(tables, (list, tuple)) or not tables:
            raise ValueError("MultiTableEmbedding: tables must be a non-empty list of make_table_options(...)")
        if key_type not in (_mf.int64, _mf.int32):
            raise TypeError(f"MultiTableEmbedding: key_type must be meshflow.int64 or meshflow.int32, got {key_type}")
        if not isinstance(store_options, dict) or store_options.get("kind") not in ("device_mem", "cached_ssd"):
            raise ValueError("MultiTableEmbedding: store_options must come from make_device_mem_store_options or "
                             "make_cached_ssd_store_options")
        if padding_idx is not None:
            raise ValueError("MultiTableEmbedding: padding_idx is not supported")
        inits = []
        for k, table in enumerate(tables):
            init = (table or {}).get("initializer", default_initializer) if isinstance(table, dict) else None
            if init is None:
                raise ValueError(f"MultiTableEmbedding: table {k} has no initializer (make_table_options)")
            inits.append(("uniform", init["low"], init["high"]) if init["type"] == "uniform"
                         else ("normal", init["mean"], init["std"]))
        path = store_options["persistent_path"]
        try:
            _os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ValueError(f"MultiTableEmbedding: the persistent path {path!r} cannot be made: {e}") from None
        if not _os.access(path, _os.W_OK | _os.X_OK):
            raise ValueError(f"MultiTableEmbedding: the persistent path {path!r} is not writable")
        self.name = name
        self.seed = seed
        self.embedding_dim = embedding_dim
        self.key_type = key_type
        self.store_options = dict(store_options)
        cache_bytes, store_file = 0, ""
        if store_options["kind"] == "cached_ssd":
            from meshflow import distributed
            rank = distributed.get_rank() if distributed.is_initialized() else 0
            _os.makedirs(_os.path.join(path, "store"), exist_ok=True)
            store_file = _os.path.realpath(_os.path.join(path, "store", f"{name}.rank{rank}.rows"))
            if store_file in _store_files:
                raise ValueError(f"MultiTableEmbedding: the store file {store_file} is in use by another embedding; "
                                 "give each embedding its own name or persistent_path")
            cache_bytes = int(store_options["cache_budget_mb"] * 2 ** 20)
        self._tables = _one_embedding.TableSet(embedding_dim, dtype, inits, seed, cache_bytes, store_file)
        self._table_id = _one_embedding.register(self._tables)  # Note [Embedding ops]
        self._grad_scale = 1.0  # set by a graph's gradient accumulation for its update
        # Sharded over every rank (Note [Sharded lookups] in
        # include/meshflow/one_embedding.h); the exchanges run on that
        # group's communicator, apart from the world's.
        self._ranks = []
        if self._sharded():
            from meshflow import distributed
            self._ranks = list(range(distributed.get_world_size()))
            distributed.new_group(self._ranks)  # made now, on every rank together
        if store_file:
            _store_files[store_file] = self
        # The parameter an optimizer holds for the tables (it has no values).
        self.shadow = _mf.nn.Parameter(_mf.zeros(1, dtype=dtype))
        _one_embedding.register_shadow(self.shadow, self._table_id, self._ranks)
        _weakref.finalize(self, _one_embedding.unregister_shadow, self.shadow._impl_id)
        _by_shadow[self.shadow._impl_id] = self

    @property
    def num_tables(self):
        return self._tables.num_tables

    @property
    def num_rows(self):
        """Rows that exist (ids looked up at least once), over all tables."""
        return self._tables.num_rows

    def forward(self, ids, offsets=None, mode="sum", per_sample_weights=None):
        """ids (batch, num_tables), one column per table -> (batch,
        num_tables, embedding_dim). The bag form, as nn.EmbeddingBag: ids
        1-d and offsets 1-d of batch * num_tables bag starts (bag k is
        sample k // num_tables of table k % num_tables; a last offset equal
        to len(ids) may follow), pooled by mode "sum" or "mean" (optionally
        weighted per id) -> (batch, num_tables, embedding_dim)."""
        if not isinstance(ids, _mf.Tensor) or ids.is_floating_point() or ids.dtype == _mf.bool:
            raise TypeError(f"MultiTableEmbedding: ids must be an integer tensor, got "
                            f"{getattr(ids, 'dtype', type(ids).__name__)}")
        num = self.num_tables
        if ids.is_global:
            return self._global_forward(ids, offsets)
        if offsets is None:
            if ids.dim() != 2 or ids.shape[1] != num:
                raise ValueError(f"MultiTableEmbedding: ids must have shape (batch, {num}) (one column per table), "
                                 f"got {tuple(ids.shape)}")
            batch = ids.shape[0]
            tables = _mf.arange(num, dtype=_mf.int64).repeat(batch)
            return self._lookup(ids.reshape(-1), tables).reshape(batch, num, self.embedding_dim)
        bags, starts = self._bags(ids, offsets)
        tables = bags % num
        rows = self._lookup(ids, tables)
        if per_sample_weights is not None:
            if not isinstance(per_sample_weights, _mf.Tensor) or tuple(per_sample_weights.shape) != tuple(ids.shape):
                raise ValueError(f"MultiTableEmbedding: per_sample_weights must have the shape of ids "
                                 f"{tuple(ids.shape)}")
            if mode != "sum":
                raise ValueError("MultiTableEmbedding: per_sample_weights needs mode='sum'")
            rows = rows * per_sample_weights.reshape(-1, 1).to(rows.dtype)
        pooled = _mf.zeros(len(starts), self.embedding_dim, dtype=rows.dtype).index_add(0, bags, rows)
        if mode == "mean":
            counts = _np.diff(_np.append(starts, ids.shape[0])).clip(min=1)
            pooled = pooled / _mf.tensor(counts, dtype=rows.dtype).reshape(-1, 1)
        elif mode != "sum":
            raise ValueError(f"MultiTableEmbedding: mode must be 'sum' or 'mean', got {mode!r}")
        return pooled.reshape(len(starts) // num, num, self.embedding_dim)

    def _lookup(self, ids, tables, average=True):
        return _one_embedding.lookup(self.shadow, ids.to(_mf.int64), tables, self._table_id, self._ranks, average)

    def _global_forward(self, ids, offsets):
        """Global ids (the global view): each rank looks up its part, and
        the rows come back as a global tensor laid out as the ids; the
        gradients are the global loss's, summed at the owners (Note
        [Sharded lookups] in include/meshflow/one_embedding.h)."""
        ranks = sorted(_np.array(ids.placement.ranks).ravel().tolist())
        if offsets is not None or ids.dim() != 2 or ids.shape[1] != self.num_tables:
            raise ValueError(f"MultiTableEmbedding: global ids must have shape (batch, {self.num_tables}), without "
                             "offsets")
        if len(ids.placement.hierarchy) != 1 or ranks != (self._ranks or [0]) or ids.sbp[0] == _mf.sbp.partial_sum:
            raise ValueError(f"MultiTableEmbedding: global ids must be split or broadcast over all {len(ranks)} "
                             f"ranks on a 1-d placement, got {ids.sbp} on {ids.placement}")
        local = ids.to_local()
        batch = local.shape[0]
        tables = _mf.arange(self.num_tables, dtype=_mf.int64).repeat(batch)
        rows = self._lookup(local.reshape(-1), tables, average=False).reshape(batch, self.num_tables,
                                                                             self.embedding_dim)
        return rows.to_global(placement=ids.placement, sbp=ids.sbp)

    def _bags(self, ids, offsets):
        """(bag of each id, bag starts) of the bag form, checked."""
        if ids.dim() != 1:
            raise ValueError(f"MultiTableEmbedding: with offsets, ids must be 1-d, got shape {tuple(ids.shape)}")
        if not isinstance(offsets, _mf.Tensor) or offsets.dim() != 1 or offsets.is_floating_point():
            raise ValueError("MultiTableEmbedding: offsets must be a 1-d integer tensor")
        starts = offsets.numpy().astype(_np.int64)
        n = ids.shape[0]
        if len(starts) and starts[-1] == n and len(starts) % self.num_tables == 1:
            starts = starts[:-1]  # include_last_offset
        if len(starts) == 0 or len(starts) % self.num_tables:
            raise ValueError(f"MultiTableEmbedding: offsets must hold batch * {self.num_tables} bag starts, got "
                             f"{len(starts)}")
        if starts[0] != 0 or (_np.diff(starts) < 0).any() or starts[-1] > n:
            raise ValueError("MultiTableEmbedding: offsets must start at 0, never decrease and stay within ids "
                             f"({n} ids)")
        bags = _np.repeat(_np.arange(len(starts)), _np.diff(_np.append(starts, n)))
        return _mf.tensor(bags), starts

    def _sharded(self):
        from meshflow import distributed
        return distributed.is_initialized() and distributed.get_world_size() > 1

    def peek(self, ids):
        """The rows of ids now (new ids: their initial values), without
        making rows or recording gradients."""
        return self._tables.peek(ids)

    # Note [Embedding snapshots]: a snapshot is a directory of one file per
    # rank (its rows: values and optimizer state) and a manifest, written
    # under a fresh name; then one small pointer file
    # <persistent_path>/snapshots/<name> is replaced atomically to name it.
    # A crash at any moment leaves the pointer on the previous complete
    # snapshot, which is what load_snapshot reads; older directories are
    # removed only after the pointer moved. Loading on M ranks reads every
    # file and keeps the rows the new sharding gives the rank.
    def _snapshots(self):
        return _os.path.join(self.store_options["persistent_path"], "snapshots")

    def save_snapshot(self, snapshot_name):
        """Writes every row (values and optimizer state) as snapshot
        `snapshot_name`, crash-safe (Note [Embedding snapshots]). Collective
        when sharded: every rank calls it."""
        from meshflow import distributed
        _check_snapshot_name(snapshot_name)
        rank, world = (distributed.get_rank(), distributed.get_world_size()) if self._sharded() else (0, 1)
        root = self._snapshots()
        version = f".{snapshot_name}.{_time.time_ns()}"
        if world > 1:  # one version name for all ranks: rank 0's
            stamp = _mf.tensor([int(version.rsplit(".", 1)[1])])
            distributed.broadcast(stamp, 0)
            version = f".{snapshot_name}.{stamp.item()}"
        directory = _os.path.join(root, version)
        if rank == 0:
            _os.makedirs(directory, exist_ok=True)
        if world > 1:
            distributed.barrier()
        ids, tables, rows = self._tables.export_rows()
        _mf.save({"ids": ids, "tables": tables, "rows": rows}, _os.path.join(directory, f"rank{rank}.safetensors"))
        if _os.environ.get("MESHFLOW_SNAPSHOT_TEST_PAUSE"):  # the crash test kills the job here
            _time.sleep(float(_os.environ["MESHFLOW_SNAPSHOT_TEST_PAUSE"]))
        if world > 1:
            distributed.barrier()
        if rank == 0:
            manifest = {"embedding_dim": self.embedding_dim, "dtype": str(self.shadow.dtype),
                        "num_tables": self.num_tables, "seed": self.seed, "ranks": world,
                        "state_slots": self._tables.state_slots, "state_kind": self._tables.state_kind,
                        "step": self._tables.step}
            _write_atomically(_os.path.join(directory, "manifest.json"), _json.dumps(manifest))
            pointer = _os.path.join(root, snapshot_name)
            previous = _read_pointer(pointer)
            _write_atomically(pointer, version)
            if previous and previous != version:
                _shutil.rmtree(_os.path.join(root, previous), ignore_errors=True)
        if world > 1:
            distributed.barrier()

    def load_snapshot(self, snapshot_name):
        """Replaces every row by those of snapshot `snapshot_name` (saved
        on any number of ranks); the optimizer state and step come back
        too. Raises ValueError for a missing snapshot or one of another
        embedding_dim, dtype or number of tables."""
        from meshflow import distributed
        _check_snapshot_name(snapshot_name)
        rank, world = (distributed.get_rank(), distributed.get_world_size()) if self._sharded() else (0, 1)
        root = self._snapshots()
        version = _read_pointer(_os.path.join(root, snapshot_name))
        if not version:
            raise ValueError(f"MultiTableEmbedding.load_snapshot: no snapshot {snapshot_name!r} in {root}")
        directory = _os.path.join(root, version)
        try:
            with open(_os.path.join(directory, "manifest.json")) as f:
                manifest = _json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"MultiTableEmbedding.load_snapshot: snapshot {snapshot_name!r} has no readable "
                             f"manifest ({e})") from None
        mine = {"embedding_dim": self.embedding_dim, "dtype": str(self.shadow.dtype), "num_tables": self.num_tables}
        for key, value in mine.items():
            if manifest.get(key) != value:
                raise ValueError(f"MultiTableEmbedding.load_snapshot: snapshot {snapshot_name!r} has {key} "
                                 f"{manifest.get(key)!r}, this embedding {value!r}")
        parts = []
        for r in range(int(manifest["ranks"])):
            part = _mf.load(_os.path.join(directory, f"rank{r}.safetensors"))
            keep = _np.ones(part["ids"].shape[0], dtype=bool) if world == 1 else \
                _owner(part["ids"].numpy(), part["tables"].numpy(), world) == rank
            index = _mf.tensor(_np.nonzero(keep)[0])
            parts.append([part["ids"][index], part["tables"][index], part["rows"][index]])
        self._tables.import_rows(_mf.cat([p[0] for p in parts]), _mf.cat([p[1] for p in parts]),
                                 _mf.cat([p[2] for p in parts]), int(manifest["state_slots"]),
                                 manifest["state_kind"], int(manifest["step"]))

    def extra_repr(self):
        return (f"name={self.name!r}, embedding_dim={self.embedding_dim}, num_tables={self.num_tables}, "
                f"rows={self.num_rows}")


def _rule(optimizer, group):
    """(kind, options) of the sparse update an optimizer's group makes."""
    name = type(optimizer).__name__
    common = {"lr": group["lr"], "weight_decay": group.get("weight_decay", 0.0),
              "maximize": bool(group.get("maximize", False))}
    if name == "SGD":
        return "sgd", {**common, "momentum": group["momentum"], "dampening": group["dampening"],
                       "nesterov": bool(group["nesterov"])}
    if name == "Adagrad":
        return "adagrad", {**common, "lr_decay": group["lr_decay"], "eps": group["eps"],
                           "initial_accumulator_value": group["initial_accumulator_value"]}
    if name in ("Adam", "AdamW"):
        if group.get("amsgrad"):
            raise ValueError("MultiTableEmbedding: Adam with amsgrad has no sparse update")
        beta1, beta2 = group["betas"]
        return "adam", {**common, "beta1": beta1, "beta2": beta2, "eps": group["eps"],
                        "decoupled_weight_decay": name == "AdamW"}
    if isinstance(optimizer, Ftrl):
        return "ftrl", {**common, **{k: group[k] for k in ("lr_power", "initial_accumulator_value", "lambda1",
                                                             "lambda2", "beta")}}
    raise ValueError(f"MultiTableEmbedding: {name} has no sparse update (SGD, Adagrad, Adam, AdamW, Ftrl)")


def _optimizer_step(optimizer):
    """After the optimizer's dense step: the sparse update of every
    embedding whose shadow parameter it holds (an op: a graph's trace
    records it, Note [Embedding ops])."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            embedding = _by_shadow.get(p._impl_id)
            if embedding is not None:  # every step counts (Adam's bias correction), rows touched or not
                kind, options = _rule(optimizer, group)
                _one_embedding.apply_update(embedding.shadow, embedding._table_id, kind, options,
                                            embedding._grad_scale)
                embedding._grad_scale = 1.0


def _scale_accumulated(optimizers, factor):
    """A graph's gradient accumulation: the next update of the embeddings
    these optimizers hold scales their summed gradients by factor."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for p in group["params"]:
                embedding = _by_shadow.get(p._impl_id)
                if embedding is not None:
                    embedding._grad_scale = factor


def _check_snapshot_name(name):
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\0" in name:
        raise ValueError(f"MultiTableEmbedding: a snapshot name is a non-empty file name, got {name!r}")


def _write_atomically(path, text):
    temporary = f"{path}.tmp{_os.getpid()}"
    with open(temporary, "w") as f:
        f.write(text)
        f.flush()
        _os.fsync(f.fileno())
    _os.replace(temporary, path)


def _read_pointer(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _holds_embeddings(optimizer):
    """Whether optimizer holds the parameters of an embedding table set."""
    return any(_by_shadow.get(p._impl_id) is not None for group in optimizer.param_groups for p in group["params"])


def _unscale(optimizer, factor):
    """GradScaler.unscale_: multiplies the pending gradients of the
    embeddings the optimizer holds by factor (a one-element tensor, read
    only when there are such gradients); True if any holds an inf or NaN. A
    sharded embedding agrees over the ranks (each checks the rows it owns),
    so a plain GradScaler skips the step on every rank alike."""
    found = False
    sharded = False
    for group in optimizer.param_groups:
        for p in group["params"]:
            embedding = _by_shadow.get(p._impl_id)
            if embedding is None:
                continue
            if not isinstance(factor, float):
                factor = float(factor.item())
            embedding._tables.scale_gradients(factor)
            found = found or embedding._tables.pending_non_finite()
            sharded = sharded or embedding._sharded()
    if sharded:
        from meshflow import distributed
        flag = _mf.tensor([1.0 if found else 0.0])
        distributed.all_reduce(flag)
        found = flag.item() > 0
    return found


def _optimizer_zero_grad(optimizer):
    for group in optimizer.param_groups:
        for p in group["params"]:
            embedding = _by_shadow.get(p._impl_id)
            if embedding is not None:
                embedding._tables.clear_gradients()
                _one_embedding.take_tokens(embedding._tables)


class Ftrl:
    """FTRL-Proximal, as OneFlow's one_embedding.Ftrl, for MultiTableEmbedding
    rows (fused, in the row) and dense parameters alike:

        g = grad + weight_decay * w
        n' = n + g^2
        sigma = (n'^(-lr_power) - n^(-lr_power)) / lr
        z = z + g - sigma * w
        w = 0 if |z| <= lambda1 else (sign(z) lambda1 - z) / ((beta + n'^(-lr_power)) / lr + lambda2)

    with n starting at initial_accumulator_value and z at 0. param_groups,
    state, step() and zero_grad() behave as torch.optim's (learning-rate
    schedulers are not supported for it)."""

    def __init__(self, params, lr=0.001, weight_decay=0.0, lr_power=-0.5, initial_accumulator_value=0.1,
                 lambda1=0.0, lambda2=0.0, beta=0.0):
        if not lr > 0:
            raise ValueError(f"Ftrl: lr must be > 0, got {lr}")
        if not initial_accumulator_value > 0:
            raise ValueError(f"Ftrl: initial_accumulator_value must be > 0, got {initial_accumulator_value}")
        if lr_power > 0:
            raise ValueError(f"Ftrl: lr_power must be <= 0, got {lr_power}")
        if lambda1 < 0 or lambda2 < 0 or beta < 0 or weight_decay < 0:
            raise ValueError("Ftrl: lambda1, lambda2, beta and weight_decay must be >= 0")
        defaults = dict(lr=lr, weight_decay=weight_decay, lr_power=lr_power,
                        initial_accumulator_value=initial_accumulator_value, lambda1=lambda1, lambda2=lambda2,
                        beta=beta)
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        self.defaults = defaults
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.state = {}

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with _mf.enable_grad():
                loss = closure()
        with _mf.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state.setdefault(p._impl_id, {
                        "accumulator": _mf.full_like(p, group["initial_accumulator_value"]),
                        "z": _mf.zeros_like(p)})
                    self._dense_update(p, p.grad, state, group)
        _optimizer_step(self)
        return loss

    @staticmethod
    def _dense_update(w, grad, state, group):
        lr, power = group["lr"], group["lr_power"]
        g = grad + group["weight_decay"] * w
        n, z = state["accumulator"], state["z"]
        n_new = n + g * g
        sigma = (n_new ** -power - n ** -power) / lr
        z.add_(g - sigma * w)
        n.copy_(n_new)
        lambda1 = group["lambda1"]
        new = (_mf.sign(z) * lambda1 - z) / ((group["beta"] + n_new ** -power) / lr + group["lambda2"])
        w.copy_(_mf.where(z.abs() <= lambda1, _mf.zeros_like(w), new))

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.zero_()
        _optimizer_zero_grad(self)

    def __repr__(self):
        return f"Ftrl({', '.join(f'{k}={v}' for k, v in self.defaults.items())})"
