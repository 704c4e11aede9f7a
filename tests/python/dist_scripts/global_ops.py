"""Run under mpirun: ops on global tensors (elementwise, matmul, sums and
their backward) equal the same computation on one process, for every input
layout, on a 1-D mesh over all ranks and (with 4 ranks) a 2x2 mesh."""
import itertools

import numpy as np

import meshflow as mf

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, P, S = mf.sbp.broadcast, mf.sbp.partial_sum, mf.sbp.split

meshes = [mf.placement("cpu", list(range(world)))]
if world == 4:
    meshes.append(mf.placement("cpu", [[0, 1], [2, 3]]))

mf.manual_seed(0)
x_full, w_full, b_full = mf.randn(6, 4, dtype=mf.float64), mf.randn(4, 5, dtype=mf.float64), mf.randn(5, dtype=mf.float64)


def model(x, w, b):
    h = mf.nn.functional.relu(x * 2.0 + 1.0) - x / 3.0
    y = mf.matmul(h, w) + b
    return (y * y).sum(), y.sum(dim=0)


# The single-process reference.
xr, wr, br = (t.clone().requires_grad_() for t in (x_full, w_full, b_full))
loss_ref, col_ref = model(xr, wr, br)
loss_ref.backward()


def whole(t, p):
    return t.detach().to_global(sbp=(B,) * len(p.hierarchy)).to_local().numpy()


checked = 0
for p in meshes:
    nd = len(p.hierarchy)
    for xs, ws in itertools.product([S(0), S(1), B, P], [B, S(0), S(1)]):
        x = mf.tensor(x_full.numpy(), placement=p, sbp=(xs,) * nd).requires_grad_()
        w = mf.tensor(w_full.numpy(), placement=p, sbp=(ws,) * nd).requires_grad_()
        b = mf.tensor(b_full.numpy(), placement=p, sbp=(B,) * nd).requires_grad_()
        loss, col = model(x, w, b)
        assert loss.is_global and col.is_global and tuple(col.shape) == (5,)
        np.testing.assert_allclose(whole(loss, p), loss_ref.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(whole(col, p), col_ref.detach().numpy(), rtol=1e-12)
        loss.backward()
        for g, ref in ((x, xr), (w, wr), (b, br)):
            assert g.grad is not None and g.grad.is_global
            np.testing.assert_allclose(whole(g.grad, p), ref.grad.numpy(), rtol=1e-12, atol=1e-12)
        checked += 1

# Autograd through the conversions (Note [Conversion gradients]) and through
# in-place ops on global tensors.
mesh = meshes[0]
full = np.arange(2.0 * world * 3).reshape(2 * world, 3)
mine = mf.tensor(full[2 * rank:2 * rank + 2]).requires_grad_()   # this rank's shard
g = mine.to_global(placement=mesh, sbp=S(0))
assert g.requires_grad and g.grad_fn is not None
(g * g).sum().backward()
np.testing.assert_allclose(mine.grad.numpy(), 2 * full[2 * rank:2 * rank + 2])

x = mf.tensor(full, placement=mesh, sbp=B).requires_grad_()
weights = mf.tensor(full + 1.0)
(x.to_global(sbp=S(1)) * weights).sum().backward()
assert x.grad.sbp == (B,)
np.testing.assert_allclose(whole(x.grad, mesh), full + 1.0)

x = mf.tensor(full, placement=mesh, sbp=S(0)).requires_grad_()
local = x.to_local()
(local * local).sum().backward()
assert x.grad.sbp == (S(0),)
np.testing.assert_allclose(whole(x.grad, mesh), 2 * full)

x = mf.tensor(full, placement=mesh, sbp=S(0)).requires_grad_()
y = x * 1.0
y.mul_(mf.tensor(full, placement=mesh, sbp=B))
y.add_(2.0)
(y * 3.0).sum().backward()
np.testing.assert_allclose(whole(x.grad, mesh), 3 * full)
checked += 1

# linear (a transposed weight) with 6 input features split: on 4 ranks two
# hold one column, a shard whose strides look contiguous. Backward's formula
# must not follow the shard's strides, or ranks run different collectives.
rng = np.random.default_rng(1)
xf, wf, bf = rng.standard_normal((2, 3, 6)), rng.standard_normal((10, 6)), rng.standard_normal(10)
refs = [mf.tensor(v).requires_grad_() for v in (xf, wf, bf)]
mf.nn.functional.linear(*refs).tanh().pow(2).sum().backward()
gl = [mf.tensor(v, placement=mesh, sbp=B).to_global(sbp=s).requires_grad_()
      for v, s in ((xf, S(2)), (wf, S(1)), (bf, B))]
mf.nn.functional.linear(*gl).tanh().pow(2).sum().backward()
for t, r in zip(gl, refs):
    np.testing.assert_allclose(whole(t.grad, mesh), r.grad.numpy(), rtol=1e-12)
checked += 1

# isclose / allclose / equal on split tensors: every rank gets the whole answer.
u = mf.tensor(full, placement=mesh, sbp=S(0))
v = mf.tensor(full + (np.arange(full.size).reshape(full.shape) == 5) * 1e-3, placement=mesh, sbp=S(1))
assert mf.allclose(u, u) and mf.equal(u, u) and not mf.equal(u, v) and not mf.allclose(u, v, rtol=0, atol=1e-4)
assert mf.allclose(u, v, atol=1e-2)
np.testing.assert_array_equal(whole(mf.isclose(u, v, rtol=0, atol=1e-4), mesh), np.abs(full - whole(v, mesh)) <= 1e-4)
checked += 1

# Bad input: a clear error on every rank, no hang.
m = mf.tensor(np.ones((3, 4)), placement=mesh, sbp=S(0))
for bad, error, text in [
        (lambda: mf.matmul(m, mf.tensor(np.ones((5, 2)), placement=mesh, sbp=B)), RuntimeError, "matmul"),
        (lambda: m.to_global(sbp=S(2)), (IndexError, ValueError), "split"),
        (lambda: m.sum(dim=3), IndexError, "dim"),
]:
    try:
        bad()
    except error as err:
        assert text in str(err), str(err)
    else:
        raise AssertionError(f"no error ({text})")

# Inputs on different placements: a clear error on every rank.
if world >= 2:
    a = mf.ones(4, placement=mf.placement("cpu", [0]), sbp=B)
    c = mf.ones(4, placement=mf.placement("cpu", list(range(world))), sbp=B)
    try:
        a + c
    except ValueError as err:
        assert "placement" in str(err)
    else:
        raise AssertionError("mixing placements did not raise")
print(f"rank {rank}/{world}: {checked} layouts OK", flush=True)
