"""Recurrent layers: one training step (forward and backward of a sum) of nn.LSTM, nn.GRU and nn.RNN
in meshflow and PyTorch, measured in the same run.

    PYTHONPATH=python /usr/bin/python3 bench/rnn.py [--steps 20] [--rounds 3] [--torch-python PY]

Shapes: sequence 32, batch 16, input 64, hidden 128, 2 layers (and a bidirectional LSTM). Each
library runs in a fresh process with 2 threads under OMP_WAIT_POLICY=PASSIVE; a process times
`--steps` steps five times and reports the best mean. Processes are repeated `--rounds` times,
interleaved, and the best counts. --torch-python adds a column for another interpreter's torch (the
newest PyTorch from bench/setup_torch_venv.sh: bench/.venv-torch/bin/python).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = {
    "LSTM": dict(kind="LSTM", kwargs={}),
    "GRU": dict(kind="GRU", kwargs={}),
    "RNN": dict(kind="RNN", kwargs={}),
    "LSTM bidirectional": dict(kind="LSTM", kwargs={"bidirectional": True}),
}
T, B, I, H, LAYERS = 32, 16, 64, 128, 2


def worker(library, steps):
    import numpy as np
    if library == "meshflow":
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import meshflow as lib
    else:
        import torch as lib
    lib.set_num_threads(2)
    x = lib.tensor(np.random.default_rng(0).standard_normal((T, B, I)).astype(np.float32))
    results = {}
    for name, case in CASES.items():
        layer = getattr(lib.nn, case["kind"])(I, H, num_layers=LAYERS, **case["kwargs"])

        def step():
            out, _ = layer(x)
            out.sum().backward()

        for _ in range(3):
            step()
        best = float("inf")
        for _ in range(5):
            begin = time.perf_counter()
            for _ in range(steps):
                step()
            best = min(best, (time.perf_counter() - begin) / steps)
        results[name] = 1e3 * best
    print(json.dumps(results))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--torch-python", help="another interpreter whose torch is measured too")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.steps)
        return
    runs = [("meshflow", sys.executable), ("torch", sys.executable)]
    if args.torch_python:
        runs.append(("torch (other)", args.torch_python))
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="2")
    best = {label: {} for label, _ in runs}
    versions = {}
    for _ in range(args.rounds):
        for label, python in runs:
            library = "meshflow" if label == "meshflow" else "torch"
            cmd = [python, os.path.abspath(__file__), "--worker", library, "--steps", str(args.steps)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            for name, ms in json.loads(out.stdout.strip().splitlines()[-1]).items():
                best[label][name] = min(best[label].get(name, float("inf")), ms)
            if library == "torch" and label not in versions:
                versions[label] = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                                 capture_output=True, text=True).stdout.strip()
    machine = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | cut -d: -f2"], capture_output=True,
                             text=True).stdout.strip()
    print(f"\n{machine}, 2 threads; T={T} B={B} input={I} hidden={H} layers={LAYERS}; ms per training step "
          f"(best of {args.rounds} processes); torch {', '.join(f'{k}: {v}' for k, v in versions.items())}\n")
    header = "| layer | meshflow | " + " | ".join(label for label, _ in runs[1:]) + " | " + \
        " | ".join(f"meshflow / {label}" for label, _ in runs[1:]) + " |"
    print(header)
    print("|---" * (1 + 2 * len(runs) - 1) + "|")
    for name in CASES:
        m = best["meshflow"][name]
        others = [best[label][name] for label, _ in runs[1:]]
        print(f"| {name} | {m:.2f} | " + " | ".join(f"{o:.2f}" for o in others) + " | " +
              " | ".join(f"{m / o:.2f}" for o in others) + " |")


if __name__ == "__main__":
    main()
