"""The stage search (mf.distributed.auto.plan_pipeline) against measured
pipelines, on 2 ranks x 1 thread (eager pipelining, float32, SGD):

* mlp: a 784-1024-1024-1024-10 MLP (Linear and ReLU children), batch 256;
* skewed: the same with its middle layer 4x wider (1024-4096-1024), so a
  balanced cut is not the middle one.

For each: the plan searched with 2 stages (micro-batches 2, 4 or 8; 1F1B,
GPipe or zero-bubble) under calibrate()'s cost model of 2 ranks, its predicted step, and
the measured median step of the eager pipeline on that plan; then, for
comparison, the predicted and measured step of another cut (one Linear
layer later, or earlier) with the plan's micro-batch count and schedule.
Then the interleaved 1F1B plan (four stages, two per rank) searched on its
own, predicted and measured.

    PYTHONPATH=python /usr/bin/python3 bench/auto_pipeline.py
"""
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = 10
BATCH = 256


def build(mf, workload):
    nn = mf.nn
    mf.manual_seed(0)
    wide = 4096 if workload == "skewed" else 1024
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, wide), nn.ReLU(), nn.Linear(wide, 1024),
                         nn.ReLU(), nn.Linear(1024, 10))


def batch(mf):
    import numpy as np
    rng = np.random.default_rng(0)
    return (mf.tensor(rng.standard_normal((BATCH, 784)).astype(np.float32)),
            mf.tensor(rng.integers(0, 10, size=BATCH)))


def calibrate_worker(path):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import meshflow as mf
    from meshflow.distributed import auto
    model = auto.calibrate()
    if mf.env.get_rank() == 0:
        with open(path, "w") as f:
            json.dump(auto.to_dict(model), f)
        print(json.dumps({}), flush=True)


def measure_worker(workload, split, m, kind):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import meshflow as mf
    import meshflow.nn.functional as F
    from meshflow.distributed import pipelining as pp
    rank = mf.env.get_rank()
    x, y = batch(mf)
    pipe = pp.pipeline(build(mf, workload), split_points=split.split(","))
    mine = [k for k in range(pipe.num_stages) if k % 2 == rank]  # interleaved: two stages per rank
    stages = [pipe.build_stage(k) for k in mine]
    schedule = pp.get_schedule_class(kind)(stages if len(stages) > 1 else stages[0], int(m), loss_fn=F.cross_entropy)
    opt = mf.optim.SGD([p for k in mine for p in pipe.get_stage_module(k).parameters()], lr=0.01)
    times = []
    for i in range(STEPS + 3):
        mf.distributed.barrier()
        begin = time.perf_counter()
        opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y)
        opt.step()
        mf.distributed.barrier()
        if i >= 3:
            times.append(time.perf_counter() - begin)
    if rank == 0:
        print(json.dumps({"ms": 1000 * statistics.median(times)}), flush=True)


def run(*args):
    sys.path.insert(0, HERE)
    from auto_parallel import run as run_ranks
    return run_ranks(2, *args, script=__file__)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        if sys.argv[2] == "calibrate":
            calibrate_worker(sys.argv[3])
        else:
            measure_worker(*sys.argv[2:6])
        return
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import meshflow as mf
    import meshflow.nn.functional as F
    from meshflow.distributed import auto
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        run("calibrate", path)
        with open(path) as f:
            machine = auto.from_dict(json.load(f))
    print("| workload | plan (split, M, schedule) | search s | predicted ms | measured ms | error | other cut | "
          "other predicted ms | other measured ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for workload in ("mlp", "skewed"):
        model = build(mf, workload)
        plan = auto.plan_pipeline(model, F.cross_entropy, batch(mf), 2, cost_model=machine, num_stages=2,
                                  microbatches=[2, 4, 8])
        split, m, kind = ",".join(plan["split_points"]), plan["n_microbatches"], plan["schedule"]
        measured = run(workload, split, str(m), kind)["ms"]
        names = [n for n, _ in model.named_children()]
        cut = plan["ranges"][1][0]
        other = cut + 2 if cut + 2 < len(names) else cut - 2  # the cut one Linear layer later (or earlier)
        costs = plan["stage_costs"]
        ranges = [(0, other), (other, len(names))]
        times = [costs[r]["time"] for r in ranges]
        other_pred = 1000 * (sum(times) + (m - 1) * max(times) + max(costs[r]["update"] for r in ranges))
        other_measured = run(workload, names[other], str(m), kind)["ms"]
        pred = 1000 * plan["step_time"]
        print(f"| {workload} | {split}, {m}, {kind} | {plan['search_seconds']:.2f} | {pred:.2f} | {measured:.2f} | "
              f"{abs(pred - measured) / measured:.0%} | {names[other]} | {other_pred:.2f} | {other_measured:.2f} |",
              flush=True)
        rows.append(workload)
    # The interleaved schedule (two stages per rank), planned on its own.
    print()
    print("| workload | plan (splits, M) | search s | predicted ms | measured ms | error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for workload in rows:
        plan = auto.plan_pipeline(build(mf, workload), F.cross_entropy, batch(mf), 2, cost_model=machine,
                                  num_stages=2, microbatches=[2, 4, 8], schedules=("interleaved_1f1b",))
        split, m = ",".join(plan["split_points"]), plan["n_microbatches"]
        measured = run(workload, split, str(m), plan["schedule"])["ms"]
        pred = 1000 * plan["step_time"]
        print(f"| {workload} | {split}, {m} | {plan['search_seconds']:.2f} | {pred:.2f} | {measured:.2f} | "
              f"{abs(pred - measured) / measured:.0%} |", flush=True)


if __name__ == "__main__":
    main()
