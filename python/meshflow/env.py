"""This process's place among the processes of a job (OneFlow's oneflow.env).

A program started by `python -m meshflow.distributed.launch` or by mpirun is
one of several ranks; a program started alone is rank 0 of 1. The first call
into this module (or meshflow.distributed) in an MPI job initialises MPI,
which every rank must reach.
"""
from meshflow._C import _distributed as _dist


def get_rank():
    """This process's rank among all processes of the job (0 when alone)."""
    return _dist.get_rank()


def get_world_size():
    """The number of processes of the job (1 when alone)."""
    return _dist.get_world_size()


def get_local_rank():
    """This process's rank among the job's processes on this machine."""
    return _dist.get_local_rank()


def barrier():
    """Waits until every process of the job gets here."""
    _dist.barrier()


def backend():
    """'mpi' under mpirun or the launcher, 'single' for a process alone."""
    return _dist.world().backend()
