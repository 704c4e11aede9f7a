"""Training-step time of meshflow against PyTorch, measured in the same run.

    PYTHONPATH=python /usr/bin/python3 bench/train_step.py [--workloads mlp,gpt] [--steps 10]
    PYTHONPATH=python /usr/bin/python3 bench/train_step.py --amp [--workloads mlp,resnet18,gpt]

For each workload (examples/models.py) and each library, a fresh process
builds the model, runs warm-up steps, then times forward + backward +
optimizer steps and reports the median. Every process uses 2 threads.
Each library runs under OMP_WAIT_POLICY=PASSIVE and =ACTIVE, `--rounds`
processes each, and its best counts: active waiting wins on small,
latency-bound steps (LeNet) while passive waiting keeps OpenBLAS at full
speed. A second table gives both libraries at PASSIVE. Libraries: meshflow,
Debian's PyTorch 1.13 (/usr/bin/python3) and, when bench/setup_torch_venv.sh
has installed it, the newest PyTorch release (bench/.venv-torch), eager and
under torch.compile (inductor; the peer of graph mode; passive waiting, one
policy: it compiles for tens of seconds in each process). The first step of
meshflow's graph and of torch.compile, which compiles, is timed apart.
Workloads: MLP, LeNet, ResNet-18 and GPT, and ViT-Tiny, a BERT-style encoder
with padding, a ConvNeXt-style CNN and DLRM with plain embedding tables
(examples/models.py).

Also printed: model-FLOP utilisation, the training FLOPs of a step (3x the
forward's matmul/conv/attention FLOPs) per second over the sgemm rate
measured in the same run.

--device cuda: the same steps on a GPU (tools/gpu_check.sh runs it there).
Libraries: meshflow eager and in graph mode (with config.enable_cuda_graph:
steps without random draws replay as CUDA graphs), and the PyTorch of the
interpreter running this script (the newest one that machine has); each
process is timed once per round and the best round counts. With --amp the
forward and the loss run under bfloat16 autocast on "cuda". Utilisation is
against the matmul rate of the step's dtype (bfloat16 under --amp) measured
in the same process.

--amp: mixed precision instead. The forward and the loss run under bfloat16
autocast (mf.autocast / torch.autocast on "cpu"); parameters, gradients and
the optimizer stay float32. Measured in the same run: meshflow float32,
meshflow bfloat16 autocast eager and in graph mode (config.enable_amp),
each PyTorch under bfloat16 autocast, and torch.compile under it (newest
PyTorch, unless --no-compile).
"""
import contextlib
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV_PYTHON = os.path.join(HERE, ".venv-torch", "bin", "python")

WORKLOADS = {
    # name: (model, batch, optimizer, model kwargs)
    "mlp": ("mlp", 128, "sgd", {}),
    "lenet": ("lenet", 32, "sgd_momentum", {}),
    "resnet18": ("resnet18", 32, "sgd_momentum", {}),
    "gpt": ("gpt", 8, "adamw", {}),
    "vit_tiny": ("vit_tiny", 64, "adamw", {}),
    "bert": ("bert", 8, "adamw", {}),
    "convnext": ("convnext", 64, "adamw", {}),
    "dlrm": ("dlrm", 256, "adamw", {}),
}
STEPS = {"mlp": 30, "lenet": 50, "resnet18": 6, "gpt": 10, "vit_tiny": 5, "bert": 10, "convnext": 5, "dlrm": 30}


def make_optimizer(lib, kind, params):
    if kind == "sgd":
        return lib.optim.SGD(params, lr=0.01)
    if kind == "sgd_momentum":
        return lib.optim.SGD(params, lr=0.01, momentum=0.9)
    return lib.optim.AdamW(params, lr=1e-3)


def forward_flops(name, batch, kwargs):
    """Matmul/conv/attention FLOPs of one forward pass (torch hooks)."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models
    model = models.build(name, torch, **kwargs)
    total = [0]

    def conv_hook(m, inp, out):
        k = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
        total[0] += 2 * out.numel() * k

    def linear_hook(m, inp, out):
        total[0] += 2 * out.numel() * m.in_features

    def attn_hook(m, inp, out):
        q = inp[0]
        n, t = (q.shape[0], q.shape[1]) if m.batch_first else (q.shape[1], q.shape[0])
        total[0] += 2 * 2 * n * t * t * m.embed_dim  # q k^T and p v
        total[0] += 2 * n * t * m.embed_dim * 3 * m.embed_dim  # in_proj (out_proj is a Linear)

    for mod in model.modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(conv_hook)
        elif isinstance(mod, torch.nn.Linear):
            mod.register_forward_hook(linear_hook)
        elif isinstance(mod, torch.nn.MultiheadAttention):
            mod.register_forward_hook(attn_hook)
    rng = __import__("numpy").random.default_rng(0)
    x, _ = models.random_batch(name, batch, rng, **({"seq": kwargs["seq"]} if "seq" in kwargs else {}))
    with torch.no_grad():
        model(torch.tensor(x))
    return total[0]


def autocast(lib, precision, device="cpu"):
    if precision == "fp32":
        return contextlib.nullcontext()
    return lib.autocast(device, dtype=lib.bfloat16)


def matmul_gflops(lib, device, precision):
    """The library's matmul rate: 2048^3 at 2 threads on the CPU, 8192^3 in
    the step's dtype on a device."""
    n = 2048 if device == "cpu" else 8192
    dtype = lib.bfloat16 if precision == "bf16" and device != "cpu" else lib.float32
    a, b = lib.randn(n, n, device=device).to(dtype), lib.randn(n, n, device=device).to(dtype)
    lib.matmul(a, b)
    best = float("inf")
    for _ in range(5):
        if device != "cpu":
            lib.cuda.synchronize()
        begin = time.perf_counter()
        lib.matmul(a, b)
        if device != "cpu":
            lib.cuda.synchronize()
        best = min(best, time.perf_counter() - begin)
    return 2 * n ** 3 / best / 1e9


def worker(lib_name, workload, steps, precision="fp32", device="cpu"):
    """Runs in the child process: prints one JSON line."""
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models
    if lib_name.startswith("meshflow"):
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import meshflow as lib
    else:
        import torch as lib
    lib.set_num_threads(2)
    lib.manual_seed(0)
    name, batch, opt_kind, kwargs = WORKLOADS[workload]
    model = models.build(name, lib, **kwargs).to(device)
    model.train()
    optimizer = make_optimizer(lib, opt_kind, model.parameters())
    if lib_name == "torch-compile":
        model = lib.compile(model)
    rng = np.random.default_rng(0)
    x, y = models.random_batch(name, batch, rng)
    x, y = lib.tensor(x).to(device), lib.tensor(y).to(device)

    def step():
        optimizer.zero_grad()
        with autocast(lib, precision, device):
            loss = models.loss_fn(name, lib, model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    extra = {}
    if lib_name == "meshflow-graph":
        class TrainGraph(lib.nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model
                self.add_optimizer(optimizer)
                if precision == "bf16":
                    self.config.enable_amp(True, dtype=lib.bfloat16)
                if device != "cpu":  # steps replayed as CUDA graphs where they can be (Note [Captured steps])
                    self.config.enable_cuda_graph()

            def build(self, x, y):
                loss = models.loss_fn(name, lib, self.model(x), y)
                loss.backward()
                return loss

        graph = TrainGraph()

        def step():  # noqa: F811
            return graph(x, y).item()

    begin = time.perf_counter()
    step()  # graph mode and torch.compile compile here
    extra["first_step_s"] = time.perf_counter() - begin
    for _ in range(2):
        step()
    if lib_name.startswith("meshflow") and device == "cpu":
        # Memory a step needs beyond parameters and optimizer state: eager's
        # measured peak (gradients included: they are dropped first), and the
        # graph's planned arena (allocated once).
        optimizer.zero_grad()
        resting = lib.memory_allocated()
        lib.reset_peak_memory_stats()
        step()
        extra["step_peak_mb"] = (lib.max_memory_allocated() - resting) / 2 ** 20
        if lib_name == "meshflow-graph":
            extra["planned_mb"] = graph.planned_peak_bytes / 2 ** 20
    times = []
    for _ in range(steps):
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    # The matmul rate of this library, for the utilisation.
    gflops = matmul_gflops(lib, device, precision)
    version = getattr(lib, "__version__", "?")
    print(json.dumps({"ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times), "sgemm_gflops": gflops,
                      "version": str(version), **extra}))


def run_child(python, lib_name, workload, steps, policy="PASSIVE", precision="fp32", device="cpu"):
    env = dict(os.environ, OMP_WAIT_POLICY=policy, OMP_NUM_THREADS="2")
    cmd = [python, os.path.abspath(__file__), "--worker", lib_name, "--workloads", workload, "--steps", str(steps),
           "--precision", precision, "--device", device]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{lib_name} {workload} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["policy"] = policy
    return result


def measure(configs, workload, steps, rounds):
    """Median step time of each (python, library[, precision]) under OpenMP's passive and
    active waiting: the best of `rounds` processes, the rounds interleaved
    across configurations so that a slow spell of the machine (its noise
    only ever adds time) does not favour one of them."""
    runs = {}
    for _ in range(rounds):
        for key in configs:
            # torch.compile compiles for 15-50 s in each process: passive only
            for policy in ("PASSIVE",) if key[1] == "torch-compile" else ("PASSIVE", "ACTIVE"):
                try:
                    r = run_child(*key[:2], workload, steps, policy, *key[2:])
                except RuntimeError as e:
                    if key[1].startswith("meshflow"):
                        raise
                    # A peer that cannot run this workload (PyTorch 1.13's CPU
                    # autocast and BERT's layer norm) gets an empty cell.
                    print(f"{key[1]} ({key[0]}) {workload}: failed: {str(e).strip().splitlines()[-1]}",
                          file=sys.stderr, flush=True)
                    r = {"ms": float("nan"), "failed": True, "first_step_s": float("nan"), "version": "?"}
                r["policy"] = policy
                best = runs.setdefault(key, {}).get(policy)
                if best is None or r["ms"] < best["ms"] or best.get("failed"):
                    runs[key][policy] = r
    for per_policy in runs.values():
        ran = [r for r in per_policy.values() if not r.get("failed")]
        per_policy["best"] = min(ran, key=lambda r: r["ms"]) if ran else next(iter(per_policy.values()))
    return [runs[key] for key in configs]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--steps", type=int, default=0, help="timed steps (0: per-workload default)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--no-new-torch", action="store_true", help="skip the newest-PyTorch venv")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--rounds", type=int, default=3, help="processes per library and policy (the best counts)")
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast columns (see the module docstring)")
    p.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help="cpu, or cuda (see the module docstring)")
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.workloads, args.steps, args.precision, args.device)
        return
    if args.device != "cpu":
        device_main(args)
        return

    peers = ["/usr/bin/python3"]
    if not args.no_new_torch and os.path.exists(VENV_PYTHON):
        peers.append(VENV_PYTHON)
    if args.amp:
        amp_main(args, peers)
        return
    rows = []
    for workload in args.workloads.split(","):
        steps = args.steps or STEPS[workload]
        name, batch, _, kwargs = WORKLOADS[workload]
        flops = 3 * forward_flops(name, batch, kwargs)
        configs = [("/usr/bin/python3", "meshflow"), ("/usr/bin/python3", "meshflow-graph")] + [
            (python, "torch") for python in peers]
        with_compile = VENV_PYTHON in peers and not args.no_compile
        if with_compile:
            configs.append((VENV_PYTHON, "torch-compile"))
        mine, graph, *theirs = measure(configs, workload, steps, args.rounds)
        compiled = theirs.pop() if with_compile else None
        rows.append((workload, flops, mine, graph, theirs, compiled))
        print(workload, json.dumps({"meshflow": mine, "graph": graph, "torch": theirs, "torch_compile": compiled}),
              flush=True)

    def fmt(r):
        return "failed" if r.get("failed") else f"{r['ms']:.1f} ({r['policy'][0].lower()})"

    def ratio(a, b):
        return "-" if a.get("failed") or b.get("failed") else f"{a['ms'] / b['ms']:.2f}"

    versions = [next((r["best"]["version"] for r in column if not r["best"].get("failed")), "?")
                for column in zip(*(row[4] for row in rows))]
    if any(r[5] for r in rows):
        print("\nGraph mode against torch.compile (newest PyTorch, inductor; passive waiting), and the first "
              "step, which compiles:\n")
        print("| workload | graph ms | torch.compile ms | graph / compile | graph first step s | "
              "torch.compile first step s |")
        print("|---|---:|---:|---:|---:|---:|")
        for workload, flops, mine, graph, theirs, compiled in rows:
            if compiled:
                g, c = graph["best"], compiled["best"]
                print(f"| {workload} | {g['ms']:.1f} | {c['ms']:.1f} | {g['ms'] / c['ms']:.2f} | "
                      f"{g['first_step_s']:.2f} | {c['first_step_s']:.1f} |")
    print("\nEach at its best OpenMP wait policy (p: passive, a: active); graph = meshflow.nn.Graph:\n")
    print("| workload | meshflow ms | graph ms | " +
          " | ".join(f"torch {v} ms | ratio | graph ratio" for v in versions) + " | meshflow MFU |")
    print("|---|---:|---:|" + "---:|---:|---:|" * len(versions) + "---:|")
    for workload, flops, mine, graph, theirs, _ in rows:
        best, best_graph = mine["best"], graph["best"]
        cells = [workload, fmt(best), fmt(best_graph)]
        for t in theirs:
            cells += [fmt(t["best"]), f"{best['ms'] / t['best']['ms']:.2f}", f"{best_graph['ms'] / t['best']['ms']:.2f}"]
        # Utilisation against the sgemm rate measured under the passive policy
        # (active waiting halves OpenBLAS's rate here).
        peak = mine["PASSIVE"]["sgemm_gflops"] * 1e9
        cells.append(f"{100 * flops / (best['ms'] / 1000) / peak:.1f}%")
        print("| " + " | ".join(cells) + " |")
    print("\nBoth with OMP_WAIT_POLICY=PASSIVE:\n")
    print("| workload | meshflow ms | graph ms | " +
          " | ".join(f"torch {v} ms | ratio | graph ratio" for v in versions) + " |")
    print("|---|---:|---:|" + "---:|---:|---:|" * len(versions))
    for workload, flops, mine, graph, theirs, _ in rows:
        cells = [workload, f"{mine['PASSIVE']['ms']:.1f}", f"{graph['PASSIVE']['ms']:.1f}"]
        for t in theirs:
            cells += [f"{t['PASSIVE']['ms']:.1f}", f"{mine['PASSIVE']['ms'] / t['PASSIVE']['ms']:.2f}",
                      f"{graph['PASSIVE']['ms'] / t['PASSIVE']['ms']:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print("\nMemory a step needs beyond parameters and optimizer state (MiB): eager meshflow's measured "
          "peak, the graph's planned arena, and what the graph allocated besides it:\n")
    print("| workload | eager peak | graph planned | planned / eager | graph other |")
    print("|---|---:|---:|---:|---:|")
    for workload, flops, mine, graph, theirs, _ in rows:
        eager_mb, planned_mb = mine["PASSIVE"]["step_peak_mb"], graph["PASSIVE"]["planned_mb"]
        print(f"| {workload} | {eager_mb:.1f} | {planned_mb:.1f} | {planned_mb / eager_mb:.2f} | "
              f"{graph['PASSIVE']['step_peak_mb']:.1f} |")


def device_main(args):
    """--device cuda: meshflow eager and graph against this interpreter's PyTorch."""
    precision = "bf16" if args.amp else "fp32"
    workloads = args.workloads if args.workloads != ",".join(WORKLOADS) else "gpt"
    python = sys.executable
    configs = [(python, "meshflow"), (python, "meshflow-graph"), (python, "torch")]
    rows = []
    for workload in workloads.split(","):
        steps = args.steps or STEPS[workload]
        name, batch, _, kwargs = WORKLOADS[workload]
        flops = 3 * forward_flops(name, batch, kwargs)
        best = {}
        for _ in range(args.rounds):
            for key in configs:
                try:
                    r = run_child(*key, workload, steps, precision=precision, device=args.device)
                except RuntimeError as e:
                    if key[1].startswith("meshflow"):
                        raise
                    print(f"{key[1]} {workload}: failed: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
                    r = {"ms": float("nan"), "failed": True, "sgemm_gflops": float("nan"), "version": "?"}
                if key not in best or r["ms"] < best[key]["ms"] or best[key].get("failed"):
                    best[key] = r
        mine, graph, torch_run = (best[key] for key in configs)
        rows.append((workload, flops, mine, graph, torch_run))
        print(workload, json.dumps({"meshflow": mine, "graph": graph, "torch": torch_run}), flush=True)
    print(f"\nOn {args.device} ({precision}); utilisation: the step's model FLOPs per second over the "
          "library's own matmul rate in that dtype:\n")
    print("| workload | meshflow ms | graph ms | torch ms | meshflow / torch | graph / torch | graph first step s "
          "| meshflow MFU | torch MFU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workload, flops, mine, graph, torch_run in rows:
        def mfu(r):
            return "-" if r.get("failed") else f"{100 * flops / (r['ms'] / 1000) / (r['sgemm_gflops'] * 1e9):.1f}%"

        def ratio(a):
            return "-" if torch_run.get("failed") else f"{a['ms'] / torch_run['ms']:.2f}"
        print(f"| {workload} | {mine['ms']:.1f} | {graph['ms']:.1f} | {torch_run['ms']:.1f} | {ratio(mine)} | "
              f"{ratio(graph)} | {graph['first_step_s']:.2f} | {mfu(mine)} | {mfu(torch_run)} |")


def amp_main(args, peers):
    workloads = args.workloads if args.workloads != ",".join(WORKLOADS) else "mlp,resnet18,gpt"
    with_compile = VENV_PYTHON in peers and not args.no_compile
    rows = []
    for workload in workloads.split(","):
        steps = args.steps or STEPS[workload]
        configs = [("/usr/bin/python3", "meshflow", "fp32"), ("/usr/bin/python3", "meshflow", "bf16"),
                   ("/usr/bin/python3", "meshflow-graph", "bf16")]
        configs += [(python, "torch", "bf16") for python in peers]
        if with_compile:
            configs.append((VENV_PYTHON, "torch-compile", "bf16"))
        fp32, bf16, graph, *theirs = measure(configs, workload, steps, args.rounds)
        compiled = theirs.pop() if with_compile else None
        rows.append((workload, fp32, bf16, graph, theirs, compiled))
        print(workload, json.dumps({"meshflow_fp32": fp32, "meshflow_bf16": bf16, "graph_bf16": graph,
                                    "torch_bf16": theirs, "torch_compile_bf16": compiled}), flush=True)

    def fmt(r):
        return "failed" if r.get("failed") else f"{r['ms']:.1f} ({r['policy'][0].lower()})"

    def ratio(a, b):
        return "-" if a.get("failed") or b.get("failed") else f"{a['ms'] / b['ms']:.2f}"

    versions = [next((r["best"]["version"] for r in column if not r["best"].get("failed")), "?")
                for column in zip(*(row[4] for row in rows))]
    print("\nbfloat16 autocast, each at its best OpenMP wait policy (p: passive, a: active); graph = "
          "meshflow.nn.Graph with config.enable_amp:\n")
    print("| workload | meshflow fp32 ms | meshflow bf16 ms | bf16 speedup | graph bf16 ms | "
          + " | ".join(f"torch {v} bf16 ms | meshflow / torch | graph / torch" for v in versions)
          + (" | torch.compile bf16 ms | graph / compile | graph first step s | torch.compile first step s"
             if with_compile else "") + " |")
    print("|---|---:|---:|---:|---:|" + "---:|---:|---:|" * len(versions) + ("---:|---:|---:|---:|" if with_compile else ""))
    for workload, fp32, bf16, graph, theirs, compiled in rows:
        cells = [workload, fmt(fp32["best"]), fmt(bf16["best"]), f"{fp32['best']['ms'] / bf16['best']['ms']:.2f}x",
                 fmt(graph["best"])]
        for t in theirs:
            cells += [fmt(t["best"]), ratio(bf16["best"], t["best"]), ratio(graph["best"], t["best"])]
        if compiled:
            c = compiled["best"]
            cells += [fmt(c), ratio(graph["best"], c), f"{graph['best']['first_step_s']:.2f}",
                      "-" if c.get("failed") else f"{c['first_step_s']:.1f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
