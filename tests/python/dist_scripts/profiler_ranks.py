"""Run under mpirun with a directory: each rank profiles two DDP steps (the
gradient all-reduce runs on DDP's reduction thread) and a plain all_reduce,
writes its trace to <dir>/rank<r>.json, and checks its own trace: the
collectives are "comm" spans on the threads that issued them, each thread
named."""
import json
import os
import sys

import meshflow as mf
import meshflow.distributed as dist
from meshflow.nn.parallel import DistributedDataParallel as DDP

out_dir = sys.argv[1]
rank, world = mf.env.get_rank(), mf.env.get_world_size()
mf.manual_seed(0)
model = DDP(mf.nn.Sequential(mf.nn.Linear(8, 16), mf.nn.ReLU(), mf.nn.Linear(16, 2)))
opt = mf.optim.SGD(model.parameters(), lr=0.1)
x, y = mf.randn(4, 8), mf.randn(4, 2)

with mf.profiler.profile() as prof:
    for _ in range(2):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        prof.step()
    t = mf.ones(1000)
    dist.all_reduce(t)

path = os.path.join(out_dir, f"rank{rank}.json")
prof.export_chrome_trace(path)
trace = json.load(open(path))
spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
threads = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
comm = [e for e in spans if e["cat"] == "comm"]
assert all(e["pid"] == rank for e in spans)
assert trace["meshflow"]["world_size"] == world
assert sum(e["name"] == "all_reduce" for e in comm) >= 3, comm  # 2 DDP steps + 1 plain
assert "DDP reduction" in {threads.get(e["tid"]) for e in comm}, (threads, comm)
assert set(e["tid"] for e in spans) <= set(threads)
assert float(t[0]) == world
print(f"rank {rank}: profiler ranks OK", flush=True)
