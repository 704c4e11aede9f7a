"""generator= on every random function, torch.normal's forms, and multinomial:
shapes, dtypes and errors as torch 1.13; values reproducible per generator
(they differ from torch's, whose generator is another algorithm)."""
import numpy as np
import pytest
import torch

import meshflow as mf


def _draws(lib, g):
    return [lib.rand(2, 3, generator=g), lib.randn(4, generator=g), lib.randint(0, 7, (5,), generator=g),
            lib.randint(7, (2,), generator=g), lib.randperm(6, generator=g),
            lib.empty(3).uniform_(-1, 1, generator=g), lib.empty(3).normal_(2, 3, generator=g),
            lib.bernoulli(lib.full((4,), 0.5), generator=g), lib.empty(4).bernoulli_(0.25, generator=g),
            lib.multinomial(lib.tensor([1.0, 2.0, 3.0]), 4, True, generator=g),
            lib.normal(0.0, 1.0, (2, 2), generator=g), lib.normal(lib.zeros(3), lib.ones(3), generator=g)]


def test_a_generator_gives_its_own_reproducible_stream_as_in_torch():
    for lib in (torch, mf):
        g = lib.Generator().manual_seed(5)
        first = _draws(lib, g)
        g.manual_seed(5)
        lib.manual_seed(123)
        lib.randn(10)  # the default generator's draws do not move g's stream
        again = _draws(lib, g)
        for a, b in zip(first, again):
            assert a.shape == b.shape and a.dtype == b.dtype and lib.equal(a, b)
    shapes = [tuple(t.shape) for t in _draws(torch, torch.Generator())]
    dtypes = [str(t.dtype).split(".")[-1] for t in _draws(torch, torch.Generator())]
    assert [tuple(t.shape) for t in _draws(mf, mf.Generator())] == shapes
    assert [str(t.dtype).split(".")[-1] for t in _draws(mf, mf.Generator())] == dtypes


def test_normal_forms_as_torch():
    for lib in (torch, mf):
        assert tuple(lib.normal(0.0, 1.0, (2, 3)).shape) == (2, 3)
        assert tuple(lib.normal(lib.zeros(2, 1), lib.ones(3)).shape) == (2, 3)
        assert tuple(lib.normal(lib.zeros(2), 2.0).shape) == (2,)
        assert tuple(lib.normal(1.0, lib.ones(4)).shape) == (4,)
        mean = lib.zeros(3, requires_grad=True)
        assert lib.normal(mean, 1.0).detach().shape == mean.shape
    mf.manual_seed(0)
    x = mf.normal(mf.full((200000,), 3.0, dtype=mf.float64), mf.full((200000,), 2.0, dtype=mf.float64)).numpy()
    assert abs(x.mean() - 3.0) < 0.02 and abs(x.std() - 2.0) < 0.02
    with pytest.raises(ValueError, match="std"):
        mf.normal(mf.zeros(2), -mf.ones(2))


def test_multinomial_shapes_and_laws():
    for lib in (torch, mf):
        w2 = lib.tensor([[0.0, 1.0, 3.0], [2.0, 2.0, 0.0]])
        assert tuple(lib.multinomial(w2, 5, replacement=True).shape) == (2, 5)
        assert lib.multinomial(w2, 2).dtype == lib.int64
        assert tuple(w2[0].multinomial(2).shape) == (2,)
    mf.manual_seed(1)
    w = np.array([0.0, 1.0, 3.0, 6.0])
    counts = np.bincount(mf.multinomial(mf.tensor(w), 100000, True).numpy(), minlength=4)
    assert counts[0] == 0
    expected = 100000 * w / w.sum()
    chi2 = ((counts[1:] - expected[1:]) ** 2 / expected[1:]).sum()
    assert chi2 < 13.8  # 2 degrees of freedom, p = 0.001
    # without replacement: distinct categories, the first drawn in proportion to the weights and the
    # second in proportion to what is left (P(first=3, second=2) = 0.6 * 3/4)
    rows = mf.multinomial(mf.tensor(np.tile(w, (40000, 1))), 2).numpy()
    assert (rows[:, 0] != rows[:, 1]).all() and (rows > 0).all()
    first = np.bincount(rows[:, 0], minlength=4) / 40000
    assert np.abs(first - w / w.sum()).max() < 0.01
    pair = np.mean((rows[:, 0] == 3) & (rows[:, 1] == 2))
    assert abs(pair - 0.6 * 0.75) < 0.01


def test_multinomial_bad_input():
    with pytest.raises(ValueError, match="finite and >= 0"):
        mf.multinomial(mf.tensor([1.0, -1.0]), 1)
    with pytest.raises(ValueError, match="finite and >= 0"):
        mf.multinomial(mf.tensor([1.0, float("nan")]), 1)
    with pytest.raises(ValueError, match="sum to 0"):
        mf.multinomial(mf.zeros(2, 3), 1, True)
    with pytest.raises(ValueError, match="without replacement"):
        mf.multinomial(mf.tensor([1.0, 1.0]), 3)
    with pytest.raises(ValueError, match="weight > 0"):
        mf.multinomial(mf.tensor([1.0, 0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="num_samples"):
        mf.multinomial(mf.ones(3), 0)
    with pytest.raises(mf.errors.ShapeError, match="1-d or 2-d"):
        mf.multinomial(mf.ones(2, 2, 2), 1)
    with pytest.raises(TypeError, match="floating-point"):
        mf.multinomial(mf.ones(3, dtype=mf.int64), 1)
    with pytest.raises(TypeError):
        mf.randn(3, generator=object())
