"""Run under mpirun: SyncBatchNorm equals one process.

Each rank holds its slice of a global batch (the slices differ in size). A
DistributedDataParallel model with SyncBatchNorm trained for a few steps gives
the outputs, input gradients, parameters and running statistics of the same
model with BatchNorm on one process over the whole batch (float64); a global
input goes through plain batch_norm with the same result; convert_sync_batchnorm
keeps parameters and buffers; eval mode uses the running statistics.
"""
import numpy as np

import meshflow as mf
from meshflow.nn.parallel import DistributedDataParallel as DDP

rank, world = mf.env.get_rank(), mf.env.get_world_size()
BATCH = 13  # uneven slices
rng = np.random.default_rng(0)
data = [rng.standard_normal((BATCH, 3, 4, 2)) * 3 + 1.5 for _ in range(3)]
bounds = np.linspace(0, BATCH, world + 1).astype(int)
lo, hi = bounds[rank], bounds[rank + 1]
TOL = dict(rtol=1e-9, atol=1e-9)  # values of order 100


def build(norm):
    mf.manual_seed(0)
    return mf.nn.Sequential(mf.nn.Conv2d(3, 4, 1), norm(4), mf.nn.ReLU()).double()


def step(model, opt, x, scale):
    opt.zero_grad()
    x = mf.tensor(x, requires_grad=True)
    out = model(x)
    (out * out).sum().mul(scale).backward()
    opt.step()
    return out.detach().numpy(), x.grad.numpy()


reference = build(mf.nn.BatchNorm2d)
ref_opt = mf.optim.SGD(reference.parameters(), lr=0.1)
model = DDP(mf.nn.SyncBatchNorm.convert_sync_batchnorm(build(mf.nn.BatchNorm2d)))
assert type(model.module[1]).__name__ == "SyncBatchNorm"
opt = mf.optim.SGD(model.parameters(), lr=0.1)
for x in data:
    # DDP averages gradients over ranks: each rank's loss is scaled by world so that the average equals
    # the one-process gradient of the whole batch's loss.
    ref_out, ref_grad = step(reference, ref_opt, x, 1.0)
    out, grad = step(model, opt, x[lo:hi], float(world))
    np.testing.assert_allclose(out, ref_out[lo:hi], **TOL)
    np.testing.assert_allclose(grad, ref_grad[lo:hi] * world, **TOL)
ref_state, state = reference.state_dict(), model.module.state_dict()
for name, value in ref_state.items():
    np.testing.assert_allclose(state[name].numpy(), value.numpy(), err_msg=name, **TOL)

# eval: the running statistics, no communication
model.eval()
reference.eval()
x = data[0]
with mf.no_grad():
    np.testing.assert_allclose(model(mf.tensor(x[lo:hi])).numpy(), reference(mf.tensor(x)).numpy()[lo:hi], **TOL)

# a global input: the whole batch is one tensor, batch_norm sees it all
layer = mf.nn.SyncBatchNorm(3).double()
mesh = mf.placement("cpu", list(range(world)))
g = mf.tensor(x).to_global(placement=mesh, sbp=mf.sbp.broadcast).to_global(sbp=mf.sbp.split(0))
plain = mf.nn.BatchNorm2d(3).double()
np.testing.assert_allclose(layer(g).to_global(sbp=mf.sbp.broadcast).to_local().detach().numpy(),
                           plain(mf.tensor(x)).detach().numpy(), **TOL)
print(f"sync batch norm OK rank {rank}", flush=True)
