"""meshflow.nn.utils.rnn: packed and padded sequences for the recurrent layers, as torch.nn.utils.rnn.

A PackedSequence holds a batch of variable-length sequences time step by time step: step t is the first
batch_sizes[t] sequences (sorted by decreasing length) at time t, so a recurrent layer never computes
on padding. Packing and padding are one index_select each, so gradients flow through them.
"""
from collections import namedtuple

import numpy as np

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "pack_sequence",
           "unpad_sequence", "unpack_sequence", "invert_permutation"]


def _mf():
    import meshflow
    return meshflow


def _index(values):
    mf = _mf()
    return mf.tensor(np.asarray(values, dtype=np.int64).reshape(-1), dtype=mf.int64)


def invert_permutation(permutation):
    """The inverse of a permutation of 0..n-1 (None stays None)."""
    if permutation is None:
        return None
    p = np.asarray(permutation.numpy(), dtype=np.int64)
    inverse = np.empty_like(p)
    inverse[p] = np.arange(p.size, dtype=np.int64)
    return _index(inverse)


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """data (sum of batch_sizes, *), batch_sizes (int64, one per step), and the permutation from the
    original batch order to the packed one (sorted_indices) and back (unsorted_indices)."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            raise ValueError("PackedSequence: batch_sizes must be given (use pack_padded_sequence or "
                             "pack_sequence to make one)")
        mf = _mf()
        if not isinstance(batch_sizes, mf.Tensor):
            batch_sizes = _index(batch_sizes)
        if batch_sizes.dim() != 1 or batch_sizes.dtype != mf.int64:
            raise ValueError(f"PackedSequence: batch_sizes must be a 1-D int64 tensor, got shape "
                             f"{tuple(batch_sizes.shape)} and dtype {batch_sizes.dtype}")
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cpu(self):
        return self

    def double(self):
        return self.to(dtype=_mf().float64)

    def float(self):
        return self.to(dtype=_mf().float32)

    def half(self):
        return self.to(dtype=_mf().float16)

    def bfloat16(self):
        return self.to(dtype=_mf().bfloat16)

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def _lengths_array(lengths):
    mf = _mf()
    if isinstance(lengths, mf.Tensor):
        values = lengths.numpy()
    else:
        values = np.asarray(lengths)
    if values.ndim != 1:
        raise ValueError(f"pack_padded_sequence: lengths must be 1-D, got shape {values.shape}")
    if values.size and not np.issubdtype(values.dtype, np.integer):
        if not np.all(np.equal(np.mod(values, 1), 0)):
            raise ValueError("pack_padded_sequence: lengths must be integers")
    return values.astype(np.int64)


def _batch_sizes(sorted_lengths):
    steps = int(sorted_lengths[0]) if sorted_lengths.size else 0
    return np.count_nonzero(sorted_lengths[None, :] > np.arange(steps)[:, None], axis=1).astype(np.int64)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded batch (T, B, *) (or (B, T, *) when batch_first) of sequences with the given lengths.
    With enforce_sorted the lengths must be decreasing; otherwise the batch is sorted here and
    sorted_indices records how."""
    mf = _mf()
    lengths = _lengths_array(lengths)
    if input.dim() < 2:
        raise ValueError(f"pack_padded_sequence: expected an input of at least 2 dims (T, B, *), got "
                         f"{input.dim()}-D")
    x = input.transpose(0, 1) if batch_first else input
    steps, batch = int(x.shape[0]), int(x.shape[1])
    if lengths.size != batch:
        raise ValueError(f"pack_padded_sequence: expected {batch} lengths (one per sequence), got {lengths.size}")
    if enforce_sorted:
        if np.any(lengths[1:] > lengths[:-1]):
            raise ValueError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                             "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                             "sidestep this requirement if you do not need ONNX exportability.")
        order = np.arange(batch, dtype=np.int64)
        sorted_indices = None
    else:
        order = np.argsort(-lengths, kind="stable").astype(np.int64)
        sorted_indices = _index(order)
    sorted_lengths = lengths[order]
    if batch and sorted_lengths[-1] <= 0:
        raise ValueError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                         "is <= 0")
    if batch and sorted_lengths[0] > steps:
        raise ValueError(f"pack_padded_sequence: a length ({int(sorted_lengths[0])}) exceeds the padded "
                         f"sequence length ({steps})")
    sizes = _batch_sizes(sorted_lengths)
    rows = np.concatenate([t * batch + order[:n] for t, n in enumerate(sizes)] + [np.zeros(0, np.int64)])
    data = x.reshape(steps * batch, *x.shape[2:]).index_select(0, _index(rows))
    return PackedSequence(data, _index(sizes), sorted_indices, invert_permutation(sorted_indices))


def _sorted_lengths(batch_sizes):
    sizes = np.asarray(batch_sizes.numpy(), dtype=np.int64)
    batch = int(sizes[0]) if sizes.size else 0
    return sizes, np.count_nonzero(sizes[None, :] > np.arange(batch)[:, None], axis=1).astype(np.int64)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded (T, B, *) or (B, T, *), lengths), in the original
    batch order."""
    mf = _mf()
    sizes, lengths = _sorted_lengths(sequence.batch_sizes)
    steps, batch = int(sizes.size), int(lengths.size)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"Expected total_length to be at least the length of the longest sequence in the "
                             f"input, but got total_length={total_length} and max sequence length being {steps}")
        steps = int(total_length)
    data = sequence.data
    unsorted = (np.asarray(sequence.unsorted_indices.numpy(), dtype=np.int64)
                if sequence.unsorted_indices is not None else np.arange(batch, dtype=np.int64))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rows = np.full((steps, batch), int(data.shape[0]), dtype=np.int64)
    present = unsorted[None, :] < sizes[:, None]
    rows[:sizes.size] = np.where(present, offsets[:-1, None] + unsorted[None, :], rows[:sizes.size])
    padding = mf.full((1, *data.shape[1:]), padding_value, dtype=data.dtype)
    padded = mf.cat([data, padding], 0).index_select(0, _index(rows)).reshape(steps, batch, *data.shape[1:])
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, _index(lengths[unsorted])


def pad_sequence(sequences, batch_first=False, padding_value=0.0):
    """Stacks tensors (L_i, *) into (max L, B, *) (or (B, max L, *)), padding with padding_value."""
    mf = _mf()
    sequences = list(sequences)
    if not sequences:
        raise ValueError("pad_sequence: expected a non-empty list of tensors")
    rest = tuple(sequences[0].shape[1:])
    for s in sequences:
        if s.dim() < 1 or tuple(s.shape[1:]) != rest:
            raise ValueError(f"pad_sequence: every sequence must have shape (L, {', '.join(map(str, rest))}) "
                             f"like the first, got {tuple(s.shape)}")
    lengths = [int(s.shape[0]) for s in sequences]
    steps, batch = max(lengths), len(sequences)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    pad_row = int(offsets[-1])
    rows = np.full(steps * batch, pad_row, dtype=np.int64)
    for b, n in enumerate(lengths):
        rows[np.arange(n) * batch + b] = offsets[b] + np.arange(n)
    padding = mf.full((1, *rest), padding_value, dtype=sequences[0].dtype)
    padded = mf.cat(sequences + [padding], 0).index_select(0, _index(rows)).reshape(steps, batch, *rest)
    return padded.transpose(0, 1) if batch_first else padded


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences of a padded batch, each cut to its length."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :int(n)] for i, n in enumerate(_lengths_array(lengths))]


def pack_sequence(sequences, enforce_sorted=True):
    """Packs a list of tensors (L_i, *)."""
    sequences = list(sequences)
    lengths = [int(s.shape[0]) for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences of a PackedSequence, in the original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
