"""Run under mpirun: the global view on CUDA placements equals one process
in float64: ops on global tensors and their gradients for every input
layout, boxing between layouts, the torch.distributed collectives on CUDA
tensors, DistributedDataParallel on a CUDA module, and a data-parallel
training step in graph mode against the same steps run eagerly.

With MESHFLOW_EMULATE_CUDA=1 each rank's "cuda" is the emulated device and
the collectives stage through host memory over MPI (Note [Host-staged
kernels]); on a machine with a GPU per rank each rank uses
cuda:<local rank> and the collectives run on NCCL (Note [NCCL
collectives])."""
import itertools
import os

import numpy as np

import meshflow as mf

if os.environ.get("MESHFLOW_EMULATE_CUDA") == "1":
    mf._C._emulate_cuda(1)
import meshflow.distributed as dist
import meshflow.nn.functional as F
from meshflow.nn.parallel import DistributedDataParallel as DDP

rank, world = mf.env.get_rank(), mf.env.get_world_size()
assert mf.cuda.is_available(), "no CUDA device: run with MESHFLOW_EMULATE_CUDA=1"
mf.cuda.set_device(dist.get_local_rank() % mf.cuda.device_count())
B, P, S = mf.sbp.broadcast, mf.sbp.partial_sum, mf.sbp.split
mesh = mf.placement("cuda", list(range(world)))


def whole(t):
    """A global tensor's full value on the host."""
    return t.detach().to_global(sbp=B).to_local().cpu().numpy()


# 1. Ops and their gradients, every layout of x and w.
mf.manual_seed(0)
x_full, w_full, b_full = (mf.randn(*s, dtype=mf.float64) for s in ((6, 4), (4, 5), (5,)))


def model(x, w, b):
    h = F.relu(x * 2.0 + 1.0) - x / 3.0
    y = mf.matmul(h, w) + b
    return (y * y).sum(), y.sum(dim=0)


xr, wr, br = (t.clone().requires_grad_() for t in (x_full, w_full, b_full))
loss_ref, col_ref = model(xr, wr, br)
loss_ref.backward()
for xs, ws in itertools.product([S(0), S(1), B, P], [B, S(0), S(1)]):
    x = mf.tensor(x_full.numpy(), placement=mesh, sbp=xs).requires_grad_()
    w = mf.tensor(w_full.numpy(), placement=mesh, sbp=ws).requires_grad_()
    b = mf.tensor(b_full.numpy(), placement=mesh, sbp=B).requires_grad_()
    assert x.to_local().device.type == "cuda", x.to_local().device
    loss, col = model(x, w, b)
    assert loss.placement == mesh and col.to_local().device.type == "cuda"
    np.testing.assert_allclose(whole(loss), loss_ref.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(whole(col), col_ref.detach().numpy(), rtol=1e-12)
    loss.backward()
    for g, ref in ((x, xr), (w, wr), (b, br)):
        assert g.grad.is_global and g.grad.to_local().device.type == "cuda", (xs, ws, g.grad.to_local().device)
        np.testing.assert_allclose(whole(g.grad), ref.grad.numpy(), rtol=1e-12, atol=1e-12)

# 2. Boxing: every transition between S(0), S(1), B and P keeps the value.
data = np.arange(4.0 * world * 6).reshape(4 * world, 6)
for src, dst in itertools.product([S(0), S(1), B, P], repeat=2):
    t = mf.tensor(data, placement=mesh, sbp=src).to_global(sbp=dst)
    assert t.sbp == (dst,) and t.to_local().device.type == "cuda"
    np.testing.assert_array_equal(whole(t), data, err_msg=f"{src} -> {dst}")

# 3. torch.distributed's collectives on CUDA tensors.
mine = mf.tensor(np.full((2, 3), float(rank + 1)), device="cuda")
total = mine.clone()
dist.all_reduce(total)
np.testing.assert_array_equal(total.cpu().numpy(), np.full((2, 3), world * (world + 1) / 2))
gathered = mf.empty(2 * world, 3, dtype=mf.float64, device="cuda")
dist.all_gather_into_tensor(gathered, mine)
np.testing.assert_array_equal(gathered.cpu().numpy()[::2, 0], np.arange(1.0, world + 1))
part = mf.empty(2, 3, dtype=mf.float64, device="cuda")
dist.reduce_scatter_tensor(part, gathered)
np.testing.assert_array_equal(part.cpu().numpy(), np.full((2, 3), float(world * (rank + 1))))
root = mine.clone()
dist.broadcast(root, src=world - 1)
np.testing.assert_array_equal(root.cpu().numpy(), np.full((2, 3), float(world)))
work = dist.all_reduce(mine, async_op=True)
work.wait()
np.testing.assert_array_equal(mine.cpu().numpy(), total.cpu().numpy())

# 4. DistributedDataParallel on a CUDA module: each rank on its rows of the
# batch gives one process's steps on the whole batch.
rng = np.random.default_rng(0)
batches = [(rng.standard_normal((8 * world, 12)), rng.integers(0, 4, 8 * world)) for _ in range(3)]
lo, hi = rank * 8, (rank + 1) * 8


def build(seed=0):
    mf.manual_seed(seed)
    return mf.nn.Sequential(mf.nn.Linear(12, 16), mf.nn.Tanh(), mf.nn.Linear(16, 4)).double()


def train(net, rows, device):
    opt = mf.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for xb, yb in batches:
        opt.zero_grad()
        F.cross_entropy(net(mf.tensor(xb[rows], device=device)), mf.tensor(yb[rows], device=device)).backward()
        opt.step()


reference = build()
train(reference, slice(None), "cpu")
replica = DDP(build(seed=rank).to("cuda"), bucket_cap_mb=0.001)  # small buckets: several collectives
train(replica, slice(lo, hi), "cuda")
for (name, p), q in zip(replica.module.named_parameters(), reference.parameters()):
    assert p.device.type == "cuda"
    np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-12,
                               err_msg=name)


# 5. Graph mode: a data-parallel global model on the CUDA placement gives
# the bits of the same steps run eagerly.
class TrainGraph(mf.nn.Graph):
    def __init__(self, net, opt):
        super().__init__()
        self.net = net
        self.add_optimizer(opt)

    def build(self, xb, yb):
        loss = F.cross_entropy(self.net(xb), yb)
        loss.backward()
        return loss


def global_run(in_graph):
    net = build().to("cuda").to_global(placement=mesh, sbp=B)
    opt = mf.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    graph = TrainGraph(net, opt) if in_graph else None
    losses = []
    for xb, yb in batches:
        xg = mf.tensor(xb, placement=mesh, sbp=S(0))
        yg = mf.tensor(yb, placement=mesh, sbp=S(0))
        if graph is None:
            opt.zero_grad()
            loss = F.cross_entropy(net(xg), yg)
            loss.backward()
            opt.step()
        else:
            loss = graph(xg, yg)
        losses.append(whole(loss))
    return losses, [whole(p) for p in net.parameters()]


eager_losses, eager_params = global_run(False)
graph_losses, graph_params = global_run(True)
np.testing.assert_array_equal(graph_losses, eager_losses)
for g, e in zip(graph_params, eager_params):
    np.testing.assert_array_equal(g, e)
for g, q in zip(graph_params, reference.parameters()):
    np.testing.assert_allclose(g, q.detach().numpy(), rtol=1e-10, atol=1e-12)
print(f"rank {rank}/{world}: cuda placements OK", flush=True)
