"""Run under mpirun: ZeroRedundancyOptimizer (ZeRO-1) equals one process.

DistributedDataParallel + ZeroRedundancyOptimizer(AdamW), each rank on its
slice of a global batch, gives after 10 steps the parameters and optimizer
state of plain AdamW on the whole batch in one process (float64, rtol
1e-10), with: a 53-element parameter (53 does not divide by the ranks), a
layer used three times per forward, a parameter without a gradient for one
step, gradient-norm clipping, and a GradScaler whose step 5 sees an
injected inf (skipped on every rank). Then the consolidated state dict
loads into a plain AdamW and back into ZeRO on every rank, and training
continues equal; a StepLR schedule drives it as it drives AdamW; under
bf16 autocast it gives DDP + AdamW's bits; 4 micro-batches under no_sync equal
the whole batch. Each rank
holds about 1/N of the optimizer state.
"""
import os

import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from meshflow.distributed.optim import ZeroRedundancyOptimizer
from meshflow.nn.parallel import DistributedDataParallel as DDP

dist = mf.distributed
rank, world = mf.env.get_rank(), mf.env.get_world_size()
BATCH = 24
rng = np.random.default_rng(0)
data = [(rng.standard_normal((BATCH, 6)), rng.standard_normal((BATCH, 6))) for _ in range(12)]
lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world


class Net(mf.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = mf.nn.Linear(6, 53)
        self.shared = mf.nn.Linear(53, 53)
        self.down = mf.nn.Linear(53, 6)

    def forward(self, x):
        h = self.up(x).tanh()
        for _ in range(3):
            h = self.shared(h).tanh()
        return self.down(h)


def build():
    mf.manual_seed(0)
    return Net().double()


def train(model, opt, scaler, rows, steps):
    params = list(opt.param_groups[0]["params"])
    for step in steps:
        x, y = data[step]
        opt.zero_grad()
        # Each rank's mean; DistributedDataParallel averages them (equal slices).
        loss = F.mse_loss(model(mf.tensor(x[rows])), mf.tensor(y[rows]))
        if step == 5 and rows[0] == 0:
            # An overflow on the rank holding row 0 only; the gradients'
            # all-reduce carries it to every rank, which all skip the step.
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        if step == 3:  # a parameter without a gradient this step: its owner skips it
            model_params(model).up.bias.grad = None
        scaler.unscale_(opt)
        mf.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()


def model_params(model):
    return model.module if isinstance(model, DDP) else model


def check(a, b, what, rtol=1e-10):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=rtol, atol=1e-12,
                                   err_msg=f"{what}: {name}")


def check_state(sd, ref, what):
    assert sorted(sd["state"]) == sorted(ref["state"]), what
    for k in ref["state"]:
        for key, value in ref["state"][k].items():
            np.testing.assert_allclose(np.asarray(sd["state"][k][key].numpy()), np.asarray(value.numpy()),
                                       rtol=1e-10, atol=1e-14, err_msg=f"{what}: state {k} {key}")


# One process, whole batch: the reference.
ref = build()
ref_opt = mf.optim.AdamW(ref.parameters(), lr=0.01, weight_decay=0.1)
ref_scaler = mf.amp.GradScaler(init_scale=16.0, growth_interval=2)
train(ref, ref_opt, ref_scaler, np.arange(BATCH), range(10))

net = build()
model = DDP(net)
opt = ZeroRedundancyOptimizer(model.parameters(), mf.optim.AdamW, lr=0.01, weight_decay=0.1)
scaler = mf.amp.GradScaler(init_scale=16.0, growth_interval=2)
train(model, opt, scaler, np.arange(lo, hi), range(10))
check(net, ref, "after 10 steps")
assert scaler.get_scale() == ref_scaler.get_scale()

# Each rank keeps the state of its share of the parameters only.
total = sum(p.numel() for p in net.parameters())
mine = sum(v.numel() for s in opt.state.values() for k, v in s.items() if k != "step")
assert mine <= 2 * (total / world + 53 * 53), (mine, total)
counts = [None] * world
dist.all_gather_object(counts, mine)
assert sum(counts) == 2 * total, counts

# The consolidated state dict is the ordinary one.
opt.consolidate_state_dict(to=0)
if rank == 0:
    sd = opt.state_dict()
    check_state(sd, ref_opt.state_dict(), "consolidated")
    plain = mf.optim.AdamW(build().parameters(), lr=0.01, weight_decay=0.1)
    plain.load_state_dict(sd)
    check_state(plain.state_dict(), ref_opt.state_dict(), "loaded into AdamW")
else:
    sd = None
    try:
        opt.state_dict()
        raise AssertionError("state_dict() without consolidation was accepted")
    except RuntimeError as e:
        assert "consolidate_state_dict" in str(e)
# Saved with mf.save on rank 0 (the format is the plain optimizer's, so it
# does not depend on the rank count) and loaded from the file on every rank.
box = [None]
if rank == 0:
    import tempfile
    box = [tempfile.mkdtemp(prefix="zero_optimizer_") + "/optimizer.safetensors"]
    mf.save(sd, box[0])
dist.broadcast_object_list(box, src=0)
path = box[0]
box = [mf.load(path)]
dist.barrier()
if rank == 0:
    import shutil
    shutil.rmtree(os.path.dirname(path))

# Reload into a fresh ZeRO optimizer (and model) and continue.
net2 = build()
with mf.no_grad():
    for p, q in zip(net2.parameters(), net.parameters()):
        p.copy_(q)
model2 = DDP(net2)
opt2 = ZeroRedundancyOptimizer(model2.parameters(), mf.optim.AdamW, lr=0.5, weight_decay=0.0)
opt2.load_state_dict(box[0])
assert opt2.param_groups[0]["lr"] == 0.01
scaler2 = mf.amp.GradScaler(init_scale=scaler.get_scale(), growth_interval=2)
ref_scaler2 = mf.amp.GradScaler(init_scale=ref_scaler.get_scale(), growth_interval=2)
train(model2, opt2, scaler2, np.arange(lo, hi), range(10, 12))
train(ref, ref_opt, ref_scaler2, np.arange(BATCH), range(10, 12))
check(net2, ref, "after reloading")
# A learning-rate schedule drives a ZeroRedundancyOptimizer as it drives AdamW.
def scheduled(make_opt, model, rows):
    opt = make_opt(model)
    sched = mf.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(6):
        x, y = data[step]
        opt.zero_grad()
        F.mse_loss(model(mf.tensor(x[rows])), mf.tensor(y[rows])).backward()
        opt.step()
        sched.step()
    return opt, sched


ref3 = build()
ref3_opt, ref3_sched = scheduled(lambda m: mf.optim.AdamW(m.parameters(), lr=0.01), ref3, np.arange(BATCH))
net3 = build()
zero3_opt, zero3_sched = scheduled(
    lambda m: ZeroRedundancyOptimizer(m.parameters(), mf.optim.AdamW, lr=0.01), DDP(net3), np.arange(lo, hi))
assert zero3_sched.get_last_lr() == ref3_sched.get_last_lr() == [0.01 * 0.5 ** 3]
assert zero3_opt.param_groups[0]["lr"] == 0.01 * 0.5 ** 3
check(net3, ref3, "under StepLR")
# Accumulation over 4 micro-batches (DDP's no_sync) of a batch of 48 (4
# equal micro-batches on every rank count): equal to one process on the
# whole batch.
data48 = [(rng.standard_normal((48, 6)), rng.standard_normal((48, 6))) for _ in range(4)]
lo48, hi48 = rank * 48 // world, (rank + 1) * 48 // world
ref4 = build()
ref4_opt = mf.optim.AdamW(ref4.parameters(), lr=0.01)
net4 = build()
ddp4 = DDP(net4)
zero4 = ZeroRedundancyOptimizer(ddp4.parameters(), mf.optim.AdamW, lr=0.01)
for step in range(4):
    x, y = data48[step]
    ref4_opt.zero_grad()
    F.mse_loss(ref4(mf.tensor(x)), mf.tensor(y)).backward()
    ref4_opt.step()
    zero4.zero_grad()
    parts = np.array_split(np.arange(lo48, hi48), 4)
    for k, part in enumerate(parts):
        loss = F.mse_loss(ddp4(mf.tensor(x[part])), mf.tensor(y[part])) / 4
        if k < 3:
            with ddp4.no_sync():
                loss.backward()
        else:
            loss.backward()
    zero4.step()
check(net4, ref4, "4 micro-batches")

# bf16 autocast, float32 parameters: the same bits as DDP + AdamW (each
# owner runs AdamW's kernel on the same averaged gradients).
def bf16_run(make_opt):
    mf.manual_seed(0)
    net = Net()
    model = DDP(net)
    opt = make_opt(model)
    for step in range(3):
        x, y = data[step]
        opt.zero_grad()
        with mf.autocast("cpu", dtype=mf.bfloat16):
            out = model(mf.tensor(x[lo:hi], dtype=mf.float32))
        F.mse_loss(out.float(), mf.tensor(y[lo:hi], dtype=mf.float32)).backward()
        opt.step()
    return net


plain_bf16 = bf16_run(lambda m: mf.optim.AdamW(m.parameters(), lr=0.01))
zero_bf16 = bf16_run(lambda m: ZeroRedundancyOptimizer(m.parameters(), mf.optim.AdamW, lr=0.01))
for (name, p), (_, q) in zip(zero_bf16.named_parameters(), plain_bf16.named_parameters()):
    np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=f"bf16: {name}")
print(f"zero optimizer OK (rank {rank} of {world})", flush=True)
