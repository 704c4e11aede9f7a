"""nn.EmbeddingBag, F.embedding_bag and nn.Bilinear against torch: outputs and gradients for every mode,
offsets, include_last_offset, padding_idx, per_sample_weights, from_pretrained, repr, and errors."""
import numpy as np
import pytest
import torch

import meshflow as mf
from test_nn import compare


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_layer_matches_torch(mode, device):
    t = torch.nn.EmbeddingBag(10, 4, mode=mode)
    m = mf.nn.EmbeddingBag(10, 4, mode=mode)
    compare(t, m, [np.array([[1, 2, 4, 5], [4, 3, 2, 9]])], device=device)
    flat = np.array([1, 2, 4, 5, 4, 3, 2, 9])
    compare(t, m, [flat, np.array([0, 3, 3, 6])], call=lambda mod, x, o: mod(x, o), device=device)


def test_padding_last_offset_and_weights(device):
    t = torch.nn.EmbeddingBag(8, 3, mode="mean", padding_idx=2)
    m = mf.nn.EmbeddingBag(8, 3, mode="mean", padding_idx=2)
    compare(t, m, [np.array([2, 1, 2, 7, 2, 3, 4]), np.array([0, 2, 4, 6])], call=lambda mod, x, o: mod(x, o), device=device)
    t = torch.nn.EmbeddingBag(8, 3, mode="max", include_last_offset=True)
    m = mf.nn.EmbeddingBag(8, 3, mode="max", include_last_offset=True)
    compare(t, m, [np.array([2, 1, 2, 7, 2, 3, 4]), np.array([0, 2, 4, 7])], call=lambda mod, x, o: mod(x, o), device=device)
    # Rows past the last offset belong to no bag (forward only: torch 1.13's backward of this case
    # corrupts its heap).
    t = torch.nn.EmbeddingBag(8, 3, mode="sum", include_last_offset=True)
    m = mf.nn.EmbeddingBag(8, 3, mode="sum", include_last_offset=True)
    m.load_state_dict({"weight": mf.tensor(t.weight.detach().numpy())})
    x, offsets = np.array([2, 1, 2, 7, 2, 3, 4]), np.array([0, 2, 4, 6])
    np.testing.assert_allclose(m(mf.tensor(x), mf.tensor(offsets)).detach().numpy(),
                               t(torch.tensor(x), torch.tensor(offsets)).detach().numpy(), rtol=1e-6)
    t = torch.nn.EmbeddingBag(8, 3, mode="sum")
    m = mf.nn.EmbeddingBag(8, 3, mode="sum")
    w = np.random.default_rng(3).standard_normal(6)
    compare(t, m, [np.array([0, 1, 2, 5, 6, 7]), np.array([0, 4]), w],
            call=lambda mod, x, o, psw: mod(x, o, per_sample_weights=psw), device=device)


def test_from_pretrained_and_repr():
    weights = np.arange(12, dtype=np.float32).reshape(4, 3)
    t = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(weights), mode="max")
    m = mf.nn.EmbeddingBag.from_pretrained(mf.tensor(weights), mode="max")
    assert not m.weight.requires_grad
    x = np.array([[0, 3], [1, 1]])
    np.testing.assert_array_equal(m(mf.tensor(x)).detach().numpy(), t(torch.tensor(x)).detach().numpy())
    for kwargs in ({}, {"mode": "sum", "padding_idx": 1}):
        assert repr(mf.nn.EmbeddingBag(5, 2, **kwargs)) == repr(torch.nn.EmbeddingBag(5, 2, **kwargs))
    layer = mf.nn.EmbeddingBag(6, 2, padding_idx=4)
    assert np.all(layer.weight.detach().numpy()[4] == 0)


def test_errors_like_torch():
    w = mf.randn(5, 2)
    with pytest.raises(ValueError, match="offsets has to be None"):
        mf.nn.functional.embedding_bag(mf.tensor([[0, 1]]), w, mf.tensor([0]))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor"):
        mf.nn.functional.embedding_bag(mf.tensor([0, 1]), w)
    with pytest.raises(ValueError, match=r"offsets\[0\] has to be 0"):
        mf.nn.functional.embedding_bag(mf.tensor([0, 1]), w, mf.tensor([1]))
    with pytest.raises(IndexError):
        mf.nn.functional.embedding_bag(mf.tensor([0, 1]), w, mf.tensor([0, 3]))
    with pytest.raises(ValueError, match="only supported for mode='sum'"):
        mf.nn.functional.embedding_bag(mf.tensor([0, 1]), w, mf.tensor([0]), per_sample_weights=mf.ones(2))
    with pytest.raises(ValueError, match="mode"):
        mf.nn.EmbeddingBag(3, 2, mode="min")
    with pytest.raises(IndexError):
        mf.nn.functional.embedding_bag(mf.tensor([0, 7]), w, mf.tensor([0]))


def test_bilinear_layer_matches_torch(device):
    for bias in (True, False):
        t, m = torch.nn.Bilinear(3, 4, 2, bias=bias), mf.nn.Bilinear(3, 4, 2, bias=bias)
        rng = np.random.default_rng(0)
        compare(t, m, [rng.standard_normal((5, 3)), rng.standard_normal((5, 4))], device=device)
        compare(t, m, [rng.standard_normal((2, 2, 3)), rng.standard_normal((2, 2, 4))], device=device)
        assert repr(m) == repr(t)
    layer = mf.nn.Bilinear(9, 2, 3)
    bound = 1 / 3
    assert np.all(np.abs(layer.weight.detach().numpy()) <= bound) and np.all(np.abs(layer.bias.detach().numpy()) <= bound)
    with pytest.raises(mf.errors.ShapeError, match="input batch dimensions do not match"):
        layer(mf.zeros(2, 9), mf.zeros(3, 2))
    with pytest.raises(mf.errors.ShapeError, match="input1 size does not match"):
        layer(mf.zeros(2, 8), mf.zeros(2, 2))
