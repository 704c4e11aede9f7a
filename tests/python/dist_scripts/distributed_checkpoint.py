"""Run under mpirun: meshflow.distributed.checkpoint.

`save DIR` trains a global model two AdamW steps with its parameters (and
so their optimizer state) laid out over all ranks — split along dim 0 and
1, uneven row counts, a 2-D mesh on 4 ranks, a partial-sum tensor — and
saves {model, optim, step, extra, big} with dcp.save; rank 0 also writes the
whole values with mf.save as the reference. `load DIR` (on any number of
ranks) builds the model with other layouts, loads in place with dcp.load and
checks every value and that training continues; a plain local model loads
the same checkpoint, and mf.load reads the directory whole. It measures the
allocator's peak while loading `big` (a 4 MiB tensor) split along either
dim: within one read buffer (256 KiB here) of the memory it held before,
where mf.load needs the whole tensor.
Bad input: a missing key, a wrong shape, a missing directory.
"""
import os
import sys

import numpy as np

import meshflow as mf
import meshflow.distributed.checkpoint as dcp

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S, P = mf.sbp.broadcast, mf.sbp.split, mf.sbp.partial_sum
mode, directory = sys.argv[1], sys.argv[2]
ckpt = os.path.join(directory, "dcp")
line = mf.placement("cpu", list(range(world)))
grid = mf.placement("cpu", [[0, 1], [2, 3]]) if world == 4 else line
BIG = (512, 2048)


class Net(mf.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = mf.nn.Embedding(53, 6)
        self.fc1 = mf.nn.Linear(6, 10)
        self.fc2 = mf.nn.Linear(10, 3)

    def forward(self, idx):
        return self.fc2(self.fc1(self.emb(idx)).tanh())


def spread(t, placement, sbp):
    """The whole tensor t (equal on every rank) laid out as sbp."""
    sbp = sbp if isinstance(sbp, tuple) else (sbp,)
    return t.to_global(placement=placement, sbp=(B,) * len(sbp)).to_global(sbp=sbp)


def build(layout):
    mf.manual_seed(0)
    model = Net().double().to_global(line, B)
    for name, sbp in layout.items():
        mod, attr = name.split(".")
        p = getattr(getattr(model, mod), attr)
        setattr(getattr(model, mod), attr, mf.nn.Parameter(p.detach().to_global(sbp=sbp)))
    return model


def step(model, opt, k):
    idx = mf.tensor([[3, 52, 7], [k, 1, 50]]).to_global(placement=line, sbp=B)
    opt.zero_grad()
    model(idx).pow(2).sum().backward()
    opt.step()


def whole(t):
    return t.to_global(sbp=[B] * len(t.sbp)).to_local().numpy() if t.is_global else t.detach().numpy()


def state(model, opt, extra, big, mesh2d):
    return {"model": model.state_dict(), "optim": opt.state_dict(), "step": 2, "extra": extra, "big": big,
            "mesh2d": mesh2d}


SAVE_LAYOUT = {"emb.weight": (S(0),), "fc1.weight": (S(0),), "fc2.weight": (S(1),)}
LOAD_LAYOUT = {"emb.weight": (S(1),), "fc1.weight": (S(1),), "fc2.weight": (S(0),), "fc1.bias": (S(0),)}


def flat(tree, key=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from flat(v, f"{key}.{k}" if key else str(k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from flat(v, f"{key}.{i}")
    else:
        yield key, tree


if mode == "save":
    model = build(SAVE_LAYOUT)
    opt = mf.optim.AdamW(model.parameters(), lr=0.05)
    step(model, opt, 0)
    step(model, opt, 1)
    extra = mf.full((3, 2), float(rank + 1), dtype=mf.float64).to_global(placement=line, sbp=P)
    big = spread(mf.arange(BIG[0] * BIG[1], dtype=mf.float32).reshape(*BIG), line, S(0))
    mesh2d = mf.arange(53 * 6, dtype=mf.float64).reshape(53, 6)
    mesh2d = spread(mesh2d, grid, (S(0), S(1)) if world == 4 else S(0))
    sd = state(model, opt, extra, big, mesh2d)
    dcp.save(sd, checkpoint_id=ckpt)
    reference = {k: whole(v) if isinstance(v, mf.Tensor) else v for k, v in flat(sd)}
    if rank == 0:
        mf.save({k.replace(".", "/"): mf.tensor(v) for k, v in reference.items() if isinstance(v, np.ndarray)},
                os.path.join(directory, "reference.safetensors"))
    print(f"rank {rank}/{world}: dcp save OK", flush=True)
    sys.exit(0)

saved_world = int(sys.argv[3])
dcp.READ_BUFFER_BYTES = 256 << 10  # below a rank's part of big, so reads are chunked
reference = {k.replace("/", "."): v.numpy() for k, v in mf.load(os.path.join(directory, "reference.safetensors")).items()}

# 1. Into other layouts, in place.
model = build(LOAD_LAYOUT)
opt = mf.optim.AdamW(model.parameters(), lr=0.05)
step(model, opt, 5)  # state exists (with other values) so the state_dict has tensors to fill
extra = mf.zeros(3, 2, dtype=mf.float64).to_global(placement=line, sbp=B)
big = spread(mf.zeros(*BIG), line, S(1))  # split the other way: strided reads
sd = state(model, opt, extra, big, spread(mf.zeros(53, 6, dtype=mf.float64), line, S(1)))
sd["step"] = -1
mf.reset_peak_memory_stats()
before = mf.memory_allocated()
dcp.load(sd, checkpoint_id=ckpt)
peak = mf.max_memory_allocated() - before
assert sd["step"] == 2
got = {k: whole(v) for k, v in flat(sd) if isinstance(v, mf.Tensor)}
assert sorted(got) == sorted(reference), (sorted(got), sorted(reference))
for k, v in reference.items():
    np.testing.assert_array_equal(got[k], v, err_msg=k)
np.testing.assert_array_equal(got["extra"], np.full((3, 2), saved_world * (saved_world + 1) / 2))
# The shards never come whole: one read buffer (the largest of the checkpoint's small tensors is far below it).
assert peak <= dcp.READ_BUFFER_BYTES + (64 << 10), f"load peak {peak} bytes above the {before} before"
# Rows split as saved (on another rank count): contiguous runs, read in buffer-sized chunks.
rows = {"big": spread(mf.zeros(*BIG), line, S(0))}
mf.reset_peak_memory_stats()
before_rows = mf.memory_allocated()
dcp.load(rows, checkpoint_id=ckpt)
rows_peak = mf.max_memory_allocated() - before_rows
np.testing.assert_array_equal(whole(rows["big"]), reference["big"])
assert rows_peak <= dcp.READ_BUFFER_BYTES + (64 << 10), f"load peak {rows_peak} bytes"
model.load_state_dict(sd["model"])
opt.load_state_dict(sd["optim"])
step(model, opt, 2)  # training goes on from the loaded state

# 2. Into a plain local model on every rank (whole tensors, each rank reads every shard).
mf.manual_seed(3)
local = Net().double()
lopt = mf.optim.AdamW(local.parameters(), lr=0.05)
lopt.zero_grad()
local(mf.tensor([[1, 2, 3]])).sum().backward()
lopt.step()
lsd = state(local, lopt, mf.zeros(3, 2, dtype=mf.float64), mf.zeros(*BIG), mf.zeros(53, 6, dtype=mf.float64))
dcp.load(lsd, checkpoint_id=ckpt)
for k, v in flat(lsd):
    if isinstance(v, mf.Tensor):
        np.testing.assert_array_equal(v.detach().numpy(), reference[k], err_msg=k)

# 3. mf.load reads the directory whole; it allocates the whole big tensor.
mf.reset_peak_memory_stats()
before = mf.memory_allocated()
loaded = mf.load(ckpt)
whole_peak = mf.max_memory_allocated() - before
np.testing.assert_array_equal(loaded["big"].numpy(), reference["big"])
assert whole_peak >= BIG[0] * BIG[1] * 4
del loaded

# 4. Bad input: nothing written before the error.
for bad, expect in (({"model": {"nope": mf.zeros(2)}}, "lacks 'model.nope'"),
                    ({"big": mf.zeros(3, 3)}, "has shape")):
    try:
        dcp.load(bad, checkpoint_id=ckpt)
    except mf.errors.Error as e:
        assert expect in str(e), str(e)
    else:
        raise AssertionError(f"dcp.load accepted {bad}")
try:
    dcp.load({}, checkpoint_id=os.path.join(directory, "missing"))
except mf.errors.Error as e:
    assert "cannot open checkpoint" in str(e) and "missing" in str(e), str(e)
else:
    raise AssertionError("a missing checkpoint loaded")
print(f"rank {rank}/{world}: dcp load OK (peak over what it held: {peak} B into S(1), {rows_peak} B into S(0); "
      f"mf.load {whole_peak} B)", flush=True)
