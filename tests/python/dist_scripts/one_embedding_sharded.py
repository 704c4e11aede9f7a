"""Run under mpirun (1, 2 or 4 ranks): a MultiTableEmbedding sharded over
the ranks (Note [Sharded lookups] in python/meshflow/one_embedding.py),
each rank training on its part of every batch, equals nn.Embedding tables
trained by one process on the whole batches, with SGD (with and without
momentum), Adagrad, Adam, AdamW and FTRL, in float64 over 10 steps: losses,
and every row on its owner; also with each rank's step a compiled graph,
and a graph composing the embedding (global ids, split over the ranks) with
a data-parallel global dense layer."""
import numpy as np

import meshflow as mf
import meshflow.one_embedding as oe

rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
DIM, BATCH = 4, 16  # the whole batch of a step, split over the ranks
ROWS = BATCH // world
IDS = [np.array([10**12 + 7, 3, -42, 2**40 + 1, 99, 7, 8]), np.array([5, 6, 123456789012, -1, 77])]


def batches(steps, seed=0):
    """Per step, the whole batch (BATCH, 2) as dense indices per table;
    every id of every table is in every step's whole batch."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        picks = []
        for ids in IDS:
            pick = np.concatenate([np.arange(len(ids)), rng.integers(0, len(ids), BATCH - len(ids))])
            rng.shuffle(pick)
            picks.append(pick)
        out.append(np.stack(picks, 1))
    return out


W = mf.tensor(np.linspace(-1, 1, DIM))


def make_embedding(path="/tmp/meshflow_one_embedding_sharded", seed=3):
    tables = [oe.make_table_options(oe.make_uniform_initializer(-0.3, 0.3)) for _ in IDS]
    return oe.MultiTableEmbedding("sharded", DIM, mf.float64, mf.int64, tables,
                                  oe.make_device_mem_store_options(path, 64), seed=seed)


def dense_tables(emb):
    """One process's nn.Embedding per table, starting from emb's initial rows."""
    dense = [mf.nn.Embedding(len(ids), DIM).double() for ids in IDS]
    with mf.no_grad():
        for f, (table, ids) in enumerate(zip(dense, IDS)):
            table.weight.copy_(emb._tables.peek_keys(mf.tensor(ids), mf.full((len(ids),), f, dtype=mf.int64)))
    return dense


def train(emb, opt, steps, dense=None, dense_opt=None):
    """The given steps of batches(): this rank's part on emb; the whole
    batch on the dense tables, losses compared."""
    for picks in steps:
        if emb is not None:
            ids = np.stack([IDS[f][picks[:, f]] for f in range(len(IDS))], 1)
            mine = slice(rank * ROWS, (rank + 1) * ROWS)
            loss = ((emb(mf.tensor(ids[mine])) * W).sum(-1) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            mean_loss = loss.detach().reshape(1).clone()
            mf.distributed.all_reduce(mean_loss)
        if dense is not None:
            dense_out = mf.stack([t(mf.tensor(picks[:, f])) for f, t in enumerate(dense)], 1)
            dense_loss = ((dense_out * W).sum(-1) ** 2).mean()
            dense_opt.zero_grad()
            dense_loss.backward()
            dense_opt.step()
            if emb is not None:
                np.testing.assert_allclose(mean_loss.item() / world, dense_loss.item(), rtol=1e-10)


def check_rows(emb, dense, what):
    """Every row on its owner equals the dense tables'; returns how many
    rows this rank owns."""
    owned = 0
    for f, (table, ids) in enumerate(zip(dense, IDS)):
        for k, i in enumerate(ids):
            if oe._owner(np.array([i]), np.array([f]), world)[0] != rank:
                continue
            owned += 1
            row = emb._tables.peek_keys(mf.tensor([int(i)]), mf.tensor([f]))[0]
            np.testing.assert_allclose(row.numpy(), table.weight[k].detach().numpy(), rtol=1e-10, atol=1e-12,
                                       err_msg=f"{what} table {f} id {i}")
    assert emb.num_rows == owned, (emb.num_rows, owned)  # each rank keeps only its rows
    total = mf.tensor([owned])
    mf.distributed.all_reduce(total)
    assert total.item() == sum(len(ids) for ids in IDS)


def run(opt_cls, options, steps=10):
    emb = make_embedding()
    dense = dense_tables(emb)
    train(emb, opt_cls(emb.parameters(), **options), batches(steps), dense, opt_cls([t.weight for t in dense],
                                                                                     **options))
    check_rows(emb, dense, opt_cls.__name__)


def run_graph(opt_cls, options, steps=6):
    """The same training as run(), each rank's step a compiled mf.nn.Graph
    (the sharded lookups and accumulations are collective ops in the plan)."""
    emb = make_embedding(seed=5)
    dense = dense_tables(emb)
    opt = opt_cls(emb.parameters(), **options)

    class Step(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.emb = emb
            self.add_optimizer(opt)

        def build(self, ids):
            loss = ((self.emb(ids) * W).sum(-1) ** 2).mean()
            loss.backward()
            return loss

    step, dense_opt = Step(), opt_cls([t.weight for t in dense], **options)
    for picks in batches(steps, seed=1):
        ids = np.stack([IDS[f][picks[:, f]] for f in range(len(IDS))], 1)
        loss = step(mf.tensor(ids[rank * ROWS:(rank + 1) * ROWS])).reshape(1).clone()
        mf.distributed.all_reduce(loss)
        train(None, None, [picks], dense, dense_opt)
    names = step._last.executable.graph.op_names()
    sharded = "one_embedding_sharded_lookup" in names and "one_embedding_sharded_accumulate" in names
    assert sharded == (world > 1), names
    check_rows(emb, dense, f"graph {opt_cls.__name__}")


def run_graph_with_global_dense(steps=5, lr=0.05):
    """A graph step composing the sharded embedding with a data-parallel
    global dense layer (its input split S(0) over the ranks, its weight
    broadcast): rows and the dense weight equal one process's dense model."""
    emb = make_embedding(seed=8)
    dense = dense_tables(emb)
    mf.manual_seed(4)
    head = mf.nn.Linear(len(IDS) * DIM, 1).double()
    ref_head = mf.nn.Linear(len(IDS) * DIM, 1).double()
    ref_head.load_state_dict(head.state_dict())
    mesh = mf.placement("cpu", list(range(world)))
    head = head.to_global(mesh, mf.sbp.broadcast)
    opt = mf.optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=lr)
    ref_opt = mf.optim.SGD([t.weight for t in dense] + list(ref_head.parameters()), lr=lr)

    class Step(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.emb, self.head = emb, head
            self.add_optimizer(opt)

        def build(self, ids):  # global ids, split over the ranks: the rows come back global too
            x = self.emb(ids).reshape(ids.shape[0], -1)
            loss = (self.head(x) ** 2).mean()
            loss.backward()
            return loss

    step = Step()
    for picks in batches(steps, seed=2):
        ids = np.stack([IDS[f][picks[:, f]] for f in range(len(IDS))], 1)
        loss = step(mf.tensor(ids[rank * ROWS:(rank + 1) * ROWS]).to_global(placement=mesh, sbp=mf.sbp.split(0)))
        ref_out = mf.stack([t(mf.tensor(picks[:, f])) for f, t in enumerate(dense)], 1).reshape(BATCH, -1)
        ref_loss = (ref_head(ref_out) ** 2).mean()
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        np.testing.assert_allclose(loss.to_global(sbp=mf.sbp.broadcast).to_local().item(), ref_loss.item(),
                                   rtol=1e-10)
    np.testing.assert_allclose(head.weight.to_local().detach().numpy(), ref_head.weight.detach().numpy(),
                               rtol=1e-10)
    check_rows(emb, dense, "graph with a global dense layer")


if __name__ == "__main__":
    run_graph_with_global_dense()
    run_graph(mf.optim.Adam, dict(lr=0.05))
    run(mf.optim.SGD, dict(lr=0.1))
    run(mf.optim.SGD, dict(lr=0.1, momentum=0.9))
    run(mf.optim.Adagrad, dict(lr=0.2, initial_accumulator_value=0.1))
    run(mf.optim.Adam, dict(lr=0.05, weight_decay=0.01))
    run(mf.optim.AdamW, dict(lr=0.05, weight_decay=0.1))
    run(oe.Ftrl, dict(lr=0.1, lambda1=0.001))
    print(f"rank {rank}/{world}: one embedding sharded OK", flush=True)
