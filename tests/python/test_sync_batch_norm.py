"""nn.SyncBatchNorm in one process (the multi-process equality with one process is
dist_scripts/sync_batch_norm.py): torch's constructor, repr, state layout and
convert_sync_batchnorm; with one rank it is BatchNorm (torch 1.13's SyncBatchNorm
only runs on GPUs, so BatchNorm2d is the reference)."""
import numpy as np
import pytest
import torch

import meshflow as mf
from test_nn import compare


def test_repr_state_and_conversion_like_torch():
    for kwargs in ({}, {"momentum": None, "affine": False}, {"eps": 1e-3, "track_running_stats": False}):
        assert repr(mf.nn.SyncBatchNorm(5, **kwargs)) == repr(torch.nn.SyncBatchNorm(5, **kwargs))
        assert list(mf.nn.SyncBatchNorm(5, **kwargs).state_dict()) == list(torch.nn.SyncBatchNorm(5, **kwargs)
                                                                              .state_dict())

    def model(lib):
        return lib.nn.Sequential(lib.nn.Conv2d(2, 3, 1), lib.nn.BatchNorm2d(3),
                                 lib.nn.Sequential(lib.nn.Linear(3, 3), lib.nn.BatchNorm1d(3)))

    t = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model(torch))
    source = model(mf)
    with mf.no_grad():
        source[1].running_mean.fill_(0.25)
    m = mf.nn.SyncBatchNorm.convert_sync_batchnorm(source)
    assert repr(m) == repr(t)
    assert m[1].running_mean is source[1].running_mean and m[1].weight is source[1].weight
    assert isinstance(m[2][1], mf.nn.SyncBatchNorm)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 4)])
def test_one_rank_is_batch_norm(shape):
    t, m = torch.nn.BatchNorm2d(3), mf.nn.SyncBatchNorm(3)
    m.load_state_dict({k: mf.tensor(v.numpy()) for k, v in t.state_dict().items()})
    x = np.random.default_rng(0).standard_normal(shape)
    compare(t, m, [x], call=lambda mod, a: torch.nn.functional.batch_norm(
        a, mod.running_mean, mod.running_var, mod.weight, mod.bias, True) if mod is t else mod(a))
    np.testing.assert_allclose(m.running_mean.numpy(), t.running_mean.numpy(), rtol=1e-9)


def test_errors():
    with pytest.raises(ValueError, match="at least 2D"):
        mf.nn.SyncBatchNorm(3)(mf.zeros(3))
    with pytest.raises(mf.errors.ShapeError, match="channels"):
        mf.nn.SyncBatchNorm(3)(mf.zeros(2, 4))
