"""Named tuples returned by ops with two results (max(dim), sort, topk, ...)."""
import collections

ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])
ValuesIndices.__module__ = __name__
