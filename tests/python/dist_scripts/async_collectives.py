"""Run under mpirun on 2 or 4 ranks: collectives with async_op=True, as
torch.distributed's (Note [Asynchronous collectives]). Several are queued at
once, a blocking call in between waits for them, results equal the blocking
calls', and a queued collective's error reaches wait()."""
import meshflow as mf
import meshflow.distributed as dist

rank, n = dist.get_rank(), dist.get_world_size()
base = mf.arange(6, dtype=mf.float64).reshape(2, 3)

# Queued in order: all_reduce, broadcast, all_gather (list), reduce_scatter, all_to_all_single.
summed = base + rank
w1 = dist.all_reduce(summed, async_op=True)
root_value = base * (rank + 1)
w2 = dist.broadcast(root_value, src=n - 1, async_op=True)
gathered = [mf.empty(2, 3, dtype=mf.float64) for _ in range(n)]
w3 = dist.all_gather(gathered, base + 10 * rank, async_op=True)
scattered = mf.empty(2, dtype=mf.float64)
w4 = dist.reduce_scatter_tensor(scattered, mf.arange(2 * n, dtype=mf.float64) * (rank + 1), async_op=True)
swapped = mf.empty(n, dtype=mf.float64)
w5 = dist.all_to_all_single(swapped, mf.arange(n, dtype=mf.float64) + 100 * rank, async_op=True)
works = [w1, w2, w3, w4, w5]
assert all(w is not None for w in works)

# A blocking collective waits for the queued ones first, so the order holds on every rank.
check = mf.ones(1, dtype=mf.float64)
dist.all_reduce(check)
assert check.item() == n
for w in works:
    assert w.wait() is True and w.is_completed()

assert summed.tolist() == (n * base + sum(range(n))).tolist()
assert root_value.tolist() == (base * n).tolist()
assert [g.tolist() for g in gathered] == [(base + 10 * r).tolist() for r in range(n)]
total = sum(r + 1 for r in range(n))
assert scattered.tolist() == [float((2 * rank + i) * total) for i in range(2)]
assert swapped.tolist() == [float(rank + 100 * r) for r in range(n)]

# A barrier without waiting, then a synchronous one.
assert dist.barrier(async_op=True).wait()
assert dist.barrier() is None and dist.all_reduce(check) is None

# Bad arguments are checked when the call is made, not at wait().
try:
    dist.all_reduce(base.t(), async_op=True)
    raise AssertionError("no error")
except ValueError as e:
    assert "all_reduce" in str(e) and "contiguous" in str(e), e
print(f"rank {rank}: async collectives OK", flush=True)
