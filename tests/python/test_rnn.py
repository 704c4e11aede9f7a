"""nn.RNN, LSTM, GRU, their cells and nn.utils.rnn against torch: outputs, final states and every
gradient (input, initial state, weights) in float64, packed sequences, and a sequence model trained
in both libraries from the same weights."""
import copy

import numpy as np
import pytest
import torch

import meshflow as mf
from test_nn import TOL, compare, copy_state, mf_from, randn, to_numpy

LAYERS = {"RNN": (torch.nn.RNN, mf.nn.RNN), "LSTM": (torch.nn.LSTM, mf.nn.LSTM), "GRU": (torch.nn.GRU, mf.nn.GRU)}
CELLS = {"RNNCell": (torch.nn.RNNCell, mf.nn.RNNCell), "LSTMCell": (torch.nn.LSTMCell, mf.nn.LSTMCell),
         "GRUCell": (torch.nn.GRUCell, mf.nn.GRUCell)}


def flat(out):
    """(output, h_n) or (output, (h_n, c_n)) as a flat tuple."""
    result = []
    for o in out if isinstance(out, tuple) else (out,):
        result.extend(o if isinstance(o, tuple) else (o,))
    return tuple(result)


def call_with_state(kind):
    if kind.startswith("LSTM"):
        return lambda m, x, h, c: flat(m(x, (h, c)))
    return lambda m, x, h: flat(m(x, h))


CONFIGS = [
    dict(),
    dict(num_layers=2),
    dict(bidirectional=True),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(bias=False),
    dict(num_layers=3, batch_first=True),
]


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_layer_matches_torch(kind, config, device):
    t_cls, m_cls = LAYERS[kind]
    torch.manual_seed(0)
    t, m = t_cls(5, 7, **config), m_cls(5, 7, **config)
    dirs = 2 if config.get("bidirectional") else 1
    states = dirs * config.get("num_layers", 1)
    x = randn(3, 4, 5, seed=1)  # (T, B, I), or (B, T, I) with batch_first
    h = randn(states, 3 if config.get("batch_first") else 4, 7, seed=2)
    inputs = [x, h] + ([randn(*h.shape, seed=3)] if kind == "LSTM" else [])
    compare(t, m, inputs, call=call_with_state(kind), device=device)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_layer_without_initial_state_and_unbatched(kind, device):
    t_cls, m_cls = LAYERS[kind]
    t, m = t_cls(4, 6, num_layers=2, bidirectional=True), m_cls(4, 6, num_layers=2, bidirectional=True)
    compare(t, m, [randn(5, 2, 4)], call=lambda mod, x: flat(mod(x)), device=device)
    t, m = t_cls(4, 6), m_cls(4, 6)
    h = randn(1, 6, seed=4)
    inputs = [randn(5, 4), h] + ([randn(1, 6, seed=5)] if kind == "LSTM" else [])
    t_out, m_out = compare(t, m, inputs, call=call_with_state(kind), device=device)
    assert tuple(m_out[0].shape) == (5, 6) and tuple(m_out[1].shape) == (1, 6)


def test_rnn_relu_and_float32(device):
    t, m = torch.nn.RNN(3, 5, nonlinearity="relu", num_layers=2), mf.nn.RNN(3, 5, nonlinearity="relu", num_layers=2)
    compare(t, m, [randn(6, 2, 3), randn(2, 2, 5)], call=call_with_state("RNN"), device=device)
    t, m = torch.nn.LSTM(3, 5, bidirectional=True), mf.nn.LSTM(3, 5, bidirectional=True)
    compare(t, m, [randn(6, 2, 3)], dtype="float32", call=lambda mod, x: flat(mod(x)), device=device)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_torch(kind, bias, device):
    t_cls, m_cls = CELLS[kind]
    t, m = t_cls(5, 4, bias=bias), m_cls(5, 4, bias=bias)
    call = call_with_state(kind)
    inputs = [randn(3, 5), randn(3, 4, seed=2)] + ([randn(3, 4, seed=3)] if kind == "LSTMCell" else [])
    compare(t, m, inputs, call=call, device=device)
    inputs = [randn(5), randn(4, seed=2)] + ([randn(4, seed=3)] if kind == "LSTMCell" else [])
    compare(t, m, inputs, call=call, device=device)
    compare(t, m, [randn(2, 5)], call=lambda mod, x: flat(mod(x)), device=device)


def test_rnn_cell_relu_and_repr(device):
    t, m = torch.nn.RNNCell(3, 2, nonlinearity="relu"), mf.nn.RNNCell(3, 2, nonlinearity="relu")
    compare(t, m, [randn(4, 3), randn(4, 2)], call=lambda mod, x, h: mod(x, h), device=device)
    for t_m, m_m in [(t, m), (torch.nn.LSTMCell(3, 2, bias=False), mf.nn.LSTMCell(3, 2, bias=False)),
                     (torch.nn.GRU(3, 4, 2, batch_first=True, dropout=0.5, bidirectional=True),
                      mf.nn.GRU(3, 4, 2, batch_first=True, dropout=0.5, bidirectional=True)),
                     (torch.nn.RNN(3, 4, 1, False, nonlinearity="relu"), mf.nn.RNN(3, 4, 1, False, nonlinearity="relu")),
                     (torch.nn.LSTM(3, 4), mf.nn.LSTM(3, 4))]:
        assert repr(m_m) == repr(t_m)


def test_attributes_and_init_follow_torch():
    t, m = torch.nn.LSTM(3, 4, 2, bidirectional=True), mf.nn.LSTM(3, 4, 2, bidirectional=True)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert (m.input_size, m.hidden_size, m.num_layers, m.bias, m.batch_first, m.dropout, m.bidirectional,
            m.proj_size, m.mode) == (3, 4, 2, True, False, 0.0, True, 0, "LSTM")
    assert [[tuple(w.shape) for w in g] for g in m.all_weights] == [[tuple(w.shape) for w in g] for g in t.all_weights]
    bound = 1 / np.sqrt(4)
    for _, p in m.named_parameters():
        v = p.detach().numpy()
        assert np.all(np.abs(v) <= bound) and v.std() > bound / 4
    assert mf.nn.RNN(2, 3).mode == "RNN_TANH" and mf.nn.RNN(2, 3, nonlinearity="relu").mode == "RNN_RELU"
    m.flatten_parameters()
    assert m.weight_ih_l0 is m.all_weights[0][0]


def test_dropout_between_layers():
    m = mf.nn.LSTM(3, 8, num_layers=3, dropout=0.5)
    x = mf.tensor(randn(5, 2, 3).astype(np.float32))
    mf.manual_seed(0)
    a = m(x)[0].detach().numpy()
    mf.manual_seed(1)
    b = m(x)[0].detach().numpy()
    assert not np.allclose(a, b)  # training: a new mask per call
    m.eval()
    np.testing.assert_array_equal(m(x)[0].detach().numpy(), m(x)[0].detach().numpy())
    t = torch.nn.LSTM(3, 8, num_layers=3, dropout=0.5).eval()
    copy_state(t, m)
    np.testing.assert_allclose(m(x)[0].detach().numpy(), t(torch.tensor(x.detach().numpy()))[0].detach().numpy(), rtol=1e-5, atol=1e-6)


# --- packed sequences -----------------------------------------------------------------

def test_pad_and_pack_match_torch():
    seqs = [randn(n, 3, seed=n) for n in (2, 5, 3)]
    t_seqs = [torch.tensor(s, requires_grad=True) for s in seqs]
    m_seqs = [mf_from(s, requires_grad=True) for s in seqs]
    for batch_first in (False, True):
        t_pad = torch.nn.utils.rnn.pad_sequence(t_seqs, batch_first=batch_first, padding_value=-1.0)
        m_pad = mf.nn.utils.rnn.pad_sequence(m_seqs, batch_first=batch_first, padding_value=-1.0)
        np.testing.assert_array_equal(m_pad.detach().numpy(), t_pad.detach().numpy())
    t_packed = torch.nn.utils.rnn.pack_sequence(t_seqs, enforce_sorted=False)
    m_packed = mf.nn.utils.rnn.pack_sequence(m_seqs, enforce_sorted=False)
    for name in ("data", "batch_sizes", "sorted_indices", "unsorted_indices"):
        np.testing.assert_array_equal(getattr(m_packed, name).detach().numpy(), getattr(t_packed, name).detach().numpy())
    t_pad, t_len = torch.nn.utils.rnn.pad_packed_sequence(t_packed, batch_first=True, total_length=6)
    m_pad, m_len = mf.nn.utils.rnn.pad_packed_sequence(m_packed, batch_first=True, total_length=6)
    np.testing.assert_array_equal(m_pad.detach().numpy(), t_pad.detach().numpy())
    np.testing.assert_array_equal(m_len.detach().numpy(), t_len.detach().numpy())
    w = randn(*t_pad.shape, seed=9)
    (t_pad * torch.tensor(w)).sum().backward()
    (m_pad * mf_from(w)).sum().backward()
    for t_s, m_s in zip(t_seqs, m_seqs):
        np.testing.assert_array_equal(m_s.grad.detach().numpy(), t_s.grad.detach().numpy())
    for t_u, m_u in zip(torch.nn.utils.rnn.unpack_sequence(t_packed), mf.nn.utils.rnn.unpack_sequence(m_packed)):
        np.testing.assert_array_equal(m_u.detach().numpy(), t_u.detach().numpy())


def test_pack_padded_errors_like_torch():
    x = mf.zeros(4, 3, 2)
    with pytest.raises(ValueError, match="sorted in decreasing order"):
        mf.nn.utils.rnn.pack_padded_sequence(x, [1, 3, 2])
    with pytest.raises(ValueError, match="greater than 0"):
        mf.nn.utils.rnn.pack_padded_sequence(x, [3, 2, 0])
    with pytest.raises(ValueError, match="exceeds"):
        mf.nn.utils.rnn.pack_padded_sequence(x, [5, 2, 1])
    with pytest.raises(ValueError, match="3 lengths"):
        mf.nn.utils.rnn.pack_padded_sequence(x, [2, 1])
    packed = mf.nn.utils.rnn.pack_padded_sequence(x, [3, 2, 1])
    with pytest.raises(ValueError, match="total_length"):
        mf.nn.utils.rnn.pad_packed_sequence(packed, total_length=2)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_packed_input_matches_torch(kind, batch_first):
    t_cls, m_cls = LAYERS[kind]
    t = t_cls(3, 5, num_layers=2, bidirectional=True, batch_first=batch_first).double()
    m = m_cls(3, 5, num_layers=2, bidirectional=True, batch_first=batch_first).to(mf.float64)
    copy_state(t, m)
    lengths = [3, 6, 1, 4]
    x = randn(4, 6, 3) if batch_first else randn(6, 4, 3)
    h = randn(4, 4, 5, seed=2)
    tx, mx = torch.tensor(x, requires_grad=True), mf_from(x, requires_grad=True)
    th, mh = torch.tensor(h, requires_grad=True), mf_from(h, requires_grad=True)
    t_state = (th, th * 0.5) if kind == "LSTM" else th
    m_state = (mh, mh * 0.5) if kind == "LSTM" else mh
    t_out, t_hn = t(torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first, enforce_sorted=False), t_state)
    m_out, m_hn = m(mf.nn.utils.rnn.pack_padded_sequence(mx, lengths, batch_first, enforce_sorted=False), m_state)
    assert isinstance(m_out, mf.nn.utils.rnn.PackedSequence)
    np.testing.assert_array_equal(m_out.batch_sizes.detach().numpy(), t_out.batch_sizes.detach().numpy())
    t_pad, _ = torch.nn.utils.rnn.pad_packed_sequence(t_out, batch_first)
    m_pad, _ = mf.nn.utils.rnn.pad_packed_sequence(m_out, batch_first)
    np.testing.assert_allclose(m_pad.detach().numpy(), t_pad.detach().numpy(), **TOL["float64"])
    t_states, m_states = flat((t_hn,)), flat((m_hn,))
    for a, b in zip(m_states, t_states):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOL["float64"])
    w = randn(*t_pad.shape, seed=7)
    t_loss = (t_pad * torch.tensor(w)).sum() + sum((s * s).sum() for s in t_states)
    m_loss = (m_pad * mf_from(w)).sum() + sum((s * s).sum() for s in m_states)
    t_loss.backward()
    m_loss.backward()
    np.testing.assert_allclose(mx.grad.detach().numpy(), tx.grad.detach().numpy(), **TOL["float64"])
    np.testing.assert_allclose(mh.grad.detach().numpy(), th.grad.detach().numpy(), **TOL["float64"])
    m_params = dict(m.named_parameters())
    for name, p in t.named_parameters():
        np.testing.assert_allclose(m_params[name].grad.detach().numpy(), p.grad.detach().numpy(), err_msg=name, **TOL["float64"])


# --- errors ---------------------------------------------------------------------------

def test_errors():
    m = mf.nn.LSTM(4, 3, num_layers=2)
    with pytest.raises(ValueError, match="2-D or 3-D"):
        m(mf.zeros(2, 3, 4, 4))
    with pytest.raises(mf.errors.ShapeError, match="input_size. Expected 4, got 5"):
        m(mf.zeros(2, 3, 5))
    with pytest.raises(mf.errors.ShapeError, match=r"expected hx of size \(2, 3, 3\)"):
        m(mf.zeros(2, 3, 4), (mf.zeros(1, 3, 3), mf.zeros(2, 3, 3)))
    with pytest.raises(mf.errors.ShapeError, match="3-D"):
        m(mf.zeros(2, 3, 4), (mf.zeros(2, 3), mf.zeros(2, 3)))
    with pytest.raises(TypeError, match="tuple"):
        m(mf.zeros(2, 3, 4), mf.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="dropout should be a number"):
        mf.nn.GRU(2, 3, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        mf.nn.RNN(2, 0)
    with pytest.raises(ValueError, match="num_layers must be greater than zero"):
        mf.nn.RNN(2, 3, num_layers=0)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        mf.nn.RNN(2, 3, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size"):
        mf.nn.LSTM(2, 3, proj_size=2)
    with pytest.raises(mf.errors.OutOfMemoryError):
        mf.nn.LSTM(2, 3, num_layers=2 ** 40)
    with pytest.raises(TypeError, match="float32 or float64"):
        mf.nn.GRU(2, 3).to(mf.bfloat16)(mf.zeros(2, 1, 2, dtype=mf.bfloat16))
    cell = mf.nn.GRUCell(3, 2)
    with pytest.raises(mf.errors.ShapeError, match="inconsistent input_size"):
        cell(mf.zeros(4, 5))
    with pytest.raises(mf.errors.ShapeError, match="batch size"):
        cell(mf.zeros(4, 3), mf.zeros(3, 2))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        cell(mf.zeros(1, 4, 3))


def test_double_backward_is_refused():
    m = mf.nn.GRU(2, 3).to(mf.float64)
    x = mf_from(randn(3, 1, 2), requires_grad=True)
    (g,) = mf.autograd.grad(m(x)[0].sum(), [x], create_graph=False)
    assert tuple(g.shape) == (3, 1, 2)
    with pytest.raises(mf.errors.Error, match="create_graph"):
        mf.autograd.grad(m(x)[0].sum(), [x], create_graph=True)


def test_deepcopy_and_state_dict_round_trip():
    m = mf.nn.GRU(3, 4, 2)
    c = copy.deepcopy(m)
    assert c.weight_hh_l1 is not m.weight_hh_l1
    np.testing.assert_array_equal(c.weight_hh_l1.detach().numpy(), m.weight_hh_l1.detach().numpy())
    x = mf.tensor(randn(4, 2, 3).astype(np.float32))
    np.testing.assert_array_equal(c(x)[0].detach().numpy(), m(x)[0].detach().numpy())
    fresh = mf.nn.GRU(3, 4, 2)
    fresh.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(fresh(x)[1].detach().numpy(), m(x)[1].detach().numpy())


# --- a sequence model trained in both libraries ------------------------------------------

def _sequence_classifier(lib):
    class Classifier(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = lib.nn.Embedding(12, 6)
            self.lstm = lib.nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True)
            self.gru = lib.nn.GRU(16, 5, batch_first=True)
            self.head = lib.nn.Linear(5, 3)

        def forward(self, tokens, lengths):
            x = self.embed(tokens)
            packed = lib.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.lstm(packed)
            out, _ = lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
            _, h = self.gru(out)
            return self.head(h[-1])

    return Classifier()


def test_sequence_model_trains_like_torch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 12, size=(6, 7))
    lengths = [7, 3, 5, 2, 6, 4]
    labels = rng.integers(0, 3, size=6)
    torch.manual_seed(0)
    t_model = _sequence_classifier(torch).double()
    m_model = _sequence_classifier(mf).to(mf.float64)
    copy_state(t_model, m_model)
    t_opt = torch.optim.Adam(t_model.parameters(), lr=0.01)
    m_opt = mf.optim.Adam(m_model.parameters(), lr=0.01)
    t_losses, m_losses = [], []
    for _ in range(8):
        for model, opt, lib, losses in ((t_model, t_opt, torch, t_losses), (m_model, m_opt, mf, m_losses)):
            opt.zero_grad()
            logits = model(lib.tensor(tokens), lengths)
            loss = lib.nn.functional.cross_entropy(logits, lib.tensor(labels))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    np.testing.assert_allclose(m_losses, t_losses, rtol=1e-9, atol=1e-12)
    assert t_losses[-1] < t_losses[0]
    m_state = m_model.state_dict()
    for name, v in t_model.state_dict().items():
        np.testing.assert_allclose(m_state[name].detach().numpy(), v.detach().numpy(), rtol=1e-8, atol=1e-10, err_msg=name)
