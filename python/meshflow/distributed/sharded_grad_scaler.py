"""ShardedGradScaler, as torch.distributed.fsdp.sharded_grad_scaler: a
GradScaler whose inf/NaN verdict is agreed by every rank of a process group.

Where each rank holds only part of the gradients (FSDP shards, pipeline
stages: docs/pipeline.md), one rank's gradients can hold an inf that the
others never see; with a plain GradScaler that rank would skip its step and
the others would update. Here unscale_ sums each rank's found_inf flag over
the group (world by default), so a step is skipped on every rank or on none:

    scaler = ShardedGradScaler()
    schedule = Schedule1F1B(stage, 4, loss_fn=lambda out, y: scaler.scale(F.mse_loss(out, y)))
    schedule.step(...)          # on each rank, as usual
    scaler.step(optimizer)      # every rank: unscales, agrees, steps or skips
    scaler.update()

Every rank of the group must call unscale_ (or step) once per optimizer and
step, in the same order: the agreement is a collective.
"""
from meshflow.amp.grad_scaler import GradScaler

__all__ = ["ShardedGradScaler"]


class ShardedGradScaler(GradScaler):
    def __init__(self, device="cpu", init_scale=2.0**16, backoff_factor=0.5, growth_factor=2.0,
                 growth_interval=2000, enabled=True, process_group=None):
        super().__init__(device, init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)
        self.process_group = process_group

    def _check_scale(self, funcname):
        # A rank without the loss (an early pipeline stage) never calls
        # scale(); its scale starts where every rank's does.
        self._lazy_init()

    def unscale_(self, optimizer):
        super().unscale_(optimizer)
        if not self.is_enabled():
            return
        from meshflow import distributed
        if distributed.get_world_size() > 1:
            distributed.all_reduce(self._state(optimizer)["found_inf"], group=self.process_group)
