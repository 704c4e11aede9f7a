"""Run under mpirun: global models in graph mode (mf.nn.Graph) give the bits
of the same models run eagerly: 5 training steps with the same seed of a
data-parallel MLP (with and without overlapped communication), a
data-parallel CNN with BatchNorm and Dropout, a tensor-parallel MLP, a tensor-parallel transformer block and, on 4 ranks,
data parallelism over a 2x2 mesh and a 2x2 mesh mixing data and tensor
parallelism (also against one process); a global eval graph; to_global /
to_local inside build(), every boxing transition; and the error of a rank
outside a graph's placement."""
import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from layouts import shard_mlp, shard_transformer_layer, whole

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S, P = mf.sbp.broadcast, mf.sbp.split, mf.sbp.partial_sum
mesh = mf.placement("cpu", list(range(world)))
STEPS = 5


class TrainGraph(mf.nn.Graph):
    def __init__(self, model, opt, loss_fn, overlap):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(opt)
        self.config.overlap_communication = overlap

    def build(self, *batch):
        loss = self.loss_fn(self.model, *batch)
        loss.backward()
        return loss


def compare_training(make_model, make_opt, loss_fn, batches, overlap=True):
    """Trains one copy of the model eagerly and one in a graph; the losses
    and the final parameters and optimizer state must be the same bits."""
    eager = make_model()
    eager_opt = make_opt(eager)
    eager_losses = []
    for batch in batches:
        eager_opt.zero_grad()
        loss = loss_fn(eager, *batch)
        loss.backward()
        eager_opt.step()
        eager_losses.append(whole(loss))
    model = make_model()
    graph_opt = make_opt(model)
    graph = TrainGraph(model, graph_opt, loss_fn, overlap)
    graph_losses = []
    for batch in batches:
        loss = graph(*batch)
        assert loss.is_global and loss.placement == batch[0].placement, loss
        graph_losses.append(whole(loss))
    assert graph.num_compiled == 1
    np.testing.assert_array_equal(graph_losses, eager_losses)
    graph.losses = graph_losses
    for (key, e), (key2, g) in zip(eager.state_dict().items(), model.state_dict().items()):
        assert key == key2 and g.is_global and g.sbp == e.sbp, (key, key2)
        np.testing.assert_array_equal(whole(g), whole(e), err_msg=key)
    # The graph follows optimizer state replaced by load_state_dict (global
    # state tensors, the step counters included).
    graph_opt.load_state_dict(eager_opt.state_dict())
    mf.manual_seed(7)
    eager_opt.zero_grad()
    loss = loss_fn(eager, *batches[0])
    loss.backward()
    eager_opt.step()
    mf.manual_seed(7)
    np.testing.assert_array_equal(whole(graph(*batches[0])), whole(loss))
    for (key, e), g in zip(eager.state_dict().items(), model.state_dict().values()):
        np.testing.assert_array_equal(whole(g), whole(e), err_msg=key)
    return graph


def op_names(graph):
    return graph._last.executable.graph.op_names()


rng = np.random.default_rng(0)

# Data parallel: parameters broadcast, batch split along dim 0; the gradient
# all-reduce is the P -> B boxing before each update.
def mlp(placement, sbp):
    mf.manual_seed(0)
    return mf.nn.Sequential(mf.nn.Linear(32, 64), mf.nn.ReLU(), mf.nn.Linear(64, 10)).to_global(placement, sbp)


def sgd(model):
    return mf.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


def cross_entropy(model, x, y):
    return F.cross_entropy(model(x), y)


dp_batches = [(mf.tensor(rng.standard_normal((16, 32)).astype(np.float32), placement=mesh, sbp=S(0)),
               mf.tensor(rng.integers(0, 10, 16), placement=mesh, sbp=S(0))) for _ in range(STEPS)]
for overlap in (True, False):
    g = compare_training(lambda: mlp(mesh, B), sgd, cross_entropy, dp_batches, overlap)
    # The gradients are all-reduced; on one rank a partial sum is the whole
    # value, and no collective runs.
    assert ("comm_all_reduce" in op_names(g)) == (world > 1), op_names(g)

# Data parallel CNN with BatchNorm (global running statistics updated in
# place) and Dropout (the same Philox counters as eager).
def cnn():
    mf.manual_seed(0)
    return mf.nn.Sequential(mf.nn.Conv2d(2, 4, 3, padding=1), mf.nn.BatchNorm2d(4), mf.nn.ReLU(), mf.nn.Flatten(),
                            mf.nn.Dropout(0.3), mf.nn.Linear(4 * 6 * 6, 5)).to_global(mesh, B)


cnn_batches = [(mf.tensor(rng.standard_normal((8, 2, 6, 6)).astype(np.float32), placement=mesh, sbp=S(0)),
                mf.tensor(rng.integers(0, 5, 8), placement=mesh, sbp=S(0)))] * STEPS
compare_training(cnn, sgd, cross_entropy, cnn_batches)

# Tensor parallel MLP (Megatron): column-parallel weight split(0), row-parallel
# weight split(1); the output is a partial sum.
E = 8


def tp_mlp():
    mf.manual_seed(1)
    return shard_mlp(mf.nn.Sequential(mf.nn.Linear(E, 4 * E), mf.nn.GELU(), mf.nn.Linear(4 * E, E)).to_global(mesh, B))


def adam(model):
    return mf.optim.Adam(model.parameters(), lr=1e-2)


def squares(model, x):
    out = model(x)
    return (out * out).mean()


tp_batches = [(mf.tensor(rng.standard_normal((6, 5, E)).astype(np.float32), placement=mesh, sbp=B),)
              for _ in range(STEPS)]
g = compare_training(tp_mlp, adam, squares, tp_batches)
assert ("comm_all_reduce" in op_names(g)) == (world > 1), op_names(g)


# Tensor-parallel transformer block (causal mask): attention's input
# projection and the first MLP layer column-parallel, the output projection
# and the second MLP layer row-parallel.
class Block(mf.nn.Module):
    def __init__(self):
        super().__init__()
        mf.manual_seed(3)
        self.layer = mf.nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0, activation="gelu", batch_first=True,
                                                   norm_first=True)
        self.register_buffer("mask", mf.triu(mf.full((5, 5), float("-inf")), 1))

    def forward(self, x):
        return self.layer(x, src_mask=self.mask)


def tp_block():
    block = Block().to_global(mesh, B)
    shard_transformer_layer(block.layer)
    return block


def adamw(model):
    return mf.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)


compare_training(tp_block, adamw, squares, tp_batches)

# 2-D: data parallel along mesh axis 0, tensor parallel along mesh axis 1.
if world == 4:
    mesh2 = mf.placement("cpu", [[0, 1], [2, 3]])

    def dp_tp_mlp():
        mf.manual_seed(1)
        block = mf.nn.Sequential(mf.nn.Linear(E, 4 * E), mf.nn.GELU(),
                                 mf.nn.Linear(4 * E, E)).to_global(mesh2, (B, B))
        return shard_mlp(block, lead=(B,))

    batches2 = [(mf.tensor(rng.standard_normal((8, 5, E)).astype(np.float32), placement=mesh2, sbp=(S(0), B)),)
                for _ in range(STEPS)]
    # Data parallel over both mesh axes: the batch split along dim 0 by
    # both (boxing through broadcast), parameters broadcast.
    batches_dp2 = [(mf.tensor(rng.standard_normal((16, 32)).astype(np.float32), placement=mesh2, sbp=(S(0), S(0))),
                    mf.tensor(rng.integers(0, 10, 16), placement=mesh2, sbp=(S(0), S(0)))) for _ in range(STEPS)]
    compare_training(lambda: mlp(mesh2, (B, B)), sgd, cross_entropy, batches_dp2)

    g = compare_training(dp_tp_mlp, sgd, squares, batches2)
    names = op_names(g)
    assert "comm_all_reduce" in names, names
    # The same training on one process (the momentum buffers of the
    # split(1) weight must persist between steps).
    mf.manual_seed(1)
    ref = mf.nn.Sequential(mf.nn.Linear(E, 4 * E), mf.nn.GELU(), mf.nn.Linear(4 * E, E))
    ref_opt = sgd(ref)
    ref_losses = []
    for (x,) in batches2:
        ref_opt.zero_grad()
        loss = squares(ref, mf.tensor(whole(x)))
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    np.testing.assert_allclose(g.losses, ref_losses, rtol=1e-5)


# A global eval graph: data-parallel inference returns the split output.
class Predict(mf.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


model = mlp(mesh, B).eval()
x = dp_batches[0][0]
out = Predict(model)(x)
with mf.no_grad():
    expected = model(x)
assert out.is_global and out.sbp == expected.sbp == (S(0),) and out.shape == expected.shape, (out, expected)
np.testing.assert_array_equal(out.to_local().numpy(), expected.to_local().numpy())


# to_global and to_local inside build(): local inputs, local outputs.
class LocalInOut(mf.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x_local):
        x = x_local.to_global(placement=mesh, sbp=S(0))
        return self.model(x).to_global(sbp=B).to_local()


x_local = dp_batches[1][0].to_local()
out = LocalInOut(model)(x_local)
assert not out.is_global
with mf.no_grad():
    expected = model(x_local.to_global(placement=mesh, sbp=S(0))).to_global(sbp=B).to_local()
np.testing.assert_array_equal(out.numpy(), expected.numpy())
# Each boxing transition inside build(): S -> S all-to-all, P -> S
# reduce-scatter, P -> B all-reduce, S -> B all-gather, B -> S slice and
# S -> P local zeroing give eager's values.
class Boxing(mf.nn.Graph):
    def build(self, x, p):
        gathered = x.to_global(sbp=B)
        return (x.to_global(sbp=S(1)), p.to_global(sbp=S(0)), p.to_global(sbp=B), gathered,
                gathered.to_global(sbp=S(1)), x.to_global(sbp=P))


x = mf.tensor(rng.standard_normal((8, 6)).astype(np.float32), placement=mesh, sbp=S(0))
partial = mf.tensor(rng.standard_normal((8, 6)).astype(np.float32) * (rank + 1)).to_global(placement=mesh, sbp=P)
boxing = Boxing()
got = boxing(x, partial)
expected = boxing.build(x, partial)
for g, e in zip(got, expected):
    assert g.is_global and g.sbp == e.sbp and g.shape == e.shape, (g, e)
    np.testing.assert_array_equal(g.to_local().numpy(), e.to_local().numpy())
    np.testing.assert_array_equal(whole(g), whole(e))
names = op_names(boxing)
for collective in ("comm_all_to_all", "comm_reduce_scatter", "comm_all_reduce", "comm_all_gather"):
    assert (collective in names) == (world > 1), (collective, names)

# A graph over a placement that leaves ranks out: every rank traces the
# whole program and keeps its part (docs/pipeline.md); the others get the
# global result without a local part, as eagerly.
if world > 1:
    first = mf.placement("cpu", [0])
    lone = mlp(first, B).eval()
    x_first = mf.tensor(np.ones((4, 32), np.float32), placement=first, sbp=B)
    out = Predict(lone)(x_first)
    with mf.no_grad():
        expected = lone(x_first)
    assert out.is_global and tuple(out.shape) == (4, 10) and out.placement == first
    if rank == 0:
        np.testing.assert_array_equal(out.to_local().numpy(), expected.to_local().numpy())
print(f"rank {rank}/{world}: graph global OK", flush=True)
