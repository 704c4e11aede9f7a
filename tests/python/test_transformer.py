"""nn.TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and Transformer against torch:
outputs and every gradient in float64 with torch's weights, masks, batch_first and norm_first, the
clones' independence, repr and errors, and a small sequence-to-sequence model trained in both."""
import numpy as np
import pytest
import torch

import meshflow as mf
from test_nn import compare, copy_state, mf_from, randn

LAYER_ARGS = dict(dim_feedforward=12, dropout=0.0)


def causal_mask(n):
    return np.triu(np.full((n, n), -np.inf), 1)


@pytest.mark.parametrize("kwargs", [{}, {"norm_first": True}, {"batch_first": True, "activation": "gelu"}],
                         ids=["post-norm", "pre-norm", "batch_first-gelu"])
def test_decoder_layer_matches_torch(kwargs, device):
    t = torch.nn.TransformerDecoderLayer(8, 2, **LAYER_ARGS, **kwargs)
    m = mf.nn.TransformerDecoderLayer(8, 2, **LAYER_ARGS, **kwargs)
    batch_first = kwargs.get("batch_first", False)
    tgt = randn(3, 4, 8, seed=1) if not batch_first else randn(4, 3, 8, seed=1)
    memory = randn(5, 4, 8, seed=2) if not batch_first else randn(4, 5, 8, seed=2)
    compare(t, m, [tgt, memory], device=device)
    # masks: causal float target mask, bool memory mask, key padding masks
    padding = np.zeros((4, 5), dtype=bool)
    padding[1, 3:] = True
    tgt_padding = np.zeros((4, 3), dtype=bool)
    tgt_padding[2, 2] = True
    memory_mask = np.zeros((3, 5), dtype=bool)
    memory_mask[0, 1] = True
    compare(t, m, [tgt, memory, causal_mask(3), memory_mask, tgt_padding, padding],
            call=lambda mod, a, b, c, d, e, f: mod(a, b, tgt_mask=c, memory_mask=d, tgt_key_padding_mask=e,
                                                   memory_key_padding_mask=f),
            grad_inputs=(0, 1), device=device)


def test_decoder_layer_unbatched(device):
    t = torch.nn.TransformerDecoderLayer(6, 3, **LAYER_ARGS)
    m = mf.nn.TransformerDecoderLayer(6, 3, **LAYER_ARGS)
    compare(t, m, [randn(4, 6), randn(2, 6, seed=3)], device=device)


@pytest.mark.parametrize("with_norm", [False, True])
def test_encoder_stack_matches_torch(with_norm, device):
    t_layer = torch.nn.TransformerEncoderLayer(8, 2, **LAYER_ARGS)
    m_layer = mf.nn.TransformerEncoderLayer(8, 2, **LAYER_ARGS)
    t = torch.nn.TransformerEncoder(t_layer, 3, norm=torch.nn.LayerNorm(8) if with_norm else None,
                                    enable_nested_tensor=False)
    m = mf.nn.TransformerEncoder(m_layer, 3, norm=mf.nn.LayerNorm(8) if with_norm else None)
    assert m.num_layers == 3 and len(m.layers) == 3
    assert (m.norm is None) == (not with_norm)
    padding = np.zeros((2, 5), dtype=bool)
    padding[0, 4] = True
    compare(t, m, [randn(5, 2, 8), causal_mask(5), padding],
            call=lambda mod, x, mask, kpm: mod(x, mask=mask, src_key_padding_mask=kpm), grad_inputs=(0,), device=device)


def test_decoder_stack_matches_torch(device):
    t = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, **LAYER_ARGS, batch_first=True), 2,
                                    norm=torch.nn.LayerNorm(8))
    m = mf.nn.TransformerDecoder(mf.nn.TransformerDecoderLayer(8, 2, **LAYER_ARGS, batch_first=True), 2,
                                 norm=mf.nn.LayerNorm(8))
    compare(t, m, [randn(2, 3, 8), randn(2, 4, 8, seed=5), causal_mask(3)],
            call=lambda mod, x, mem, mask: mod(x, mem, tgt_mask=mask), grad_inputs=(0, 1), device=device)


def test_stack_layers_are_independent_clones():
    layer = mf.nn.TransformerEncoderLayer(4, 2, dim_feedforward=8)
    stack = mf.nn.TransformerEncoder(layer, 2)
    first, second = stack.layers[0], stack.layers[1]
    assert first is not layer and first is not second and stack.layers[0] is first
    assert first.linear1.weight is not second.linear1.weight
    np.testing.assert_array_equal(first.linear1.weight.detach().numpy(), layer.linear1.weight.detach().numpy())
    with mf.no_grad():
        first.linear1.weight.fill_(0.5)
    assert not np.allclose(second.linear1.weight.detach().numpy(), 0.5)
    assert not np.allclose(layer.linear1.weight.detach().numpy(), 0.5)
    names = [n for n, _ in stack.named_parameters()]
    t_names = [n for n, _ in torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(4, 2, 8), 2,
                                                         enable_nested_tensor=False).named_parameters()]
    assert names == t_names


@pytest.mark.parametrize("kwargs", [{}, {"batch_first": True, "norm_first": True}])
def test_transformer_matches_torch(kwargs, device):
    torch.manual_seed(0)
    t = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, **LAYER_ARGS, **kwargs)
    m = mf.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, **LAYER_ARGS, **kwargs)
    batch_first = kwargs.get("batch_first", False)
    src = randn(2, 5, 8) if batch_first else randn(5, 2, 8)
    tgt = randn(2, 3, 8, seed=4) if batch_first else randn(3, 2, 8, seed=4)
    tgt_mask = mf.nn.Transformer.generate_square_subsequent_mask(3).detach().numpy()
    np.testing.assert_array_equal(tgt_mask, torch.nn.Transformer.generate_square_subsequent_mask(3).detach().numpy())
    src_padding = np.zeros((2, 5), dtype=bool)
    src_padding[1, 3:] = True
    compare(t, m, [src, tgt, tgt_mask, src_padding],
            call=lambda mod, s, tg, mask, kpm: mod(s, tg, tgt_mask=mask, src_key_padding_mask=kpm,
                                                   memory_key_padding_mask=kpm),
            grad_inputs=(0, 1), device=device)


def test_transformer_init_and_attributes():
    m = mf.nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32)
    t = torch.nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert (m.d_model, m.nhead, m.batch_first) == (16, 4, False)
    # Xavier-uniform for every matrix: |w| <= sqrt(6 / (fan_in + fan_out))
    w = m.encoder.layers[0].linear1.weight.detach().numpy()
    bound = np.sqrt(6 / (16 + 32))
    assert np.all(np.abs(w) <= bound) and w.std() > bound / 3
    assert repr(m) == repr(t)
    assert repr(mf.nn.TransformerDecoderLayer(8, 2)) == repr(torch.nn.TransformerDecoderLayer(8, 2))


def test_custom_encoder_and_callable_activation():
    enc = mf.nn.TransformerEncoder(mf.nn.TransformerEncoderLayer(8, 2, 12, 0.0, activation=mf.nn.functional.gelu), 1)
    m = mf.nn.Transformer(d_model=8, nhead=2, num_decoder_layers=1, dim_feedforward=12, dropout=0.0,
                          custom_encoder=enc)
    assert m.encoder is enc and len(m.decoder.layers) == 1
    out = m(mf.randn(4, 1, 8), mf.randn(2, 1, 8))
    assert tuple(out.shape) == (2, 1, 8)


def test_errors_like_torch():
    m = mf.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8)
    with pytest.raises(RuntimeError, match="batch number of src and tgt"):
        m(mf.zeros(3, 2, 8), mf.zeros(3, 4, 8))
    with pytest.raises(RuntimeError, match="feature number"):
        m(mf.zeros(3, 2, 8), mf.zeros(3, 2, 6))
    with pytest.raises(ValueError, match="relu/gelu"):
        mf.nn.TransformerDecoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError, match="divisible"):
        mf.nn.TransformerDecoderLayer(9, 2)
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        mf.nn.TransformerEncoder(mf.nn.Linear(2, 2), 2)
    with pytest.raises(ValueError, match="num_layers"):
        mf.nn.TransformerDecoder(mf.nn.TransformerDecoderLayer(8, 2), -1)
    layer = mf.nn.TransformerDecoderLayer(8, 2, dim_feedforward=8)
    with pytest.raises(mf.errors.ShapeError):
        layer(mf.zeros(3, 2, 8), mf.zeros(4, 3, 8))


def _seq2seq(lib):
    class Model(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = lib.nn.Embedding(10, 8)
            self.transformer = lib.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                                  dim_feedforward=16, dropout=0.0, batch_first=True)
            self.head = lib.nn.Linear(8, 10)

        def forward(self, src, tgt, mask):
            return self.head(self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask))

    return Model()


def test_seq2seq_trains_like_torch():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(0, 10, size=(4, 6)), rng.integers(0, 10, size=(4, 5))
    t_model, m_model = _seq2seq(torch).double(), _seq2seq(mf).to(mf.float64)
    copy_state(t_model, m_model)
    t_opt = torch.optim.Adam(t_model.parameters(), lr=0.01)
    m_opt = mf.optim.Adam(m_model.parameters(), lr=0.01)
    mask = causal_mask(4)
    losses = {"torch": [], "mf": []}
    for _ in range(5):
        for key, model, opt, lib in (("torch", t_model, t_opt, torch), ("mf", m_model, m_opt, mf)):
            opt.zero_grad()
            logits = model(lib.tensor(src), lib.tensor(tgt[:, :-1]), lib.tensor(mask))
            loss = lib.nn.functional.cross_entropy(logits.reshape(-1, 10), lib.tensor(tgt[:, 1:]).reshape(-1))
            loss.backward()
            opt.step()
            losses[key].append(loss.item())
    np.testing.assert_allclose(losses["mf"], losses["torch"], rtol=1e-9, atol=1e-12)
    assert losses["torch"][-1] < losses["torch"][0]
