"""Run under mpirun on 2 ranks with the plan of plan_pipeline (argv: the
split points, comma-separated; the micro-batch count; the schedule): the
eager pipeline on that plan (two stages per rank for interleaved 1F1B)
trains 2 SGD steps with the losses and parameters of one process on the
whole batch (float64, rtol 1e-10)."""
import sys

import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from meshflow.distributed import pipelining as pp

sys.path.insert(0, sys.argv[4])
from pipeline_model import build, batch  # noqa: E402

rank = mf.distributed.get_rank()
split_points, m, kind = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
RTOL, ATOL, LR, STEPS = 1e-10, 1e-13, 0.05, 2
x, y = batch()

# One process: the whole batch (the loss is a mean, so it equals the micro-batches' average).
ref = build()
ref_opt = mf.optim.SGD(ref.parameters(), lr=LR)
ref_losses = []
for _ in range(STEPS):
    ref_opt.zero_grad()
    loss = F.mse_loss(ref(x), y)
    loss.backward()
    ref_losses.append(loss.item())
    ref_opt.step()

model = build()
pipe = pp.pipeline(model, split_points=split_points)
world = mf.distributed.get_world_size()
per_rank = pipe.num_stages // world  # interleaved: stage k on rank k % world
assert pipe.num_stages == world * per_rank and per_rank == (2 if kind == "interleaved_1f1b" else 1)
mine = [k for k in range(pipe.num_stages) if k % world == rank]
stages = [pipe.build_stage(k) for k in mine]
schedule = pp.get_schedule_class(kind)(stages if per_rank > 1 else stages[0], m, loss_fn=F.mse_loss)
opt = mf.optim.SGD([p for k in mine for p in pipe.get_stage_module(k).parameters()], lr=LR)
first, last = 0 in mine, pipe.num_stages - 1 in mine
for step in range(STEPS):
    opt.zero_grad()
    losses = []
    if first:
        schedule.step(x)
    elif last:
        schedule.step(target=y, losses=losses)
    else:
        schedule.step()
    if last:
        np.testing.assert_allclose(np.mean([l.item() for l in losses]), ref_losses[step], rtol=RTOL)
    opt.step()
ref_state = ref.state_dict()
for k in mine:
    for key, value in pipe.get_stage_module(k).state_dict().items():
        np.testing.assert_allclose(value.numpy(), ref_state[key].numpy(), rtol=RTOL, atol=ATOL, err_msg=key)
print(f"rank {rank}: auto pipeline OK", flush=True)
