"""Named tuples returned by ops with several results (max(dim), sort, topk,
torch.linalg's decompositions), with torch.return_types' field names."""
import collections

ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])
slogdet = collections.namedtuple("slogdet", ["sign", "logabsdet"])
linalg_slogdet = collections.namedtuple("linalg_slogdet", ["sign", "logabsdet"])
linalg_qr = collections.namedtuple("linalg_qr", ["Q", "R"])
linalg_svd = collections.namedtuple("linalg_svd", ["U", "S", "Vh"])
linalg_eigh = collections.namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
for _type in (ValuesIndices, slogdet, linalg_slogdet, linalg_qr, linalg_svd, linalg_eigh):
    _type.__module__ = __name__
del _type
