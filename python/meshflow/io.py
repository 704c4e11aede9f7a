"""meshflow.io: checkpoints in the safetensors format.

save(obj, f) / load(f) store a tree of None, bool, int, float, str, Tensor,
list and dict (str keys) in one safetensors file, like torch.save / torch.load
for state dicts (tuples load as lists). save_file / load_file read and write
plain safetensors files of named tensors, as the safetensors package does.
Every save is atomic: the file holds either its old content or the new one.
"""
import json
import math
import os

from meshflow._C import _io

__all__ = ["save", "load", "save_file", "load_file", "load_file_with_metadata"]


def save(obj, f):
    """Saves obj (None, bool, int, float, str, Tensor, list, tuple, dict) to path f.

    With global tensors in obj, the save is collective (every rank calls it):
    each shard is written once, by one rank, to f + ".shard<rank>", and the
    first rank writes f with the rest of obj and an index of the shards (see
    docs/distributed.md). load(f) reassembles the whole tensors, so the
    checkpoint loads under any placement, SBP or world size.
    """
    path = os.fspath(f)
    if not any(True for _ in _global_tensors(obj)):
        _io.save(obj, path)
        return
    if not isinstance(path, str) or not path or path.endswith(os.sep) or os.path.isdir(path):
        raise ValueError(f"save: {path!r} does not name a file")
    _save_global(obj, path)


def load(f, verify=True):
    """Loads what save wrote; a safetensors file from elsewhere loads as {name: tensor}.

    f may also be a directory that meshflow.distributed.checkpoint.save wrote.

    Global tensors of a checkpoint saved by several ranks come back as whole
    local tensors; load_state_dict lays them out like the module's
    parameters. save stores a CRC-32C of every tensor; with verify (the
    default) a tensor whose bytes changed raises meshflow.errors.Error naming
    it, and verify=False skips the check.
    """
    path = os.fspath(f)
    if isinstance(path, str) and os.path.isdir(path):  # a meshflow.distributed.checkpoint directory
        path = os.path.join(path, _CHECKPOINT_FILE)
    obj = _io.load(path, verify)
    if isinstance(obj, dict) and _GLOBAL_KEY in obj:
        return _load_global(obj[_GLOBAL_KEY], path, verify)
    return obj


# --- global checkpoints ---------------------------------------------------------

_GLOBAL_KEY = "__meshflow_global_checkpoint__"
# The checkpoint file inside a meshflow.distributed.checkpoint directory.
_CHECKPOINT_FILE = "checkpoint.safetensors"


def _global_tensors(obj, key="", depth=0):
    """(dotted key, tensor) of the global tensors in obj. Stops at a depth
    beyond what save accepts, which then reports the nesting itself."""
    from meshflow import Tensor
    if depth > 64:
        return
    if isinstance(obj, Tensor):
        if obj.is_global:
            yield key, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _global_tensors(v, f"{key}.{k}" if key else str(k), depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _global_tensors(v, f"{key}.{i}" if key else str(i), depth + 1)


def _split_range(n, parts, index):
    base, extra = divmod(n, parts)
    begin = index * base + min(index, extra)
    return begin, begin + base + (1 if index < extra else 0)


def _shards(shape, placement, sbp):
    """[(rank, offsets, sizes)] of the ranks that write a distinct shard: for
    every split, each part once (the rank at coordinate 0 of the other axes)."""
    import numpy as np
    ranks = np.array(placement.ranks).reshape(-1).tolist()
    mesh = list(placement.hierarchy)
    out = []
    for flat, rank in enumerate(ranks):
        coords = list(np.unravel_index(flat, mesh))
        if any(coords[a] != 0 for a, s in enumerate(sbp) if s.axis is None):
            continue
        offsets, sizes = [0] * len(shape), list(shape)
        for a, s in enumerate(sbp):
            if s.axis is not None:
                b, e = _split_range(sizes[s.axis], mesh[a], int(coords[a]))
                offsets[s.axis] += b
                sizes[s.axis] = e - b
        out.append((int(rank), offsets, sizes))
    return out


def _save_global(obj, path):
    import meshflow as mf
    rank = mf.env.get_rank()
    index, mine = {}, {}

    def replace(value, key=""):
        if isinstance(value, mf.Tensor) and value.is_global:
            t = value.detach()
            sbp = t.sbp
            if mf.sbp.partial_sum in sbp:  # partial sums are not disjoint parts: reduce them
                sbp = tuple(mf.sbp.broadcast if s == mf.sbp.partial_sum else s for s in sbp)
                t = t.to_global(sbp=sbp)
            shards = _shards(list(t.shape), t.placement, sbp)
            index[key] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("meshflow.", ""), "shards": shards}
            if any(r == rank for r, _, _ in shards):
                mine[key] = t.to_local().contiguous()
            return {"__global__": key}
        if isinstance(value, dict):
            return {k: replace(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [replace(v, f"{key}.{i}" if key else str(i)) for i, v in enumerate(value)]
        return value

    tree = replace(obj)
    if mine:
        save_file(mine, f"{path}.shard{rank}")
    mf.env.barrier()
    if rank == 0:
        _io.save({_GLOBAL_KEY: {"index": json.dumps(index), "tree": tree}}, path)
    mf.env.barrier()


# Shards per tensor a checkpoint may list (the exact-cover check is quadratic).
_MAX_SHARDS = 4096


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _check_index(meta, path):
    """The index of a global checkpoint, validated before anything is
    allocated: JSON types, dtypes, shapes, and shard boxes that lie inside
    the global shape and cover it exactly once. Raises meshflow.errors.Error
    (never KeyError or JSONDecodeError) for anything else."""
    import meshflow as mf

    def bad(*parts):
        return mf.errors.Error(f"load: '{path}' is not a valid global checkpoint: " + "".join(map(str, parts)))

    if not isinstance(meta, dict) or not isinstance(meta.get("index"), str) or "tree" not in meta:
        raise bad("its entry must hold an index (a string) and a tree")
    try:
        index = json.loads(meta["index"])
    except ValueError as e:  # JSONDecodeError, or a number too deep or too long
        raise bad(f"the index is not valid JSON ({e})") from None
    except RecursionError:
        raise bad("the index is nested too deeply") from None
    if not isinstance(index, dict):
        raise bad(f"the index must be an object, got {type(index).__name__}")
    dtypes = {str(d).replace("meshflow.", ""): d for d in (
        mf.float32, mf.float64, mf.float16, mf.bfloat16, mf.int64, mf.int32, mf.int16, mf.int8, mf.uint8, mf.bool)}
    out = {}
    for key, entry in index.items():
        where = f"tensor {key!r}: "
        if not isinstance(entry, dict) or set(entry) != {"shape", "dtype", "shards"}:
            raise bad(where, "an entry must be an object with exactly shape, dtype and shards")
        shape, dtype, shards = entry["shape"], entry["dtype"], entry["shards"]
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape) or len(shape) > 64:
            raise bad(where, f"shape must be a list of at most 64 non-negative integers, got {shape!r:.200}")
        if dtype not in dtypes:
            raise bad(where, f"unknown dtype {dtype!r:.50}")
        if not isinstance(shards, list) or len(shards) > _MAX_SHARDS:
            raise bad(where, f"shards must be a list of at most {_MAX_SHARDS} entries")
        boxes = []
        for s in shards:
            if (not isinstance(s, list) or len(s) != 3 or not _is_int(s[0]) or s[0] < 0
                    or not all(isinstance(v, list) and len(v) == len(shape) and all(_is_int(x) for x in v)
                               for v in s[1:])):
                raise bad(where, f"a shard must be [rank, offsets, sizes] with {len(shape)} offsets and sizes, "
                          f"got {s!r:.200}")
            rank, offsets, sizes = s
            for d, (o, n) in enumerate(zip(offsets, sizes)):
                if o < 0 or n < 0 or o + n > shape[d]:
                    raise bad(where, f"the shard of rank {rank} spans [{o}, {o + n}) of dim {d}, outside "
                              f"[0, {shape[d]})")
            boxes.append((rank, offsets, sizes))
        total = math.prod(shape)
        covered = sum(math.prod(n) for _, _, n in boxes)
        nonempty = [b for b in boxes if math.prod(b[2]) > 0]
        for i, (ra, oa, na) in enumerate(nonempty):
            for rb, ob, nb in nonempty[i + 1:]:
                if all(x < y + m and y < x + n for x, n, y, m in zip(oa, na, ob, nb)):
                    raise bad(where, f"the shards of ranks {ra} and {rb} overlap")
        if covered != total:
            raise bad(where, f"the shards cover {covered} of the tensor's {total} elements")
        out[key] = (shape, dtypes[dtype], boxes)
    return out


def _load_global(meta, path, verify=True):
    import meshflow as mf
    index = _check_index(meta, path)

    def bad(*parts):
        return mf.errors.Error(f"load: '{path}' is not a valid global checkpoint: " + "".join(map(str, parts)))

    files = {}
    parts = {}
    # Every shard is read and matched against its box before the whole
    # tensors are allocated, so their size is bounded by the files' contents.
    for key, (shape, dtype, boxes) in index.items():
        for rank, offsets, sizes in boxes:
            if rank not in files:
                files[rank] = load_file(f"{path}.shard{rank}", verify=verify)
            part = files[rank].get(key)
            if part is None:
                raise bad(f"tensor {key!r}: {path}.shard{rank} does not hold it")
            if list(part.shape) != sizes or part.dtype != dtype:
                raise bad(f"tensor {key!r}: {path}.shard{rank} holds a {part.dtype} shard of shape "
                          f"{list(part.shape)}, the index says {dtype} {sizes}")
            parts.setdefault(key, []).append((offsets, sizes, part))
    wholes = {}
    for key, (shape, dtype, _) in index.items():
        full = mf.empty(shape, dtype=dtype)
        for offsets, sizes, part in parts.get(key, ()):
            view = full
            for d, (o, n) in enumerate(zip(offsets, sizes)):
                view = view.narrow(d, o, n)
            view.copy_(part)
        wholes[key] = full

    def restore(value):
        if isinstance(value, dict):
            if set(value) == {"__global__"}:
                key = value["__global__"]
                if not isinstance(key, str) or key not in wholes:
                    raise bad(f"the tree names global tensor {key!r:.100}, which the index lacks")
                return wholes[key]
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return value

    return restore(meta["tree"])


def save_file(tensors, filename, metadata=None):
    """Writes {name: tensor} and optional {str: str} metadata as a safetensors file."""
    _io.save_file(dict(tensors), os.fspath(filename), dict(metadata or {}))


def load_file(filename, verify=True):
    """Reads a safetensors file into {name: tensor}; verify as in load()."""
    return _io.load_file(os.fspath(filename), verify)[0]


def load_file_with_metadata(filename, verify=True):
    """Reads a safetensors file into ({name: tensor}, {str: str} metadata)."""
    tensors, metadata = _io.load_file(os.fspath(filename), verify)
    return tensors, metadata
