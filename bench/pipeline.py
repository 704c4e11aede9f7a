"""Pipeline parallelism (docs/pipeline.md): for each schedule, eager and in
graph mode, on P ranks x 1 thread, the measured bubble (idle time over step time, per rank
and overall) next to the simulator's prediction (with the measured mean
costs of F, B, I and W) and the formula; the peak activation memory per
stage of GPipe against 1F1B; and a GPT step pipelined on 2 ranks against
data parallel on 2 ranks at the same global batch (eager and graph).

    PYTHONPATH=python /usr/bin/python3 bench/pipeline.py [--ranks 2 4] [--steps 5]

Stages are compute-bound: each is `--layers` Linear(--width) + Tanh
layers, float32, micro-batches of `--rows` rows. With more ranks than
cores the ranks share cores and the measured bubble says so.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2), ("zero_bubble", 1), ("zbv", 2)]


def stage_worker(args):
    import meshflow as mf
    import meshflow.nn as nn
    import meshflow.nn.functional as F
    from meshflow.distributed import pipelining as pp
    rank, p = mf.distributed.get_rank(), mf.distributed.get_world_size()
    m, rows, width = args.microbatches, args.rows, args.width
    results = []
    for kind, v in SCHEDULES:
        if kind == "interleaved_1f1b" and m % p:
            continue
        stages = p * v
        mf.manual_seed(0)
        layers_per_stage = max(1, args.layers // v)
        mods = []
        for _ in range(stages * layers_per_stage):
            mods += [nn.Linear(width, width), nn.Tanh()]
        model = nn.Sequential(*mods)
        pipe = pp.pipeline(model, split_points=[2 * layers_per_stage * s for s in range(1, stages)])
        layout = pp.make_schedule(kind, p, p if kind == "interleaved_1f1b" else 1, v).stage_rank
        mine = [s for s in range(stages) if layout[s] == rank]
        built = [pipe.build_stage(s) for s in mine]
        cls = pp.get_schedule_class(kind)
        schedule = cls(built if v > 1 else built[0], m, loss_fn=F.mse_loss)
        x = mf.randn(m * rows, width)
        y = mf.randn(m * rows, width)
        first, last = 0 in mine, stages - 1 in mine
        samples = []
        for step in range(args.steps + 1):
            for b in built:
                b.submod.zero_grad(set_to_none=False)
            mf.distributed.barrier()
            mf.reset_peak_memory_stats()
            base = mf.memory_allocated()
            start = time.perf_counter()
            kwargs = {"target": y} if last else {}
            schedule.step(*([x] if first else []), **kwargs)
            wall = time.perf_counter() - start
            peak = mf.max_memory_allocated() - base
            if step == 0:
                continue  # warm-up
            costs = {}  # "3F" (stage 3's forward) -> durations
            for name, a, b, _ in schedule.last_step_timeline:
                costs.setdefault(name.rstrip("0123456789"), []).append(b - a)
            busy = sum(b - a for _, a, b, _ in schedule.last_step_timeline)
            # Held between actions: activations kept for backward (and the
            # gradients on their way), without the transients inside one.
            held = max(mem for *_, mem in schedule.last_step_timeline) - base
            samples.append({"wall": wall, "busy": busy, "peak": peak, "held": held,
                            "costs": {k: statistics.mean(v) for k, v in costs.items()}})
        results.append({"kind": kind, "v": v, "rank": rank, "samples": samples})
    gather_and_report(args, rank, p, results, "eager: ")


def graph_stage_worker(args):
    """The same stages as a pipelined mf.nn.Graph (GraphModule.set_stage):
    busy time and action costs from the plan's timeline, memory from its
    static plan."""
    import meshflow as mf
    import meshflow.nn as nn
    import meshflow.nn.functional as F
    rank, p = mf.distributed.get_rank(), mf.distributed.get_world_size()
    m, rows, width = args.microbatches, args.rows, args.width
    B = mf.sbp.broadcast
    results = []
    for kind, v in SCHEDULES:
        if kind == "interleaved_1f1b" and m % p:
            continue
        stages = p * v
        rank_of = [s if s < p else 2 * p - 1 - s for s in range(stages)] if kind == "zbv" else \
            [s % p for s in range(stages)]
        placements = [mf.placement("cpu", [r]) for r in rank_of]
        mf.manual_seed(0)
        layers_per_stage = max(1, args.layers // v)
        modules = []
        for s in range(stages):
            mods = []
            for _ in range(layers_per_stage):
                mods += [nn.Linear(width, width), nn.Tanh()]
            modules.append(nn.Sequential(*mods).to_global(placements[s], B))
        model = nn.ModuleList(modules)

        class Step(mf.nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model
                for s in range(stages):
                    model[s].to(mf.nn.graph.GraphModule).set_stage(s, placements[s])
                self.config.set_gradient_accumulation_steps(m)
                self.config.set_pipeline_schedule(kind)
                self.add_optimizer(mf.optim.SGD(model.parameters(), lr=1e-4))

            def build(self, x, y):
                for s in range(stages):
                    x = model[s](x.to_global(placement=placements[s], sbp=B))
                loss = F.mse_loss(x, y.to_global(placement=placements[-1], sbp=B))
                loss.backward()
                return loss

        g = Step()
        x = mf.randn(m * rows, width, placement=placements[0], sbp=B)
        y = mf.randn(m * rows, width, placement=placements[0], sbp=B)
        split = kind in ("zero_bubble", "zbv")
        samples = []
        for step in range(args.steps + 1):
            mf.distributed.barrier()
            start = time.perf_counter()
            g(x, y)
            wall = time.perf_counter() - start
            if step == 0:
                g._last.executable.set_timing(True)
                continue
            costs, busy = {}, 0.0
            for stage, micro, phase, a, b in g._last.executable.timeline():
                if phase not in ("forward", "backward", "weight") or stage < 0:
                    continue
                letter = {"forward": "F", "backward": "I" if split else "B", "weight": "W"}[phase]
                costs.setdefault(f"{stage}{letter}", {}).setdefault(micro, 0.0)
                costs[f"{stage}{letter}"][micro] += b - a
                busy += b - a
            samples.append({"wall": wall, "busy": busy, "peak": g.planned_peak_bytes,
                            "held": g._last.executable.forward_peak_bytes,
                            "costs": {k: statistics.mean(v.values()) for k, v in costs.items()}})
        results.append({"kind": kind, "v": v, "rank": rank, "samples": samples})
    gather_and_report(args, rank, p, results, "graph mode (mf.nn.Graph): ")


def gather_and_report(args, rank, p, results, title=""):
    import meshflow as mf
    gathered = [None] * p
    # Rank 0 collects every rank's samples through files (small, once).
    path = os.path.join(args.out, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(results))
    os.replace(path + ".tmp", path)
    mf.distributed.barrier()
    if rank == 0:
        for r in range(p):
            with open(os.path.join(args.out, f"rank{r}.json")) as f:
                gathered[r] = json.load(f)
        report_stages(gathered, p, args.microbatches, title)


def report_stages(gathered, p, m, title=""):
    from meshflow.distributed import pipelining as pp
    print(f"\n## {title}{p} ranks x 1 thread, {m} micro-batches")
    print("| schedule | stages | step ms | measured bubble | per rank | simulated (measured stage costs) | formula |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    memory = {}
    for index, (kind, v) in enumerate([(r["kind"], r["v"]) for r in gathered[0]]):
        per_rank = [g[index] for g in gathered]
        steps = len(per_rank[0]["samples"])
        # The step time is the slowest rank's; idle = step - busy per rank.
        bubbles, walls = [], []
        for k in range(steps):
            wall = max(r["samples"][k]["wall"] for r in per_rank)
            walls.append(wall)
            bubbles.append([1 - r["samples"][k]["busy"] / wall for r in per_rank])
        k = min(range(steps), key=lambda i: walls[i])  # the least disturbed step
        rank_bubble = bubbles[k]
        measured = statistics.mean(rank_bubble)
        mean = {}  # the measured mean cost of each stage's F, B, I, W
        for r in per_rank:
            mean.update(r["samples"][k]["costs"])
        stages = p * v
        f = [mean[f"{s}F"] for s in range(stages)]
        if f"0B" in mean:
            i_cost = w_cost = [mean[f"{s}B"] / 2 for s in range(stages)]
        else:
            # (stage 0 has no input gradient: its I is empty)
            i_cost = [mean.get(f"{s}I", 0.0) for s in range(stages)]
            w_cost = [mean.get(f"{s}W", 0.0) for s in range(stages)]
        schedule = pp.make_schedule(kind, p, m, v)
        # The simulator with each stage's measured costs (no latency).
        predicted = schedule.simulate(forward=f, backward_input=i_cost, backward_weight=w_cost).bubble_fraction
        formula = {"gpipe": (p - 1) / (m + p - 1), "1f1b": (p - 1) / (m + p - 1),
                   "interleaved_1f1b": (p - 1) / (v * m + p - 1)}.get(kind)
        print(f"| {kind} | {p * v} | {1000 * walls[k]:.1f} | {100 * measured:.1f}% | "
              f"{' '.join(f'{100 * b:.0f}%' for b in rank_bubble)} | {100 * predicted:.1f}% | "
              f"{'-' if formula is None else f'{100 * formula:.1f}%'} |")
        memory[kind] = ([max(s["held"] for s in r["samples"]) for r in per_rank],
                        [max(s["peak"] for s in r["samples"]) for r in per_rank])
    if title.startswith("graph"):
        print("\nMemory per rank in MiB from the static memory plan: held = the most bytes of forward-made buffers "
              "(activations) live at once, peak = the plan's arena (every buffer of the step but parameters and "
              "optimizer state: accumulated gradients, inputs and transients too)")
    else:
        print("\nMemory per rank in MiB over the step's baseline (parameters, gradients): held = the most kept "
              "between actions (activations), peak = the allocator's peak (transients inside an action too)")
    print("| schedule | " + " | ".join(f"rank {r} held / peak" for r in range(p)) + " |")
    print("| --- |" + " --- |" * p)
    for kind, (held, peaks) in memory.items():
        print(f"| {kind} | " + " | ".join(f"{h / 2**20:.1f} / {b / 2**20:.1f}" for h, b in zip(held, peaks)) + " |")
    if "gpipe" in memory and "1f1b" in memory:
        ratio = memory["1f1b"][0][0] / memory["gpipe"][0][0]
        print(f"\n1F1B / GPipe held on rank 0 (stage 0): {ratio:.2f} (aim <= p/m = {p / m:.2f})")


def gpt_worker(args):
    import numpy as np
    import meshflow as mf
    import meshflow.nn.functional as F
    from meshflow.distributed import pipelining as pp
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models
    rank, p = mf.distributed.get_rank(), mf.distributed.get_world_size()
    kw = dict(vocab=512, d_model=128, heads=4, layers=4, seq=64)
    batch, m = args.gpt_batch, args.gpt_microbatches
    x_np, y_np = models.random_batch("gpt", batch, np.random.default_rng(0), vocab=kw["vocab"], seq=kw["seq"])

    def lm_loss(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    mf.manual_seed(0)
    if args.mode == "pipeline":
        model = models.gpt_sequential(mf, **kw)
        children = [n for n, _ in model.named_children()]
        cut = children[1 + kw["layers"] // 2]  # half the blocks per stage
        pipe = pp.pipeline(model, split_points=[cut])
        stage = pipe.build_stage(rank)
        schedule = pp.Schedule1F1B(stage, m, loss_fn=lm_loss)
        opt = mf.optim.AdamW(stage.submod.parameters(), lr=1e-3)
        x, y = mf.tensor(x_np), mf.tensor(y_np)

        def step():
            opt.zero_grad()
            schedule.step(x) if rank == 0 else schedule.step(target=y)
            opt.step()
    elif args.mode in ("graph_pipeline", "graph_dp"):
        step = gpt_graph_step(args, mf, models, kw, x_np, y_np, lm_loss)
    else:
        model = mf.nn.parallel.DistributedDataParallel(models.gpt(mf, **kw))
        opt = mf.optim.AdamW(model.parameters(), lr=1e-3)
        rows = slice(rank * batch // p, (rank + 1) * batch // p)
        x, y = mf.tensor(x_np[rows]), mf.tensor(y_np[rows])

        def step():
            opt.zero_grad()
            lm_loss(model(x), y).backward()
            opt.step()

    times = []
    for k in range(args.steps + 1):
        mf.distributed.barrier()
        start = time.perf_counter()
        step()
        mf.distributed.barrier()
        if k:
            times.append(time.perf_counter() - start)
    if rank == 0:
        print(json.dumps({"mode": args.mode, "median_ms": 1000 * statistics.median(times)}), flush=True)


def gpt_graph_step(args, mf, models, kw, x_np, y_np, lm_loss):
    """A compiled GPT train step: pipelined over 2 ranks (embed and the
    first half of the blocks on rank 0, the rest on rank 1, 1F1B), or data
    parallel on both (the batch split)."""
    B, S = mf.sbp.broadcast, mf.sbp.split
    p = mf.distributed.get_world_size()
    if args.mode == "graph_pipeline":
        model = models.gpt_sequential(mf, **kw)
        children = list(model.children())
        half = 1 + kw["layers"] // 2
        where = [mf.placement("cpu", [0 if k < half else p - 1]) for k in range(len(children))]
        for child, placement in zip(children, where):
            child.to_global(placement, B)
        sbp = B
    else:
        model = models.gpt(mf, **kw).to_global(mf.placement("cpu", list(range(p))), B)
        where, sbp = None, S(0)
    opt = mf.optim.AdamW(model.parameters(), lr=1e-3)

    class Step(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            if where is not None:
                for k, (child, placement) in enumerate(zip(children, where)):
                    child.to(mf.nn.graph.GraphModule).set_stage(0 if k < half else 1, placement)
                self.config.set_gradient_accumulation_steps(args.gpt_microbatches)
            self.add_optimizer(opt)

        def build(self, x, y):
            if where is None:
                out = self.model(x)
            else:
                out = x
                for child, placement in zip(children, where):
                    out = child(out.to_global(placement=placement, sbp=B))
            loss = lm_loss(out, y.to_global(placement=out.placement, sbp=sbp))
            loss.backward()
            return loss

    g = Step()
    first = where[0] if where is not None else mf.placement("cpu", list(range(p)))
    x, y = mf.tensor(x_np, placement=first, sbp=sbp), mf.tensor(y_np, placement=first, sbp=sbp)
    return lambda: g(x, y)


def launch(n, argv):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(ROOT, "python"))
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n), sys.executable,
           os.path.abspath(__file__), *argv]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stdout + out.stderr)
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--gpt-batch", type=int, default=16)
    ap.add_argument("--gpt-microbatches", type=int, default=4)
    ap.add_argument("--worker", choices=["stages", "graph_stages", "gpt"])
    ap.add_argument("--mode", choices=["pipeline", "dp", "graph_pipeline", "graph_dp"])
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.worker == "stages":
        return stage_worker(args)
    if args.worker == "graph_stages":
        return graph_stage_worker(args)
    if args.worker == "gpt":
        return gpt_worker(args)
    import tempfile
    print(f"machine: {os.cpu_count()} cores; ranks x 1 thread (OMP_NUM_THREADS=1); each schedule: the least "
          f"disturbed of {args.steps} steps per schedule")
    common = ["--steps", str(args.steps), "--microbatches", str(args.microbatches), "--rows", str(args.rows),
              "--width", str(args.width), "--layers", str(args.layers)]
    for n in args.ranks:
        for worker in ("stages", "graph_stages"):
            with tempfile.TemporaryDirectory() as out:
                print(launch(n, ["--worker", worker, "--out", out, *common]), end="")
    print(f"\n## GPT (vocab 512, d_model 128, 4 layers, seq 64), global batch {args.gpt_batch}, 2 ranks x 1 thread")
    results = {}
    for mode in ("pipeline", "dp", "graph_pipeline", "graph_dp"):
        line = launch(2, ["--worker", "gpt", "--mode", mode, "--steps", str(args.steps), "--gpt-batch",
                          str(args.gpt_batch), "--gpt-microbatches", str(args.gpt_microbatches)]).strip().splitlines()[-1]
        results[mode] = json.loads(line)["median_ms"]
    print("| mode | step ms (median) |\n| --- | --- |")
    print(f"| pipeline, 2 stages, 1F1B, {args.gpt_microbatches} micro-batches | {results['pipeline']:.1f} |")
    print(f"| data parallel (DDP) | {results['dp']:.1f} |")
    print(f"| graph, pipeline, 2 stages, 1F1B, {args.gpt_microbatches} micro-batches | "
          f"{results['graph_pipeline']:.1f} |")
    print(f"| graph, data parallel | {results['graph_dp']:.1f} |")
    print(f"pipeline / data parallel: eager {results['pipeline'] / results['dp']:.2f}x the time, graph "
          f"{results['graph_pipeline'] / results['graph_dp']:.2f}x")


if __name__ == "__main__":
    main()
