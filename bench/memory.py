"""Memory for training (docs/memory.md): the peak memory of one training
step of a GPT with and without activation checkpointing (each block
recomputed in backward, meshflow.utils.checkpoint), and what it costs in
step time; PyTorch 2.15's step time with and without its checkpoint, in
the same run, for the time ratio. Then, on 1, 2 and 4 ranks (mpirun, one
thread each), the per-rank bytes of parameters, gradients and AdamW state
of a GPT of about 50M parameters with DistributedDataParallel + AdamW and
with ZeroRedundancyOptimizer and with fully_shard, next to ZeRO's formulas
(16, 8 + 8/N and 16/N bytes per parameter), and their step times; and the same model as a global data-parallel nn.Graph
without ZeRO and with graph.config.enable_zero stages 1, 2 and 3 (4 + 8/N
and 12/N bytes held per parameter between steps).

    PYTHONPATH=python /usr/bin/python3 bench/memory.py [--layers 8] [--batch 8] [--seq 128]
    [--torch-python .venv-torch/bin/python]   (bench/setup_torch_venv.sh)

"Activations" is the step's peak allocation above what is held before it
(parameters, gradients of the previous step are set to None, AdamW state),
measured with mf.max_memory_allocated(). PyTorch keeps no allocator
statistics on the CPU, so only its time is shown.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))


def measure(lib_name, args, checkpoint):
    import importlib
    lib = importlib.import_module(lib_name)
    import models
    lib.manual_seed(0)
    lib.set_num_threads(args.threads)
    model = models.gpt(lib, vocab=args.vocab, d_model=args.d_model, heads=args.heads, layers=args.layers,
                       seq=args.seq, checkpoint=checkpoint)
    opt = lib.optim.AdamW(model.parameters(), lr=1e-4)
    idx = lib.randint(0, args.vocab, (args.batch, args.seq))
    target = lib.randint(0, args.vocab, (args.batch, args.seq))
    times, peaks = [], []
    for step in range(args.steps + 1):
        opt.zero_grad(set_to_none=True)
        if lib_name == "meshflow":
            lib.reset_peak_memory_stats()
            base = lib.memory_allocated()
        start = time.perf_counter()
        logits = model(idx)
        loss = lib.nn.functional.cross_entropy(logits.reshape(-1, args.vocab), target.reshape(-1))
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - start
        if step:  # the first step allocates the optimizer's state
            times.append(elapsed)
            if lib_name == "meshflow":
                peaks.append(lib.max_memory_allocated() - base)
    return {"ms": 1e3 * statistics.median(times), "peak_mib": max(peaks) / 2**20 if peaks else None,
            "loss": float(loss.item())}


def zero_child(args):
    """Under mpirun: per-rank bytes of parameters + gradients + optimizer
    state after a step, DDP + AdamW against DDP + ZeroRedundancyOptimizer
    and against fully_shard (every block a unit, then the root)."""
    import meshflow as mf
    import models
    from meshflow.distributed.fsdp import fully_shard
    from meshflow.distributed.optim import ZeroRedundancyOptimizer
    from meshflow.nn.parallel import DistributedDataParallel as DDP
    dist = mf.distributed
    mf.set_num_threads(1)
    out = {}
    for kind in ("ddp", "zero1", "fsdp"):
        mf.manual_seed(0)
        net = models.gpt(mf, vocab=args.zero_vocab, d_model=args.zero_d_model, heads=8, layers=args.zero_layers,
                         seq=args.zero_seq)
        numel = sum(p.numel() for p in net.parameters())
        if kind == "fsdp":
            for i in range(len(net.blocks)):  # (a loop variable would keep the last block alive)
                fully_shard(net.blocks[i])
            model = fully_shard(net)
        else:
            model = DDP(net, gradient_as_bucket_view=True)  # gradients held once, as ZeRO's formula counts
        opt = (ZeroRedundancyOptimizer(model.parameters(), mf.optim.AdamW, lr=1e-4) if kind == "zero1"
               else mf.optim.AdamW(model.parameters(), lr=1e-4))
        idx = mf.randint(0, args.zero_vocab, (2, args.zero_seq))
        times = []
        for step in range(3):
            opt.zero_grad(set_to_none=False)
            dist.barrier()
            start = time.perf_counter()
            logits = model(idx)
            mf.nn.functional.cross_entropy(logits.reshape(-1, args.zero_vocab), idx.reshape(-1)).backward()
            opt.step()
            times.append(time.perf_counter() - start)
            del logits
        held = [None] * dist.get_world_size()
        dist.all_gather_object(held, mf.memory_allocated())
        out[kind] = {"numel": numel, "max_bytes": max(held), "ms": 1e3 * statistics.median(times[1:])}
        del model, net, opt
    out.update(graph_zero(args))
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(out), flush=True)


def graph_zero(args):
    """Under mpirun: the same GPT as a global data-parallel model in an
    nn.Graph, without ZeRO and with graph.config.enable_zero stages 1, 2 and 3:
    per-rank bytes held after a step (parameters and optimizer state; the
    graph's gradients live in its arena during the step only)."""
    import meshflow as mf
    import models
    dist = mf.distributed
    world = dist.get_world_size()
    mesh = mf.placement("cpu", list(range(world)))
    out = {}
    for stage in (0, 1, 2, 3):
        mf.manual_seed(0)
        net = models.gpt(mf, vocab=args.zero_vocab, d_model=args.zero_d_model, heads=8, layers=args.zero_layers,
                         seq=args.zero_seq).to_global(placement=mesh, sbp=mf.sbp.broadcast)
        opt = mf.optim.AdamW(net.parameters(), lr=1e-4)

        class Step(mf.nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = net
                self.add_optimizer(opt)
                if stage:
                    self.config.enable_zero(True, stage=stage, shard_min_size=1024)

            def build(self, idx):
                logits = self.model(idx)
                loss = mf.nn.functional.cross_entropy(logits.reshape(-1, args.zero_vocab), idx.reshape(-1))
                loss.backward()
                return loss

        graph = Step()
        idx = mf.randint(0, args.zero_vocab, (2 * world, args.zero_seq)).to_global(placement=mesh,
                                                                                  sbp=mf.sbp.split(0))
        times = []
        for step in range(3):
            dist.barrier()
            start = time.perf_counter()
            graph(idx).to_local()
            times.append(time.perf_counter() - start)
        held = [None] * world
        dist.all_gather_object(held, mf.memory_allocated())
        out[f"graph_zero{stage}"] = {"max_bytes": max(held), "ms": 1e3 * statistics.median(times[1:]),
                                     "arena": graph.planned_peak_bytes}
        del graph, net, opt, Step
    return out


def run_zero(args):
    rows = {}
    for n in args.zero_ranks:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable,
               os.path.abspath(__file__), "--zero-child"] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
            if k.startswith("zero_") and k not in ("zero_ranks", "zero_child")]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        result = [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if not result:
            raise SystemExit(f"ZeRO run on {n} ranks failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        rows[n] = result[0]
    psi = next(iter(rows.values()))["ddp"]["numel"]
    print(f"\nGPT of {psi / 1e6:.1f}M parameters, AdamW, float32: per-rank bytes of parameters + gradients + "
          "optimizer state after a step (max over ranks)")
    print(f"{'ranks':>5s} {'DDP MiB':>9s} {'formula':>8s} {'ZeRO-1 MiB':>11s} {'formula':>8s} {'ratio':>6s}"
          f" {'FSDP MiB':>9s} {'formula':>8s} {'ratio':>6s} {'DDP ms':>8s} {'ZeRO-1 ms':>10s} {'FSDP ms':>8s}")
    for n, r in rows.items():
        ddp_formula, zero_formula, fsdp_formula = 16 * psi, 8 * psi + 8 * psi / n, 16 * psi / n
        print(f"{n:5d} {r['ddp']['max_bytes'] / 2**20:9.0f} {ddp_formula / 2**20:8.0f} "
              f"{r['zero1']['max_bytes'] / 2**20:11.0f} {zero_formula / 2**20:8.0f} "
              f"{r['zero1']['max_bytes'] / zero_formula:6.3f} {r['fsdp']['max_bytes'] / 2**20:9.0f} "
              f"{fsdp_formula / 2**20:8.0f} {r['fsdp']['max_bytes'] / fsdp_formula:6.3f} "
              f"{r['ddp']['ms']:8.0f} {r['zero1']['ms']:10.0f} {r['fsdp']['ms']:8.0f}")
    print("(equal global batch: 2 sequences per rank in every column; FSDP/DDP step time: "
          + ", ".join(f"{n} ranks {r['fsdp']['ms'] / r['ddp']['ms']:.2f}x" for n, r in rows.items()) + ")")
    print("\nThe same GPT, global data-parallel in an nn.Graph (graph.config.enable_zero): per-rank MiB held "
          "after a step (max over ranks): all of it, and without the graph's arena (its planned intermediates: "
          "gradients and activations), next to 12 (no ZeRO), 4 + 8/N (stages 1, 2) and 12/N (stage 3) bytes per "
          "parameter")
    print(f"{'ranks':>5s} {'stage':>5s} {'held':>7s} {'arena':>7s} {'held-arena':>11s} {'formula':>8s} {'ratio':>6s} "
          f"{'step ms':>8s}")
    for n, r in rows.items():
        for stage in (0, 1, 2, 3):
            g = r[f"graph_zero{stage}"]
            formula = 12 * psi if stage == 0 else 12 * psi / n if stage == 3 else 4 * psi + 8 * psi / n
            rest = g["max_bytes"] - g["arena"]
            print(f"{n:5d} {stage:5d} {g['max_bytes'] / 2**20:7.0f} {g['arena'] / 2**20:7.0f} {rest / 2**20:11.0f} "
                  f"{formula / 2**20:8.0f} {rest / formula:6.3f} {g['ms']:8.0f}")


def child(args):
    out = {}
    for checkpoint in (False, True):
        out[str(checkpoint)] = measure(args.lib, args, checkpoint)
    print("RESULT " + json.dumps(out), flush=True)


def run(python, lib, args):
    cmd = [python, os.path.abspath(__file__), "--child", "--lib", lib] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
        if k not in ("child", "lib", "torch_python", "zero_child") and not k.startswith("zero_")]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"{lib} run failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--torch-python", default=os.path.join(os.path.dirname(HERE), ".venv-torch", "bin", "python"))
    p.add_argument("--zero-ranks", type=int, nargs="*", default=[1, 2, 4],
                   help="rank counts of the ZeRO table (none: skip it)")
    p.add_argument("--zero-layers", type=int, default=14)
    p.add_argument("--zero-d-model", type=int, default=512)
    p.add_argument("--zero-vocab", type=int, default=8192)
    p.add_argument("--zero-seq", type=int, default=32)
    p.add_argument("--zero-child", action="store_true")
    p.add_argument("--child", action="store_true")
    p.add_argument("--lib", default="meshflow")
    args = p.parse_args()
    if args.child:
        child(args)
        return
    if args.zero_child:
        zero_child(args)
        return
    mf = run(sys.executable, "meshflow", args)
    print(f"GPT, {args.layers} layers, d_model {args.d_model}, batch {args.batch} x seq {args.seq}, "
          f"AdamW, {args.threads} threads")
    print(f"{'':28s}{'step ms':>10s}{'activation peak MiB':>22s}")
    for key, name in (("False", "meshflow"), ("True", "meshflow, checkpointed")):
        r = mf[key]
        print(f"{name:28s}{r['ms']:10.1f}{r['peak_mib']:22.1f}")
    plain, ckpt = mf["False"], mf["True"]
    print(f"checkpointed / plain: activation peak {ckpt['peak_mib'] / plain['peak_mib']:.2f}, "
          f"step time {ckpt['ms'] / plain['ms']:.2f}x; losses equal: {plain['loss'] == ckpt['loss']}")
    if os.path.exists(args.torch_python):
        t = run(args.torch_python, "torch", args)
        print(f"torch: {t['False']['ms']:.1f} ms, checkpointed {t['True']['ms']:.1f} ms "
              f"({t['True']['ms'] / t['False']['ms']:.2f}x); meshflow/torch step time: plain "
              f"{plain['ms'] / t['False']['ms']:.2f}, checkpointed {ckpt['ms'] / t['True']['ms']:.2f}")
    else:
        print(f"(no {args.torch_python}: run bench/setup_torch_venv.sh for PyTorch's times)")
    if args.zero_ranks:
        run_zero(args)


if __name__ == "__main__":
    main()
