"""The samplers of meshflow.utils.data (torch.utils.data.sampler): the
order in which a DataLoader reads a dataset, drawn from meshflow's
generators. Re-exported by meshflow.utils.data, where users import them."""
import bisect
import itertools
import math

import meshflow as _mf

# --- random draws from a generator ----------------------------------------------------

def _draw(generator, factory):
    """factory(generator) for a generator argument that may be None (the
    default generator); anything else than a meshflow.Generator is refused."""
    if generator is not None and not isinstance(generator, _mf.Generator):
        raise TypeError(f"generator must be a meshflow.Generator or None, got {type(generator).__name__}")
    return factory(generator)


def _random_seed(generator=None):
    """A seed in [0, 2**63 - 1) drawn from generator (the default one when None),
    as torch.empty((), dtype=torch.int64).random_(generator=generator)."""
    return int(_draw(generator, lambda g: _mf.randint(0, 2 ** 63 - 1, (1,), generator=g)).tolist()[0])


# --- samplers -----------------------------------------------------------------------


class Sampler:
    """Iterates over dataset indices (or, for a batch sampler, lists of them)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """Indices of data_source in random order, as torch.utils.data.RandomSampler.

    Without replacement each iteration gives a new permutation, and
    num_samples > len(data_source) gives whole permutations one after the
    other and the start of one more (PyTorch's rule). With replacement it
    draws num_samples indices uniformly and independently. num_samples
    defaults to len(data_source) (read at each use: the dataset may grow).
    Draws come from generator (a meshflow.Generator); when it is None each
    iteration seeds a new generator from the default one, as PyTorch does.
    """

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        if self._num_samples is None:
            return len(self.data_source)
        return self._num_samples

    # Indices drawn per call with replacement: lazy enough for a huge
    # num_samples, few enough calls for a fast epoch.
    _CHUNK = 1 << 16

    def __iter__(self):
        n = len(self.data_source)
        num_samples = self.num_samples
        if n == 0:
            raise ValueError("RandomSampler: cannot sample from an empty data_source")
        generator = self.generator
        if generator is None:
            generator = _mf.Generator().manual_seed(_random_seed())
        if self.replacement:
            for start in range(0, num_samples, self._CHUNK):
                size = min(self._CHUNK, num_samples - start)
                yield from _draw(generator, lambda g: _mf.randint(0, n, (size,), generator=g)).tolist()
        else:
            for _ in range(num_samples // n):
                yield from _mf.randperm(n, generator=generator).tolist()
            yield from _mf.randperm(n, generator=generator).tolist()[:num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a new random order on each iteration."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        order = _mf.randperm(len(self.indices), generator=self.generator).tolist()
        return (self.indices[i] for i in order)

    def __len__(self):
        return len(self.indices)


def _weights_tensor(weights):
    """weights as a float64 tensor (torch.as_tensor(weights, dtype=torch.double))."""
    if isinstance(weights, _mf.Tensor):
        return weights.detach().to(_mf.float64)
    try:
        return _mf.as_tensor(weights, dtype=_mf.float64)
    except TypeError:
        if hasattr(weights, "tolist") and not isinstance(weights, (str, bytes)):  # a torch tensor, say
            return _mf.as_tensor(weights.tolist(), dtype=_mf.float64)
        raise


class WeightedRandomSampler(Sampler):
    """num_samples indices of [0, len(weights)) drawn with probabilities
    proportional to weights, as torch.utils.data.WeightedRandomSampler.

    weights must be a 1-D sequence (or tensor) of finite, non-negative
    numbers, not all zero; without replacement num_samples may not exceed
    len(weights), and zero-weight indices come (in random order) only after
    every positive one, as in PyTorch. PyTorch reports bad weights when it
    samples (a RuntimeError of torch.multinomial); meshflow raises a
    ValueError when the sampler is made, and again at iteration if
    self.weights was changed since.

    Note [Weighted sampling]: meshflow has no multinomial op. With
    replacement: one uniform u per sample and the index i with
    cdf[i-1] <= u * total < cdf[i] (cumulative sum and bisection; a zero
    weight is never chosen). Without replacement: the exponential-key form
    of the Gumbel-top-k trick (Efraimidis and Spirakis), key_i = E_i / w_i
    with E_i ~ Exp(1) (compared as logarithms), and the num_samples smallest
    keys in increasing order, which has the law of drawing one index at a
    time in proportion to the weights left, as torch.multinomial does. Each
    iteration draws from generator (a meshflow.Generator, or the default
    generator when None), never from
    Python's random module. The values differ from PyTorch's, whose
    generator is another algorithm.
    """

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        weights_tensor = _weights_tensor(weights)
        if len(weights_tensor.shape) != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                             f"{tuple(weights_tensor.shape)}")
        self.weights = weights_tensor
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator
        self._checked_weights()

    def _checked_weights(self):
        """self.weights as a list of floats, after the checks of the class docstring."""
        weights = self.weights
        if not isinstance(weights, _mf.Tensor) or weights.dim() != 1:
            weights = _weights_tensor(weights)
            if weights.dim() != 1:
                raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                                 f"{tuple(weights.shape)}")
        values = weights.tolist()
        if not values:
            raise ValueError("WeightedRandomSampler: weights is empty; there is nothing to sample")
        for i, w in enumerate(values):
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"WeightedRandomSampler: weights must be finite and non-negative, "
                                 f"but weights[{i}] = {w}")
        positive = sum(1 for w in values if w > 0)
        if positive == 0:
            raise ValueError("WeightedRandomSampler: the weights are all zero (their sum must be positive)")
        if not self.replacement and self.num_samples > len(values):
            raise ValueError(f"WeightedRandomSampler: cannot draw num_samples={self.num_samples} indices without "
                             f"replacement from {len(values)} weights")
        return values

    def __iter__(self):
        values = self._checked_weights()
        n, k = len(values), self.num_samples
        if self.replacement:
            top = max(values)
            scaled = [w / top for w in values]  # a sum that cannot overflow
            cdf = list(itertools.accumulate(scaled))
            total = cdf[-1]
            last = max(i for i, w in enumerate(scaled) if w > 0)
            uniforms = _draw(self.generator, lambda g: _mf.rand(k, dtype=_mf.float64, generator=g)).tolist()
            # u * total rounds up to total at worst: the last positive weight takes it.
            indices = [min(i, last) for i in map(bisect.bisect_right, itertools.repeat(cdf),
                                                 (u * total for u in uniforms))]
        else:
            weights = _mf.tensor(values, dtype=_mf.float64)
            uniforms = _draw(self.generator, lambda g: _mf.rand(n, dtype=_mf.float64, generator=g))
            exponentials = -_mf.log1p(-uniforms)  # finite: uniforms < 1
            positive = weights > 0
            # log(E / w): at most log(37) - log(5e-324) < 750 for any positive weight. Zero weights come
            # after all of them, in random order, as in torch.multinomial.
            keys = _mf.where(positive, _mf.log(exponentials) - _mf.log(_mf.where(positive, weights, 1.0)),
                             exponentials + 2000.0)
            indices = _mf.topk(keys, k, largest=False, sorted=True).indices.tolist()
        yield from indices

    def __len__(self):
        return self.num_samples


class DistributedSampler(Sampler):
    """The part of dataset's indices that one of num_replicas processes reads,
    as torch.utils.data.distributed.DistributedSampler.

    num_replicas and rank default to meshflow.distributed's world size and
    rank. Every rank gets num_samples indices: without drop_last the index
    list is padded with its own start up to a multiple of num_replicas,
    with drop_last its tail is cut; rank r takes every num_replicas-th
    index from r. shuffle=False keeps dataset order, so the lists equal
    PyTorch's. shuffle=True permutes the indices with a meshflow.Generator
    seeded with seed + epoch (the same permutation on every rank; call
    set_epoch(epoch) before each epoch for a new one); the permutation
    differs from PyTorch's, whose generator is another algorithm.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from meshflow import distributed as dist
            if not dist.is_available():
                raise RuntimeError("Requires distributed package to be available")
            if num_replicas is None:
                num_replicas = dist.get_world_size()
            if rank is None:
                rank = dist.get_rank()
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas <= 0:
            raise ValueError(f"num_replicas should be a positive integer value, but got num_replicas={num_replicas}")
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"rank should be an integer, but got rank={rank!r}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        if self.drop_last and len(self.dataset) % self.num_replicas != 0:
            # The nearest length that divides evenly, so every rank gets as many.
            self.num_samples = math.ceil((len(self.dataset) - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(len(self.dataset) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            generator = _mf.Generator().manual_seed((self.seed + self.epoch) % 2 ** 64)
            indices = _mf.randperm(n, generator=generator).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding_size = self.total_size - len(indices)
            if padding_size <= len(indices):
                indices += indices[:padding_size]
            else:
                indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
        else:
            indices = indices[:self.total_size]
        if len(indices) != self.total_size:
            raise RuntimeError(f"DistributedSampler: the dataset's length changed from the one the sampler was "
                               f"made for ({len(indices)} indices for a total_size of {self.total_size})")
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """The epoch whose permutation the next iteration gives (with shuffle=True)."""
        self.epoch = epoch


class BatchSampler(Sampler):
    """Groups the indices of sampler into lists of batch_size."""

    def __init__(self, sampler, batch_size, drop_last):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        if isinstance(self.sampler, (SequentialSampler, RandomSampler)):
            # One draw, then slices: far faster than index by index.
            indices = list(self.sampler)
            stop = len(indices) - len(indices) % self.batch_size if self.drop_last else len(indices)
            for start in range(0, stop, self.batch_size):
                yield indices[start:start + self.batch_size]
            return
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
