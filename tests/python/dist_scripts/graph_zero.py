"""Run under mpirun: ZeRO stages 1, 2 and 3 in graph mode
(graph.config.enable_zero) equal the same graph without ZeRO and one
process.

A data-parallel global model (float64) trained for 10 AdamW steps in an
nn.Graph, the batch split S(0) over the ranks, gives the parameters and
optimizer state of eager AdamW on the whole batch in one process (rtol
1e-10), with: 53-row parameters (53 does not divide by 2 or 4), a layer used
three times per forward, tied weights, gradient-norm clipping inside
build(), and a GradScaler whose step 5 sees an injected inf. Each rank keeps
its rows of every state tensor of at least shard_min_size elements; smaller
ones stay replicated. Stage 1 all-reduces the gradients, stage 2
reduce-scatters them, stage 3 also keeps those parameters as their rows and
gathers them at each use, again in backward (also without the scaler,
under a learning-rate schedule, over 4 micro-batches of gradient
accumulation, with a parameter frozen for one step, and stage 3 under bf16
autocast against the graph without ZeRO; a delay before every collective
changes no bit). Then the optimizer state saved as a global checkpoint
loads into a graph without ZeRO (and back), and the bad-input errors.
"""
import os
import tempfile

import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from layouts import whole

dist = mf.distributed
rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S = mf.sbp.broadcast, mf.sbp.split
mesh = mf.placement("cpu", list(range(world)))
BATCH, STEPS, MIN_SIZE = 24, 10, 40
rng = np.random.default_rng(0)
data = [(rng.standard_normal((BATCH, 6)), rng.standard_normal((BATCH, 6))) for _ in range(STEPS + 2)]


class Net(mf.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = mf.nn.Linear(6, 53)
        self.shared = mf.nn.Linear(53, 53)
        self.gate = mf.nn.Linear(6, 53, bias=False)
        self.gate.weight = self.up.weight  # tied
        self.down = mf.nn.Linear(53, 6)  # its bias (6 elements) stays replicated

    def forward(self, x):
        h = self.up(x).tanh() * self.gate(x).sigmoid()
        for _ in range(3):
            h = self.shared(h).tanh()
        return self.down(h)


def build():
    mf.manual_seed(0)
    return Net().double()


def make_opt(model):
    return mf.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)


def make_scaler():
    return mf.amp.GradScaler(init_scale=16.0, growth_interval=2)


def blowup(step, scaled=True):
    return float("inf") if step == 5 and scaled else 1.0


class TrainGraph(mf.nn.Graph):
    """scaler None: no grad scaler and no clipping."""

    def __init__(self, model, opt, scaler, zero):
        super().__init__()
        self.model = model
        # Without a scaler, a learning-rate schedule (the updates of global
        # parameters follow it).
        self.add_optimizer(opt, lr_sch=None if scaler else schedule(opt))
        self.scaled = scaler is not None
        if self.scaled:
            self.set_grad_scaler(scaler)
        if zero:
            self.config.enable_zero(True, stage=zero, shard_min_size=MIN_SIZE)

    def build(self, x, y, factor):
        loss = F.mse_loss(self.model(x), y) * factor
        loss.backward()
        if self.scaled:
            mf.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        return loss


def schedule(opt):
    return mf.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)


def reference(steps, scaled=True):
    model = build()
    opt, scaler = make_opt(model), mf.amp.GradScaler(init_scale=16.0, growth_interval=2, enabled=scaled)
    sched = None if scaled else schedule(opt)
    for step in steps:
        x, y = data[step]
        opt.zero_grad()
        loss = F.mse_loss(model(mf.tensor(x)), mf.tensor(y)) * blowup(step, scaled)
        scaler.scale(loss).backward()
        if scaled:
            scaler.unscale_(opt)
            mf.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if sched:
            sched.step()
    return model, opt, scaler


def global_batch(step, scaled=True):
    x, y = data[step]
    factor = mf.tensor([blowup(step, scaled)], dtype=mf.float64).reshape(())
    return (mf.tensor(x).to_global(placement=mesh, sbp=S(0)), mf.tensor(y).to_global(placement=mesh, sbp=S(0)),
            factor.to_global(placement=mesh, sbp=B))


def train_graph(zero, steps=range(STEPS), scaled=True):
    model = build().to_global(placement=mesh, sbp=B)
    opt, scaler = make_opt(model), make_scaler() if scaled else None
    graph = TrainGraph(model, opt, scaler, zero)
    for step in steps:
        graph(*global_batch(step, scaled))
    assert graph.num_compiled == 1
    return model, opt, scaler, graph


def check_params(model, ref, what):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        np.testing.assert_allclose(whole(p), q.detach().numpy(), rtol=1e-10, atol=1e-13, err_msg=f"{what}: {name}")


def check_state(opt, ref_opt, what):
    sd, ref = opt.state_dict()["state"], ref_opt.state_dict()["state"]
    assert sorted(sd) == sorted(ref), what
    for k in ref:
        for key, value in ref[k].items():
            got = sd[k][key]
            got = whole(got) if got.is_global else got.numpy()
            np.testing.assert_allclose(got, value.numpy(), rtol=1e-10, atol=1e-13, err_msg=f"{what}: state {k} {key}")


def op_names(graph):
    return graph._last.executable.graph.op_names()


import sys

if len(sys.argv) > 1:
    # `save DIR`: stage 3 trains 10 steps and saves model and optimizer state
    # (a global checkpoint); `load DIR` (any rank count) loads it into a
    # stage-3 graph that trains on equal to one process.
    path = os.path.join(sys.argv[2], "zero3")
    if sys.argv[1] == "save":
        model, opt, scaler, _ = train_graph(3)
        mf.save({"model": model.state_dict(), "optim": opt.state_dict(), "scale": scaler.get_scale()}, path)
    else:
        ckpt = mf.load(path)
        model = build().to_global(placement=mesh, sbp=B)
        model.load_state_dict(ckpt["model"])
        opt = make_opt(model)
        opt.load_state_dict(ckpt["optim"])
        graph = TrainGraph(model, opt, mf.amp.GradScaler(init_scale=ckpt["scale"], growth_interval=2), 3)
        for step in (STEPS, STEPS + 1):
            graph(*global_batch(step))
        ref2, _, _ = reference(range(STEPS + 2))
        check_params(model, ref2, "stage 3, saved on 4 ranks, loaded here")
    print(f"graph zero {sys.argv[1]} OK (rank {rank} of {world})", flush=True)
    sys.exit(0)

ref, ref_opt, ref_scaler = reference(range(STEPS))
plain, plain_opt, _, plain_graph = train_graph(None)
check_params(plain, ref, "without ZeRO")

for stage in (1, 2, 3):
    model, opt, scaler, graph = train_graph(stage)
    check_params(model, ref, f"stage {stage}")
    check_state(opt, ref_opt, f"stage {stage}")
    assert scaler.get_scale() == ref_scaler.get_scale()
    # Each rank keeps its rows of the large state tensors; small ones stay
    # replicated, and the parameters too below stage 3.
    state = opt.state_dict()["state"]
    for i, p in enumerate(model.parameters()):
        big = p.numel() >= MIN_SIZE and p.shape[0] >= world
        assert p.sbp == ((S(0),) if big and stage == 3 else (B,)), (i, p.sbp)
        assert p._compute_sbp == ((B,) if big and stage == 3 else None), (i, p._compute_sbp)
        for key in ("exp_avg", "exp_avg_sq"):
            t = state[i][key]
            assert t.sbp == ((S(0),) if big else (B,)), (i, key, t.sbp)
            if big:
                rows = t.to_local().shape[0]
                assert abs(rows - p.shape[0] / world) < 1, (i, rows)
    if world > 1:
        # Stage 2 reduces the gradients of the sharded parameters straight
        # into each rank's rows; stage 1 all-reduces every gradient. The
        # updated rows are gathered back.
        names = op_names(graph)
        assert ("comm_reduce_scatter" in names) == (stage >= 2) and "comm_all_gather" in names, names
        if stage == 3:
            # Gathered before forward's and again before backward's reads:
            # more gathers than the parameters gathered back after stage 2's update.
            gathers = sum(n == "comm_all_gather" for n in names)
            sharded = sum(p.sbp == (S(0),) for p in model.parameters())
            assert gathers > sharded, (gathers, sharded)

    # The state is an ordinary global checkpoint: saved sharded, it loads
    # into an optimizer without ZeRO and training continues equal.
    box = [tempfile.mkdtemp(prefix="graph_zero_") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    path = os.path.join(box[0], "opt")
    mf.save(opt.state_dict(), path)
    dist.barrier()
    loaded = mf.load(path)
    again = build().to_global(placement=mesh, sbp=B)
    with mf.no_grad():
        for p, q in zip(again.parameters(), model.parameters()):
            p.copy_(q)
    again_opt = make_opt(again)
    again_opt.load_state_dict(loaded)
    again_graph = TrainGraph(again, again_opt, mf.amp.GradScaler(init_scale=scaler.get_scale(), growth_interval=2),
                             None)
    ref2, ref2_opt, _ = reference(range(STEPS + 2))
    for step in (STEPS, STEPS + 1):
        again_graph(*global_batch(step))
    check_params(again, ref2, f"stage {stage}, loaded without ZeRO")
    dist.barrier()
    if rank == 0:
        import shutil
        shutil.rmtree(box[0])

# Without a grad scaler and clipping, with a learning-rate schedule.
ref, _, _ = reference(range(STEPS), scaled=False)
for stage in (1, 2, 3):
    model, _, _, graph = train_graph(stage, scaled=False)
    check_params(model, ref, f"stage {stage} without a scaler")
    if world > 1:
        assert ("comm_reduce_scatter" in op_names(graph)) == (stage >= 2), op_names(graph)

# Gradient accumulation over 4 micro-batches of the global batch (S(0)):
# stage 2 equals one process on the whole batch.
model = build().to_global(placement=mesh, sbp=B)
opt = make_opt(model)
graph = TrainGraph(model, opt, None, 2)
graph.config.set_gradient_accumulation_steps(4)
for step in range(STEPS):
    graph(*global_batch(step, False))
check_params(model, ref, "stage 2, 4 micro-batches")

# A delay before every all-gather and reduce-scatter on rank 1 (the
# prefetched gathers then arrive late): the same bits.
delay = mf._C._distributed._set_test_comm_delay
if rank == 1:
    delay("all_gather", 0.001)
    delay("reduce_scatter", 0.001)
delayed, _, _, delayed_graph = train_graph(3, steps=range(3), scaled=False)
delay("all_gather", 0)
delay("reduce_scatter", 0)
prompt, _, _, _ = train_graph(3, steps=range(3), scaled=False)
for (name, p), (_, q) in zip(delayed.named_parameters(), prompt.named_parameters()):
    np.testing.assert_array_equal(whole(p), whole(q), err_msg=f"delayed collectives: {name}")
if world > 1:
    assert "prefetch_gathers 0" not in delayed_graph._last.passes, delayed_graph._last.passes

# bf16 autocast (enable_amp) on float32 parameters: stage 3 equals the graph
# without ZeRO up to the order of the gradient sums.
def amp_run(zero):
    mf.manual_seed(0)
    model = Net().to_global(placement=mesh, sbp=B)
    opt = make_opt(model)
    graph = TrainGraph(model, opt, None, zero)
    graph.config.enable_amp(True, dtype=mf.bfloat16)
    for step in range(3):
        x, y = data[step]
        graph(mf.tensor(x, dtype=mf.float32).to_global(placement=mesh, sbp=S(0)),
              mf.tensor(y, dtype=mf.float32).to_global(placement=mesh, sbp=S(0)),
              mf.tensor(1.0).to_global(placement=mesh, sbp=B))
    return model


for (name, p), (_, q) in zip(amp_run(3).named_parameters(), amp_run(None).named_parameters()):
    np.testing.assert_allclose(whole(p), whole(q), rtol=1e-4, atol=1e-5, err_msg=f"bf16, stage 3: {name}")

# A parameter without a gradient for one step (the graph compiles that step
# apart): stage 3 equals eager training.
model = build().to_global(placement=mesh, sbp=B)
opt = make_opt(model)
graph = TrainGraph(model, opt, None, 3)
ref_model = build()
ref_opt = make_opt(ref_model)
ref_sched = schedule(ref_opt)
for step in range(5):
    for m in (model, ref_model):
        m.up.bias.requires_grad_(step != 2)
    graph(*global_batch(step, False))
    x, y = data[step]
    ref_opt.zero_grad()
    F.mse_loss(ref_model(mf.tensor(x)), mf.tensor(y)).backward()
    ref_opt.step()
    ref_sched.step()
check_params(model, ref_model, "stage 3, up.bias frozen for one step")

# Stage 3 over 4 micro-batches too.
model = build().to_global(placement=mesh, sbp=B)
opt = make_opt(model)
graph = TrainGraph(model, opt, None, 3)
graph.config.set_gradient_accumulation_steps(4)
for step in range(STEPS):
    graph(*global_batch(step, False))
check_params(model, ref, "stage 3, 4 micro-batches")

# Bad input: a parameter that is not broadcast on the data-parallel axis,
# named; a local model; unknown stages.
if world > 1:
    model = build().to_global(placement=mesh, sbp=B)
    model.shared.weight = mf.nn.Parameter(model.shared.weight.detach().to_global(sbp=S(0)))
    graph = TrainGraph(model, make_opt(model), make_scaler(), 2)
    try:
        graph(*global_batch(0))
        raise AssertionError("a split parameter was accepted")
    except ValueError as e:
        assert "model.shared.weight" in str(e) and "broadcast" in str(e), e
local = build()
graph = TrainGraph(local, make_opt(local), make_scaler(), 1)
try:
    graph(mf.tensor(data[0][0]), mf.tensor(data[0][1]), mf.tensor(1.0, dtype=mf.float64))
    raise AssertionError("a local model was accepted")
except ValueError as e:
    assert "model.up.weight" in str(e) and "local" in str(e), e
for bad in (4, 0, "1", True):
    try:
        mf.nn.Graph().config.enable_zero(True, stage=bad)
        raise AssertionError(f"stage {bad!r} was accepted")
    except ValueError as e:
        assert "stage" in str(e)
print(f"graph zero OK (rank {rank} of {world})", flush=True)
