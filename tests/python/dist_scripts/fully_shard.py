"""Run under mpirun: fully_shard (ZeRO-3) equals one process and DDP.

`fully_shard.py` (no arguments): a model of three units (two submodules and
the root) trains 10 AdamW steps, each rank on its slice of a global batch,
and ends with the parameters and optimizer state of one process on the
whole batch (float64, rtol 1e-10), with: parameters of 53 rows (uneven on
2 and 4 ranks) and a 0-d one (replicated), a layer used three times, tied
weights, a parameter with requires_grad off for one step, gradient-norm
clipping, a GradScaler whose step 5 sees an injected inf, and both
reshard_after_forward settings; then accumulation over 4 micro-batches
(set_requires_gradient_sync), equal to DDP under no_sync; a delay injected
before every gather and reduce-scatter on rank 1 changes no bit; bf16
autocast against DDP; each rank holds 1/N of parameters and state; bad
input. `save DIR` trains 10 steps and saves model and optimizer state with
meshflow.distributed.checkpoint; `load DIR` (any rank count) loads them
into a new sharded model and trains on equal to one process, and mf.load
reads the same checkpoint into a plain local model.
"""
import sys

import numpy as np

import meshflow as mf
import meshflow.distributed.checkpoint as dcp
import meshflow.nn.functional as F
from meshflow.distributed.fsdp import FSDPModule, fully_shard
from meshflow.nn.parallel import DistributedDataParallel as DDP

dist = mf.distributed
rank, world = mf.env.get_rank(), mf.env.get_world_size()
BATCH, MICRO = 48, 4
rng = np.random.default_rng(0)
data = [(rng.standard_normal((BATCH, 6)), rng.standard_normal((BATCH, 6))) for _ in range(14)]
lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world
B, S = mf.sbp.broadcast, mf.sbp.split


class Net(mf.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = mf.nn.Linear(6, 53)
        self.shared = mf.nn.Linear(53, 53)
        self.down = mf.nn.Linear(53, 6)
        self.proj = mf.nn.Linear(6, 6, bias=False)
        self.back = mf.nn.Linear(6, 6)
        self.back.weight = self.proj.weight  # tied
        self.gain = mf.nn.Parameter(mf.tensor(1.5))

    def forward(self, x):
        h = self.up(x).tanh()
        for _ in range(3):
            h = self.shared(h).tanh()
        return self.back(self.proj(self.down(h)).tanh()) * self.gain


def build(dtype=mf.float64):
    mf.manual_seed(0)
    return Net().to(dtype)


def shard(net, reshard=True):
    fully_shard(net.up, reshard_after_forward=reshard)
    fully_shard(net.shared, reshard_after_forward=reshard)
    fully_shard(net, reshard_after_forward=reshard)
    return net


def train(model, opt, scaler, rows, steps, micro=1, inf_step=5):
    params = [p for g in opt.param_groups for p in g["params"]]
    for step in steps:
        x, y = data[step]
        opt.zero_grad()
        if step == 3:  # one step without a gradient for up.bias
            model.up.bias.requires_grad_(False)
        parts = np.array_split(rows, micro)
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            if isinstance(model, FSDPModule):
                model.set_requires_gradient_sync(last)
            loss = F.mse_loss(model(mf.tensor(x[part])), mf.tensor(y[part])) / micro
            if step == inf_step and rows[0] == 0 and last:
                loss = loss * float("inf")  # on the rank holding row 0 only: every rank skips the step
            scaler.scale(loss).backward()
        model.up.bias.requires_grad_(True)
        scaler.unscale_(opt)
        mf.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()


def whole(t):
    t = t.detach()
    return t.to_global(sbp=[B] * len(t.sbp)).to_local().numpy() if t.is_global else t.numpy()


def check(net, ref, what, rtol=1e-10, atol=1e-12):
    for (name, p), (_, q) in zip(net.named_parameters(), ref.named_parameters()):
        np.testing.assert_allclose(whole(p), whole(q), rtol=rtol, atol=atol, err_msg=f"{what}: {name}")


def check_state(opt, ref_opt, what):
    sd, rd = opt.state_dict(), ref_opt.state_dict()
    assert sorted(sd["state"]) == sorted(rd["state"]), what
    for k in rd["state"]:
        for key, value in rd["state"][k].items():
            got = sd["state"][k][key]
            if isinstance(value, mf.Tensor):
                np.testing.assert_allclose(whole(got), value.numpy(), rtol=1e-10, atol=1e-14,
                                           err_msg=f"{what}: state {k} {key}")
            else:
                assert got == value, (what, k, key, got, value)


def reference(steps, micro=1):
    ref = build()
    opt = mf.optim.AdamW(ref.parameters(), lr=0.01, weight_decay=0.1)
    scaler = mf.amp.GradScaler(init_scale=16.0, growth_interval=2)
    train(ref, opt, scaler, np.arange(BATCH), steps, micro)
    return ref, opt, scaler


def sharded_run(steps, micro=1, reshard=True):
    net = shard(build(), reshard)
    opt = mf.optim.AdamW(net.parameters(), lr=0.01, weight_decay=0.1)
    scaler = mf.amp.GradScaler(init_scale=16.0, growth_interval=2)
    train(net, opt, scaler, np.arange(lo, hi), steps, micro)
    return net, opt, scaler


mode = sys.argv[1] if len(sys.argv) > 1 else "check"

if mode == "check":
    ref, ref_opt, ref_scaler = reference(range(10))
    for reshard in (True, False):
        net, opt, scaler = sharded_run(range(10), reshard=reshard)
        check(net, ref, f"10 steps, reshard_after_forward={reshard}")
        check_state(opt, ref_opt, f"state, reshard_after_forward={reshard}")
        assert scaler.get_scale() == ref_scaler.get_scale()
    assert isinstance(net, FSDPModule) and isinstance(net.up, FSDPModule) and not isinstance(net.down, FSDPModule)
    assert net.up.weight.sbp == (S(0),) and net.gain.sbp == (B,)
    assert net.back.weight.to_local().data_ptr() == net.proj.weight.to_local().data_ptr()  # still tied

    # Each rank holds its rows of every split parameter and of its AdamW state.
    total = sum(p.numel() for p in net.parameters())
    mine = sum(p.to_local().numel() for p in net.parameters())
    counts = [None] * world
    dist.all_gather_object(counts, mine)
    assert sum(counts) == total + (world - 1) * 1, (counts, total)  # only the 0-d gain is on every rank
    state_mine = sum(v.to_local().numel() for s in opt.state_dict()["state"].values()
                     for k, v in s.items() if isinstance(v, mf.Tensor) and k != "step")
    assert state_mine == 2 * mine, (state_mine, mine)

    # A delay before every gather and every reduce-scatter on rank 1: the same bits.
    delay = mf._C._distributed._set_test_comm_delay
    if rank == 1:
        delay("all_gather", 0.002)
        delay("reduce_scatter", 0.002)
    delayed, _, _ = sharded_run(range(3))
    delay("all_gather", 0)
    delay("reduce_scatter", 0)
    plain, _, _ = sharded_run(range(3))
    check(delayed, plain, "delayed collectives", rtol=0, atol=0)

    # Accumulation over 4 micro-batches: equal to one process on the whole
    # batch and to DistributedDataParallel under no_sync.
    ref_acc, _, _ = reference(range(10, 14), micro=MICRO)
    acc, _, _ = sharded_run(range(10, 14), micro=MICRO)
    check(acc, ref_acc, "4 micro-batches")
    ddp_net = build()
    ddp = DDP(ddp_net)
    ddp_opt = mf.optim.AdamW(ddp.parameters(), lr=0.01, weight_decay=0.1)
    ddp_scaler = mf.amp.GradScaler(init_scale=16.0, growth_interval=2)
    for step in range(10, 14):
        x, y = data[step]
        ddp_opt.zero_grad()
        for k, part in enumerate(np.array_split(np.arange(lo, hi), MICRO)):
            loss = F.mse_loss(ddp(mf.tensor(x[part])), mf.tensor(y[part])) / MICRO
            if k < MICRO - 1:
                with ddp.no_sync():
                    ddp_scaler.scale(loss).backward()
            else:
                ddp_scaler.scale(loss).backward()
        ddp_scaler.unscale_(ddp_opt)
        mf.nn.utils.clip_grad_norm_(list(ddp.parameters()), 1.0)
        ddp_scaler.step(ddp_opt)
        ddp_scaler.update()
    check(acc, ddp_net, "4 micro-batches against DDP")

    # bf16 autocast, float32 parameters, SGD: equal to DDP up to rounding. The
    # whole parameters are not leaves, so autocast casts them at each use
    # and the bf16 gradients of a layer used several times are summed in
    # float32 (DDP: in bfloat16, through one cached cast).
    def bf16_steps(model, opt):
        for step in range(3):
            x, y = data[step]
            opt.zero_grad()
            with mf.autocast("cpu", dtype=mf.bfloat16):
                out = model(mf.tensor(x[lo:hi], dtype=mf.float32))
            F.mse_loss(out.float(), mf.tensor(y[lo:hi], dtype=mf.float32)).backward()
            opt.step()
    half = shard(build(mf.float32))
    bf16_steps(half, mf.optim.SGD(half.parameters(), lr=0.1))
    half_ddp_net = build(mf.float32)
    half_ddp = DDP(half_ddp_net)
    bf16_steps(half_ddp, mf.optim.SGD(half_ddp.parameters(), lr=0.1))
    check(half, half_ddp_net, "bf16 autocast against DDP", rtol=1e-3, atol=1e-4)

    # Bad input.
    def refused(fn, expect):
        try:
            fn()
        except (ValueError, TypeError, NotImplementedError, mf.errors.Error) as e:
            assert expect in str(e), str(e)
        else:
            raise AssertionError(f"accepted: {expect}")
    refused(lambda: fully_shard(DDP(build())), "wrapped by DistributedDataParallel")
    wrapped = build()
    DDP(wrapped)
    refused(lambda: fully_shard(wrapped), "wrapped by DistributedDataParallel")
    refused(lambda: fully_shard(net), "already applied")
    refused(lambda: DDP(net), "fully_shard")
    tied = build()
    fully_shard(tied.proj)
    refused(lambda: fully_shard(tied), "another fully_shard unit")
    tp = build().to_global(mf.placement("cpu", list(range(world))), B)
    refused(lambda: fully_shard(tp.up), "parameter 'weight' is a global tensor")
    refused(lambda: fully_shard(build(), mesh=mf.placement("cpu", [[0]])), "hybrid sharding")
    refused(lambda: fully_shard("not a module"), "expected a meshflow.nn.Module")
    # A forward that raises leaves the unit usable.
    broken = shard(build())
    try:
        broken(mf.zeros(2, 5, dtype=mf.float64))
    except mf.errors.Error:
        pass
    assert broken.up.weight.sbp == (S(0),)
    F.mse_loss(broken(mf.tensor(data[0][0][lo:hi])), mf.tensor(data[0][1][lo:hi])).backward()
    assert broken.up.weight.grad.sbp == (S(0),)
    print(f"fully_shard OK (rank {rank} of {world})", flush=True)

elif mode == "save":
    net, opt, _ = sharded_run(range(10))
    dcp.save({"model": net.state_dict(), "optim": opt.state_dict()}, checkpoint_id=sys.argv[2])
    print(f"fully_shard save OK (rank {rank} of {world})", flush=True)

elif mode == "load":
    ref, ref_opt, ref_scaler = reference(range(10))
    net = shard(build())
    opt = mf.optim.AdamW(net.parameters(), lr=0.01, weight_decay=0.1)
    net(mf.tensor(data[0][0][lo:hi])).sum().backward()
    opt.step()  # the state exists, to be filled in place
    sd = {"model": net.state_dict(), "optim": opt.state_dict()}
    dcp.load(sd, checkpoint_id=sys.argv[2])
    net.load_state_dict(sd["model"])
    opt.load_state_dict(sd["optim"])
    check(net, ref, "loaded")
    check_state(opt, ref_opt, "loaded state")
    scaler = mf.amp.GradScaler(init_scale=ref_scaler.get_scale(), growth_interval=2)
    ref_scaler2 = mf.amp.GradScaler(init_scale=ref_scaler.get_scale(), growth_interval=2)
    train(net, opt, scaler, np.arange(lo, hi), range(10, 12), inf_step=None)
    train(ref, ref_opt, ref_scaler2, np.arange(BATCH), range(10, 12), inf_step=None)
    check(net, ref, "trained on after loading")
    # The same checkpoint, whole, into a plain local model.
    plain = build()
    plain.load_state_dict(mf.load(sys.argv[2])["model"])
    ref2, _, _ = reference(range(10))
    check(plain, ref2, "mf.load into a local model")
    print(f"fully_shard load OK (rank {rank} of {world})", flush=True)
