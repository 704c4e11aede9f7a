"""Run under mpirun on 2 ranks with `die` or `stall`: a pipelined graph
runs one step; then rank 1 ends (or sleeps) instead of running the second,
so rank 0 waits in its schedule for a message that never comes. The test
checks that rank 0 raises DistributedError within the communicator's
timeout (stall) and that the job ends (die)."""
import os
import sys
import time

import meshflow as mf
import meshflow.nn as nn
import meshflow.nn.functional as F

rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
assert world == 2 and sys.argv[1] in ("die", "stall")
B = mf.sbp.broadcast
P = [mf.placement("cpu", [0]), mf.placement("cpu", [1])]
mf.manual_seed(0)
stages = nn.ModuleList([nn.Linear(4, 4).to_global(P[0], B), nn.Linear(4, 2).to_global(P[1], B)])


class Train(mf.nn.Graph):
    def __init__(self):
        super().__init__()
        self.stages = stages
        for s in range(2):
            stages[s].to(mf.nn.graph.GraphModule).set_stage(s, P[s])
        self.config.set_gradient_accumulation_steps(4)
        self.add_optimizer(mf.optim.SGD(stages.parameters(), lr=0.1))

    def build(self, x, y):
        h = self.stages[0](x.to_global(placement=P[0], sbp=B))
        out = self.stages[1](h.to_global(placement=P[1], sbp=B))
        loss = F.mse_loss(out, y.to_global(placement=P[1], sbp=B))
        loss.backward()
        return loss


g = Train()
x, y = mf.randn(8, 4, placement=P[0], sbp=B), mf.randn(8, 2, placement=P[0], sbp=B)
g(x, y)
if rank == 1:
    if sys.argv[1] == "die":
        os._exit(5)
    time.sleep(60)
try:
    g(x, y)
except mf.errors.DistributedError as e:
    print(f"rank {rank} raised DistributedError: {e}", flush=True)
    sys.exit(3)
raise AssertionError("the step ended although a rank died")
