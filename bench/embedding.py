"""Sparse embeddings (docs/embedding.md): training samples/s of a DLRM
(examples/dlrm.py's model) with meshflow's MultiTableEmbedding against the
same model in the newest PyTorch (one nn.EmbeddingBag(sparse=True) per
feature, SparseAdam for the tables and Adam for the dense layers; and both
with Adagrad), 2 threads; then a sweep of the rows per table: samples/s and
resident memory of both, and where PyTorch's tables no longer fit.

    bash bench/setup_torch_venv.sh          # the newest PyTorch, in bench/.venv-torch
    PYTHONPATH=python /usr/bin/python3 bench/embedding.py [--steps 60] [--sizes 1e5 1e6 1e7 1e8]

Each configuration runs in a process of its own (resident memory is the
process's peak, ru_maxrss) on the same generated batches: 26 features of
Zipf(1.2)-distributed ids over `rows` ids per table, 13 log-normal dense
features, batch 2048.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DENSE, SPARSE, DIM = 13, 26, 16


def batches(rows, steps, batch, seed=0):
    """(dense, ids) per step: Zipf ids drawn without a table of `rows`
    probabilities (inverse transform of the continuous Zipf law), so that
    100M-row tables cost nothing to sample."""
    rng = np.random.default_rng(seed)
    a = 1.2
    out = []
    for _ in range(steps):
        u = rng.random((batch, SPARSE))
        # P(id >= k) ~ k^(1-a): inverse transform, clipped to the table.
        with np.errstate(over="ignore"):
            k = np.minimum((1 - u) ** (1 / (1 - a)), rows)
        ids = np.clip(np.floor(k).astype(np.int64) - 1, 0, rows - 1)
        dense = rng.lognormal(0, 1, (batch, DENSE)).astype(np.float32)
        labels = (rng.random(batch) < 0.25).astype(np.float32)
        out.append((dense, ids, labels))
    return out


def worker(args):
    rows, lib, opt_name = int(args.rows), args.lib, args.opt
    data = batches(rows, args.steps + args.warmup, args.batch)
    if lib == "meshflow":
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        import meshflow as mf
        import meshflow.nn.functional as F
        from meshflow import one_embedding as oe
        import dlrm
        mf.set_num_threads(2)
        tables = [oe.make_table_options(oe.make_uniform_initializer(-0.05, 0.05)) for _ in range(SPARSE)]
        path = f"/tmp/meshflow-bench-emb-{os.getpid()}"
        store = (oe.make_cached_ssd_store_options(args.cache_mb, path) if args.cache_mb
                 else oe.make_device_mem_store_options(path, capacity=rows))
        model = dlrm.DLRM(DIM, oe.MultiTableEmbedding("bench", DIM, mf.float32, mf.int64, tables, store))
        opt = (mf.optim.Adam if opt_name == "adam" else mf.optim.Adagrad)(model.parameters(), lr=1e-3)

        def step(dense, ids, labels):
            loss = F.binary_cross_entropy_with_logits(model(mf.tensor(dense), mf.tensor(ids)), mf.tensor(labels))
            opt.zero_grad()
            loss.backward()
            opt.step()
    else:
        import torch
        import torch.nn.functional as F
        torch.set_num_threads(2)

        class TorchDLRM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bottom = torch.nn.Sequential(torch.nn.Linear(DENSE, 64), torch.nn.ReLU(), torch.nn.Linear(64, DIM),
                                                  torch.nn.ReLU())
                self.tables = torch.nn.ModuleList([torch.nn.EmbeddingBag(rows, DIM, mode="sum", sparse=True)
                                                   for _ in range(SPARSE)])
                pairs = (SPARSE + 1) * SPARSE // 2
                self.top = torch.nn.Sequential(torch.nn.Linear(DIM + pairs, 64), torch.nn.ReLU(),
                                               torch.nn.Linear(64, 1))
                r, c = np.triu_indices(SPARSE + 1, 1)
                self.r, self.c = torch.tensor(r), torch.tensor(c)

            def forward(self, dense, ids):
                x = self.bottom(torch.log1p(dense))
                vectors = torch.stack([x] + [t(ids[:, f:f + 1]) for f, t in enumerate(self.tables)], 1)
                dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.r, self.c]
                return self.top(torch.cat([x, dots], 1)).squeeze(1)

        model = TorchDLRM()
        sparse = [p for t in model.tables for p in t.parameters()]
        dense_params = list(model.bottom.parameters()) + list(model.top.parameters())
        if opt_name == "adam":
            opts = [torch.optim.SparseAdam(sparse, lr=1e-3), torch.optim.Adam(dense_params, lr=1e-3)]
        else:
            opts = [torch.optim.Adagrad(sparse + dense_params, lr=1e-3)]

        def step(dense, ids, labels):
            loss = F.binary_cross_entropy_with_logits(model(torch.from_numpy(dense), torch.from_numpy(ids)),
                                                      torch.from_numpy(labels))
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()

    for b in data[:args.warmup]:
        step(*b)
    start = time.perf_counter()
    for b in data[args.warmup:]:
        step(*b)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"samples_per_s": args.steps * args.batch / seconds, "rss": rss}))


def run(lib, rows, opt, steps, batch, warmup=5, cache_mb=0):
    python = os.path.join(HERE, ".venv-torch", "bin", "python") if lib == "torch" else "/usr/bin/python3"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="2")
    out = subprocess.run([python, os.path.abspath(__file__), "--worker", "--lib", lib, "--rows", str(rows),
                          "--opt", opt, "--steps", str(steps), "--batch", str(batch), "--warmup", str(warmup),
                          "--cache-mb", str(cache_mb)],
                         env=env, capture_output=True, text=True)
    if out.returncode < 0:
        return {"error": f"killed by signal {-out.returncode} (out of memory)"}
    if out.returncode:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return {"error": lines[-1][:120] if lines else f"exit code {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def cell(result):
    return f"{result['samples_per_s']:.0f}" if "samples_per_s" in result else result.get("error", "-")


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--lib")
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--opt", default="adam")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--cache-mb", type=float, default=0, help="> 0: the cached store with this budget")
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6, 1e7, 1e8])
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    have_torch = os.path.exists(os.path.join(HERE, ".venv-torch", "bin", "python"))
    torch_version = "not installed (bash bench/setup_torch_venv.sh)"
    if have_torch:
        torch_version = subprocess.run([os.path.join(HERE, ".venv-torch", "bin", "python"), "-c",
                                        "import torch; print(torch.__version__)"], capture_output=True,
                                       text=True).stdout.strip()
    print(f"DLRM, 26 tables x {DIM}, batch {args.batch}, 2 threads, {args.steps} timed steps; torch {torch_version}")
    print("\n## Samples/s at 1M rows per table\n")
    print("| optimizer | meshflow samples/s | torch samples/s | meshflow / torch |")
    print("| --- | --- | --- | --- |")
    for opt in ("adam", "adagrad"):
        mine = run("meshflow", int(1e6), opt, args.steps, args.batch)
        theirs = run("torch", int(1e6), opt, args.steps, args.batch) if have_torch else {"error": "no torch"}
        ratio = (f"{mine['samples_per_s'] / theirs['samples_per_s']:.2f}x"
                 if "samples_per_s" in mine and "samples_per_s" in theirs else "-")
        print(f"| {opt} | {cell(mine)} | {cell(theirs)} | {ratio} |", flush=True)
    print("\n## Rows per table (Adam): samples/s and resident memory\n")
    print("| rows per table | meshflow samples/s | meshflow RSS GiB | torch samples/s | torch RSS GiB |")
    print("| --- | --- | --- | --- | --- |")
    for rows in args.sizes:
        rows = int(rows)
        mine = run("meshflow", rows, "adam", args.steps, args.batch)
        # torch holds every table whole, and SparseAdam's two moments whole too.
        needed = 3 * SPARSE * rows * DIM * 4
        if not have_torch:
            theirs = "not installed"
        elif needed > 0.8 * available_bytes():
            theirs = (f"out of memory (tables and Adam state need {needed / 2**30:.0f} GiB, "
                      f"{available_bytes() / 2**30:.0f} available)")
        else:
            theirs = run("torch", rows, "adam", args.steps, args.batch)
        t_cols = (f"{theirs['samples_per_s']:.0f} | {theirs['rss'] / 2**30:.2f}" if isinstance(theirs, dict) and
                  "samples_per_s" in theirs else f"{theirs if isinstance(theirs, str) else theirs.get('error')} | -")
        m_cols = (f"{mine['samples_per_s']:.0f} | {mine['rss'] / 2**30:.2f}" if "samples_per_s" in mine
                  else f"{mine.get('error')} | -")
        print(f"| {rows:,} | {m_cols} | {t_cols} |", flush=True)
    # The largest size once more, its rows in a file behind a 64 MiB cache.
    rows = int(args.sizes[-1])
    mine = run("meshflow", rows, "adam", args.steps, args.batch, cache_mb=64)
    m_cols = (f"{mine['samples_per_s']:.0f} | {mine['rss'] / 2**30:.2f}" if "samples_per_s" in mine
              else f"{mine.get('error')} | -")
    print(f"| {rows:,}, cached store (64 MiB cache over a file) | {m_cols} | - | - |", flush=True)


if __name__ == "__main__":
    main()
