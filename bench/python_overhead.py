#!/usr/bin/env python3
"""Per-op time from Python, meshflow against PyTorch in the same run.

Small ops, where the time is the cost of getting from Python to the kernel
and back: an add of two 4-element tensors, an 8x8 matmul, and a chain of 10
elementwise ops on 100 elements. Both libraries run on one thread. Each case
is timed in rounds that alternate the two libraries (so drift on a shared
machine hits both), and the median of the rounds is reported.

    PYTHONPATH=python /usr/bin/python3 bench/python_overhead.py [--rounds 31]
"""
import argparse
import platform
import statistics
import time

import torch

import meshflow as mf
from meshflow.utils.collect_env import _cpu_model


def chain(x):
    y = x + 1.0
    y = y * 2.0
    y = y - x
    y = y.exp()
    y = y.sin()
    y = y.abs()
    y = y.sqrt()
    y = y / 3.0
    y = y.relu()
    return y.neg()


def cases(lib):
    a, b = lib.ones(4), lib.full((4,), 2.0)
    m = lib.rand(8, 8)
    x = lib.rand(100)
    return {
        "add, 2 x float32[4]": (lambda: a + b, 1),
        "matmul, float32[8, 8] @ [8, 8]": (lambda: m @ m, 1),
        "10-op elementwise chain, float32[100]": (lambda: chain(x), 10),
    }


def time_per_op(fn, ops_per_call, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / (calls * ops_per_call)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    args = parser.parse_args()

    torch.set_num_threads(1)
    mf.set_num_threads(1)
    libs = {"meshflow": cases(mf), "torch": cases(torch)}
    print(f"Python per-op overhead on {_cpu_model()}, 1 thread each")
    print(f"meshflow {mf.__version__}, torch {torch.__version__}, Python {platform.python_version()}; "
          f"median of {args.rounds} rounds of {args.calls} calls")
    print(f"{'case':40s} {'meshflow us':>12s} {'torch us':>10s} {'ratio':>7s}")
    for case in libs["meshflow"]:
        samples = {name: [] for name in libs}
        for name in libs:  # warm-up: caches, allocator pools
            fn, ops = libs[name][case]
            time_per_op(fn, ops, args.calls)
        for r in range(args.rounds):
            order = list(libs) if r % 2 == 0 else list(reversed(libs))
            for name in order:
                fn, ops = libs[name][case]
                samples[name].append(time_per_op(fn, ops, args.calls))
        mf_us = statistics.median(samples["meshflow"]) * 1e6
        torch_us = statistics.median(samples["torch"]) * 1e6
        print(f"{case:40s} {mf_us:12.2f} {torch_us:10.2f} {mf_us / torch_us:6.2f}x")
    # What the binding alone costs: +x runs no op, only the call and a new wrapper.
    x = mf.ones(4)
    floor = statistics.median(time_per_op(lambda: +x, 1, args.calls) for _ in range(args.rounds)) * 1e6
    print(f"meshflow binding floor (+x: a call and a new Tensor object, no op): {floor:.2f} us")


if __name__ == "__main__":
    main()
