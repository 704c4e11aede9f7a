"""Run under mpirun: the auto-parallel plan of a small MLP step on this
world (1-D mesh) under the described machine of layouts.MACHINE, printed by
rank 0 as JSON (predicted step time, memory, parameter layouts), for
test_auto_parallel.py to compare with the simulator's prediction of the
same step on a mesh of this size, made in one process."""
import json

import meshflow as mf
from layouts import MACHINE
from simulated_step import step

rank, world = mf.env.get_rank(), mf.env.get_world_size()
mf.distributed.auto.set_cost_model(MACHINE)
mesh = mf.placement("cpu", list(range(world)))
model, opt, loss_fn, (x, y) = step()


class Step(mf.nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.config.enable_auto_parallel(True)

    def build(self, x, y):
        loss = loss_fn(self.model, x, y)
        loss.backward()
        return loss


g = Step()
B, S = mf.sbp.broadcast, mf.sbp.split
g(x.to_global(placement=mesh, sbp=B).to_global(sbp=S(0)), y.to_global(placement=mesh, sbp=B).to_global(sbp=S(0)))
report = mf.distributed.auto.cost_report(g)
if rank == 0:
    print(json.dumps({"step_time": report["step_time"], "memory": report["memory"],
                      "communication_bytes": report["communication_bytes"],
                      "layouts": [str(p["sbp"]) for p in report["parameters"]]}), flush=True)
print(f"rank {rank}: simulated OK", flush=True)
