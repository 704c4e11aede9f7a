"""meshflow.io: checkpoints in the safetensors format.

save(obj, f) / load(f) store a tree of None, bool, int, float, str, Tensor,
list and dict (str keys) in one safetensors file, like torch.save / torch.load
for state dicts (tuples load as lists). f is a path (str or os.PathLike) or
a binary file-like object (io.BytesIO, a file opened with "wb" / "rb"), as
in PyTorch. save_file / load_file read and write plain safetensors files of
named tensors, as the safetensors package does. Every save to a path is
atomic: the file holds either its old content or the new one.

Loading never unpickles: a checkpoint is JSON and raw tensor bytes, so no
file can run code, whatever weights_only says (see load).
"""
import collections
import json
import math
import os
import pickle
import pickletools
import shutil
import tempfile

from meshflow._C import _io

__all__ = ["save", "load", "save_file", "load_file", "load_file_with_metadata"]


def _is_path(f):
    return isinstance(f, (str, bytes, os.PathLike))


def _stream_name(f):
    """How an error names the file-like object f."""
    name = getattr(f, "name", None)
    return name if isinstance(name, str) and name else f"<{type(f).__name__}>"


def _check_stream(f, op, method):
    import io
    if isinstance(f, io.TextIOBase):
        raise TypeError(f"{op}: {_stream_name(f)} is a text stream; open the file in binary mode "
                        f"('{'wb' if method == 'write' else 'rb'}') or pass its path")
    if not callable(getattr(f, method, None)):
        raise TypeError(f"{op}: f must be a path (str or os.PathLike) or a binary file-like object with "
                        f"{method}(), got {type(f).__name__}")


def save(obj, f):
    """Saves obj (None, bool, int, float, str, Tensor, list, tuple, dict) to f:
    a path, or a binary file-like object that gets the file's bytes written
    at its position (then flushed), as torch.save does.

    A save to a path is atomic (a temporary file renamed over it). With
    global tensors in obj the save is collective (every rank calls it, with
    a path): each shard is written once, by one rank, to f + ".shard<rank>",
    and the first rank writes f with the rest of obj and an index of the
    shards (see docs/distributed.md). load(f) reassembles the whole tensors,
    so the checkpoint loads under any placement, SBP or world size.

    Local tensors on a device are written from a copy on the host; load
    returns them on the CPU, where map_location (or load_state_dict, which
    copies into the parameters where they are) places them.
    """
    obj = _on_host(obj)
    if not _is_path(f):
        _check_stream(f, "save", "write")
        if any(True for _ in _global_tensors(obj)):
            raise ValueError("save: a checkpoint with global tensors is written as several files (one per "
                             "shard), so it needs a path, not a file-like object")
        with tempfile.TemporaryDirectory(prefix="meshflow-save-") as directory:
            path = os.path.join(directory, "checkpoint.safetensors")
            _io.save(obj, path)
            with open(path, "rb") as data:
                shutil.copyfileobj(data, f)
        flush = getattr(f, "flush", None)
        if callable(flush):
            flush()
        return
    path = os.fspath(f)
    if not any(True for _ in _global_tensors(obj)):
        _io.save(obj, path)
        return
    if not isinstance(path, str) or not path or path.endswith(os.sep) or os.path.isdir(path):
        raise ValueError(f"save: {path!r} does not name a file")
    _save_global(obj, path)


# The keyword arguments torch.load hands to pickle's Unpickler: accepted, and
# unused since nothing is unpickled.
_PICKLE_LOAD_ARGS = ("encoding", "errors", "fix_imports", "buffers")


def load(f, map_location=None, pickle_module=None, *, weights_only=False, verify=True, **pickle_load_args):
    """Loads what save wrote; a safetensors file from elsewhere loads as {name: tensor}.

    The arguments are torch.load's. f is a path, a directory that
    meshflow.distributed.checkpoint.save wrote, or a binary file-like object
    read from its position to its end (a checkpoint with global tensors
    needs its path: its shards are files next to it).

    map_location places the loaded tensors, which are all on the CPU: None,
    a device ("cpu", mf.device("cpu")), a dict of location to location
    ({"cuda:0": "cpu"}; the tensors' location is "cpu"), or a callable
    fn(tensor, "cpu") returning a tensor or None (keep it; PyTorch passes a
    storage). A device that is not available (any CUDA device on this
    build) raises RuntimeError naming it.

    Nothing is ever unpickled: a checkpoint holds only tensors, dicts, lists
    and None/bool/int/float/str, so weights_only=True accepts every
    meshflow checkpoint, as torch.load(weights_only=True) accepts a state
    dict. A pickle (or a torch.save zip archive) raises
    pickle.UnpicklingError with weights_only=True and meshflow.errors.Error
    otherwise, never running its code. pickle_module and the Unpickler
    arguments (encoding, ...) are accepted and unused; with weights_only=True
    a pickle_module is refused, as in PyTorch.

    Global tensors of a checkpoint saved by several ranks come back as whole
    local tensors; load_state_dict lays them out like the module's
    parameters. save stores a CRC-32C of every tensor; with verify (the
    default) a tensor whose bytes changed raises meshflow.errors.Error naming
    it, and verify=False skips the check. Corrupt or truncated input raises
    meshflow.errors.Error.
    """
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    for key in pickle_load_args:
        if key not in _PICKLE_LOAD_ARGS:
            raise TypeError(f"load() got an unexpected keyword argument '{key}'")
    place = _placement(map_location)
    if _is_path(f):
        path = os.fspath(f)
        if isinstance(path, str) and os.path.isdir(path):  # a meshflow.distributed.checkpoint directory
            path = os.path.join(path, _CHECKPOINT_FILE)
        obj = _load_tree(path, verify, weights_only)
        if isinstance(obj, dict) and _GLOBAL_KEY in obj:
            obj = _load_global(obj[_GLOBAL_KEY], path, verify)
    else:
        _check_stream(f, "load", "read")
        name = _stream_name(f)
        fd, path = tempfile.mkstemp(prefix="meshflow-load-", suffix=".safetensors")
        try:
            with os.fdopen(fd, "wb") as copy:
                shutil.copyfileobj(f, copy)
            obj = _load_tree(path, verify, weights_only, name)
        finally:
            os.unlink(path)
        if isinstance(obj, dict) and _GLOBAL_KEY in obj:
            import meshflow as mf
            raise mf.errors.Error(f"load: {name} is the index of a checkpoint with global tensors, whose shards "
                                  "are files next to it; load it by its path")
    return obj if place is None else _map_tensors(obj, place)


def _looks_pickled(path):
    """Whether the file starts like a pickle (protocol 2 or later) or a zip
    archive (what torch.save writes). Only parses opcodes: runs nothing."""
    import io
    try:
        with open(path, "rb") as file:
            head = file.read(64)
    except OSError:
        return False
    if head.startswith(b"PK\x03\x04"):
        return True
    if len(head) < 3 or head[0] != 0x80 or not 2 <= head[1] <= 5:
        return False
    try:  # PROTO, then valid opcodes: never a safetensors length (its high bytes are zeros)
        ops = pickletools.genops(io.BytesIO(head))
        for _ in range(2):
            next(ops)
    except StopIteration:
        return True
    except Exception:
        return False
    return True


def _load_tree(path, verify, weights_only, name=None):
    """_io.load(path, verify) with clear errors: a pickle is named as one, and
    a file-like object's temporary copy by the object (name)."""
    try:
        return _io.load(path, verify)
    except Exception as error:
        shown = name if name is not None else path
        if _looks_pickled(path):
            what = (f"{shown} is a pickle or a torch.save archive, not a meshflow checkpoint; meshflow.load reads "
                    "safetensors files of tensors, dicts, lists and primitives and never unpickles (unpickling "
                    "can run arbitrary code)")
            if weights_only:
                raise pickle.UnpicklingError(f"Weights only load failed: {what}.") from None
            import meshflow as mf
            raise mf.errors.Error(f"load: {what}. If you trust the file, load it with torch.load or pickle "
                                  "and save its tensors with meshflow.save.") from None
        if name is None:
            raise
        try:
            renamed = type(error)(str(error).replace(path, name))
        except Exception:
            raise error from None
        raise renamed from None


def _device_of(location, what):
    import meshflow as mf
    if isinstance(location, mf.device):
        return location
    if isinstance(location, str):
        return mf.device(location)
    raise TypeError(f"load: {what} must be a device or a device string, got {type(location).__name__}")


def _check_available(device):
    import meshflow as mf
    if device.type == "cpu":
        return
    if device.type == "cuda" and mf.cuda.is_available() and (device.index or 0) < mf.cuda.device_count():
        return
    raise RuntimeError(f"load: map_location maps the checkpoint's tensors to device '{device}', which is not "
                       "available: meshflow.cuda.is_available() is False (this build runs on the CPU only). "
                       "Use map_location='cpu' (or None).")


def _placement(map_location):
    """map_location as fn(tensor) -> tensor, or None when the tensors stay where they are."""
    import meshflow as mf
    if map_location is None:
        return None
    if isinstance(map_location, (str, mf.device)):
        device = _device_of(map_location, "map_location")
    elif isinstance(map_location, dict):
        target = "cpu"
        for key, value in map_location.items():
            try:
                key = str(_device_of(key, "a map_location key"))
            except ValueError:  # not a device name: never the tensors' location
                continue
            if key == "cpu":
                target = value
        device = _device_of(target, "a map_location value")
    elif callable(map_location):
        def place(tensor):
            placed = map_location(tensor, "cpu")
            if placed is None:
                return tensor
            if not isinstance(placed, mf.Tensor):
                raise TypeError(f"load: map_location returned {type(placed).__name__}; it must return a tensor "
                                "or None")
            return placed
        return place
    else:
        raise TypeError("load: map_location must be None, a device or device string, a dict of locations or a "
                        f"callable, got {type(map_location).__name__}")
    _check_available(device)
    if device.type == "cpu":
        return None
    return lambda tensor: tensor.to(device)


def _map_tensors(obj, place):
    import meshflow as mf
    if isinstance(obj, mf.Tensor):
        return place(obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, place) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_tensors(v, place) for v in obj]
    return obj


# --- global checkpoints ---------------------------------------------------------

_GLOBAL_KEY = "__meshflow_global_checkpoint__"
# The checkpoint file inside a meshflow.distributed.checkpoint directory.
_CHECKPOINT_FILE = "checkpoint.safetensors"


def _on_host(obj, depth=0):
    """obj with each local tensor on a device replaced by its copy on the
    host (the same object where there is none). Stops at a depth beyond
    what save accepts, which then reports the nesting itself."""
    from meshflow import Tensor
    if depth > 64:
        return obj
    if isinstance(obj, Tensor):
        return obj.cpu() if not obj.is_global and obj.device.type != "cpu" else obj
    if isinstance(obj, dict):
        items = {k: _on_host(v, depth + 1) for k, v in obj.items()}
        if all(items[k] is v for k, v in obj.items()):
            return obj
        return collections.OrderedDict(items) if isinstance(obj, collections.OrderedDict) else items
    if isinstance(obj, (list, tuple)):
        values = [_on_host(v, depth + 1) for v in obj]
        if all(a is b for a, b in zip(values, obj)):
            return obj
        return values if isinstance(obj, list) else tuple(values)
    return obj


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
