"""meshflow's training-step time in two built source trees, measured in one run.

    /usr/bin/python3 bench/compare_trees.py BEFORE_TREE [AFTER_TREE] [--workloads mlp,lenet,resnet18,gpt]
                                            [--rounds 3]

A change that must not slow the CPU down (a refactor of the kernels, the
backend boundary) is checked by timing the commit before it against the
commit with it. Each tree must be built (its python/meshflow has the
extension); AFTER_TREE defaults to this one. For each workload, eager and
graph mode, each tree's own bench/train_step.py worker runs a fresh process
(2 threads) under OMP_WAIT_POLICY=PASSIVE and =ACTIVE, `--rounds` times,
the rounds interleaved across the trees so a slow spell of the machine does
not favour one; the best median step counts. Prints one table row per
workload and mode with after / before.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from train_step import STEPS  # noqa: E402  the per-workload defaults


def run_worker(tree, mode, workload, steps, policy):
    env = dict(os.environ, OMP_WAIT_POLICY=policy, OMP_NUM_THREADS="2")
    env.pop("PYTHONPATH", None)  # the worker puts its own tree's package first
    cmd = ["/usr/bin/python3", os.path.join(tree, "bench", "train_step.py"), "--worker", mode,
           "--workloads", workload, "--steps", str(steps or STEPS[workload])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{tree} {mode} {workload} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("before")
    p.add_argument("after", nargs="?", default=ROOT)
    p.add_argument("--workloads", default="mlp,lenet,resnet18,gpt")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=0, help="timed steps (0: train_step.py's default)")
    args = p.parse_args()
    if args.rounds < 1 or args.steps < 0:
        p.error("--rounds must be at least 1 and --steps at least 0")
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    for tree in trees.values():
        if not os.path.isfile(os.path.join(tree, "bench", "train_step.py")):
            p.error(f"{tree} is not a meshflow source tree")
    print("| workload | mode | before ms | after ms | after / before |")
    print("| --- | --- | --- | --- | --- |")
    for workload in args.workloads.split(","):
        if workload not in STEPS:
            p.error(f"unknown workload {workload!r} (known: {', '.join(STEPS)})")
        for mode in ("meshflow", "meshflow-graph"):
            best = {}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    for policy in ("PASSIVE", "ACTIVE"):
                        ms = run_worker(tree, mode, workload, args.steps, policy)
                        best[name] = min(best.get(name, ms), ms)
            label = "graph" if mode == "meshflow-graph" else "eager"
            print(f"| {workload} | {label} | {best['before']:.2f} | {best['after']:.2f} | "
                  f"{best['after'] / best['before']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
