"""Run under mpirun on 2 ranks: mf.distributed.isend / irecv, as
torch.distributed's: both ranks post at once, wait() returns when done."""
import meshflow as mf
import meshflow.distributed as dist

rank = dist.get_rank()
peer = 1 - rank
mine = mf.arange(6, dtype=mf.float64).reshape(2, 3) + 10 * rank
got = mf.empty(2, 3, dtype=mf.float64)
receive = dist.irecv(got, src=peer, tag=5)
send = dist.isend(mine, dst=peer, tag=5)
assert send.wait() and receive.wait()
assert receive.is_completed()
assert got.tolist() == (mf.arange(6, dtype=mf.float64).reshape(2, 3) + 10 * peer).tolist()
try:
    dist.isend(mine, dst=rank)
    raise AssertionError("no error")
except ValueError as e:
    assert "isend: dst must be another rank" in str(e), e
print(f"rank {rank}: p2p nonblocking OK", flush=True)
