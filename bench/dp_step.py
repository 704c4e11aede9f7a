"""Data-parallel training step: the MLP (784-1024-1024-10, global batch 256,
SGD momentum) on 2 ranks x 1 thread against 1 rank x 2 threads, in the same
run.

    PYTHONPATH=python /usr/bin/python3 bench/dp_step.py

The data-parallel model is the single-process model made global
(parameters broadcast, batch split along dim 0); its weight gradients come
out as partial sums and are all-reduced when the optimizer update boxes
them (no overlap with backward yet).
"""
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(steps):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np
    import meshflow as mf
    import models
    world = mf.env.get_world_size()
    mf.manual_seed(0)
    model = models.mlp(mf)
    x_np, y_np = models.random_batch("mlp", 256, np.random.default_rng(0))
    if world > 1:
        mesh = mf.placement("cpu", list(range(world)))
        model.to_global(mesh, mf.sbp.broadcast)
        x = mf.tensor(x_np, placement=mesh, sbp=mf.sbp.split(0))
        y = mf.tensor(y_np, placement=mesh, sbp=mf.sbp.split(0))
    else:
        x, y = mf.tensor(x_np), mf.tensor(y_np)
    opt = mf.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for i in range(steps + 3):
        begin = time.perf_counter()
        opt.zero_grad()
        loss = mf.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if i >= 3:
            times.append(time.perf_counter() - begin)
    if mf.env.get_rank() == 0:
        print(f"{1000 * statistics.median(times):.2f}", flush=True)


def run(ranks, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks),
           sys.executable, os.path.abspath(__file__), "--worker", str(steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]))
        return
    steps, rounds = 20, 3
    one, two = [], []
    for _ in range(rounds):  # interleaved; the best of each counts
        one.append(run(1, 2, steps))
        two.append(run(2, 1, steps))
    print(f"1 rank x 2 threads: {min(one):.2f} ms/step (runs {', '.join(f'{v:.1f}' for v in one)})")
    print(f"2 ranks x 1 thread: {min(two):.2f} ms/step (runs {', '.join(f'{v:.1f}' for v in two)})")
    print(f"ratio (2 ranks / 1 rank): {min(two) / min(one):.2f}")


if __name__ == "__main__":
    main()
