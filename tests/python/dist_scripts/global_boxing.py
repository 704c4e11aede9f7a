"""Run under mpirun: every boxing transition round-trips exactly, uneven
splits included, and to_global of local shards builds the right global
tensor. Prints one summary line per rank."""
import itertools

import numpy as np

import meshflow as mf

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, P = mf.sbp.broadcast, mf.sbp.partial_sum


def split_range(n, parts, index):
    base, extra = divmod(n, parts)
    begin = index * base + min(index, extra)
    return begin, begin + base + (1 if index < extra else 0)


meshes = [mf.placement("cpu", list(range(world)))]
if world == 4:
    meshes.append(mf.placement("cpu", [[0, 1], [2, 3]]))
shapes = [(7, 5), (4, 6, 3), (1, 9)]  # uneven splits, and parts of size 0
checked = 0
for p in meshes:
    nd = len(p.hierarchy)
    for shape in shapes:
        full = mf.arange(int(np.prod(shape)), dtype=mf.float64).reshape(shape)
        options = [B, P] + [mf.sbp.split(d) for d in range(len(shape))]
        layouts = list(itertools.product(options, repeat=nd))
        for src in layouts:
            g = mf.tensor(full.numpy(), placement=p, sbp=src)
            assert g.is_global and g.shape == full.shape and g.sbp == src
            for dst in layouts:
                h = g.to_global(sbp=dst)
                assert h.sbp == dst and h.placement == p
                whole = h.to_global(sbp=(B,) * nd).to_local()
                assert np.array_equal(whole.numpy(), full.numpy()), (shape, src, dst)
                if P not in dst:
                    expected = mf.tensor(full.numpy(), placement=p, sbp=dst).to_local()
                    assert np.array_equal(h.to_local().numpy(), expected.numpy()), (shape, src, dst)
                checked += 1

# Local shards -> global: each rank holds rows split_range(10, world, rank).
b, e = split_range(10, world, rank)
local = mf.arange(10 * 3, dtype=mf.float32).reshape(10, 3)[b:e]
g = local.to_global(placement=meshes[0], sbp=mf.sbp.split(0))
assert tuple(g.shape) == (10, 3)
assert np.array_equal(g.to_global(sbp=B).to_local().numpy(), np.arange(30, dtype=np.float32).reshape(10, 3))
# Partial sums: every rank contributes rank + 1.
s = mf.full((2, 2), float(rank + 1)).to_global(placement=meshes[0], sbp=P)
assert np.array_equal(s.to_global(sbp=B).to_local().numpy(), np.full((2, 2), world * (world + 1) / 2))

# Placement changes.
if world >= 2:
    src_p, dst_p = mf.placement("cpu", [0]), mf.placement("cpu", list(range(world)))
    full = mf.randn(5, 4)  # the same on every rank (same seed)
    g = mf.tensor(full.numpy(), placement=src_p, sbp=B)
    h = g.to_global(placement=dst_p, sbp=mf.sbp.split(1))
    expected = mf.tensor(full.numpy(), placement=dst_p, sbp=mf.sbp.split(1)).to_local()
    assert np.array_equal(h.to_local().numpy(), expected.numpy())
    back = h.to_global(placement=src_p, sbp=B)
    if rank == 0:
        assert np.array_equal(back.to_local().numpy(), full.numpy())
    else:
        assert back.to_local() is None
    checked += 2
if world == 4:
    a, c = mf.placement("cpu", [0, 1]), mf.placement("cpu", [2, 3])
    full = mf.arange(12.0).reshape(3, 4)
    g = mf.tensor(full.numpy(), placement=a, sbp=mf.sbp.split(0))
    h = g.to_global(placement=c, sbp=mf.sbp.split(1))
    if rank in (2, 3):
        expected = mf.tensor(full.numpy(), placement=c, sbp=mf.sbp.split(1)).to_local()
        assert np.array_equal(h.to_local().numpy(), expected.numpy())
    checked += 1

# Bad input fails on every rank, without a hang: shapes that differ across
# ranks (with more than one rank), a split axis out of range.
bad_calls = [lambda: mf.zeros(3).to_global(placement=meshes[0], sbp=mf.sbp.split(2))]
if world > 1:
    bad_calls.append(lambda: mf.zeros(3, 4 + rank).to_global(placement=meshes[0], sbp=B))
for bad in bad_calls:
    try:
        bad()
    except (mf.errors.Error, IndexError, ValueError) as err:
        assert str(err)
    else:
        raise AssertionError("a bad to_global did not raise")
print(f"rank {rank}/{world}: {checked} transitions OK", flush=True)
