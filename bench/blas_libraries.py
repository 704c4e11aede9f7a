#!/usr/bin/env python3
"""The CPU's GEMM libraries on the products of training steps, measured in
the same run.

    PYTHONPATH=python /usr/bin/python3 bench/blas_libraries.py [--reps 5] [--threads 2]

For each linear layer below, its three products (forward x @ W^T, input
gradient g @ W, weight gradient g^T @ x) in float32 and bfloat16, through
meshflow's matmul with each library forced (OpenBLAS, oneDNN, oneMKL where
tools/install_deps.sh installed it) and with "auto" (Note [Choosing a GEMM
library]), and through the newest PyTorch when bench/setup_torch_venv.sh has
installed it (a process of its own). Prints GFLOP/s, the median of --reps
products after two warm-up products; "auto" also prints which library it
chose.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PYTHON = os.path.join(HERE, ".venv-torch", "bin", "python")

# (name, rows, in features, out features)
LAYERS = [
    ("MLP bench fc1, batch 128", 128, 784, 1024),
    ("GPT bench fc1, 8x128 tokens", 1024, 256, 1024),
    ("GPT bench head, 8x128 tokens", 1024, 256, 1024 * 3 // 4),
    ("GPT-2-small qkv, 4x1024 tokens", 4096, 768, 2304),
    ("GPT-2-small fc1, 4x1024 tokens", 4096, 768, 3072),
    ("GPT-2-small fc2, 4x1024 tokens", 4096, 3072, 768),
    ("square 2048", 2048, 2048, 2048),
]


def products(rows, fin, fout):
    """(what, n, m, k, a_transposed, b_transposed) of a linear layer's step."""
    return [("fwd", rows, fout, fin, False, True),     # x (rows, in) @ W^T, W (out, in)
            ("dx", rows, fin, fout, False, False),     # g (rows, out) @ W (out, in)
            ("dW", fout, fin, rows, True, False)]      # g^T (out, rows) @ x (rows, in)


def operand(lib, rows, cols, transposed, dtype):
    t = lib.randn(cols, rows) if transposed else lib.randn(rows, cols)
    t = t.to(dtype)
    return t.t() if transposed else t


def measure(lib, dtype, n, m, k, ta, tb, reps):
    a = operand(lib, n, k, ta, dtype)
    b = operand(lib, k, m, tb, dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return 2 * n * m * k / statistics.median(times) / 1e9


def cases():
    for name, rows, fin, fout in LAYERS:
        for what, n, m, k, ta, tb in products(rows, fin, fout):
            yield f"{name}: {what}", n, m, k, ta, tb


def torch_worker(reps, threads):
    import torch
    torch.set_num_threads(threads)
    out = {"version": torch.__version__, "rates": {}}
    for dtype in ("float32", "bfloat16"):
        for label, n, m, k, ta, tb in cases():
            out["rates"][f"{dtype}|{label}"] = measure(torch, getattr(torch, dtype), n, m, k, ta, tb, reps)
    print(json.dumps(out))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        torch_worker(args.reps, args.threads)
        return
    import meshflow as mf
    from meshflow.utils.collect_env import _cpu_model
    mf.set_num_threads(args.threads)
    cpu = mf.backends.cpu
    libraries = ["openblas", "onednn"] + (["mkl"] if mf.backends.mkl.is_available() else []) + ["auto"]
    print(f"GEMM libraries, {args.threads} threads, median of {args.reps}; {_cpu_model()}")
    print(f"oneMKL: {mf.backends.mkl.version() or 'not installed'}")
    torch_rates, torch_version = {}, None
    if os.path.exists(VENV_PYTHON):
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        run = subprocess.run([VENV_PYTHON, __file__, "--torch-worker", "--reps", str(args.reps), "--threads",
                              str(args.threads)], capture_output=True, text=True, env=env, check=True)
        result = json.loads(run.stdout.strip().splitlines()[-1])
        torch_rates, torch_version = result["rates"], result["version"]
    for dtype_name in ("float32", "bfloat16"):
        dtype = getattr(mf, dtype_name)
        cols = [lib for lib in libraries if not (lib == "openblas" and dtype_name != "float32")]
        head = ["product", "n x m x k"] + cols + ["auto chose"] + ([f"torch {torch_version}"] if torch_rates else [])
        print(f"\n{dtype_name}, GFLOP/s\n")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for label, n, m, k, ta, tb in cases():
            row = [label, f"{n}x{m}x{k}" + (" (a^T)" if ta else "") + (" (b^T)" if tb else "")]
            for lib in cols:
                cpu.preferred_blas_library(lib)
                if lib == "auto":
                    cpu.clear_blas_choices()
                row.append(f"{measure(mf, dtype, n, m, k, ta, tb, args.reps):.0f}")
            chosen = [c["library"] for c in cpu.blas_choices() if (c["n"], c["m"], c["k"]) == (n, m, k)]
            row.append(chosen[0] if chosen else "(not measured: small)")
            if torch_rates:
                row.append(f"{torch_rates[f'{dtype_name}|{label}']:.0f}")
            print("| " + " | ".join(row) + " |")
            sys.stdout.flush()
    cpu.preferred_blas_library("auto")


if __name__ == "__main__":
    main()
