"""Run under mpirun on 2 ranks: bad pipeline input raises a clear error on
every rank (never a hang), and the ranks can go on afterwards.

With the argument `die` (or `stall`), rank 1 ends (or sleeps) in the
middle of a schedule instead; the test checks how the job ends."""
import os
import sys
import time

import meshflow as mf
import meshflow.nn as nn
import meshflow.nn.functional as F
from meshflow.distributed import pipelining as pp

rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
assert world == 2


def model():
    mf.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def expect(fn, *fragments):
    """fn raises on this rank, with every fragment in its message."""
    try:
        fn()
    except (ValueError, TypeError) as e:
        for f in fragments:
            assert f in str(e), f"rank {rank}: expected {f!r} in {e}"
        return
    raise AssertionError(f"rank {rank}: no error, expected {fragments}")


pipe = pp.pipeline(model(), split_points=[2])
x = mf.tensor([[0.1 * (i + j) for j in range(4)] for i in range(8)], dtype=mf.float64)
y = mf.zeros(8, 2, dtype=mf.float64)

if len(sys.argv) > 1:
    # A rank that ends or stalls in the middle of a schedule.
    class Fault(nn.Module):
        calls = 0

        def forward(self, h):
            if not mf.is_grad_enabled():
                return h  # the schedule's count of random counters (a forward without grad)
            Fault.calls += 1
            if Fault.calls == 2:
                if sys.argv[1] == "die":
                    os._exit(5)
                time.sleep(60)
            return h

    stage_module = nn.Sequential(pipe.get_stage_module(rank), Fault()) if rank == 1 else pipe.get_stage_module(0)
    schedule = pp.Schedule1F1B(pp.PipelineStage(stage_module, rank, 2), 4, loss_fn=F.mse_loss)
    try:
        schedule.step(x) if rank == 0 else schedule.step(target=y)
    except mf.errors.DistributedError as e:
        print(f"rank {rank} raised DistributedError: {e}", flush=True)
        sys.exit(3)
    raise AssertionError("the step ended although a rank died")

# A stage id used twice.
expect(lambda: pp.Schedule1F1B(pp.PipelineStage(pipe.get_stage_module(0), 0, 2), 2, loss_fn=F.mse_loss),
       "stage id 0 is used twice (on ranks 0 and 1)")
# Stages in the wrong layout for the schedule (rank 0 with stage 1).
expect(lambda: pp.Schedule1F1B(pp.PipelineStage(pipe.get_stage_module(1 - rank), 1 - rank, 2), 2,
                               loss_fn=F.mse_loss), "this schedule puts stages")
# Ranks that build different schedules.
expect(lambda: (pp.ScheduleGPipe if rank == 0 else pp.Schedule1F1B)(pipe.build_stage(rank), 2, loss_fn=F.mse_loss),
       "every rank must build the same schedule")
# Interleaved with a micro-batch count that is not a multiple of the ranks.
mlp4 = pp.pipeline(nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)]).double(), split_points=[1, 2, 3])
expect(lambda: pp.ScheduleInterleaved1F1B([mlp4.build_stage(rank), mlp4.build_stage(rank + 2)], 3,
                                          loss_fn=F.mse_loss), "multiple of the number of ranks (2), got 3")

schedule = pp.Schedule1F1B(pipe.build_stage(rank), 2, loss_fn=F.mse_loss)
# A batch that does not divide into the micro-batches (rank 1 did nothing wrong).
expect(lambda: schedule.step(x[:5]) if rank == 0 else schedule.step(target=y[:5]),
       "must divide into n_microbatches (2)")
# Inputs on the wrong rank.
expect(lambda: schedule.step(x) if rank == 0 else schedule.step(x, target=y),
       "inputs given on rank 1, which does not run stage 0 (rank 0 does)")
# No inputs on the first stage's rank.
expect(lambda: schedule.step() if rank == 0 else schedule.step(target=y), "rank 0 runs stage 0 and needs the inputs")
# No target on the last stage's rank.
expect(lambda: schedule.step(x) if rank == 0 else schedule.step(), "call step(target=y) here")

# The ranks go on: a good step after the errors.
losses = []
out = schedule.step(x) if rank == 0 else schedule.step(target=y, losses=losses)
if rank == 1:
    ref = model()
    expected = [F.mse_loss(ref(c), t).item() for c, t in zip(x.chunk(2, 0), y.chunk(2, 0))]
    assert [l.item() for l in losses] == expected, (losses, expected)
    assert tuple(out.shape) == (8, 2)
print(f"rank {rank}/{world}: pipeline errors OK", flush=True)
