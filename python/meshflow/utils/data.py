"""meshflow.utils.data: datasets, samplers, collation and the DataLoader.

The API of torch.utils.data. A DataLoader over a C++-backed dataset
(TensorDataset, meshflow.datasets.FashionMNIST / TextDataset, or a Subset of
one) without a collate_fn builds each batch in C++ with one gather per
tensor, on C++ worker threads when num_workers > 0 (the fast path). Any
other dataset runs in Python; num_workers > 0 then prefetches batches on
Python threads (not processes): it pays off when __getitem__ waits on I/O or
runs C++ ops. Either way batches come out in sampler order, and an exception
raised while building a batch is raised again, with its own class, when
that batch is reached. get_worker_info() tells code running in a worker
which one it is (None elsewhere), as in PyTorch.
"""
import bisect
import collections.abc
import itertools
import math
import operator
import threading
import time
import warnings

import meshflow as _mf
from meshflow._C import _profiler
from meshflow._C import data as _data
from meshflow.utils.sampler import (  # noqa: F401  (also meshflow.utils.data's)
    BatchSampler, DistributedSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
    WeightedRandomSampler, _random_seed)

__all__ = [
    "Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset", "random_split",
    "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
    "BatchSampler", "DistributedSampler", "default_collate", "default_convert", "DataLoader", "get_worker_info",
]


# --- datasets -----------------------------------------------------------------------


class Dataset:
    """A map-style dataset: __getitem__(index) and __len__()."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])

    def _cpp_dataset(self):
        """The C++ dataset giving the same examples, or None (see the module docstring)."""
        return None


class IterableDataset(Dataset):
    """A dataset given by iteration (__iter__) rather than by index."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other):
        raise TypeError("IterableDataset does not support '+'")


def _overrides_getitem(dataset, cls):
    return type(dataset).__getitem__ is not cls.__getitem__


class TensorDataset(Dataset):
    """Example i is (t[i] for t in tensors); all tensors share their first dimension."""

    def __init__(self, *tensors):
        self._cpp = _data.TensorDataset(list(tensors))
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self):
        return len(self._cpp)

    def _cpp_dataset(self):
        return None if _overrides_getitem(self, TensorDataset) else self._cpp


class ConcatDataset(Dataset):
    """The examples of several datasets one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise IndexError(f"ConcatDataset: index {index} is out of range for length {len(self)}")
            index += len(self)
        if index >= len(self):
            raise IndexError(f"ConcatDataset: index {index} is out of range for length {len(self)}")
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which > 0 else 0
        return self.datasets[which][index - start]


class Subset(Dataset):
    """The examples of dataset at indices, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)

    def _cpp_dataset(self):
        if _overrides_getitem(self, Subset):
            return None
        base = _cpp_dataset_of(self.dataset)
        if base is None:
            return None
        return _data.Subset(base, [_index_of(i, "Subset") for i in self.indices])


def _cpp_dataset_of(dataset):
    method = getattr(dataset, "_cpp_dataset", None)
    return method() if method is not None else None


def random_split(dataset, lengths, generator=None):
    """Splits dataset into disjoint random Subsets of the given lengths.

    lengths are integers summing to len(dataset), or fractions summing to 1:
    split i then gets floor(len * f) examples and the remainder goes one by
    one to splits 0, 1, ... The permutation comes from generator (the
    default generator when None).
    """
    lengths = list(lengths)
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = []
        for i, fraction in enumerate(lengths):
            if fraction < 0 or fraction > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            counts.append(int(math.floor(n * fraction)))
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.")
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = _mf.randperm(sum(lengths), generator=generator).tolist()
    splits, offset = [], 0
    for length in lengths:
        splits.append(Subset(dataset, order[offset:offset + length]))
        offset += length
    return splits


# --- collation ----------------------------------------------------------------------


def _numpy_kind(obj):
    """'array' for a numpy array, 'scalar' for a numpy number, else None."""
    cls = type(obj)
    if cls.__module__ != "numpy" or cls.__name__ in ("str_", "bytes_", "string_"):
        return None
    return "array" if cls.__name__ in ("ndarray", "memmap") else "scalar"


def _rebuild(like, items):
    """items in a container of like's type when that type takes one, else as given."""
    try:
        return type(like)(items)
    except TypeError:
        return items


def default_convert(data):
    """Turns numpy arrays and numbers into tensors, inside dicts, tuples and lists
    (the collate_fn of a DataLoader with batch_size=None)."""
    if isinstance(data, _mf.Tensor):
        return data
    kind = _numpy_kind(data)
    if kind == "array" and data.dtype.kind in "OSUV":
        return data
    if kind is not None:
        return _mf.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _rebuild(data, {key: default_convert(data[key]) for key in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild(data, [default_convert(d) for d in data])
    return data


def default_collate(batch):
    """Stacks a list of samples into a batch, as torch.utils.data.default_collate.

    Tensors are stacked along a new dim 0; numpy arrays become tensors first;
    floats become a float64 tensor, ints (and bools) an int64 (bool) tensor;
    strings stay a list; dicts, named tuples, tuples and lists are collated
    field by field (a tuple gives a list, as in PyTorch).
    """
    elem = batch[0]
    if isinstance(elem, _mf.Tensor):
        return _mf.stack(list(batch), 0)
    kind = _numpy_kind(elem)
    if kind == "array":
        if elem.dtype.kind in "OSUV":
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                            f"dicts or lists; found numpy array of dtype {elem.dtype}")
        return default_collate([_mf.as_tensor(b) for b in batch])
    if kind == "scalar":
        import numpy
        return _mf.as_tensor(numpy.asarray(batch))
    if isinstance(elem, float):
        return _mf.tensor(batch, dtype=_mf.float64)
    if isinstance(elem, int):
        return _mf.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(samples)) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = [list(samples) for samples in zip(*batch)]
        collated = [default_collate(samples) for samples in transposed]
        return collated if isinstance(elem, tuple) else _rebuild(elem, collated)
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    f"found {type(elem)}")


# --- loading ------------------------------------------------------------------------


class _Batches:
    """The iterator of one DataLoader epoch."""

    def __init__(self, length):
        self._length = length

    def __iter__(self):
        return self

    def __next__(self):
        if not _profiler.enabled():
            return self._next()
        start = _profiler.now_ns()
        try:
            return self._next()
        finally:
            _profiler.add(f"enumerate(DataLoader)#{type(self).__name__}.__next__", "data", start,
                          _profiler.now_ns())

    def __len__(self):
        if self._length is None:
            raise TypeError("this DataLoader's dataset has no len()")
        return self._length

    def close(self):
        """Stops building batches; workers finish the batch in hand and exit."""


class _SerialBatches(_Batches):
    """Builds each batch when it is asked for (num_workers=0)."""

    def __init__(self, tasks, build, length):
        super().__init__(length)
        self._tasks = iter(tasks)
        self._build = build

    def _next(self):
        return self._build(next(self._tasks))


class WorkerInfo:
    """What get_worker_info() returns in a worker: id, num_workers, seed and
    dataset (read-only), as torch.utils.data.WorkerInfo."""

    __initialized = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs.keys())
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {type(self).__name__} objects")
        return super().__setattr__(key, val)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)}' for k in self.__keys)})"


_worker = threading.local()


def get_worker_info():
    """The WorkerInfo of the DataLoader worker running this code, or None
    outside workers, as torch.utils.data.get_worker_info.

    A worker sees it in worker_init_fn, in the dataset's __getitem__ and in
    collate_fn. The sampler, and the iterator of an IterableDataset, run as
    in the main process (None): the workers share one of each (they are
    threads), so sharding an IterableDataset by worker id would drop data;
    the usual `if info is None: everything` branch then gives every sample
    once. seed is the loader's base seed plus the worker id, as in PyTorch;
    the workers share the default generator, so it is not reseeded per
    worker as PyTorch's worker processes are.
    """
    return getattr(_worker, "info", None)


class _HiddenWorkerInfo:
    """Runs a block as outside the workers: get_worker_info() is None in it."""

    def __enter__(self):
        self._saved = getattr(_worker, "info", None)
        _worker.info = None

    def __exit__(self, *exc):
        _worker.info = self._saved


def _run_inits(infos, init_fn):
    """init_fn(id) of every worker on a thread of its own that sees its
    WorkerInfo; raises the error of the lowest worker id that failed."""
    errors = [None] * len(infos)

    def run(i):
        _worker.info = infos[i]
        try:
            init_fn(infos[i].id)
        except BaseException as error:
            errors[i] = error
        finally:
            _worker.info = None

    threads = [threading.Thread(target=run, args=(i,), name=f"DataLoader worker {i}", daemon=True)
               for i in range(len(infos))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error


class _PrefetchState:
    """What the worker threads of _ThreadedBatches share.

    Note [Python batch workers]: task k (the k-th item of tasks, taken under
    the lock so that numbering follows the sampler) is built by whichever
    thread claims it, at most max_ahead tasks past the one the consumer
    waits for. Results wait in a dict until the consumer reaches them, so
    they come out in order. The threads hold this state and never the
    iterator the user holds: dropping that iterator runs its __del__, which
    stops them. Each thread first runs worker_init_fn; no thread claims a
    task before all of them are done, and if one raised, the first next()
    raises its error (the lowest worker id's) and no batch is built.
    """

    def __init__(self, tasks, build, max_ahead, infos, init_fn, timeout, on_ready=None):
        self.tasks = iter(tasks)
        self.build = build
        self.max_ahead = max_ahead
        self.cond = threading.Condition()
        self.results = {}
        self.next_claim = 0
        self.position = 0
        self.end = None  # number of tasks, once they ran out
        self.stopping = False
        self.infos = infos
        self.init_fn = init_fn
        self.inits_left = len(infos) if init_fn is not None else 0
        self.init_errors = {}
        self.timeout = timeout
        self.on_ready = on_ready  # called once every worker_init_fn succeeded

    def work(self, worker):
        _worker.info = self.infos[worker]
        try:
            if self.init_fn is not None and not self._init(worker):
                return
            self._loop()
        finally:
            _worker.info = None

    def _init(self, worker):
        try:
            self.init_fn(self.infos[worker].id)
            error = None
        except BaseException as e:
            error = e
        with self.cond:
            if error is not None:
                self.init_errors[worker] = error
            self.inits_left -= 1
            if self.inits_left == 0 and not self.init_errors and self.on_ready is not None:
                self.on_ready()
            self.cond.notify_all()
            while self.inits_left > 0 and not self.stopping:
                self.cond.wait()
            return not self.init_errors and not self.stopping

    def _loop(self):
        while True:
            with self.cond:
                while not (self.stopping or self.end is not None
                           or self.next_claim < self.position + self.max_ahead):
                    self.cond.wait()
                if self.stopping or self.end is not None:
                    return
                index = self.next_claim
                self.next_claim += 1
                try:
                    with _HiddenWorkerInfo():  # the sampler runs as in the main process
                        task = next(self.tasks)
                except StopIteration:
                    self.end = index
                    self.cond.notify_all()
                    return
                except BaseException as error:  # a failing sampler ends the pass
                    self.end = index + 1
                    self.results[index] = (None, error)
                    self.cond.notify_all()
                    return
            try:
                result = (self.build(task), None)
            except BaseException as error:
                result = (None, error)
            with self.cond:
                self.results[index] = result
                self.cond.notify_all()

    def next(self):
        deadline = None if not self.timeout else time.monotonic() + self.timeout
        with self.cond:
            while self.position not in self.results:
                if self.init_errors and self.inits_left == 0:
                    raise self.init_errors[min(self.init_errors)]
                if self.end is not None and self.position >= self.end:
                    raise StopIteration
                if deadline is None:
                    self.cond.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")
                    self.cond.wait(left)
            batch, error = self.results.pop(self.position)
            self.position += 1
            self.cond.notify_all()
        if error is not None:
            raise error
        return batch

    def stop(self):
        with self.cond:
            self.stopping = True
            self.cond.notify_all()


class _ThreadedBatches(_Batches):
    """Builds batches ahead on len(infos) Python threads, returned in order."""

    def __init__(self, tasks, build, length, infos, prefetch_factor, init_fn=None, timeout=0, on_ready=None):
        super().__init__(length)
        self._state = _PrefetchState(tasks, build, len(infos) * prefetch_factor, infos, init_fn, timeout, on_ready)
        self._threads = [threading.Thread(target=self._state.work, args=(i,), name=f"DataLoader worker {i}",
                                          daemon=True)
                         for i in range(len(infos))]
        for thread in self._threads:
            thread.start()

    def _next(self):
        try:
            return self._state.next()
        except StopIteration:
            self.close()
            raise

    def close(self):
        self._state.stop()
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:
                thread.join()
        self._threads = []

    def __del__(self):
        self.close()


class _FastBatches(_Batches):
    """Batches built by the C++ loader (meshflow._C.data.BatchIterator)."""

    def __init__(self, cpp_dataset, batches, num_workers, prefetch_factor):
        super().__init__(len(batches))
        self._it = _data.BatchIterator(cpp_dataset, batches, num_workers, prefetch_factor)

    def _next(self):
        return next(self._it)

    def close(self):
        self._it = iter(())  # the C++ iterator's destructor stops and joins its workers


class _FailedBatches(_Batches):
    """An epoch whose workers failed to start: next() raises their error."""

    def __init__(self, error, length):
        super().__init__(length)
        self._error = error

    def _next(self):
        raise self._error


def _batches_of(iterable, batch_size, drop_last):
    """Lists of batch_size consecutive items of iterable."""
    it = iter(iterable)
    while True:
        batch = list(itertools.islice(it, batch_size))
        if not batch or (drop_last and len(batch) < batch_size):
            return
        yield batch


def _index_of(i, where):
    """A sample index as an int: ints, integer tensors and NumPy integers;
    anything else (a float, inf) is a TypeError, as list indexing has it."""
    try:
        return operator.index(i)
    except TypeError:
        raise TypeError(f"{where}: sample indices must be integers, got {type(i).__name__} {i!r:.50}") from None


# Workers are threads of this process: far more than any machine's cores is a
# mistake, and starting them would exhaust the process first.
_MAX_WORKERS = 1024
_MAX_PREFETCH = 1 << 16


class DataLoader:
    """Batches of a dataset, as torch.utils.data.DataLoader (PyTorch 1.13's
    arguments, defaults and checks).

    Iterating gives one epoch: with shuffle=True a new permutation drawn from
    generator (an meshflow.Generator; the default generator when None).
    num_workers > 0 builds up to num_workers * prefetch_factor batches ahead
    on threads; batches still come out in sampler order. See the module
    docstring for the C++ fast path.

    Each iteration draws a base seed from generator, as PyTorch does; worker
    i's WorkerInfo (get_worker_info()) has seed base_seed + i, and
    worker_init_fn(i) runs once per worker and epoch (once per loader with
    persistent_workers=True, which keeps the WorkerInfo and so the seeds).
    pin_memory and pin_memory_device are accepted and do nothing (this build
    has only the CPU). multiprocessing_context is checked as PyTorch does and
    otherwise unused, since workers are threads. timeout > 0 bounds the wait
    for a batch from Python workers (RuntimeError past it); fast-path
    batches are in-memory gathers and are not timed.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device=""):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int):
            raise TypeError(f"DataLoader: num_workers must be an int, got {type(num_workers).__name__}")
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable workers.")
        if num_workers > _MAX_WORKERS:
            raise ValueError(f"DataLoader: num_workers={num_workers} is more than the {_MAX_WORKERS} worker threads "
                             "a loader may start")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"DataLoader: timeout must be a number of seconds, got {type(timeout).__name__}")
        if not timeout >= 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified when num_workers > 0 "
                             "(it sets how many batches the workers build ahead).")
        if prefetch_factor is None:
            prefetch_factor = 2
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int):
            raise TypeError(f"DataLoader: prefetch_factor must be an int, got {type(prefetch_factor).__name__}")
        if prefetch_factor < 1 or prefetch_factor > _MAX_PREFETCH:
            raise ValueError(f"prefetch_factor should be a positive integer of at most {_MAX_PREFETCH}, "
                             f"got {prefetch_factor}")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(f"DataLoader: worker_init_fn must be callable, got {type(worker_init_fn).__name__}")
        if not isinstance(pin_memory_device, str):
            raise TypeError(f"DataLoader: pin_memory_device must be a str, got {type(pin_memory_device).__name__}")
        multiprocessing_context = _checked_context(multiprocessing_context, num_workers)
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                                 f"but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, "
                                 f"but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                                 f"but got batch_sampler={batch_sampler}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, "
                                 "sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if not iterable:
            if sampler is None:
                sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            if batch_size is not None and batch_sampler is None:
                batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.generator = generator
        self._auto_collation = batch_sampler is not None or (iterable and batch_size is not None)
        self._custom_collate = collate_fn is not None
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._persistent_infos = None  # the WorkerInfo of persistent workers, once initialised

    def __len__(self):
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)

    def _length_or_none(self):
        try:
            return len(self)
        except TypeError:
            return None

    def _worker_infos(self):
        """(WorkerInfo of each worker, whether worker_init_fn must run): a base
        seed is drawn from generator on every iteration, as PyTorch does (with
        workers or not); persistent workers keep their first ones."""
        if self._persistent_infos is not None:
            return self._persistent_infos, False
        base_seed = _random_seed(self.generator)
        infos = [WorkerInfo(id=i, num_workers=self.num_workers, seed=base_seed + i, dataset=self.dataset)
                 for i in range(self.num_workers)]
        return infos, self.worker_init_fn is not None

    def _initialised(self, infos):
        if self.persistent_workers:
            self._persistent_infos = infos

    def __iter__(self):
        length = self._length_or_none()
        infos, run_init = self._worker_infos()
        if isinstance(self.dataset, IterableDataset):
            samples = iter(self.dataset)
            tasks = samples if self.batch_size is None else _batches_of(samples, self.batch_size, self.drop_last)
            build = self.collate_fn
        elif self.batch_sampler is not None:
            cpp = None if self._custom_collate else _cpp_dataset_of(self.dataset)
            if cpp is not None:
                if isinstance(self.batch_sampler, BatchSampler) and \
                        isinstance(self.sampler, (SequentialSampler, RandomSampler)):
                    batches = list(self.batch_sampler)  # Python ints already
                else:
                    batches = [[_index_of(i, "DataLoader") for i in batch] for batch in self.batch_sampler]
                if run_init:  # the C++ workers run no Python: worker_init_fn runs on threads of its own
                    try:
                        _run_inits(infos, self.worker_init_fn)
                    except BaseException as error:
                        return _FailedBatches(error, length)
                self._initialised(infos)
                return _FastBatches(cpp, batches, self.num_workers, self.prefetch_factor)
            tasks = iter(self.batch_sampler)
            dataset, collate = self.dataset, self.collate_fn

            def build(indices):
                return collate([dataset[i] for i in indices])
        else:
            tasks = iter(self.sampler)
            dataset, convert = self.dataset, self.collate_fn

            def build(index):
                return convert(dataset[index])
        if self.num_workers == 0:
            return _SerialBatches(tasks, build, length)
        if not run_init:
            self._initialised(infos)
        return _ThreadedBatches(tasks, build, length, infos, self.prefetch_factor,
                                self.worker_init_fn if run_init else None, self.timeout,
                                on_ready=lambda: self._initialised(infos))


def _checked_context(context, num_workers):
    """multiprocessing_context after PyTorch's checks (a start method name
    becomes its context)."""
    if context is None:
        return None
    import multiprocessing
    if num_workers == 0:
        raise ValueError(f"multiprocessing_context can only be used with multi-process loading "
                         f"(num_workers > 0), but got num_workers={num_workers}")
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(f"multiprocessing_context option should specify a valid start method in {methods!r}, "
                             f"but got multiprocessing_context={context!r}")
        context = multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(f"multiprocessing_context option should be a valid context object or a string specifying "
                        f"the start method, but got multiprocessing_context={context}")
    return context
