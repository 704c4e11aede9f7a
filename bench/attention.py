#!/usr/bin/env python3
"""Fused attention against the composed formula, measured in the same run.

    PYTHONPATH=python /usr/bin/python3 bench/attention.py [--seqs 128 512 1024 2048] [--reps 5]

For each sequence length, dtype (float32, bfloat16) and mask (none, causal):
the time of one forward + backward of
  - meshflow's scaled_dot_product_attention (fused_attention where Note
    [Choosing fused attention] picks it),
  - the composed formula written with meshflow ops (softmax(q k^T * scale +
    mask) v, the (L, S) weights materialised),
  - the newest PyTorch's F.scaled_dot_product_attention, when
    bench/setup_torch_venv.sh has installed it (a process of its own),
and meshflow's peak memory above the inputs for both forms. Batch 8, 4
heads, head dim 64, 2 threads.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PYTHON = os.path.join(HERE, ".venv-torch", "bin", "python")
B, H, D = 8, 4, 64


def timed(fn, reps):
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def meshflow_rows(seqs, reps):
    import meshflow as mf
    F = mf.nn.functional

    def composed(q, k, v, causal):
        s = (q * (1 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
        if causal:
            L = q.shape[-2]
            s = s + mf.triu(mf.full((L, L), -math.inf, dtype=q.dtype), 1)
        return mf.softmax(s, -1) @ v

    rows = []
    for dtype in ("float32", "bfloat16"):
        for causal in (False, True):
            for L in seqs:
                q, k, v = (mf.randn(B, H, L, D, dtype=getattr(mf, dtype), requires_grad=True) for _ in range(3))
                g = mf.randn(B, H, L, D, dtype=getattr(mf, dtype))
                row = {"dtype": dtype, "mask": "causal" if causal else "none", "seq": L}
                for name, fn in (("fused", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
                                 ("composed", lambda: composed(q, k, v, causal))):
                    row[name + "_ms"] = timed(lambda: fn().backward(g), reps)
                    mf.reset_peak_memory_stats()
                    base = mf.memory_allocated()
                    fn().backward(g)
                    row[name + "_mib"] = (mf.max_memory_allocated() - base) / 2**20
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                row["kernel"] = "fused" if out.grad_fn.name() == "FusedAttentionBackward0" else "composed"
                rows.append(row)
    return rows


def torch_worker(seqs, reps):
    import torch
    torch.set_num_threads(2)
    F = torch.nn.functional
    out = {}
    for dtype in ("float32", "bfloat16"):
        for causal in (False, True):
            for L in seqs:
                q, k, v = (torch.randn(B, H, L, D, dtype=getattr(torch, dtype), requires_grad=True) for _ in range(3))
                g = torch.randn(B, H, L, D, dtype=getattr(torch, dtype))
                ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g), reps)
                out[f"{dtype}/{'causal' if causal else 'none'}/{L}"] = ms
    print(json.dumps({"version": torch.__version__, "ms": out}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seqs", type=int, nargs="+", default=[128, 512, 1024, 2048])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        return torch_worker(args.seqs, args.reps)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    import meshflow as mf
    mf.set_num_threads(2)
    torch_ms, torch_version = {}, None
    if os.path.exists(VENV_PYTHON):
        res = subprocess.run([VENV_PYTHON, __file__, "--torch-worker", "--reps", str(args.reps), "--seqs",
                              *map(str, args.seqs)], capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="2", PYTHONPATH=""))
        if res.returncode == 0:
            data = json.loads(res.stdout.strip().splitlines()[-1])
            torch_ms, torch_version = data["ms"], data["version"]
        else:
            print("newest PyTorch failed:", res.stderr[-500:], file=sys.stderr)
    rows = meshflow_rows(args.seqs, args.reps)
    from meshflow.utils.collect_env import _cpu_model
    print(f"Attention forward + backward, batch {B}, {H} heads, head dim {D}, 2 threads; {_cpu_model()}; "
          f"meshflow {mf.__version__}" + (f", torch {torch_version}" if torch_version else ""))
    print(f"{'dtype':9} {'mask':7} {'seq':>5} {'kernel':>9} {'sdpa ms':>9} {'composed ms':>12} {'speedup':>8} "
          f"{'sdpa MiB':>9} {'composed MiB':>13} {'torch sdpa ms':>14}")
    for r in rows:
        t = torch_ms.get(f"{r['dtype']}/{r['mask']}/{r['seq']}")
        print(f"{r['dtype']:9} {r['mask']:7} {r['seq']:5d} {r['kernel']:>9} {r['fused_ms']:9.1f} "
              f"{r['composed_ms']:12.1f} {r['composed_ms'] / r['fused_ms']:7.2f}x {r['fused_mib']:9.1f} "
              f"{r['composed_mib']:13.1f} {('%14.1f' % t) if t else '%14s' % '-'}")


if __name__ == "__main__":
    main()
