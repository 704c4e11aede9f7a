"""meshflow.one_embedding (docs/embedding.md): MultiTableEmbedding trained
with each optimizer equals nn.Embedding with the same optimizer on dense
gradients (float64, 20 steps, every used row checked), rows start from
values that depend only on their id, and bad input gets clear errors."""
import numpy as np
import pytest

import meshflow as mf
import meshflow.one_embedding as oe

DIM = 5
# Hash ids: large, sparse, negative too; a different set per table.
IDS = [np.array([10**12 + 7, 3, -42, 2**40 + 1, 99]), np.array([5, 6, 123456789012, -1])]


def embedding(dtype=mf.float64, seed=0, normal=False, path="/tmp/meshflow_one_embedding_test", dim=DIM):
    init = oe.make_normal_initializer(0.0, 0.1) if normal else oe.make_uniform_initializer(-0.2, 0.3)
    return oe.MultiTableEmbedding("test", dim, dtype, mf.int64, [oe.make_table_options(init) for _ in IDS],
                                  oe.make_device_mem_store_options(str(path), capacity=64), seed=seed)


def batches(steps, rows=12, seed=0):
    """(ids (rows, 2), dense indices per table) per step; every id of each
    table appears in every step (so sparse and dense updates agree)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        cols, dense = [], []
        for ids in IDS:
            pick = np.concatenate([np.arange(len(ids)), rng.integers(0, len(ids), rows - len(ids))])
            rng.shuffle(pick)
            cols.append(ids[pick])
            dense.append(pick)
        out.append((np.stack(cols, 1), dense))
    return out


OPTIMIZERS = [
    (mf.optim.SGD, dict(lr=0.1)),
    (mf.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    (mf.optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.1, nesterov=False, maximize=True)),
    (mf.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    (mf.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.001)),
    (mf.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.01)),
    (mf.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    (oe.Ftrl, dict(lr=0.1, weight_decay=0.01, lambda1=0.001, lambda2=0.01, beta=0.5)),
    (oe.Ftrl, dict(lr=0.05, lr_power=-0.7, initial_accumulator_value=0.5)),
]


@pytest.mark.parametrize("cached", [False, True], ids=["memory", "cached"])
@pytest.mark.parametrize("opt_cls,options", OPTIMIZERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_sparse_updates_equal_dense_embedding(opt_cls, options, cached, tmp_path):
    """cached: the rows live in a file behind a cache just large enough for
    one lookup (evictions every step are in
    test_cached_store_trains_as_the_memory_store)."""
    mf.manual_seed(0)
    sparse = embedding(path=tmp_path)
    if cached:
        tables = [oe.make_table_options(oe.make_uniform_initializer(-0.2, 0.3)) for _ in IDS]
        sparse = oe.MultiTableEmbedding("cached", DIM, mf.float64, mf.int64, tables, oe.make_cached_ssd_store_options(
            9 * 3 * DIM * 8 / 2 ** 20, tmp_path))
    head = mf.nn.Linear(2 * DIM, 1).double()
    # The dense model: one nn.Embedding per table, starting from the same rows.
    dense = [mf.nn.Embedding(len(ids), DIM).double() for ids in IDS]
    with mf.no_grad():
        for f, (table, ids) in enumerate(zip(dense, IDS)):
            cols = np.zeros((len(ids), len(IDS)), dtype=np.int64)
            cols[:, f] = ids
            table.weight.copy_(sparse.peek(mf.tensor(cols))[:, f])
    dense_head = mf.nn.Linear(2 * DIM, 1).double()
    dense_head.load_state_dict(head.state_dict())
    opt = opt_cls(list(sparse.parameters()) + list(head.parameters()), **options)
    dense_opt = opt_cls([p for t in dense for p in t.parameters()] + list(dense_head.parameters()), **options)
    for ids, picks in batches(20):
        out = sparse(mf.tensor(ids))
        loss = (head(out.reshape(len(ids), -1)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        dense_out = mf.stack([t(mf.tensor(p)) for t, p in zip(dense, picks)], 1)
        dense_loss = (dense_head(dense_out.reshape(len(ids), -1)) ** 2).mean()
        dense_opt.zero_grad()
        dense_loss.backward()
        dense_opt.step()
        np.testing.assert_allclose(loss.item(), dense_loss.item(), rtol=1e-10)
    for f, (table, ids) in enumerate(zip(dense, IDS)):
        cols = np.zeros((len(ids), len(IDS)), dtype=np.int64)
        cols[:, f] = ids
        np.testing.assert_allclose(sparse.peek(mf.tensor(cols))[:, f].numpy(), table.weight.detach().numpy(),
                                   rtol=1e-10, atol=1e-12)
    assert sparse.num_rows == sum(len(ids) for ids in IDS)


def test_ftrl_follows_its_formula():
    """oe.Ftrl on a dense parameter against the formula in numpy."""
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((3, 4))
    options = dict(lr=0.1, weight_decay=0.05, lr_power=-0.6, initial_accumulator_value=0.2, lambda1=0.02,
                   lambda2=0.1, beta=0.3)
    p = mf.nn.Parameter(mf.tensor(w0))
    opt = oe.Ftrl([p], **options)
    w, n, z = w0.copy(), np.full_like(w0, 0.2), np.zeros_like(w0)
    for _ in range(5):
        grad = rng.standard_normal(w0.shape)
        p.grad = mf.tensor(grad)
        opt.step()
        g = grad + 0.05 * w
        n_new = n + g * g
        sigma = (n_new ** 0.6 - n ** 0.6) / 0.1
        z = z + g - sigma * w
        n = n_new
        w = np.where(np.abs(z) <= 0.02, 0.0, (np.sign(z) * 0.02 - z) / ((0.3 + n ** 0.6) / 0.1 + 0.1))
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-12, atol=1e-14)


def test_rows_start_from_their_id_alone():
    ids = mf.tensor([[5, 6], [10**12 + 7, -1], [5, 123456789012]])
    a, b = embedding(), embedding()
    first = a(ids).detach()
    b(mf.tensor([[99, -1]]))  # another order of first lookups
    np.testing.assert_array_equal(b(ids).detach().numpy(), first.numpy())
    np.testing.assert_array_equal(embedding().peek(ids).numpy(), first.numpy())
    assert not np.array_equal(embedding(seed=1).peek(ids).numpy(), first.numpy())
    values = embedding().peek(mf.tensor(np.arange(2000).reshape(1000, 2))).numpy()
    assert values.min() >= -0.2 and values.max() < 0.3 and abs(values.mean() - 0.05) < 0.01
    normal = embedding(normal=True).peek(mf.tensor(np.arange(4000).reshape(2000, 2))).numpy()
    assert abs(normal.mean()) < 0.01 and abs(normal.std() - 0.1) < 0.01
    # Repeated ids in one batch share a row and sum their gradients.
    e = embedding()
    opt = mf.optim.SGD(e.parameters(), lr=1.0)
    out = e(mf.tensor([[5, 6], [5, 6]]))
    out.sum().backward()
    before = e.peek(mf.tensor([[5, 6]]))
    opt.step()
    np.testing.assert_allclose(e.peek(mf.tensor([[5, 6]])).numpy(), before.numpy() - 2.0)


def test_float32_rows_and_schedulers():
    e = embedding(dtype=mf.float32)
    opt = mf.optim.SGD(e.parameters(), lr=1.0)
    sched = mf.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ids = mf.tensor([[3, 5]])
    start = e.peek(ids)
    for _ in range(3):
        opt.zero_grad()
        e(ids).sum().backward()
        opt.step()
        sched.step()
    assert e(ids).dtype == mf.float32
    np.testing.assert_allclose(e.peek(ids).numpy(), start.numpy() - (1 + 0.5 + 0.25), rtol=1e-6)
    # zero_grad drops the pending gradient: a step after it changes nothing.
    e(ids).sum().backward()
    opt.zero_grad()
    before = e.peek(ids)
    opt.step()
    np.testing.assert_array_equal(e.peek(ids).numpy(), before.numpy())


def test_grad_scaler_unscales_and_skips_sparse_gradients():
    e = embedding()
    head = mf.nn.Linear(2 * DIM, 1).double()
    opt = mf.optim.SGD(list(e.parameters()) + list(head.parameters()), lr=0.1)
    scaler = mf.amp.GradScaler(init_scale=1024.0)
    ref = embedding()
    ref_head = mf.nn.Linear(2 * DIM, 1).double()
    ref_head.load_state_dict(head.state_dict())
    ref_opt = mf.optim.SGD(list(ref.parameters()) + list(ref_head.parameters()), lr=0.1)
    ids = mf.tensor([[3, 5], [99, 6], [3, -1]])
    factor = [1.0]
    for value in (1.0, float("inf")):
        factor[0] = value
        opt.zero_grad()
        out = e(ids)
        out.register_hook(lambda g: g * factor[0])
        scaler.scale((head(out.reshape(3, -1)) ** 2).mean()).backward()
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 512.0
    ref_opt.zero_grad()
    (ref_head(ref(ids).reshape(3, -1)) ** 2).mean().backward()
    ref_opt.step()  # the one step that was not skipped
    np.testing.assert_allclose(e.peek(ids).numpy(), ref.peek(ids).numpy(), rtol=1e-12)
    np.testing.assert_allclose(head.weight.detach().numpy(), ref_head.weight.detach().numpy(), rtol=1e-12)


def test_snapshot_round_trip_restores_rows_and_optimizer_state(tmp_path):
    ids = [mf.tensor(b[0]) for b in batches(6)]

    def train(e, opt, steps):
        for x in steps:
            opt.zero_grad()
            (e(x) ** 2).sum().backward()
            opt.step()

    a = embedding(path=tmp_path)
    opt_a = mf.optim.Adam(a.parameters(), lr=0.05)
    train(a, opt_a, ids[:3])
    a.save_snapshot("model")
    train(a, opt_a, ids[3:])
    b = embedding(path=tmp_path, seed=5)  # another initialisation: everything comes from the snapshot
    opt_b = mf.optim.Adam(b.parameters(), lr=0.05)
    b.load_snapshot("model")
    assert b.num_rows == a.num_rows
    train(b, opt_b, ids[3:])
    every = mf.tensor(np.stack([np.resize(IDS[0], 5), np.resize(IDS[1], 5)], 1))
    np.testing.assert_allclose(b.peek(every).numpy(), a.peek(every).numpy(), rtol=1e-12)
    a.save_snapshot("model")  # replacing it keeps one directory
    assert len([d for d in (tmp_path / "snapshots").iterdir() if d.is_dir()]) == 1
    with pytest.raises(ValueError, match="no snapshot 'other'"):
        b.load_snapshot("other")
    with pytest.raises(ValueError, match="has embedding_dim 5, this embedding 3"):
        embedding(path=tmp_path, dim=3).load_snapshot("model")
    with pytest.raises(ValueError, match="a snapshot name is a non-empty file name"):
        a.save_snapshot("../x")


def test_cached_store_matches_a_dictionary():
    """Random lookups and updates through a 4-row cache over a file against
    a dictionary model, every value of every row checked."""
    import tempfile
    rng = np.random.default_rng(9)
    with tempfile.TemporaryDirectory() as d:
        row_bytes = 3 * 8
        cached = mf._C._one_embedding.TableSet(3, mf.float64, [("uniform", -1.0, 1.0)] * 2, 7, 4 * row_bytes,
                                               f"{d}/rows")
        fresh = mf._C._one_embedding.TableSet(3, mf.float64, [("uniform", -1.0, 1.0)] * 2, 7)  # initial values
        model = {}
        keys = [(int(i), t) for i in rng.integers(-10**12, 10**12, 12) for t in (0, 1)]
        for _ in range(300):
            pick = [keys[k] for k in rng.choice(len(keys), rng.integers(1, 5), replace=False)]
            ids, tables = mf.tensor([k[0] for k in pick]), mf.tensor([k[1] for k in pick])
            for k in pick:
                if k not in model:
                    model[k] = fresh.peek_keys(mf.tensor([k[0]]), mf.tensor([k[1]]))[0].numpy().copy()
            got = cached.lookup_keys(ids, tables).numpy()
            np.testing.assert_array_equal(got, np.stack([model[k] for k in pick]))
            if rng.random() < 0.5:  # a put: plain SGD with lr 1 subtracts the gradient
                grad = rng.standard_normal((len(pick), 3))
                cached.accumulate_key_gradients(ids, tables, mf.tensor(grad))
                cached.apply("sgd", {"lr": 1.0})
                for k, g in zip(pick, grad):
                    model[k] = model[k] - g
        assert cached.num_rows == len(model)
        ids, tables, rows = cached.export_rows()
        for i, t, r in zip(ids.tolist(), tables.tolist(), rows.numpy()):
            np.testing.assert_array_equal(r, model[(i, t)])


def test_cached_store_trains_as_the_memory_store(tmp_path):
    """A cache of 10 rows under 18 distinct rows: evictions every step; 20
    Adam steps equal the in-memory store, and a snapshot round trip works."""
    mem = embedding(path=tmp_path / "m")
    tables = [oe.make_table_options(oe.make_uniform_initializer(-0.2, 0.3)) for _ in IDS]
    row_mb = 3 * DIM * 8 / 2 ** 20
    cached = oe.MultiTableEmbedding("test", DIM, mf.float64, mf.int64, tables,
                                    oe.make_cached_ssd_store_options(10 * row_mb, tmp_path / "c"))
    assert (tmp_path / "c" / "store" / "test.rank0.rows").exists()
    more = [np.concatenate([ids, ids + 1]) for ids in IDS]  # 18 distinct rows over all steps
    opt_m, opt_c = mf.optim.Adam(mem.parameters(), lr=0.05), mf.optim.Adam(cached.parameters(), lr=0.05)
    rng = np.random.default_rng(2)
    for step in range(20):
        ids = mf.tensor(np.stack([rng.choice(m, 4) for m in more], 1))  # at most 8 distinct ids a step
        for e, opt in ((mem, opt_m), (cached, opt_c)):
            opt.zero_grad()
            (e(ids) ** 2).sum().backward()
            opt.step()
    every = mf.tensor(np.stack([np.resize(m, 10) for m in more], 1))
    np.testing.assert_allclose(cached.peek(every).numpy(), mem.peek(every).numpy(), rtol=1e-12)
    assert cached.num_rows == mem.num_rows
    with pytest.raises(ValueError, match="the cache holds 10 rows, fewer than the 12 distinct ids of one lookup"):
        cached(mf.tensor(np.stack([np.arange(6), np.arange(6)], 1)))
    cached.save_snapshot("s")
    options = oe.make_cached_ssd_store_options(10 * row_mb, tmp_path / "c")
    with pytest.raises(ValueError, match="is in use by another embedding"):
        oe.MultiTableEmbedding("test", DIM, mf.float64, mf.int64, tables, options)
    del cached, opt_c, e, opt
    import gc
    gc.collect()
    again = oe.MultiTableEmbedding("test", DIM, mf.float64, mf.int64, tables, options, seed=4)
    again.load_snapshot("s")
    np.testing.assert_allclose(again.peek(every).numpy(), mem.peek(every).numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="cache_budget_mb must be a positive number"):
        oe.make_cached_ssd_store_options(0, tmp_path)


@pytest.mark.parametrize("mode,weighted", [("sum", False), ("mean", False), ("sum", True)])
def test_bag_form_pools_rows_and_their_gradients(mode, weighted):
    rng = np.random.default_rng(5)
    batch, num = 3, len(IDS)
    sizes = rng.integers(0, 4, batch * num)  # empty bags too
    ids = np.concatenate([rng.choice(IDS[k % num], size) for k, size in enumerate(sizes)]).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    bags = np.repeat(np.arange(batch * num), sizes)
    weights = rng.standard_normal(len(ids)) if weighted else np.ones(len(ids))
    e = embedding()
    opt = mf.optim.SGD(e.parameters(), lr=1.0)
    rows = e._tables.peek_keys(mf.tensor(ids), mf.tensor(bags % num)).numpy()
    expected = np.zeros((batch * num, DIM))
    np.add.at(expected, bags, rows * weights[:, None])
    if mode == "mean":
        expected /= np.maximum(sizes, 1)[:, None]
    out = e(mf.tensor(ids), offsets=mf.tensor(starts), mode=mode,
            per_sample_weights=mf.tensor(weights) if weighted else None)
    np.testing.assert_allclose(out.detach().numpy(), expected.reshape(batch, num, DIM), rtol=1e-12)
    w = rng.standard_normal((batch, num, DIM))
    (out * mf.tensor(w)).sum().backward()
    opt.step()
    grads = w.reshape(-1, DIM)[bags] * weights[:, None]
    if mode == "mean":
        grads /= np.maximum(sizes, 1)[bags][:, None]
    want = {}
    for i, t, g, r in zip(ids, bags % num, grads, rows):
        want.setdefault((i, t), r.copy())
        want[(i, t)] -= g
    for (i, t), r in want.items():
        np.testing.assert_allclose(e._tables.peek_keys(mf.tensor([i]), mf.tensor([t]))[0].numpy(), r, rtol=1e-12)
    # The last offset may be given (include_last_offset), as nn.EmbeddingBag takes it.
    again = e(mf.tensor(ids), offsets=mf.tensor(np.append(starts, len(ids))), mode=mode,
              per_sample_weights=mf.tensor(weights) if weighted else None)
    assert tuple(again.shape) == (batch, num, DIM)
    with pytest.raises(ValueError, match="offsets must hold batch \\* 2 bag starts"):
        e(mf.tensor(ids), offsets=mf.tensor(starts[:-1]))
    with pytest.raises(ValueError, match="offsets must start at 0, never decrease"):
        e(mf.tensor(ids), offsets=mf.tensor(starts[::-1].copy()))


@pytest.mark.parametrize("accumulation", [1, 2])
def test_graph_mode_equals_eager(accumulation):
    """An mf.nn.Graph step (lookup, accumulation and the fused update are
    ops in the plan) trains as eager steps do, with gradient accumulation
    and a learning-rate schedule."""
    def make():
        e = embedding()
        mf.manual_seed(3)
        head = mf.nn.Linear(2 * DIM, 1).double()
        opt = mf.optim.Adam(list(e.parameters()) + list(head.parameters()), lr=0.05)
        return e, head, opt, mf.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    e, head, opt, sched = make()
    g_e, g_head, g_opt, g_sched = make()

    class Step(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.e, self.head = g_e, g_head
            self.add_optimizer(g_opt, lr_sch=g_sched)
            self.config.set_gradient_accumulation_steps(accumulation)

        def build(self, ids):
            loss = (self.head(self.e(ids).reshape(ids.shape[0], -1)) ** 2).mean()
            loss.backward()
            return loss

    step = Step()
    for ids, _ in batches(6, rows=8):
        x = mf.tensor(ids)
        g_loss = step(x)
        opt.zero_grad()
        losses = []
        for part in x.chunk(accumulation, 0):
            loss = (head(e(part).reshape(part.shape[0], -1)) ** 2).mean()
            (loss / accumulation).backward()
            losses.append(loss.item())
        opt.step()
        sched.step()
        np.testing.assert_allclose(g_loss.item(), np.mean(losses), rtol=1e-10)
    every = mf.tensor(np.stack([np.resize(IDS[0], 5), np.resize(IDS[1], 5)], 1))
    np.testing.assert_allclose(g_e.peek(every).numpy(), e.peek(every).numpy(), rtol=1e-10)
    np.testing.assert_allclose(g_head.weight.detach().numpy(), head.weight.detach().numpy(), rtol=1e-10)
    names = step._last.executable.graph.op_names()
    assert "one_embedding_lookup" in names and "one_embedding_apply_" in names
    assert names.count("one_embedding_accumulate") == accumulation


def test_graph_grad_scaler_skips_steps_with_sparse_infs():
    """A graph grad scaler unscales and checks the embedding's gradients in
    the plan (one_embedding_unscale): equal to eager GradScaler steps, and
    a step whose sparse gradient holds an inf is skipped."""
    def make():
        e = embedding()
        mf.manual_seed(3)
        head = mf.nn.Linear(2 * DIM, 1).double()
        return e, head, mf.optim.Adam(list(e.parameters()) + list(head.parameters()), lr=0.05)

    e, head, opt = make()
    g_e, g_head, g_opt = make()
    scaler, g_scaler = mf.amp.GradScaler(init_scale=1024.0), mf.amp.GradScaler(init_scale=1024.0)

    class Step(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.e, self.head = g_e, g_head
            self.add_optimizer(g_opt)
            self.set_grad_scaler(g_scaler)

        def build(self, ids, factor):
            out = self.e(ids)
            out.register_hook(lambda g: g * factor)
            loss = (self.head(out.reshape(ids.shape[0], -1)) ** 2).mean()
            loss.backward()
            return loss

    step = Step()
    for k, (ids, _) in enumerate(batches(4, rows=8)):
        value = float("inf") if k == 2 else 1.0
        x = mf.tensor(ids)
        step(x, mf.tensor(value, dtype=mf.float64))
        opt.zero_grad()
        out = e(x)
        out.register_hook(lambda g, v=value: g * v)
        scaler.scale((head(out.reshape(8, -1)) ** 2).mean()).backward()
        scaler.step(opt)
        scaler.update()
        assert g_scaler.get_scale() == scaler.get_scale()
    assert scaler.get_scale() == 512.0
    every = mf.tensor(np.stack([np.resize(IDS[0], 5), np.resize(IDS[1], 5)], 1))
    np.testing.assert_allclose(g_e.peek(every).numpy(), e.peek(every).numpy(), rtol=1e-10)
    np.testing.assert_allclose(g_head.weight.detach().numpy(), head.weight.detach().numpy(), rtol=1e-10)
    assert "one_embedding_unscale_" in step._last.executable.graph.op_names()


def test_bad_input():
    e = embedding()
    with pytest.raises(TypeError, match="ids must be an integer tensor"):
        e(mf.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"ids must have shape \(batch, 2\)"):
        e(mf.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="tables must be a non-empty list"):
        oe.MultiTableEmbedding("x", 4, mf.float32, mf.int64, [], oe.make_device_mem_store_options("/tmp", 8))
    with pytest.raises(TypeError, match="key_type"):
        oe.MultiTableEmbedding("x", 4, mf.float32, mf.float32, [oe.make_table_options(
            oe.make_uniform_initializer(0, 1))], oe.make_device_mem_store_options("/tmp", 8))
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        oe.MultiTableEmbedding("x", 4, mf.int64, mf.int64, [oe.make_table_options(
            oe.make_uniform_initializer(0, 1))], oe.make_device_mem_store_options("/tmp", 8))
    with pytest.raises(ValueError, match="low must be <= high"):
        oe.make_uniform_initializer(1, 0)
    with pytest.raises(ValueError, match="persistent path '/proc/none' cannot be made"):
        embedding(path="/proc/none")
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        oe.make_device_mem_store_options("/tmp", 0)
    opt = mf.optim.RMSprop(e.parameters(), lr=0.1)
    e(mf.tensor([[1, 2]])).sum().backward()
    with pytest.raises(ValueError, match="RMSprop has no sparse update"):
        opt.step()
    # One rule for an embedding's whole training.
    e2 = embedding()
    for cls in (mf.optim.Adam, mf.optim.Adagrad):
        opt = cls(e2.parameters(), lr=0.1)
        e2(mf.tensor([[1, 2]])).sum().backward()
        if cls is mf.optim.Adam:
            opt.step()
        else:
            with pytest.raises(ValueError, match="state of another optimizer"):
                opt.step()


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_sharded_over_ranks_equals_one_process(ranks):
    import shutil
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed")
    from test_global import mpirun
    assert mpirun(ranks, "one_embedding_sharded.py").count("one embedding sharded OK") == ranks


@pytest.mark.parametrize("saved,loaded", [(2, 1), (1, 4), (4, 2)])
def test_snapshot_saved_on_n_ranks_loads_on_m(tmp_path, saved, loaded):
    import shutil
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed")
    from test_global import mpirun
    assert mpirun(saved, "one_embedding_snapshot.py", "save", str(tmp_path)).count("snapshot save OK") == saved
    assert mpirun(loaded, "one_embedding_snapshot.py", "load", str(tmp_path)).count("snapshot load OK") == loaded


def test_a_crash_during_a_snapshot_keeps_the_previous_one(tmp_path):
    """kill -9 of the whole job while a second snapshot is written: the
    first one still loads (and trains on as if nothing happened)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed")
    from test_global import SCRIPTS, mpirun
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__))))
    job = subprocess.Popen(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
                            os.path.join(SCRIPTS, "one_embedding_snapshot.py"), "crash", str(tmp_path)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        deadline, seen, output = time.monotonic() + 120, 0, []
        while seen < 2 and time.monotonic() < deadline:
            line = job.stdout.readline()
            if not line and job.poll() is not None:
                break
            output.append(line)
            seen += line.count("saving again")  # the ranks' lines may share one
        assert seen == 2, "the job did not reach its second snapshot:\n" + "".join(output[-40:])
        # Both ranks wrote their files and wait before the manifest and the pointer.
        for _ in range(200):
            partial = [d for d in (tmp_path / "snapshots").iterdir() if d.is_dir()]
            if len(partial) == 2 and all(len(list(d.glob("rank*.safetensors"))) == 2 for d in partial):
                break
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert mpirun(1, "one_embedding_snapshot.py", "load", str(tmp_path)).count("snapshot load OK") == 1
