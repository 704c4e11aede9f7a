"""scaled_dot_product_attention's fused kernel (fused_attention: blocked,
online softmax, no (L, S) weights) against the composed formula in PyTorch
1.13 (float64), forward and backward, with masks, strides, dropout, 16-bit
inputs, graph mode, and its memory."""
import math

import numpy as np
import pytest
import torch

import meshflow as mf

F = mf.nn.functional


def torch_reference(q, k, v, mask=None, causal=False, scale=None):
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = (q * s) @ k.transpose(-2, -1)
    if causal:
        L, S = scores.shape[-2:]
        scores = scores + torch.triu(torch.full((L, S), -math.inf, dtype=scores.dtype), 1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, -1) @ v


def run_both(qn, kn, vn, gn, mask=None, causal=False, scale=None, transform=lambda t: t, device="cpu"):
    tq, tk, tv = [torch.tensor(a, requires_grad=True) for a in (qn, kn, vn)]
    tmask = torch.tensor(mask) if mask is not None else None
    out_t = torch_reference(transform(tq), transform(tk), transform(tv), tmask, causal, scale)
    out_t.backward(torch.tensor(gn))
    mq, mk, mv = [mf.tensor(a, requires_grad=True, device=device) for a in (qn, kn, vn)]
    mmask = mf.tensor(mask, device=device) if mask is not None else None
    out_m = F.scaled_dot_product_attention(transform(mq), transform(mk), transform(mv), attn_mask=mmask,
                                           is_causal=causal, scale=scale)
    out_m.backward(mf.tensor(gn, device=device))
    return (out_m, mq, mk, mv), (out_t, tq, tk, tv)


def assert_close(ours, ref, rtol=1e-10, atol=1e-12):
    out_m, mq, mk, mv = ours
    out_t, tq, tk, tv = ref
    np.testing.assert_allclose(out_m.detach().cpu().numpy(), out_t.detach().numpy(), rtol=rtol, atol=atol)
    for name, a, b in (("q", mq, tq), ("k", mk, tk), ("v", mv, tv)):
        np.testing.assert_allclose(a.grad.cpu().numpy(), b.grad.numpy(), rtol=rtol, atol=atol, err_msg=name)


SHAPES = [  # batch dims, L, S, E, Ev: blocks of 64 queries and 128 keys, with partial blocks
    ((), 5, 3, 4, 4),
    ((2,), 70, 150, 16, 8),
    ((2, 3), 130, 129, 8, 12),
    ((1, 2), 200, 300, 32, 32),
]


@pytest.mark.parametrize("batch,L,S,E,Ev", SHAPES)
@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float", "bool_keys", "scale"])
def test_equals_the_composed_formula(batch, L, S, E, Ev, kind, device):
    rng = np.random.default_rng(L + S)
    qn, kn = rng.standard_normal(batch + (L, E)), rng.standard_normal(batch + (S, E))
    vn, gn = rng.standard_normal(batch + (S, Ev)), rng.standard_normal(batch + (L, Ev))
    mask, scale = None, None
    if kind == "bool":
        mask = rng.random((L, S)) < 0.6
        mask[:, 0] = True  # no row fully masked
    elif kind == "float":
        mask = rng.standard_normal(batch[:1] + (1,) * len(batch) + (S,) if batch else (L, S))
    elif kind == "bool_keys":  # key padding: (S,) broadcast over the batch and the queries
        mask = np.arange(S) < max(1, S - 7)
    elif kind == "scale":
        scale = 0.37
    ours, ref = run_both(qn, kn, vn, gn, mask=mask, causal=kind == "causal", scale=scale, device=device)
    assert ours[0].grad_fn.name() == "FusedAttentionBackward0"
    assert_close(ours, ref)


def test_strided_inputs_and_whole_masked_blocks():
    # (N, T, H, D) transposed to (N, H, T, D): the kernel reads the strides;
    # a causal mask given as a tensor skips the key blocks it masks whole.
    rng = np.random.default_rng(0)
    N, T, H, D = 2, 300, 2, 16
    qn, kn, vn, gn = (rng.standard_normal((N, T, H, D)) for _ in range(4))
    gn = gn.transpose(0, 2, 1, 3).copy()
    mask = np.triu(np.full((T, T), -np.inf), 1)
    ours, ref = run_both(qn, kn, vn, gn, mask=mask, transform=lambda t: t.transpose(1, 2))
    assert_close(ours, ref)


def test_a_row_with_every_key_masked_is_nan_as_composed():
    q, k, v = mf.randn(1, 3, 4, dtype=mf.float64), mf.randn(1, 5, 4, dtype=mf.float64), mf.randn(1, 5, 4,
                                                                                                 dtype=mf.float64)
    mask = mf.ones(3, 5, dtype=mf.bool)
    mask[1] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).numpy()
    assert np.isnan(out[0, 1]).all() and np.isfinite(out[0, [0, 2]]).all()


def test_a_float_mask_that_requires_grad_takes_the_composed_path():
    rng = np.random.default_rng(1)
    qn, kn, vn = (rng.standard_normal((2, 6, 4)) for _ in range(3))
    mn = rng.standard_normal((6, 6))
    mask = mf.tensor(mn, requires_grad=True)
    out = F.scaled_dot_product_attention(mf.tensor(qn), mf.tensor(kn), mf.tensor(vn), attn_mask=mask)
    out.sum().backward()
    tmask = torch.tensor(mn, requires_grad=True)
    torch_reference(torch.tensor(qn), torch.tensor(kn), torch.tensor(vn), tmask).sum().backward()
    np.testing.assert_allclose(mask.grad.numpy(), tmask.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_float32_and_the_16_bit_kernel():
    rng = np.random.default_rng(2)
    # float32 runs fused at any size
    qn, kn, vn, gn = (rng.standard_normal((2, 2, 100, 16)) for _ in range(4))
    ours, ref = run_both(*(a.astype(np.float32) for a in (qn, kn, vn, gn)), causal=True)
    assert ours[0].grad_fn.name() == "FusedAttentionBackward0"
    assert_close(ours, ref, rtol=2e-5, atol=2e-5)
    # bfloat16 runs fused once the composed formula's weights would pass 512
    # MiB (Note [Choosing fused attention]): compared with the float32
    # kernel (checked above) on the same bf16 values, at bf16's precision.
    L = 9500
    qn, kn, vn, gn = (rng.standard_normal((1, L, 8)) for _ in range(4))
    results = []
    for dtype in (mf.bfloat16, mf.float32):
        mq, mk, mv = (mf.tensor(a, dtype=mf.bfloat16).to(dtype).requires_grad_() for a in (qn, kn, vn))
        out = F.scaled_dot_product_attention(mq, mk, mv, is_causal=True)
        assert out.grad_fn.name() == "FusedAttentionBackward0"
        out.backward(mf.tensor(gn, dtype=mf.bfloat16).to(dtype))
        results.append([t.float().numpy() for t in (out.detach(), mq.grad, mk.grad, mv.grad)])
    for a, b in zip(*results):
        assert np.abs(a - b).max() <= 0.02 * np.abs(b).max() + 1e-3
    small = mf.randn(1, 64, 8, dtype=mf.bfloat16, requires_grad=True)
    assert F.scaled_dot_product_attention(small, small, small).grad_fn.name() != "FusedAttentionBackward0"


def test_dropout_is_seeded_unbiased_and_its_gradient_is_exact():
    S, p = 40, 0.3
    # q = k = 0: every weight is 1/S; v = 1: a row's output is (kept / S) / (1 - p)
    q, k = mf.zeros(200, 1, 8, dtype=mf.float64), mf.zeros(200, S, 8, dtype=mf.float64)
    v = mf.ones(200, S, 1, dtype=mf.float64)
    mf.manual_seed(5)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy().ravel()
    mf.manual_seed(5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy().ravel()
    np.testing.assert_array_equal(a, b)
    kept = a * S * (1 - p)
    np.testing.assert_allclose(kept, np.round(kept), atol=1e-9)
    assert abs(kept.mean() / S - (1 - p)) < 0.02
    # the backward regenerates the forward's mask: a directional derivative
    rng = np.random.default_rng(3)
    qn, kn, vn, dn = (rng.standard_normal((2, 9, 4)) for _ in range(4))

    def f(qv):
        mf.manual_seed(11)
        return F.scaled_dot_product_attention(qv, mf.tensor(kn), mf.tensor(vn), dropout_p=0.4)

    qt = mf.tensor(qn, requires_grad=True)
    f(qt).sum().backward()
    eps = 1e-6
    fd = (f(mf.tensor(qn + eps * dn)).sum().item() - f(mf.tensor(qn - eps * dn)).sum().item()) / (2 * eps)
    assert abs(float((qt.grad.numpy() * dn).sum()) - fd) < 1e-6


def test_memory_is_linear_in_the_sequence():
    def peak(L):
        q, k, v = (mf.randn(1, 2, L, 16, requires_grad=True) for _ in range(3))
        mf.reset_peak_memory_stats()
        base = mf.memory_allocated()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        return mf.max_memory_allocated() - base

    small, large = peak(512), peak(2048)
    assert large < 6 * small, (small, large)  # 4x the sequence: about 4x the memory, not 16x


def test_graph_mode_equals_eager():
    class G(mf.nn.Graph):
        def __init__(self, proj):
            super().__init__()
            self.proj = proj

        def build(self, x):
            q = self.proj(x).reshape(2, 70, 2, 8).transpose(1, 2)
            return F.scaled_dot_product_attention(q, q, q, is_causal=True).sum()

    mf.manual_seed(0)
    proj = mf.nn.Linear(16, 16).double()
    x = mf.randn(2, 70, 16, dtype=mf.float64)
    q = proj(x).reshape(2, 70, 2, 8).transpose(1, 2)
    eager = F.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
    g = G(proj)
    assert g(x).item() == eager.item()
    assert "fused_attention" in str(g)


def test_bad_input_is_a_clear_error():
    q = mf.randn(2, 4, 8)
    with pytest.raises(mf.errors.ShapeError, match="scaled_dot_product_attention: the size of tensor"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=mf.ones(3, 4, dtype=mf.bool))
    with pytest.raises(mf.errors.TypeError, match="attn_mask must be bool"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=mf.ones(4, 4, dtype=mf.int64))
    with pytest.raises(mf.errors.ShapeError, match="must equal k.shape"):
        F.scaled_dot_product_attention(q, mf.randn(2, 4, 7), q)
