"""meshflow.utils.data samplers (RandomSampler, WeightedRandomSampler,
DistributedSampler), the DataLoader's worker options and get_worker_info,
against torch.utils.data where results are deterministic and by frequency
checks where they are random."""
import collections
import math
import random
import threading
import time

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import meshflow as mf
import meshflow.utils.data as mdata


def gen(seed):
    return mf.Generator().manual_seed(seed)


def chi_square(counts, probabilities, total):
    """Pearson's statistic of observed counts {k: n} against probabilities {k: p}."""
    assert set(counts) <= set(probabilities)
    return sum((counts.get(k, 0) - total * p) ** 2 / (total * p) for k, p in probabilities.items())


# Upper 0.1% points of the chi-square distribution, by degrees of freedom.
CHI2_999 = {3: 16.27, 4: 18.47, 5: 20.52, 9: 27.88, 11: 31.26}


# --- WeightedRandomSampler ------------------------------------------------------------


def test_weighted_sampling_with_replacement_follows_the_weights():
    weights = [1.0, 2.0, 3.0, 0.0, 4.0, 10.0]
    total = 20000
    sampler = mdata.WeightedRandomSampler(weights, total, generator=gen(0))
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == total
    assert all(type(i) is int and 0 <= i < len(weights) for i in drawn)
    counts = collections.Counter(drawn)
    assert 3 not in counts  # a zero weight is never drawn
    s = sum(weights)
    probabilities = {i: w / s for i, w in enumerate(weights) if w > 0}
    assert chi_square(counts, probabilities, total) < CHI2_999[4]


def test_weighted_sampling_without_replacement_follows_sequential_draws():
    """The law of torch.multinomial(replacement=False): each index in turn in
    proportion to the weights not drawn yet."""
    weights = [1.0, 2.0, 3.0, 4.0]
    s = sum(weights)
    probabilities = {(i, j): weights[i] / s * weights[j] / (s - weights[i])
                     for i in range(4) for j in range(4) if i != j}
    sampler = mdata.WeightedRandomSampler(weights, 2, replacement=False, generator=gen(1))
    repeats = 4000
    counts = collections.Counter(tuple(sampler) for _ in range(repeats))
    assert chi_square(counts, probabilities, repeats) < CHI2_999[11]


def test_weighted_sampling_without_replacement_draws_distinct_positive_indices():
    weights = torch.tensor([0.5, 0.0, 2.0, 1e-300, 7.0, 0.0, 3.0], dtype=torch.float64)
    for k in range(1, 6):
        ours = list(mdata.WeightedRandomSampler(weights, k, replacement=False, generator=gen(k)))
        theirs = list(tdata.WeightedRandomSampler(weights, k, replacement=False))
        assert len(ours) == len(theirs) == k and len(set(ours)) == k
        assert not {1, 5} & set(ours)
    # All positive weights: every one is drawn, tiny ones included.
    assert sorted(mdata.WeightedRandomSampler(weights, 5, replacement=False, generator=gen(9))) == [0, 2, 3, 4, 6]


def test_weighted_sampler_accepts_sequences_arrays_and_tensors():
    for weights in ([1, 2, 3], (0.5, 0.25, 0.25), np.array([1.0, 1.0, 2.0]), mf.tensor([1.0, 0.0, 1.0]),
                    torch.tensor([3.0, 1.0, 1.0]), range(1, 4)):
        ours = mdata.WeightedRandomSampler(weights, 7, generator=gen(2))
        theirs = tdata.WeightedRandomSampler(weights if not isinstance(weights, mf.Tensor) else weights.tolist(), 7)
        assert ours.weights.dtype == mf.float64 and tuple(ours.weights.shape) == tuple(theirs.weights.shape)
        assert ours.weights.tolist() == theirs.weights.tolist()
        assert len(list(ours)) == len(ours) == len(theirs) == 7
    assert mdata.WeightedRandomSampler([1.0, 2.0], 3).replacement is True


@pytest.mark.parametrize("kwargs", [{"num_samples": 0}, {"num_samples": -3}, {"num_samples": 2.0},
                                    {"num_samples": True}, {"num_samples": None},
                                    {"num_samples": 2, "replacement": 1}, {"num_samples": 2, "replacement": "no"}])
def test_weighted_sampler_argument_errors_match_torch(kwargs):
    with pytest.raises(ValueError) as theirs:
        tdata.WeightedRandomSampler([1.0, 2.0], **kwargs)
    with pytest.raises(ValueError) as ours:
        mdata.WeightedRandomSampler([1.0, 2.0], **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_weighted_sampler_shape_error_matches_torch():
    for weights in ([[1.0, 2.0], [3.0, 4.0]], 5.0):
        with pytest.raises(ValueError) as theirs:
            tdata.WeightedRandomSampler(weights, 2)
        with pytest.raises(ValueError) as ours:
            mdata.WeightedRandomSampler(weights, 2)
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("weights,replacement,num_samples,match", [
    ([1.0, -0.5, 2.0], True, 3, r"weights\[1\] = -0.5"),
    ([1.0, float("nan")], True, 3, "finite"),
    ([1.0, float("inf")], True, 3, "finite"),
    ([0.0, 0.0, 0.0], True, 3, "all zero"),
    ([0.0, 0.0, 0.0], False, 2, "all zero"),
    ([], True, 3, "empty"),
    ([1.0, 0.0, 2.0], False, 4, "cannot draw num_samples=4 indices without replacement from 3 weights"),
])
def test_weighted_sampler_refuses_bad_weights(weights, replacement, num_samples, match):
    """PyTorch finds these when it samples (a RuntimeError of multinomial);
    meshflow refuses them when the sampler is made."""
    with pytest.raises(RuntimeError):
        list(tdata.WeightedRandomSampler(weights, num_samples, replacement=replacement))
    with pytest.raises(ValueError, match=match):
        mdata.WeightedRandomSampler(weights, num_samples, replacement=replacement)


def test_zero_weights_come_last_without_replacement_as_in_torch():
    weights = [1.0, 0.0, 2.0, 0.0, 0.0, 3.0]
    for seed in range(5):
        ours = list(mdata.WeightedRandomSampler(weights, 6, replacement=False, generator=gen(seed)))
        theirs = list(tdata.WeightedRandomSampler(weights, 6, replacement=False,
                                                  generator=torch.Generator().manual_seed(seed)))
        for drawn in (ours, theirs):
            assert sorted(drawn) == list(range(6))
            assert set(drawn[:3]) == {0, 2, 5} and set(drawn[3:]) == {1, 3, 4}


def test_weighted_sampler_rechecks_changed_weights():
    sampler = mdata.WeightedRandomSampler([1.0, 2.0], 3)
    sampler.weights = mf.tensor([1.0, -1.0], dtype=mf.float64)
    with pytest.raises(ValueError, match="non-negative"):
        list(sampler)


def test_weighted_sampler_is_reproducible_per_generator_and_uses_no_python_random():
    python_state = random.getstate()
    default_state = mf.default_generator.get_state()
    g = gen(5)
    sampler = mdata.WeightedRandomSampler([1, 2, 3, 4], 50, generator=g)
    first, second = list(sampler), list(sampler)
    assert first != second  # the generator advanced
    assert list(mdata.WeightedRandomSampler([1, 2, 3, 4], 50, generator=gen(5))) == first
    assert random.getstate() == python_state
    assert mf.default_generator.get_state() == default_state  # draws came from g alone
    mf.manual_seed(11)
    a = list(mdata.WeightedRandomSampler([1, 2, 3, 4], 30))
    mf.manual_seed(11)
    assert list(mdata.WeightedRandomSampler([1, 2, 3, 4], 30)) == a
    mf.manual_seed(11)
    b = list(mdata.WeightedRandomSampler([1, 2, 3, 4], 3, replacement=False))
    mf.manual_seed(11)
    assert list(mdata.WeightedRandomSampler([1, 2, 3, 4], 3, replacement=False)) == b


@pytest.mark.parametrize("num_workers", [0, 2])
def test_weighted_sampler_in_a_loader(num_workers):
    x = mf.arange(10)
    loader = mdata.DataLoader(mdata.TensorDataset(x), batch_size=4, num_workers=num_workers,
                              sampler=mdata.WeightedRandomSampler([0.0] * 5 + [1.0] * 5, 13, generator=gen(3)))
    batches = [b[0].tolist() for b in loader]
    assert [len(b) for b in batches] == [4, 4, 4, 1] and len(loader) == 4
    assert all(5 <= i < 10 for b in batches for i in b)
    again = mdata.DataLoader(mdata.TensorDataset(x), batch_size=4,
                             sampler=mdata.WeightedRandomSampler([0.0] * 5 + [1.0] * 5, 13, generator=gen(3)))
    assert [b[0].tolist() for b in again] == batches


# --- RandomSampler --------------------------------------------------------------------


@pytest.mark.parametrize("n,replacement,num_samples", [(5, False, None), (5, True, None), (5, False, 3),
                                                        (5, False, 12), (5, True, 40), (1, False, 4), (7, True, 1)])
def test_random_sampler_lengths_and_structure_match_torch(n, replacement, num_samples):
    ours = mdata.RandomSampler(range(n), replacement=replacement, num_samples=num_samples, generator=gen(n))
    theirs = tdata.RandomSampler(range(n), replacement=replacement, num_samples=num_samples,
                                 generator=torch.Generator().manual_seed(n))
    got, want = list(ours), list(theirs)
    assert len(ours) == len(theirs) == len(got) == len(want) == ours.num_samples == theirs.num_samples
    assert all(type(i) is int and 0 <= i < n for i in got)
    if not replacement:
        # whole permutations, then the start of one more (PyTorch's rule)
        for start in range(0, len(got), n):
            assert len(set(got[start:start + n])) == len(got[start:start + n])
            assert len(set(want[start:start + n])) == len(want[start:start + n])


def test_random_sampler_with_replacement_is_uniform():
    sampler = mdata.RandomSampler(range(6), replacement=True, num_samples=30000, generator=gen(4))
    counts = collections.Counter(sampler)
    assert chi_square(counts, {i: 1 / 6 for i in range(6)}, 30000) < CHI2_999[5]


def test_random_sampler_without_replacement_permutes_each_epoch():
    sampler = mdata.RandomSampler(range(20), generator=gen(6))
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == list(range(20)) and first != second
    assert list(mdata.RandomSampler(range(20), generator=gen(6))) == first


def test_random_sampler_without_generator_seeds_from_the_default_generator():
    mf.manual_seed(3)
    a = list(mdata.RandomSampler(range(30))), list(mdata.RandomSampler(range(30), replacement=True))
    mf.manual_seed(3)
    assert (list(mdata.RandomSampler(range(30))), list(mdata.RandomSampler(range(30), replacement=True))) == a
    assert sorted(a[0]) == list(range(30))


def test_random_sampler_num_samples_follows_the_dataset():
    data = [1, 2, 3]
    sampler = mdata.RandomSampler(data)
    data.append(4)
    assert len(sampler) == 4 and sorted(sampler) == [0, 1, 2, 3]


@pytest.mark.parametrize("args,kwargs,error", [
    ((range(4),), {"replacement": 1}, TypeError),
    ((range(4),), {"num_samples": 0}, ValueError),
    ((range(4),), {"num_samples": -2}, ValueError),
    ((range(4),), {"num_samples": 2.5}, ValueError),
    (([],), {}, ValueError),
])
def test_random_sampler_errors_match_torch(args, kwargs, error):
    with pytest.raises(error) as theirs:
        tdata.RandomSampler(*args, **kwargs)
    with pytest.raises(error) as ours:
        mdata.RandomSampler(*args, **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_random_sampler_of_an_empty_source_with_num_samples():
    with pytest.raises(ValueError, match="empty"):
        list(mdata.RandomSampler([], num_samples=3))


# --- DistributedSampler -----------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 5, 10, 12, 13])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_without_shuffle_equals_torch(n, replicas, drop_last):
    data = list(range(n))
    for rank in range(replicas):
        ours = mdata.DistributedSampler(data, num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        theirs = tdata.DistributedSampler(data, num_replicas=replicas, rank=rank, shuffle=False,
                                          drop_last=drop_last)
        assert list(ours) == list(theirs)
        assert len(ours) == len(theirs) == ours.num_samples
        assert ours.total_size == theirs.total_size


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (3, 5, False), (12, 4, False),
                                                  (13, 4, True), (1, 3, False)])
def test_distributed_sampler_shuffle_splits_one_permutation(n, replicas, drop_last):
    data = list(range(n))
    samplers = [mdata.DistributedSampler(data, num_replicas=replicas, rank=r, seed=7, drop_last=drop_last)
                for r in range(replicas)]
    parts = [list(s) for s in samplers]
    torch_lengths = [len(tdata.DistributedSampler(data, num_replicas=replicas, rank=r, drop_last=drop_last))
                     for r in range(replicas)]
    assert [len(p) for p in parts] == [len(s) for s in samplers] == torch_lengths
    # Interleave the ranks back into the padded (or cut) index list.
    total = samplers[0].total_size
    merged = [parts[i % replicas][i // replicas] for i in range(total)]
    if drop_last:
        assert len(set(merged)) == total and set(merged) <= set(data)
    else:
        assert sorted(merged[:n]) == data  # a permutation ...
        padding = total - n                 # ... padded with its own start, as torch pads
        assert merged[n:] == (merged[:n] * math.ceil(padding / n))[:padding]


def test_distributed_sampler_epochs_and_seeds():
    data = list(range(50))
    a = mdata.DistributedSampler(data, num_replicas=2, rank=0)
    b = mdata.DistributedSampler(data, num_replicas=2, rank=1)
    epoch0 = list(a)
    assert list(a) == epoch0  # the same epoch gives the same order
    assert sorted(epoch0 + list(b)) == data
    a.set_epoch(1)
    b.set_epoch(1)
    epoch1 = list(a)
    assert epoch1 != epoch0 and sorted(epoch1 + list(b)) == data
    assert a.epoch == 1 and a.shuffle is True and a.seed == 0 and a.drop_last is False
    other = mdata.DistributedSampler(data, num_replicas=2, rank=0, seed=1)
    assert list(other) != epoch0
    assert list(mdata.DistributedSampler(data, num_replicas=2, rank=0, seed=-1)) != epoch0  # any int seed


def test_distributed_sampler_defaults_come_from_meshflow_distributed():
    sampler = mdata.DistributedSampler(list(range(9)), shuffle=False)
    assert sampler.num_replicas == mf.distributed.get_world_size() == 1
    assert sampler.rank == mf.distributed.get_rank() == 0
    assert list(sampler) == list(range(9))
    with pytest.raises(ValueError, match="Invalid rank 1"):
        mdata.DistributedSampler(list(range(9)), rank=1)  # the world has one rank


def test_distributed_sampler_errors():
    for rank in (3, -1):
        with pytest.raises(ValueError) as theirs:
            tdata.DistributedSampler(range(10), num_replicas=3, rank=rank)
        with pytest.raises(ValueError) as ours:
            mdata.DistributedSampler(range(10), num_replicas=3, rank=rank)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="num_replicas"):
        mdata.DistributedSampler(range(10), num_replicas=0, rank=0)
    with pytest.raises(TypeError, match="rank"):
        mdata.DistributedSampler(range(10), num_replicas=2, rank=0.5)


def test_distributed_sampler_in_a_loader():
    x = mf.arange(11)
    for rank in range(2):
        sampler = mdata.DistributedSampler(mdata.TensorDataset(x), num_replicas=2, rank=rank, shuffle=False)
        got = [b[0].tolist() for b in mdata.DataLoader(mdata.TensorDataset(x), batch_size=4, sampler=sampler)]
        want = [b.tolist() for (b,) in torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.arange(11)), batch_size=4,
            sampler=tdata.DistributedSampler(range(11), num_replicas=2, rank=rank, shuffle=False))]
        assert got == want


# --- DataLoader options -------------------------------------------------------------------


class Numbers(mdata.Dataset):
    """Example i is i, and records which worker built it."""

    def __init__(self, n, delay=0.0):
        self.n, self.delay, self.seen = n, delay, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = mdata.get_worker_info()
        self.seen.append(None if info is None else info.id)
        if self.delay:
            time.sleep(self.delay)
        return i


def test_loader_accepts_torch_options_and_keeps_them():
    ds = Numbers(6)
    kwargs = dict(batch_size=2, pin_memory=True, timeout=5, worker_init_fn=None, generator=gen(0),
                  persistent_workers=True, pin_memory_device="", prefetch_factor=3)
    ours = mdata.DataLoader(ds, num_workers=2, multiprocessing_context="spawn", **kwargs)
    theirs = tdata.DataLoader(list(range(6)), num_workers=2, multiprocessing_context="spawn",
                              **dict(kwargs, generator=torch.Generator()))
    for name in ("pin_memory", "timeout", "persistent_workers", "pin_memory_device", "prefetch_factor",
                 "num_workers", "batch_size"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.multiprocessing_context.get_start_method() == "spawn"
    assert [b.tolist() for b in ours] == [[0, 1], [2, 3], [4, 5]]
    plain = mdata.DataLoader(ds)
    assert (plain.pin_memory, plain.timeout, plain.worker_init_fn, plain.multiprocessing_context,
            plain.persistent_workers, plain.pin_memory_device, plain.prefetch_factor) == \
        (False, 0, None, None, False, "", 2)


@pytest.mark.parametrize("kwargs,error", [
    ({"persistent_workers": True}, ValueError),
    ({"timeout": -1}, ValueError),
    ({"prefetch_factor": 3}, ValueError),
    ({"multiprocessing_context": "fork"}, ValueError),
    ({"num_workers": 2, "multiprocessing_context": "no-such-method"}, ValueError),
    ({"num_workers": 2, "multiprocessing_context": 5}, TypeError),
    ({"num_workers": -1}, ValueError),
])
def test_loader_option_errors_match_torch(kwargs, error):
    with pytest.raises(error):
        tdata.DataLoader(list(range(4)), **kwargs)
    with pytest.raises(error):
        mdata.DataLoader(Numbers(4), **kwargs)


@pytest.mark.parametrize("fast", [False, True])
def test_worker_init_fn_runs_once_per_worker_in_the_worker(fast):
    ds = mdata.TensorDataset(mf.arange(12)) if fast else Numbers(12)
    calls, lock = [], threading.Lock()

    def init(worker_id):
        info = mdata.get_worker_info()
        with lock:
            calls.append((worker_id, info.id, info.num_workers, info.seed, info.dataset is ds,
                          threading.current_thread() is threading.main_thread()))

    loader = mdata.DataLoader(ds, batch_size=3, num_workers=3, worker_init_fn=init, generator=gen(2))
    batches = [b[0].tolist() if fast else b.tolist() for b in loader]
    assert batches == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    calls.sort()
    assert [c[0] for c in calls] == [0, 1, 2] and all(c[0] == c[1] for c in calls)
    assert all(c[2] == 3 and c[4] and not c[5] for c in calls)
    seeds = [c[3] for c in calls]
    assert seeds == [seeds[0], seeds[0] + 1, seeds[0] + 2]  # base_seed + worker_id, as torch
    list(loader)
    assert len(calls) == 6  # once per worker and epoch
    assert mdata.get_worker_info() is None


def test_worker_init_fn_is_not_called_without_workers():
    calls = []
    assert [b.tolist() for b in mdata.DataLoader(Numbers(4), batch_size=2, worker_init_fn=calls.append)] == \
        [[0, 1], [2, 3]]
    assert calls == []
    ds = Numbers(3)
    list(mdata.DataLoader(ds))
    assert ds.seen == [None, None, None]


def test_get_worker_info_in_getitem_and_its_fields():
    ds = Numbers(20, delay=0.001)
    assert [b.tolist() for b in mdata.DataLoader(ds, batch_size=2, num_workers=2)] == \
        [[2 * i, 2 * i + 1] for i in range(10)]
    assert set(ds.seen) <= {0, 1} and None not in ds.seen
    infos = []
    list(mdata.DataLoader(Numbers(2), num_workers=1, worker_init_fn=lambda i: infos.append(mdata.get_worker_info())))
    info = infos[0]
    assert (info.id, info.num_workers) == (0, 1) and isinstance(info.seed, int)
    assert repr(info).startswith("WorkerInfo(id=0, num_workers=1, seed=")
    with pytest.raises(RuntimeError, match="Cannot assign attributes to WorkerInfo objects"):
        info.id = 3


def test_the_sampler_runs_as_in_the_main_process():
    seen = []

    class Watching(mdata.Sampler):
        def __iter__(self):
            for i in range(6):
                seen.append(mdata.get_worker_info())
                yield i

        def __len__(self):
            return 6

    assert [b.tolist() for b in mdata.DataLoader(Numbers(6), batch_size=2, sampler=Watching(), num_workers=2)] == \
        [[0, 1], [2, 3], [4, 5]]
    assert seen == [None] * 6


def test_sharding_iterable_dataset_by_worker_info_gives_every_sample_once():
    class Range(mdata.IterableDataset):
        def __iter__(self):
            info = mdata.get_worker_info()
            if info is None:
                return iter(range(10))
            return iter(range(info.id, 10, info.num_workers))

    for workers in (0, 2):
        got = sorted(v for b in mdata.DataLoader(Range(), batch_size=3, num_workers=workers) for v in b.tolist())
        assert got == list(range(10))


def test_seeds_change_per_epoch_unless_workers_persist():
    for persistent in (False, True):
        recorded = []
        loader = mdata.DataLoader(Numbers(4), batch_size=2, num_workers=2, persistent_workers=persistent,
                                  generator=gen(1), worker_init_fn=lambda i: recorded.append(
                                      mdata.get_worker_info().seed))
        epochs = []
        for _ in range(3):
            list(loader)
            epochs.append(sorted(recorded))
            recorded.clear()
        if persistent:
            assert len(epochs[0]) == 2 and epochs[1] == epochs[2] == []  # worker_init_fn ran once
        else:
            assert all(len(e) == 2 for e in epochs) and epochs[0] != epochs[1]


def test_persistent_workers_keep_their_info():
    seeds = []

    class Seeds(Numbers):
        def __getitem__(self, i):
            seeds.append(mdata.get_worker_info().seed)
            return i

    loader = mdata.DataLoader(Seeds(8), batch_size=2, num_workers=2, persistent_workers=True)
    list(loader)
    first = set(seeds)
    seeds.clear()
    list(loader)
    assert set(seeds) <= first and len(first) <= 2


def test_the_loader_draws_its_base_seed_from_its_generator():
    a, b = gen(4), gen(4)
    list(mdata.DataLoader(Numbers(4), batch_size=2, generator=a))
    assert a.get_state() != b.get_state()  # one draw per epoch, as torch's _base_seed
    list(mdata.DataLoader(Numbers(4), batch_size=2, num_workers=2, generator=b))
    assert a.get_state() == b.get_state()


@pytest.mark.parametrize("fast", [False, True])
def test_a_failing_worker_init_fn_raises_its_error(fast):
    ds = mdata.TensorDataset(mf.arange(6)) if fast else Numbers(6)

    def init(worker_id):
        if worker_id == 1:
            raise KeyError(f"worker {worker_id} cannot start")

    it = iter(mdata.DataLoader(ds, batch_size=2, num_workers=3, worker_init_fn=init))
    with pytest.raises(KeyError, match="worker 1 cannot start"):
        next(it)  # before any batch, as in torch, where the worker's error comes instead of its first batch


def test_timeout_bounds_the_wait_for_a_batch():
    loader = mdata.DataLoader(Numbers(4, delay=0.2), batch_size=1, num_workers=1, timeout=0.02)
    it = iter(loader)
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.02 seconds"):
        next(it)
    it.close()
    fast_enough = mdata.DataLoader(Numbers(4), batch_size=2, num_workers=2, timeout=5)
    assert [b.tolist() for b in fast_enough] == [[0, 1], [2, 3]]


def test_worker_info_is_exported_like_torch():
    assert "get_worker_info" in mdata.__all__ and "WeightedRandomSampler" in mdata.__all__
    assert "DistributedSampler" in mdata.__all__
    assert tdata.get_worker_info() is None and mdata.get_worker_info() is None


def test_a_generator_must_be_a_meshflow_generator():
    with pytest.raises(TypeError, match="generator must be a meshflow.Generator"):
        iter(mdata.DataLoader(Numbers(4), generator=mf.ones(1)))
    with pytest.raises(TypeError, match="generator must be a meshflow.Generator"):
        list(mdata.WeightedRandomSampler([1.0, 2.0], 3, generator="seed"))
