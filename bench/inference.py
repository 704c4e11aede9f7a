"""Inference latency at batch 1: meshflow eager, meshflow graph
(mf.nn.Graph eval graph) and PyTorch, measured in the same run.

    PYTHONPATH=python /usr/bin/python3 bench/inference.py [--model mlp] [--calls 2000]

Each library runs in a fresh process with 2 threads under
OMP_WAIT_POLICY=PASSIVE; a process times `--calls` forward calls (no grad)
five times and reports the best mean per call. Processes are repeated
`--rounds` times, interleaved, and the best counts (noise only adds time).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(kind, model_name, calls):
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models
    if kind.startswith("meshflow"):
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import meshflow as lib
    else:
        import torch as lib
    lib.set_num_threads(2)
    model = models.build(model_name, lib)
    model.eval()
    x, _ = models.random_batch(model_name, 1, np.random.default_rng(0))
    x = lib.tensor(x)
    if kind == "meshflow-graph":
        class Predict(lib.nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model

            def build(self, x):
                return self.model(x)

        graph = Predict()

        def call():
            return graph(x)
    else:
        def call():
            with lib.no_grad():
                return model(x)
    for _ in range(50):
        call()
    best = float("inf")
    for _ in range(5):
        begin = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - begin) / calls)
    print(json.dumps({"us": 1e6 * best}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.model, args.calls)
        return
    kinds = ["meshflow", "meshflow-graph", "torch"]
    best = {k: float("inf") for k in kinds}
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="2")
    for _ in range(args.rounds):
        for kind in kinds:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--model", args.model,
                   "--calls", str(args.calls)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            best[kind] = min(best[kind], json.loads(out.stdout.strip().splitlines()[-1])["us"])
    print(f"\n{args.model}, batch 1, us per call (best of {args.rounds} processes):\n")
    print("| meshflow eager | meshflow graph | torch | eager / torch | graph / torch |")
    print("|---:|---:|---:|---:|---:|")
    m, g, t = best["meshflow"], best["meshflow-graph"], best["torch"]
    print(f"| {m:.1f} | {g:.1f} | {t:.1f} | {m / t:.2f} | {g / t:.2f} |")


if __name__ == "__main__":
    main()
