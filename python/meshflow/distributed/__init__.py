"""Collectives between processes, named as in torch.distributed.

Start a job with `python -m meshflow.distributed.launch --nproc-per-node N
script.py` (or `mpirun -np N python script.py`); each process then calls the
same collectives in the same order. Tensors must be contiguous CPU tensors;
results are written in place. Ranks passed as `src`/`dst` are world ranks,
as in PyTorch. A collective that another rank never joins raises
meshflow.errors.DistributedError after MESHFLOW_COMM_TIMEOUT seconds
(default 300). See docs/distributed.md.
"""
import pickle

import meshflow as _mf
from meshflow._C import _distributed as _dist

ReduceOp = _dist.ReduceOp
Communicator = _dist.Communicator

_OPS = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN, "prod": ReduceOp.PRODUCT,
        "product": ReduceOp.PRODUCT}


class _NonGroupMember:
    def __repr__(self):
        return "GroupMember.NON_GROUP_MEMBER"


class GroupMember:
    """new_group's result on a rank outside the group (as in PyTorch)."""

    WORLD = None
    NON_GROUP_MEMBER = _NonGroupMember()


def _group(group, name):
    if group is None:
        return _dist.world()
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError(f"{name}: this rank ({get_rank()}) is not a member of the group")
    return group


def _reduce_op(op, name):
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.lower() in _OPS:
        return _OPS[op.lower()]
    raise ValueError(f"{name}: op must be one of {sorted(_OPS)} or a ReduceOp, got {op!r}")


def _group_rank(comm, world_rank, name, arg):
    ranks = comm.world_ranks()
    if world_rank not in ranks:
        raise ValueError(f"{name}: {arg} must be a world rank in the group {ranks}, got {world_rank}")
    return ranks.index(world_rank)


def _flat(tensor, name, arg):
    if not isinstance(tensor, _mf.Tensor):
        raise TypeError(f"{name}: {arg} must be a meshflow Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name}: {arg} must be contiguous (call .contiguous() first)")
    return tensor.reshape(-1)


def is_available():
    return True


def is_initialized():
    """Always true: the world group exists from the first use."""
    return True


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, **kwargs):
    """Starts the world group (as in PyTorch; MPI needs no rendezvous).

    timeout (a datetime.timedelta or seconds) bounds every collective's wait
    for its peers, graph mode included: past it the call raises
    meshflow.errors.DistributedError naming the collective and the ranks
    that did not reach it. It overrides MESHFLOW_COMM_TIMEOUT (default 300 s).
    world_size and rank, when given, must be what the launcher started.
    """
    if timeout is not None:
        seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"init_process_group: timeout must be a datetime.timedelta or a number of seconds, "
                            f"got {type(timeout).__name__}")
        _dist.set_comm_timeout(float(seconds))
    _dist.world()
    if world_size not in (-1, None) and world_size != get_world_size():
        raise ValueError(f"init_process_group: world_size={world_size} but the launcher started "
                         f"{get_world_size()} processes")
    if rank not in (-1, None) and rank != get_rank():
        raise ValueError(f"init_process_group: rank={rank} but this process is rank {get_rank()}")


# Note [Uncaught exceptions]: under mpirun, a rank whose script raises would
# run its exit handlers, MPI_Finalize among them, which waits for ranks that
# are themselves waiting for it in a collective: the job would hang until the
# timeout. Instead the rank prints its traceback and aborts the whole job at
# once (MPI_Abort; mpirun then kills every rank), as mpirun does for a rank
# that crashes.
def _abort_on_uncaught_exception(exc_type, exc, tb):
    import os
    import sys
    # The launcher's variable: asking MPI could start it, which is collective.
    rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK") if v in os.environ), "?")
    print(f"meshflow.distributed: world rank {rank} raised an uncaught exception; aborting the job",
          file=sys.stderr)
    _previous_excepthook(exc_type, exc, tb)
    # The traceback travels through the launcher's output forwarding; give it
    # a moment to arrive before the abort notice, which the launcher prints
    # itself (under load it could otherwise come first).
    sys.stderr.flush()
    import time
    time.sleep(0.3)
    _dist._abort_job(1)


_previous_excepthook = None
if _dist.started_by_mpi():
    import sys as _sys
    _previous_excepthook = _sys.excepthook
    _sys.excepthook = _abort_on_uncaught_exception
    del _sys


def destroy_process_group(group=None):
    """Accepted for PyTorch scripts; MPI ends when the process exits."""


def get_rank(group=None):
    """This process's rank in `group` (the world by default)."""
    return _group(group, "get_rank").rank()


def get_world_size(group=None):
    return _group(group, "get_world_size").size()


def get_local_rank():
    return _dist.get_local_rank()


def get_backend(group=None):
    return _group(group, "get_backend").backend()


def new_group(ranks=None):
    """A group of some world ranks. Only the members need to call it (MPI's
    group creation is collective over the members); other ranks get
    GroupMember.NON_GROUP_MEMBER."""
    world = _dist.world()
    ranks = list(range(world.size())) if ranks is None else sorted(ranks)
    if world.rank() not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    return world.subgroup(ranks)


class _FinishingWork:
    """A queued collective whose results are copied out by wait()."""

    def __init__(self, work, finish):
        self._work, self._finish = work, finish

    def wait(self, timeout=None):
        self._work.wait()
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()
        return True

    def is_completed(self):
        return self._work.is_completed()


def _on_device(tensor):
    return isinstance(tensor, _mf.Tensor) and tensor.device.type != "cpu"


def _device_comm(comm, tensor):
    """The group of comm's ranks for tensor's device (Note [Device groups]:
    NCCL for CUDA tensors), or None where tensor is on the host or its
    device has no group of its own."""
    if not _on_device(tensor):
        return None
    return _dist.device_group(comm.world_ranks(), tensor.device)


def _issue(comm, op, args, async_op, finish=None):
    """Runs the collective `op` of comm; with async_op it is queued (Note
    [Asynchronous collectives]) and its Work returned, as torch.distributed's
    async_op=True does; otherwise None. Device tensors use their device's
    group, or are staged through host copies (as gloo serves CUDA tensors),
    the results copied back."""
    device_args = [a for a in args if _on_device(a)]
    if device_args:
        group = _device_comm(comm, device_args[0])
        if group is not None:
            comm = group
        else:
            originals, staged = args, tuple(a.cpu() if _on_device(a) else a for a in args)
            after = finish

            def copy_back():
                for device_arg, host in zip(originals, staged):
                    if host is not device_arg:
                        device_arg.copy_(host)
                if after is not None:
                    after()

            args, finish = staged, copy_back
    if async_op:
        work = getattr(comm, op + "_async")(*args)
        return _FinishingWork(work, finish) if finish is not None else work
    getattr(comm, op)(*args)
    if finish is not None:
        finish()
    return None


def barrier(group=None, async_op=False):
    return _issue(_group(group, "barrier"), "barrier", (), async_op)


def all_reduce(tensor, op="sum", group=None, async_op=False):
    """In place: tensor becomes the reduction of every rank's tensor."""
    return _issue(_group(group, "all_reduce"), "all_reduce", (tensor, _reduce_op(op, "all_reduce")), async_op)


def broadcast(tensor, src, group=None, async_op=False):
    """In place: tensor becomes world rank src's tensor."""
    comm = _group(group, "broadcast")
    return _issue(comm, "broadcast", (tensor, _group_rank(comm, src, "broadcast", "src")), async_op)


def _object_bytes(obj):
    import numpy as np
    data = pickle.dumps(obj)
    return _mf.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())


def broadcast_object_list(object_list, src=0, group=None):
    """In place: object_list's items become world rank src's (pickled, as
    in PyTorch: only for objects from the job's own ranks)."""
    comm = _group(group, "broadcast_object_list")
    root = _group_rank(comm, src, "broadcast_object_list", "src")
    data = _object_bytes(list(object_list)) if comm.rank() == root else None
    size = _mf.tensor([0 if data is None else data.numel()], dtype=_mf.int64)
    comm.broadcast(size, root)
    if data is None:
        data = _mf.empty(int(size.item()), dtype=_mf.uint8)
    comm.broadcast(data, root)
    if comm.rank() != root:
        object_list[:] = pickle.loads(data.numpy().tobytes())


def all_gather_object(object_list, obj, group=None):
    """object_list[r] becomes group rank r's obj (pickled, as in PyTorch)."""
    comm = _group(group, "all_gather_object")
    n = comm.size()
    if len(object_list) != n:
        raise ValueError(f"all_gather_object: object_list must have one slot per rank ({n}), got "
                         f"{len(object_list)}")
    data = _object_bytes(obj)
    sizes = _mf.zeros(n, dtype=_mf.int64)
    comm.all_gather(_mf.tensor([data.numel()], dtype=_mf.int64), sizes, [1] * n)
    longest = int(sizes.max().item())
    padded = _mf.zeros(longest, dtype=_mf.uint8)
    padded[: data.numel()] = data
    gathered = _mf.zeros(n * longest, dtype=_mf.uint8)
    comm.all_gather(padded, gathered, [longest] * n)
    raw = gathered.numpy().tobytes()
    for r in range(n):
        object_list[r] = pickle.loads(raw[r * longest: r * longest + int(sizes[r].item())])


def _check_whole(op, name, whole, part_numel, ranks):
    """whole must hold one part of part_numel elements per rank."""
    if whole.numel() != ranks * part_numel:
        raise ValueError(f"{op}: {name} must hold {ranks} x {part_numel} elements, got shape {tuple(whole.shape)}")


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output_tensor = every rank's input_tensor, concatenated along dim 0 or
    stacked (output numel = world size x input numel), in rank order."""
    comm = _group(group, "all_gather_into_tensor")
    flat_in = _flat(input_tensor, "all_gather_into_tensor", "input_tensor")
    flat_out = _flat(output_tensor, "all_gather_into_tensor", "output_tensor")
    _check_whole("all_gather_into_tensor", "output_tensor", output_tensor, flat_in.numel(), comm.size())
    return _issue(comm, "all_gather", (flat_in, flat_out, [flat_in.numel()] * comm.size()), async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] = rank r's tensor (tensors may differ in numel between
    ranks when tensor_list's entries say so)."""
    comm = _group(group, "all_gather")
    if len(tensor_list) != comm.size():
        raise ValueError(f"all_gather: tensor_list must have one tensor per rank ({comm.size()}), "
                         f"got {len(tensor_list)}")
    counts = [t.numel() for t in tensor_list]
    flat_in = _flat(tensor, "all_gather", "tensor")
    gathered = _mf.empty(sum(counts), dtype=tensor.dtype, device=tensor.device)

    def finish():
        offset = 0
        for out, count in zip(tensor_list, counts):
            out.copy_(gathered[offset:offset + count].reshape(out.shape))
            offset += count

    return _issue(comm, "all_gather", (flat_in, gathered, counts), async_op, finish)


def reduce_scatter_tensor(output, input, op="sum", group=None, async_op=False):
    """output = the reduction over ranks of this rank's slice of input
    (input numel = world size x output numel, split in rank order)."""
    comm = _group(group, "reduce_scatter_tensor")
    flat_in = _flat(input, "reduce_scatter_tensor", "input")
    flat_out = _flat(output, "reduce_scatter_tensor", "output")
    _check_whole("reduce_scatter_tensor", "input", input, flat_out.numel(), comm.size())
    return _issue(comm, "reduce_scatter",
                  (flat_in, flat_out, [flat_out.numel()] * comm.size(), _reduce_op(op, "reduce_scatter")), async_op)


def reduce_scatter(output, input_list, op="sum", group=None, async_op=False):
    """output = the reduction over ranks of input_list[rank]."""
    comm = _group(group, "reduce_scatter")
    if len(input_list) != comm.size():
        raise ValueError(f"reduce_scatter: input_list must have one tensor per rank ({comm.size()}), "
                         f"got {len(input_list)}")
    counts = [t.numel() for t in input_list]
    if counts[comm.rank()] != output.numel():
        raise ValueError(f"reduce_scatter: output must have input_list[{comm.rank()}]'s {counts[comm.rank()]} "
                         f"elements, got shape {tuple(output.shape)}")
    flat_in = (_mf.cat([t.reshape(-1) for t in input_list]) if input_list
               else _mf.empty(0, dtype=output.dtype, device=output.device))
    return _issue(comm, "reduce_scatter",
                  (flat_in, _flat(output, "reduce_scatter", "output"), counts, _reduce_op(op, "reduce_scatter")),
                  async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    """Rows (dim 0) of input go to the ranks in order: input_split_sizes[r]
    rows to rank r (equal splits by default); output receives
    output_split_sizes[r] rows from rank r."""
    comm = _group(group, "all_to_all_single")
    n = comm.size()

    def splits(sizes, tensor, arg):
        if sizes is not None:
            return [int(s) for s in sizes]
        rows = tensor.shape[0] if tensor.dim() > 0 else 0
        if rows % n:
            raise ValueError(f"all_to_all_single: {arg}.shape[0] ({rows}) must divide by the group size ({n}) "
                             f"when no split sizes are given")
        return [rows // n] * n

    return _issue(comm, "all_to_all", (input, splits(input_split_sizes, input, "input"), output,
                                       splits(output_split_sizes, output, "output")), async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """output_tensor_list[r] = rank r's input_tensor_list[rank] (sizes may
    differ; each output must have the size its sender's input has)."""
    comm = _group(group, "all_to_all")
    n = comm.size()
    if len(input_tensor_list) != n or len(output_tensor_list) != n:
        raise ValueError(f"all_to_all: both lists must have one tensor per rank ({n}), got "
                         f"{len(output_tensor_list)} outputs and {len(input_tensor_list)} inputs")
    dtype = input_tensor_list[0].dtype
    sent = _mf.cat([t.reshape(-1) for t in input_tensor_list])
    received = _mf.empty(sum(t.numel() for t in output_tensor_list), dtype=dtype,
                         device=input_tensor_list[0].device)

    def finish():
        offset = 0
        for out in output_tensor_list:
            out.copy_(received[offset:offset + out.numel()].reshape(out.shape))
            offset += out.numel()

    return _issue(comm, "all_to_all", (sent, [t.numel() for t in input_tensor_list], received,
                                       [t.numel() for t in output_tensor_list]), async_op, finish)


def send(tensor, dst, group=None, tag=0):
    comm = _group(group, "send")
    peer = _group_rank(comm, dst, "send", "dst")
    _issue(comm, "send", (tensor, peer, tag), False)


def recv(tensor, src, group=None, tag=0):
    """Receives into tensor from world rank src; returns src."""
    comm = _group(group, "recv")
    _issue(comm, "recv", (tensor, _group_rank(comm, src, "recv", "src"), tag), False)
    return src


Work = _dist.Work


def isend(tensor, dst, group=None, tag=0):
    """Starts sending tensor to world rank dst and returns a Work; its
    wait() returns once the send completed (bounded by the timeout). The
    tensor must not change before then."""
    comm = _group(group, "isend")
    comm = _device_comm(comm, tensor) or comm
    return comm.isend(_flat(tensor, "isend", "tensor"), _group_rank(comm, dst, "isend", "dst"), tag)


def irecv(tensor, src, group=None, tag=0):
    """Starts receiving into tensor from world rank src; wait() on the
    returned Work before reading it."""
    comm = _group(group, "irecv")
    comm = _device_comm(comm, tensor) or comm
    return comm.irecv(_flat(tensor, "irecv", "tensor"), _group_rank(comm, src, "irecv", "src"), tag)


def __getattr__(name):
    # meshflow.distributed.pipelining loads on first use (it needs meshflow.nn).
    if name in ("pipelining", "optim", "checkpoint", "fsdp", "device_mesh", "auto", "simulate"):
        import importlib
        return importlib.import_module("meshflow.distributed." + name)
    raise AttributeError(f"module 'meshflow.distributed' has no attribute {name!r}")
