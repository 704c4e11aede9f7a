"""meshflow.nn.parallel: DistributedDataParallel, as torch.nn.parallel has it.

Each process holds a whole replica of the model and feeds it its own part of
the batch; after `loss.backward()` every parameter's `.grad` is the mean of the
processes' gradients, reduced in buckets on a communication thread while
backward is still running (Note [Gradient buckets] in
include/meshflow/distributed/reducer.h). Start the processes with
`python -m meshflow.distributed.launch` or `mpirun`.

A global model (`Module.to_global` with broadcast parameters and a split
batch) is the other way to train data-parallel in meshflow: there the
reduction follows from the SBP rules.
"""
import contextlib

from meshflow._C import _distributed, _modules

Module = _modules.Module

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    """Wraps `module` for data-parallel training over all processes.

    On construction every rank's parameters and buffers are set to rank 0's,
    so replicas start equal. With `broadcast_buffers` (the default) buffers
    such as BatchNorm's running statistics are set to rank 0's before each
    forward. `bucket_cap_mb` caps a gradient bucket. Inside `no_sync()`
    backward only accumulates locally; the first backward after it averages
    the accumulated gradients. `gradient_as_bucket_view=True` makes each
    .grad a view of its bucket after the first backward, so the gradients
    are held once instead of twice (bucket and .grad), as in PyTorch.
    """

    def __init__(self, module, broadcast_buffers=True, bucket_cap_mb=25.0, gradient_as_bucket_view=False):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: expected a meshflow.nn.Module, got {type(module).__name__}")
        if bucket_cap_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        if getattr(module, "_fsdp_unit", None) is not None:
            raise ValueError("DistributedDataParallel: the module was sharded with fully_shard, which already "
                             "averages gradients over the ranks")
        self.module = module
        module._ddp_wrapped = True  # fully_shard refuses it
        self.broadcast_buffers = broadcast_buffers
        self._world = _distributed.get_world_size()
        params = [p for p in module.parameters() if p.requires_grad]
        # Checks the parameters (no global ones) before any communication.
        self._reducer = _distributed.GradientReducer(params, max(1, int(bucket_cap_mb * 2**20)),
                                                     gradient_as_bucket_view=bool(gradient_as_bucket_view))
        if self._world > 1:
            _distributed.broadcast_tensors([t.detach() for t in list(module.parameters()) + list(module.buffers())], 0)

    def forward(self, *args, **kwargs):
        if self.broadcast_buffers and self._world > 1:
            buffers = [b.detach() for b in self.module.buffers()]
            if buffers:
                _distributed.broadcast_tensors(buffers, 0)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside accumulates gradients without averaging them."""
        previous = self._reducer.sync
        self._reducer.sync = False
        try:
            yield
        finally:
            self._reducer.sync = previous

    @property
    def bucket_params(self):
        """Parameter indices (among those requiring grad) per bucket, in reduction order."""
        return self._reducer.bucket_params
