"""interpolate and F.pad's index modes against PyTorch 1.13, forward and backward.

    PYTHONPATH=python /usr/bin/python3 bench/resample.py [--rounds 15] [--threads 2]

Each case runs the same call in meshflow and in PyTorch on the same float32
data, alternating the two libraries sample by sample; the best sample of
each counts. Ratio = PyTorch time / meshflow time (above 1: meshflow is
faster).
"""
import argparse
import os
import platform
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import meshflow as mf  # noqa: E402

SHAPE = (8, 32, 64, 64)
CASES = [
    ("nearest x2", lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2)),
    ("bilinear x2", lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")),
    ("bilinear x0.5, align_corners", lambda lib, x: lib.nn.functional.interpolate(
        x, scale_factor=0.5, mode="bilinear", align_corners=True)),
    ("bicubic x2", lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2, mode="bicubic")),
    ("reflect pad 3", lambda lib, x: lib.nn.functional.pad(x, (3, 3, 3, 3), mode="reflect")),
    ("replicate pad 3", lambda lib, x: lib.nn.functional.pad(x, (3, 3, 3, 3), mode="replicate")),
    ("circular pad 3", lambda lib, x: lib.nn.functional.pad(x, (3, 3, 3, 3), mode="circular")),
]


def sample(lib, call, x, backward):
    if not backward:
        start = time.perf_counter()
        call(lib, x)
        return time.perf_counter() - start
    leaf = x.detach().requires_grad_(True)
    y = call(lib, leaf)
    g = lib.ones(*y.shape)
    start = time.perf_counter()
    lib.autograd.grad([y], [leaf], [g])
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    mf.set_num_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, {args.threads} threads, "
          f"torch {torch.__version__}, input float32 {SHAPE}, best of {args.rounds} alternating samples")
    data = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    inputs = {torch: torch.tensor(data), mf: mf.tensor(data)}
    print(f"{'case':34} {'pass':8} {'torch ms':>9} {'mf ms':>9} {'ratio':>6}")
    for name, call in CASES:
        for backward in (False, True):
            best = {torch: float("inf"), mf: float("inf")}
            for _ in range(args.rounds):
                for lib in (torch, mf):
                    best[lib] = min(best[lib], sample(lib, call, inputs[lib], backward))
            print(f"{name:34} {'backward' if backward else 'forward':8} {best[torch] * 1e3:9.2f} "
                  f"{best[mf] * 1e3:9.2f} {best[torch] / best[mf]:6.2f}")


if __name__ == "__main__":
    main()
