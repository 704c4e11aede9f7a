"""meshflow.io: checkpoints in the safetensors format.

save(obj, f) / load(f) store a tree of None, bool, int, float, str, Tensor,
list and dict (str keys) in one safetensors file, like torch.save / torch.load
for state dicts (tuples load as lists). save_file / load_file read and write
plain safetensors files of named tensors, as the safetensors package does.
Every save is atomic: the file holds either its old content or the new one.
"""
import json
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
    if not any(True for _ in _global_tensors(obj)):
        _io.save(obj, os.fspath(f))
        return
    _save_global(obj, os.fspath(f))


def load(f):
    """Loads what save wrote; a safetensors file from elsewhere loads as {name: tensor}.

    Global tensors of a checkpoint saved by several ranks come back as whole
    local tensors; load_state_dict lays them out like the module's
    parameters.
    """
    obj = _io.load(os.fspath(f))
    if isinstance(obj, dict) and _GLOBAL_KEY in obj:
        return _load_global(obj[_GLOBAL_KEY], os.fspath(f))
    return obj


# --- global checkpoints ---------------------------------------------------------

_GLOBAL_KEY = "__meshflow_global_checkpoint__"


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


def _load_global(meta, path):
    import meshflow as mf
    index = json.loads(meta["index"])
    files = {}
    wholes = {}
    for key, entry in index.items():
        full = mf.empty(entry["shape"], dtype=getattr(mf, entry["dtype"]))
        for rank, offsets, sizes in entry["shards"]:
            if rank not in files:
                files[rank] = load_file(f"{path}.shard{rank}")
            part = full
            for d, (o, n) in enumerate(zip(offsets, sizes)):
                part = part.narrow(d, o, n)
            part.copy_(files[rank][key])
        wholes[key] = full

    def restore(value):
        if isinstance(value, dict):
            if set(value) == {"__global__"}:
                return wholes[value["__global__"]]
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return value

    return restore(meta["tree"])


def save_file(tensors, filename, metadata=None):
    """Writes {name: tensor} and optional {str: str} metadata as a safetensors file."""
    _io.save_file(dict(tensors), os.fspath(filename), dict(metadata or {}))


def load_file(filename):
    """Reads a safetensors file into {name: tensor}."""
    return _io.load_file(os.fspath(filename))[0]


def load_file_with_metadata(filename):
    """Reads a safetensors file into ({name: tensor}, {str: str} metadata)."""
    tensors, metadata = _io.load_file(os.fspath(filename))
    return tensors, metadata
