"""meshflow.utils.data and meshflow.datasets against torch.utils.data: batch
boundaries, ordering, collation, workers, errors, and the C++ fast path."""
import collections
import gc
import os
import threading
import time

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import meshflow as mf
import meshflow.utils.data as mdata
from meshflow.datasets import FashionMNIST, TextDataset

FASHION_ROOT = "/usr/share/datasets/fashion-mnist"


def plain(obj):
    """A batch as nested Python values with dtype names, for either library."""
    if isinstance(obj, (mf.Tensor, torch.Tensor)):
        return ("tensor", str(obj.dtype).split(".")[-1], tuple(obj.shape), obj.tolist())
    if isinstance(obj, dict):
        return {key: plain(value) for key, value in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return (type(obj).__name__,) + tuple(plain(v) for v in obj)
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [plain(v) for v in obj])
    return obj


def epoch(loader):
    return [plain(batch) for batch in loader]


def numbered(n):
    x = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32)
    y = np.arange(n)
    return (mdata.TensorDataset(mf.tensor(x), mf.tensor(y)), tdata.TensorDataset(torch.tensor(x), torch.tensor(y)))


# --- TensorDataset, Subset, random_split --------------------------------------------


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True), (5, True), (20, False),
                                                  (20, True)])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_tensor_dataset_batches_match_torch(batch_size, drop_last, num_workers):
    ours, theirs = numbered(10)
    loader = mdata.DataLoader(ours, batch_size=batch_size, drop_last=drop_last, num_workers=num_workers)
    expected = epoch(tdata.DataLoader(theirs, batch_size=batch_size, drop_last=drop_last))
    assert len(loader) == len(expected)
    assert epoch(loader) == expected
    assert epoch(loader) == expected  # a second epoch is the same without shuffle


def test_tensor_dataset_getitem_and_errors():
    ours, theirs = numbered(4)
    assert len(ours) == 4
    assert plain(ours[2]) == plain(theirs[2]) and plain(ours[-1]) == plain(theirs[-1])
    with pytest.raises(RuntimeError, match="size mismatch"):
        mdata.TensorDataset(mf.zeros(3), mf.zeros(4))


def test_subset_and_concat():
    ours, theirs = numbered(10)
    ours_sub, theirs_sub = mdata.Subset(ours, [7, 2, 9]), tdata.Subset(theirs, [7, 2, 9])
    assert len(ours_sub) == 3 and plain(ours_sub[1]) == plain(theirs_sub[1])
    for num_workers in (0, 2):
        assert epoch(mdata.DataLoader(ours_sub, batch_size=2, num_workers=num_workers)) == \
            epoch(tdata.DataLoader(theirs_sub, batch_size=2))
    both = ours + ours_sub
    assert isinstance(both, mdata.ConcatDataset) and len(both) == 13
    assert plain(both[11]) == plain(ours[2]) and plain(both[-1]) == plain(ours[9])
    with pytest.raises(IndexError):
        both[13]
    assert epoch(mdata.DataLoader(both, batch_size=4)) == epoch(tdata.DataLoader(theirs + theirs_sub, batch_size=4))


def test_random_split_lengths_like_torch():
    ours, theirs = numbered(10)
    for lengths in ([3, 7], [0.25, 0.25, 0.5], [1 / 3, 1 / 3, 1 / 3], [0.1] * 10):
        got = mdata.random_split(ours, lengths, generator=mf.Generator().manual_seed(0))
        want = tdata.random_split(theirs, lengths, generator=torch.Generator().manual_seed(0))
        assert [len(s) for s in got] == [len(s) for s in want]
        covered = sorted(i for s in got for i in s.indices)
        assert covered == list(range(10))
    with pytest.raises(ValueError):
        mdata.random_split(ours, [3, 8])


def test_random_split_is_deterministic_per_seed():
    ours, _ = numbered(50)
    a = mdata.random_split(ours, [20, 30], generator=mf.Generator().manual_seed(1))
    b = mdata.random_split(ours, [20, 30], generator=mf.Generator().manual_seed(1))
    c = mdata.random_split(ours, [20, 30], generator=mf.Generator().manual_seed(2))
    assert [s.indices for s in a] == [s.indices for s in b]
    assert a[0].indices != c[0].indices
    assert a[0].indices != list(range(20))


# --- shuffling and generators -------------------------------------------------------


def labels(loader):
    return [int(v) for batch in loader for v in batch[1].tolist()]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_shuffle_covers_each_epoch_once_with_new_orders(num_workers):
    ours, _ = numbered(23)
    loader = mdata.DataLoader(ours, batch_size=5, shuffle=True, num_workers=num_workers,
                              generator=mf.Generator().manual_seed(3))
    first, second = labels(loader), labels(loader)
    assert sorted(first) == sorted(second) == list(range(23))
    assert first != second and first != list(range(23))
    again = mdata.DataLoader(ours, batch_size=5, shuffle=True, generator=mf.Generator().manual_seed(3))
    assert labels(again) == first and labels(again) == second


def test_shuffle_without_generator_uses_the_default_generator():
    ours, _ = numbered(30)
    mf.manual_seed(5)
    first = labels(mdata.DataLoader(ours, batch_size=4, shuffle=True))
    mf.manual_seed(5)
    assert labels(mdata.DataLoader(ours, batch_size=4, shuffle=True)) == first


def test_generator_api():
    g = mf.Generator()
    assert g.manual_seed(7) is g and g.initial_seed() == 7
    a = mf.randperm(20, generator=g).tolist()
    state = g.get_state()
    b = mf.randperm(20, generator=g).tolist()
    g.set_state(state)
    assert mf.randperm(20, generator=g).tolist() == b and a != b
    assert mf.randperm(20, generator=mf.Generator().manual_seed(7)).tolist() == a


# --- collation ----------------------------------------------------------------------


Point = collections.namedtuple("Point", ["x", "y"])


def collate_cases():
    return {
        "dict": [{"a": i, "b": float(i) / 2, "name": f"n{i}"} for i in range(3)],
        "tuple": [(i, [i, i + 1], True) for i in range(3)],
        "namedtuple": [Point(i, 2.5 * i) for i in range(3)],
        "nested": [{"pair": (i, {"deep": [float(i)]})} for i in range(2)],
        "numpy": [np.arange(4, dtype=np.int32) + i for i in range(3)],
        "numpy_scalar": [np.float32(i) / 4 for i in range(3)],
        "list": [[i, 2 * i] for i in range(3)],
    }


@pytest.mark.parametrize("case", list(collate_cases()))
def test_default_collate_matches_torch(case):
    samples = collate_cases()[case]
    assert plain(mdata.default_collate(samples)) == plain(tdata.default_collate(samples))


def test_default_collate_of_tensors_and_errors():
    samples = [mf.full((2, 3), float(i)) for i in range(4)]
    batch = mdata.default_collate(samples)
    assert tuple(batch.shape) == (4, 2, 3) and batch[3, 1, 2].item() == 3.0
    with pytest.raises(RuntimeError, match="equal size"):
        mdata.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError):
        mdata.default_collate([object(), object()])


class DictDataset(mdata.Dataset):
    """Python samples of mixed types, slow enough for workers to overlap."""

    def __init__(self, n, fail_at=None, delay=0.0):
        self.n, self.fail_at, self.delay = n, fail_at, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"sample {i} is missing")
        if self.delay:
            time.sleep(self.delay)
        return {"index": i, "value": float(i) * 0.5, "pair": (i, -i)}


class TorchDictDataset(tdata.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"index": i, "value": float(i) * 0.5, "pair": (i, -i)}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_python_dataset_matches_torch(num_workers, drop_last):
    loader = mdata.DataLoader(DictDataset(11, delay=0.001), batch_size=4, num_workers=num_workers,
                              drop_last=drop_last)
    expected = epoch(tdata.DataLoader(TorchDictDataset(11), batch_size=4, drop_last=drop_last))
    assert len(loader) == len(expected)
    assert epoch(loader) == expected


def test_workers_keep_order_whatever_the_timing():
    class Jittery(mdata.Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            time.sleep(0.004 if i % 3 == 0 else 0.0)
            return i

    got = [batch.tolist() for batch in mdata.DataLoader(Jittery(), batch_size=2, num_workers=4, prefetch_factor=3)]
    assert got == [[i, i + 1] for i in range(0, 40, 2)]


def test_custom_collate_and_batch_sampler():
    ours, theirs = numbered(9)

    def collate(samples):
        return sum(int(s[1]) for s in samples)

    assert list(mdata.DataLoader(ours, batch_size=4, collate_fn=collate, num_workers=2)) == \
        list(tdata.DataLoader(theirs, batch_size=4, collate_fn=collate))
    batches = [[8, 0], [3], [1, 2, 4]]
    assert epoch(mdata.DataLoader(ours, batch_sampler=batches)) == \
        epoch(tdata.DataLoader(theirs, batch_sampler=batches))
    sampler = [5, 1, 1, 7]
    assert epoch(mdata.DataLoader(ours, sampler=sampler, batch_size=3)) == \
        epoch(tdata.DataLoader(theirs, sampler=sampler, batch_size=3))


def test_batch_size_none_converts_samples():
    ours, theirs = numbered(3)
    assert epoch(mdata.DataLoader(ours, batch_size=None)) == epoch(tdata.DataLoader(theirs, batch_size=None))
    arrays = [np.arange(3) * i for i in range(2)]
    assert epoch(mdata.DataLoader(arrays, batch_size=None)) == epoch(tdata.DataLoader(arrays, batch_size=None))


# --- exceptions and shutdown --------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_exception_in_getitem_propagates_with_its_class(num_workers):
    it = iter(mdata.DataLoader(DictDataset(20, fail_at=9), batch_size=4, num_workers=num_workers))
    assert next(it)["index"].tolist() == [0, 1, 2, 3]
    assert next(it)["index"].tolist() == [4, 5, 6, 7]
    with pytest.raises(KeyError, match="sample 9 is missing"):
        next(it)


def test_fast_path_error_is_an_index_error():
    ours, _ = numbered(5)
    with pytest.raises(IndexError):
        list(mdata.DataLoader(ours, sampler=[0, 7], batch_size=2))


@pytest.mark.parametrize("fast", [False, True])
def test_early_break_stops_workers(fast):
    gc.collect()  # iterators of earlier tests kept alive by tracebacks stop now, not during the count
    before = threading.active_count()
    if fast:
        dataset, _ = numbered(100000)
    else:
        dataset = DictDataset(100000, delay=0.001)
    loader = mdata.DataLoader(dataset, batch_size=2, num_workers=3, prefetch_factor=2)
    start = time.monotonic()
    for _ in range(3):
        for i, _batch in enumerate(loader):
            if i == 2:
                break
    assert time.monotonic() - start < 10
    for _ in range(100):  # the last iterator is freed when the loop variable goes
        if threading.active_count() == before:
            break
        time.sleep(0.01)
    assert threading.active_count() == before


def test_bad_arguments():
    ours, _ = numbered(4)
    with pytest.raises(ValueError):
        mdata.DataLoader(ours, num_workers=-1)
    with pytest.raises(ValueError):
        mdata.DataLoader(ours, prefetch_factor=2)  # only with workers
    with pytest.raises(ValueError):
        mdata.DataLoader(ours, sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError):
        mdata.DataLoader(ours, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError):
        mdata.DataLoader(ours, batch_size=None, drop_last=True)


# --- IterableDataset ------------------------------------------------------------------


class Squares(mdata.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter([(i, i * i) for i in range(self.n)])

    def __len__(self):
        return self.n


class TorchSquares(tdata.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter([(i, i * i) for i in range(self.n)])

    def __len__(self):
        return self.n


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_dataset_batches(num_workers, drop_last):
    loader = mdata.DataLoader(Squares(10), batch_size=4, drop_last=drop_last, num_workers=num_workers)
    expected = epoch(tdata.DataLoader(TorchSquares(10), batch_size=4, drop_last=drop_last))
    assert len(loader) == len(expected)
    assert epoch(loader) == expected
    with pytest.raises(ValueError):
        mdata.DataLoader(Squares(3), shuffle=True)


# --- meshflow.datasets ----------------------------------------------------------------


needs_fashion = pytest.mark.skipif(not os.path.isdir(FASHION_ROOT),
                                   reason="Fashion-MNIST is absent (Debian package dataset-fashion-mnist)")


@needs_fashion
def test_fashion_mnist():
    train, test = FashionMNIST(), FashionMNIST(train=False)
    assert len(train) == 60000 and len(test) == 10000
    image, label = train[0]
    assert tuple(image.shape) == (1, 28, 28) and image.dtype == mf.float32 and isinstance(label, int)
    assert 0 <= label < 10 and len(FashionMNIST.classes) == 10
    assert float(train.data.min()) >= 0.0 and float(train.data.max()) == 1.0
    assert train.targets.dtype == mf.int64 and int(train.targets.max()) == 9


@needs_fashion
def test_fashion_mnist_fast_path_equals_python_path():
    subset = mdata.Subset(FashionMNIST(train=False), list(range(0, 10000, 37)))
    fast = mdata.DataLoader(subset, batch_size=64, shuffle=True, num_workers=2, generator=mf.Generator().manual_seed(4))
    slow = mdata.DataLoader(subset, batch_size=64, shuffle=True, collate_fn=mdata.default_collate,
                            generator=mf.Generator().manual_seed(4))
    fast_batches, slow_batches = list(fast), list(slow)
    assert len(fast_batches) == len(slow_batches) == len(fast)
    for a, b in zip(fast_batches, slow_batches):
        assert isinstance(a, list) and len(a) == 2
        assert tuple(a[0].shape) == tuple(b[0].shape) and a[0].dtype == mf.float32
        assert a[1].dtype == b[1].dtype == mf.int64
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


@needs_fashion
def test_fashion_mnist_transform():
    ds = FashionMNIST(train=False, transform=lambda image: image * 2, target_transform=lambda label: label + 100)
    image, label = ds[5]
    assert float(image.max()) == 2.0 and label >= 100
    batch = next(iter(mdata.DataLoader(ds, batch_size=3)))
    assert float(batch[0].max()) == 2.0 and min(batch[1].tolist()) >= 100


def test_fashion_mnist_missing_folder():
    with pytest.raises(RuntimeError, match="dataset-fashion-mnist"):
        FashionMNIST(root="/nonexistent/fashion")


@pytest.mark.parametrize("mode", ["char", "byte"])
def test_text_dataset(tmp_path, mode):
    text = "héllo wörld ☃ and more text"
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    ds = TextDataset(path, block_size=4, mode=mode)
    raw = text if mode == "char" else text.encode("utf-8")
    assert len(ds) == len(raw) - 4
    assert ds.vocab_size == (len(set(text)) if mode == "char" else 256)
    assert ds.decode(ds.encode(raw)) == raw
    x, y = ds[3]
    assert x.dtype == mf.int64 and ds.decode(x) == raw[3:7] and ds.decode(y) == raw[4:8]
    x, y = ds[-1]
    assert ds.decode(y) == raw[-4:]
    if mode == "char":
        assert ds.encode(" ").tolist() == [0] and ds.encode("☃").tolist() == [ds.vocab_size - 1]
        with pytest.raises(ValueError):
            ds.encode("Z")
    fast = list(mdata.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2,
                                 generator=mf.Generator().manual_seed(0)))
    slow = list(mdata.DataLoader(ds, batch_size=5, shuffle=True, collate_fn=mdata.default_collate,
                                 generator=mf.Generator().manual_seed(0)))
    assert [plain(b) for b in fast] == [plain(b) for b in slow]
    assert tuple(fast[0][0].shape) == (5, 4)
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_text_dataset_folder(tmp_path):
    (tmp_path / "b").write_text("two ")
    (tmp_path / "a").write_text("one ")
    (tmp_path / "a.dat").write_bytes(b"\x00\x01index")
    ds = TextDataset(tmp_path, block_size=2, mode="byte")
    assert ds.decode(ds.tokens) == b"one two "


# --- which path runs ------------------------------------------------------------------


def test_fast_path_only_for_unchanged_cpp_datasets():
    ours, _ = numbered(6)

    class Doubled(mdata.TensorDataset):
        def __getitem__(self, index):
            x, y = super().__getitem__(index)
            return x, y * 2

    assert type(iter(mdata.DataLoader(ours, batch_size=2))).__name__ == "_FastBatches"
    assert type(iter(mdata.DataLoader(mdata.Subset(ours, [1, 2]), batch_size=2))).__name__ == "_FastBatches"
    assert type(iter(mdata.DataLoader(ours, batch_size=2, collate_fn=mdata.default_collate))).__name__ != \
        "_FastBatches"
    doubled = Doubled(*ours.tensors)
    for num_workers in (0, 2):
        assert labels(mdata.DataLoader(doubled, batch_size=4, num_workers=num_workers)) == [0, 2, 4, 6, 8, 10]
        assert labels(mdata.DataLoader(mdata.Subset(doubled, [5, 1]), batch_size=4)) == [10, 2]


def test_cpp_data_loader_binding():
    ours, _ = numbered(10)
    loader = mf._C.data.DataLoader(ours._cpp, batch_size=3, shuffle=True, drop_last=True, num_workers=2, seed=8)
    assert len(loader) == 3
    first = [v for batch in loader for v in batch[1].tolist()]
    state = loader.generator.get_state()
    second = [v for batch in loader for v in batch[1].tolist()]
    assert len(first) == 9 and len(set(first)) == 9 and first != second
    other = mf._C.data.DataLoader(ours._cpp, batch_size=3, shuffle=True, drop_last=True)
    other.generator.set_state(state)
    assert [v for batch in other for v in batch[1].tolist()] == second


def test_failing_sampler_ends_the_epoch_with_its_exception():
    def sampler():
        yield 0
        yield 1
        raise LookupError("sampler broke")

    class Sized:
        def __iter__(self):
            return sampler()

        def __len__(self):
            return 4

    it = iter(mdata.DataLoader(DictDataset(4), sampler=Sized(), batch_size=1, num_workers=2))
    assert next(it)["index"].tolist() == [0] and next(it)["index"].tolist() == [1]
    with pytest.raises(LookupError, match="sampler broke"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
