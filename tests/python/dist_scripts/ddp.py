"""Run under mpirun: DistributedDataParallel equals one process.

An MLP trained with DistributedDataParallel, each rank on its slice of a
global batch of 256, gives after 10 steps the parameters (and mean losses) of
the same MLP trained on one process with the whole batch; with small buckets
too, with gradient accumulation through no_sync(), and with
gradient_as_bucket_view. Replicas that start
from different values are made equal by the wrapper.
"""
import contextlib

import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from meshflow.nn.parallel import DistributedDataParallel as DDP

rank, world = mf.env.get_rank(), mf.env.get_world_size()
BATCH = 256
rng = np.random.default_rng(0)
data = [(rng.standard_normal((BATCH, 784)), rng.integers(0, 10, BATCH)) for _ in range(10)]
lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world


def build(seed=0):
    mf.manual_seed(seed)
    return mf.nn.Sequential(mf.nn.Linear(784, 64), mf.nn.ReLU(), mf.nn.Linear(64, 10)).double()


def train(model, rows, accumulate=1):
    opt = mf.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    losses = []
    for x, y in data:
        opt.zero_grad()
        x, y = x[rows], y[rows]
        parts = np.array_split(np.arange(len(y)), accumulate)
        total = 0.0
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            ctx = model.no_sync() if (isinstance(model, DDP) and not last) else contextlib.nullcontext()
            with ctx:
                loss = F.cross_entropy(model(mf.tensor(x[part])), mf.tensor(y[part])) * (len(part) / len(y))
                loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses


def mean_over_ranks(values):
    t = mf.tensor(np.array(values))
    mf._C._distributed.world().all_reduce(t)
    return t.numpy() / world


def check(model, reference, what):
    for (name, p), (_, q) in zip(model.module.named_parameters(), reference.named_parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{what}: {name}")


reference = build()
ref_losses = train(reference, slice(None))

# Replicas built with different seeds start from rank 0's values.
model = DDP(build(seed=rank), bucket_cap_mb=25)
assert len(model.bucket_params) == 1
losses = mean_over_ranks(train(model, slice(lo, hi)))
np.testing.assert_allclose(losses, ref_losses, rtol=1e-9)
check(model, reference, "one bucket")

small = DDP(build(), bucket_cap_mb=0.004)  # 4 KiB: a bucket per parameter
assert len(small.bucket_params) >= 3, small.bucket_params
train(small, slice(lo, hi))
check(small, reference, "small buckets")

accumulated = DDP(build(), bucket_cap_mb=0.1)
train(accumulated, slice(lo, hi), accumulate=2)
check(accumulated, reference, "no_sync accumulation")

# Gradients as views of the buckets: the same results, with no_sync
# accumulation too, and the gradients held once.
viewed = DDP(build(), bucket_cap_mb=0.1, gradient_as_bucket_view=True)
train(viewed, slice(lo, hi), accumulate=2)
check(viewed, reference, "gradient_as_bucket_view")
before = mf.memory_allocated()
train(viewed, slice(lo, hi))  # grads zeroed in place: no new gradient memory survives a step
assert mf.memory_allocated() <= before, (mf.memory_allocated(), before)
grads = {p.grad.data_ptr() for p in viewed.parameters()}
assert len(grads) == len(list(viewed.parameters()))

try:
    DDP(build().to_global(mf.placement("cpu", list(range(world))), mf.sbp.broadcast))
    raise AssertionError("a global model was accepted")
except ValueError as e:
    assert "global" in str(e)
print(f"rank {rank}/{world}: ddp OK, losses {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
