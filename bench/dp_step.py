"""Data-parallel training step: the MLP (784-1024-1024-10, global batch 256,
SGD momentum) on 2 ranks x 1 thread against 1 rank x 2 threads, in the same
run, two ways:

* global: the single-process model made global (parameters broadcast, batch
  split along dim 0); its weight gradients come out as partial sums and are
  all-reduced as they reach the parameters' .grad (during backward, on the
  main thread);
* ddp: mf.nn.parallel.DistributedDataParallel, each rank a local replica
  fed its half of the batch; gradients are all-reduced in buckets on a
  communication thread while backward goes on;
* graph: the global model's step as an mf.nn.Graph, its all-reduces run on
  the plan's communication thread beside the rest of backward
  (graph_in_order: the same plan with every step in order).

    PYTHONPATH=python /usr/bin/python3 bench/dp_step.py

DDP_BUCKET_MB sets DistributedDataParallel's bucket cap (default 25).
"""
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(mode, steps):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np
    import meshflow as mf
    import models
    world = mf.env.get_world_size()
    mf.manual_seed(0)
    model = models.mlp(mf)
    x_np, y_np = models.random_batch("mlp", 256, np.random.default_rng(0))
    if world > 1 and mode == "ddp":
        rank = mf.env.get_rank()
        rows = slice(rank * 256 // world, (rank + 1) * 256 // world)
        model = mf.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=float(os.environ.get("DDP_BUCKET_MB", "25")))
        x, y = mf.tensor(x_np[rows]), mf.tensor(y_np[rows])
    elif world > 1:
        mesh = mf.placement("cpu", list(range(world)))
        model.to_global(mesh, mf.sbp.broadcast)
        x = mf.tensor(x_np, placement=mesh, sbp=mf.sbp.split(0))
        y = mf.tensor(y_np, placement=mesh, sbp=mf.sbp.split(0))
    else:
        x, y = mf.tensor(x_np), mf.tensor(y_np)
    opt = mf.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def eager_step():
        opt.zero_grad()
        loss = mf.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = eager_step
    if mode.startswith("graph"):
        class TrainGraph(mf.nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model
                self.add_optimizer(opt)
                self.config.overlap_communication = mode == "graph"

            def build(self, x, y):
                loss = mf.nn.functional.cross_entropy(self.model(x), y)
                loss.backward()
                return loss

        graph = TrainGraph()

        def step():
            return graph(x, y)
    times = []
    for i in range(steps + 3):
        begin = time.perf_counter()
        loss = step()
        (loss.to_local() if loss.is_global else loss).item()
        if i >= 3:
            times.append(time.perf_counter() - begin)
    if mf.env.get_rank() == 0:
        print(f"{1000 * statistics.median(times):.2f}", flush=True)


def run(mode, ranks, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks),
           sys.executable, os.path.abspath(__file__), "--worker", mode, str(steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]))
        return
    steps, rounds = 20, 3
    times = {"one": [], "global": [], "ddp": [], "graph": [], "graph_in_order": []}
    for _ in range(rounds):  # interleaved; the best of each counts
        times["one"].append(run("one", 1, 2, steps))
        for key in ("global", "ddp", "graph", "graph_in_order"):
            times[key].append(run(key, 2, 1, steps))

    def runs(key):
        return ", ".join(f"{v:.1f}" for v in times[key])

    one = min(times["one"])
    print(f"1 rank x 2 threads:            {one:.2f} ms/step (runs {runs('one')})")
    for key in ("global", "ddp", "graph", "graph_in_order"):
        best = min(times[key])
        print(f"2 ranks x 1 thread, {key:14s}: {best:.2f} ms/step (runs {runs(key)}), ratio {best / one:.2f}")


if __name__ == "__main__":
    main()
