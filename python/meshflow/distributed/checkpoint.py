"""meshflow.distributed.checkpoint: sharded state saved and loaded in place,
with the names of torch.distributed.checkpoint (DCP).

    sd = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    mf.distributed.checkpoint.save(sd, checkpoint_id="ckpt/step100")
    ...
    sd = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    mf.distributed.checkpoint.load(sd, checkpoint_id="ckpt/step100")
    model.load_state_dict(sd["model"]); optimizer.load_state_dict(sd["optim"])

checkpoint_id is a directory. It holds a global checkpoint as mf.save writes
one (docs/distributed.md): CHECKPOINT_FILE, with the index and everything
but the global tensors, and CHECKPOINT_FILE.shard<rank>, plain safetensors
files of the shards each rank wrote. mf.load(checkpoint_id) reads it whole in
one process. load reads into the tensors of state_dict, in their own
layouts, on any number of ranks: each rank reads only the byte ranges of the
shards that overlap its own part (Note [Reading shards by range] in
src/io/safetensors.cpp), so it needs its own shards plus one read buffer of
memory, never a whole sharded tensor.
"""
import os

import meshflow as _mf
from meshflow import io as _io_py
from meshflow._C import _io

__all__ = ["save", "load", "CHECKPOINT_FILE", "READ_BUFFER_BYTES"]

CHECKPOINT_FILE = _io_py._CHECKPOINT_FILE
# The read buffer of one rank (one unit of the outermost split dim where larger).
READ_BUFFER_BYTES = 16 << 20


def _file(checkpoint_id, op):
    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise TypeError(f"{op}: checkpoint_id must be a path (str or os.PathLike), got "
                        f"{type(checkpoint_id).__name__}")
    directory = os.fspath(checkpoint_id)
    if not directory:
        raise ValueError(f"{op}: checkpoint_id is empty")
    return directory, os.path.join(directory, CHECKPOINT_FILE)


def save(state_dict, *, checkpoint_id, storage_writer=None, planner=None, process_group=None, no_dist=False):
    """Saves state_dict (a dict of tensors, global or local, and plain
    values, nested in dicts and lists) into the directory checkpoint_id,
    which it creates. Collective when state_dict holds global tensors: every
    rank calls it, and each distinct shard is written once (every file
    atomically). storage_writer, planner and process_group are PyTorch's and
    must be None."""
    _no_extras("save", storage_writer=storage_writer, planner=planner, process_group=process_group)
    if not isinstance(state_dict, dict):
        raise TypeError(f"save: state_dict must be a dict, got {type(state_dict).__name__}")
    directory, path = _file(checkpoint_id, "save")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(f"save: checkpoint_id {directory!r} is a file, not a directory")
    os.makedirs(directory, exist_ok=True)
    _io_py._save_global(state_dict, path)


def _no_extras(op, **kwargs):
    for name, value in kwargs.items():
        if value is not None:
            raise NotImplementedError(f"{op}: {name} is not supported (pass None); checkpoints are always "
                                      "the directory of safetensors files checkpoint_id names")


def load(state_dict, *, checkpoint_id, storage_reader=None, planner=None, process_group=None, no_dist=False,
         verify=True):
    """Loads the checkpoint in the directory checkpoint_id into state_dict,
    in place: every tensor of state_dict is filled with the saved values in
    its own layout (the checkpoint may come from another number of ranks or
    other SBPs), and every other value is replaced by the saved one. Keys of
    the checkpoint that state_dict lacks are not read. A key state_dict has
    and the checkpoint lacks, or a tensor whose shape differs, raises
    meshflow.errors.Error naming it before anything is written. With verify
    (the default) a shard read whole is checked against its checksum; parts
    read by range are not (their checksum covers the whole shard)."""
    _no_extras("load", storage_reader=storage_reader, planner=planner, process_group=process_group)
    if not isinstance(state_dict, dict):
        raise TypeError(f"load: state_dict must be a dict, got {type(state_dict).__name__}")
    directory, path = _file(checkpoint_id, "load")
    if not os.path.isfile(path):
        raise _mf.errors.Error(f"load: cannot open checkpoint {directory!r}: it holds no {CHECKPOINT_FILE}")
    meta = _io.load(path, verify)
    if isinstance(meta, dict) and _io_py._GLOBAL_KEY in meta:
        index, tree = _io_py._check_index(meta[_io_py._GLOBAL_KEY], path), meta[_io_py._GLOBAL_KEY]["tree"]
    else:
        index, tree = {}, meta
    _Loader(path, index, verify).run(state_dict, tree)


def _bad(path, *parts):
    return _mf.errors.Error(f"load: '{path}' is not a valid global checkpoint: " + "".join(map(str, parts)))


class _Loader:
    def __init__(self, path, index, verify):
        self.path, self.index, self.verify = path, index, verify
        self.readers, self.held = {}, {}
        self.rank = _mf.env.get_rank()

    def run(self, state_dict, tree):
        plan = []  # (destination tensor, key, saved local tensor or None for a global one)
        self._match(state_dict, tree, "", plan)
        # Every shard file's header is read and checked before anything is written.
        reads = []
        for dest, key, saved in plan:
            if saved is None:
                reads.extend(self._reads(dest, key))
        with _mf.no_grad():
            for dest, key, saved in plan:
                if saved is not None:
                    dest.copy_(saved)
            for reader, key, at, sizes, target, dtype in reads:
                if reader is None:
                    target.zero_()
                elif target.dtype == dtype:
                    reader.read_box(key, at, sizes, target, READ_BUFFER_BYTES)
                else:  # read in the saved dtype, then cast
                    part = _mf.empty(sizes, dtype=dtype)
                    reader.read_box(key, at, sizes, part, READ_BUFFER_BYTES)
                    target.copy_(part)

    def _match(self, value, saved, key, plan):
        """Pairs every tensor of value with its saved counterpart (checked),
        and replaces the other values of dicts and lists by the saved ones."""
        if isinstance(value, dict):
            if not isinstance(saved, dict):
                raise _mf.errors.Error(f"load: {key or 'the state_dict'!r} is a dict, the checkpoint holds "
                                       f"{type(saved).__name__}")
            for k, v in value.items():
                sk = str(k)
                child = f"{key}.{sk}" if key else sk
                if sk not in saved:
                    raise _mf.errors.Error(f"load: the checkpoint lacks {child!r}")
                if isinstance(v, (dict, list, _mf.Tensor)):
                    self._match(v, saved[sk], child, plan)
                else:
                    value[k] = _restore(saved[sk], self.path)
            return
        if isinstance(value, list):
            if not isinstance(saved, list) or len(saved) != len(value):
                raise _mf.errors.Error(f"load: {key!r} is a list of {len(value)}, the checkpoint holds "
                                       f"{len(saved) if isinstance(saved, list) else type(saved).__name__}")
            for i, v in enumerate(value):
                if isinstance(v, (dict, list, _mf.Tensor)):
                    self._match(v, saved[i], f"{key}.{i}", plan)
                else:
                    value[i] = _restore(saved[i], self.path)
            return
        # a tensor
        if isinstance(saved, dict) and set(saved) == {"__global__"}:
            gkey = saved["__global__"]
            if gkey not in self.index:
                raise _bad(self.path, f"the tree names global tensor {gkey!r:.100}, which the index lacks")
            shape = self.index[gkey][0]
            plan.append((value, gkey, None))
        elif isinstance(saved, _mf.Tensor):
            shape = list(saved.shape)
            plan.append((value, key, saved))
        else:
            raise _mf.errors.Error(f"load: {key!r} is a tensor, the checkpoint holds {type(saved).__name__}")
        if list(value.shape) != shape:
            raise _mf.errors.ShapeError(f"load: {key!r} has shape {list(value.shape)}, the checkpoint's "
                                        f"{shape}")

    def _reader(self, rank):
        if rank not in self.readers:
            self.readers[rank] = _io.SafetensorsReader(f"{self.path}.shard{rank}", self.verify)
        return self.readers[rank]

    def _reads(self, dest, key):
        """The box reads that fill this rank's part of dest:
        (reader, key, offsets in the shard, sizes, target view, saved dtype);
        a partial-sum part off coordinate 0 is zeroed instead."""
        shape, dtype, boxes = self.index[key]
        if dest.is_global:
            box = _local_box(list(dest.shape), dest.placement, dest.sbp, self.rank)
            if box is None:
                return []  # this rank holds no part of dest
            (offsets, sizes), zero = box
            local = dest.to_local()
            if zero:  # partial sums: the value lives on coordinate 0 of each partial axis
                return [(None, key, None, None, local, dtype)]
        else:
            offsets, sizes, local = [0] * len(shape), list(shape), dest
        out = []
        for rank, s_off, s_size in boxes:
            lo = [max(a, b) for a, b in zip(offsets, s_off)]
            hi = [min(a + n, b + m) for a, n, b, m in zip(offsets, sizes, s_off, s_size)]
            box_sizes = [h - l for l, h in zip(lo, hi)]
            if any(n <= 0 for n in box_sizes):
                continue  # no overlap (or nothing to read)
            reader = self._reader(rank)
            held = self._held(reader, rank).get(key)
            if held is None or list(held[1]) != list(s_size) or held[0] != dtype:
                got = "no such tensor" if held is None else f"a {held[0]} shard of shape {list(held[1])}"
                raise _bad(self.path, f"tensor {key!r}: {self.path}.shard{rank} holds {got}, the index says "
                           f"{dtype} {s_size}")
            target = local
            for d, (l, h) in enumerate(zip(lo, hi)):
                target = target.narrow(d, l - offsets[d], h - l)
            out.append((reader, key, [l - b for l, b in zip(lo, s_off)], box_sizes, target, dtype))
        return out

    def _held(self, reader, rank):
        if rank not in self.held:
            self.held[rank] = dict(reader.tensors())
        return self.held[rank]


def _restore(value, path):
    if isinstance(value, dict) and set(value) == {"__global__"}:
        raise _mf.errors.Error(f"load: '{path}' holds a tensor where the state_dict has a plain value")
    return value


def _local_box(shape, placement, sbp, rank):
    """((offsets, sizes), zero) of rank's local part of a global tensor, or
    None where rank is not in the placement; zero where a partial-sum axis
    puts rank off coordinate 0 (its part holds zeros)."""
    import numpy as np
    ranks = np.array(placement.ranks).reshape(-1).tolist()
    if rank not in ranks:
        return None
    mesh = list(placement.hierarchy)
    coords = [int(c) for c in np.unravel_index(ranks.index(rank), mesh)]
    offsets, sizes = [0] * len(shape), list(shape)
    zero = False
    for a, s in enumerate(sbp):
        if s.axis is not None:
            b, e = _io_py._split_range(sizes[s.axis], mesh[a], coords[a])
            offsets[s.axis] += b
            sizes[s.axis] = e - b
        elif s == _mf.sbp.partial_sum and coords[a] != 0:
            zero = True
    return (offsets, sizes), zero
