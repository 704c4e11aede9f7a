"""Training equals PyTorch: the same model in torch and meshflow, torch's
initial weights copied into meshflow, three optimizer steps on identical
data; losses and every parameter and buffer must match.

Runs in float64 so that the comparison is tight: differences in summation
order between the two libraries stay near 1e-12 instead of hiding real
mistakes behind float32 noise.
"""
import os
import sys

import numpy as np
import pytest
import torch

import meshflow as mf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import models  # noqa: E402

# Small batches keep the suite fast; the shapes are the benchmark's otherwise.
CASES = {
    "mlp": dict(batch=16, kwargs={}),
    "lenet": dict(batch=8, kwargs={}),
    "resnet18": dict(batch=4, kwargs={}),
    "gpt": dict(batch=2, kwargs=dict(seq=32)),
    "vit_tiny": dict(batch=2, kwargs=dict(dim=48, depth=2, mlp=96)),
    "bert": dict(batch=3, kwargs=dict(vocab=64, dim=32, layers=2, mlp=64, seq=24)),
    "convnext": dict(batch=2, kwargs=dict(dims=(8, 16, 24, 32), depths=(1, 1, 2, 1))),
    "dlrm": dict(batch=16, kwargs=dict(dim=8, bottom=(16,), top=(16,))),
}

OPTIMIZERS = {
    "sgd_momentum": lambda lib, params: lib.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adamw": lambda lib, params: lib.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
}


def run_steps(name, lib, model, optimizer, batches):
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = models.loss_fn(name, lib, model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_three_steps_match_pytorch(name, opt):
    case = CASES[name]
    torch.manual_seed(0)
    ref = models.build(name, torch, **case["kwargs"]).double()
    net = models.build(name, mf, **case["kwargs"]).double()
    assert list(net.state_dict().keys()) == list(ref.state_dict().keys())
    models.copy_state(ref, net, mf)

    rng = np.random.default_rng(1)
    seq = case["kwargs"].get("seq", 128)
    vocab = case["kwargs"].get("vocab", 1024)
    data = [models.random_batch(name, case["batch"], rng, vocab=vocab, seq=seq) for _ in range(3)]

    def as_lib(lib, arr):
        t = lib.tensor(arr)
        return t.double() if arr.dtype == np.float32 else t

    ref_batches = [(as_lib(torch, x), as_lib(torch, y)) for x, y in data]
    net_batches = [(as_lib(mf, x), as_lib(mf, y)) for x, y in data]
    ref_losses = run_steps(name, torch, ref, OPTIMIZERS[opt](torch, ref.parameters()), ref_batches)
    net_losses = run_steps(name, mf, net, OPTIMIZERS[opt](mf, net.parameters()), net_batches)

    np.testing.assert_allclose(net_losses, ref_losses, rtol=1e-9, atol=1e-9)
    ref_state = ref.state_dict()
    for key, value in net.state_dict().items():
        np.testing.assert_allclose(value.numpy(), ref_state[key].numpy(), rtol=1e-8, atol=1e-10, err_msg=key)
