"""One Python object per tensor and per module, as in PyTorch: identity,
id() and dict keys stay stable while the C++ side holds the object's target,
and the objects die with it."""
import gc
import threading
import weakref

import pytest
import torch

import meshflow as mf


@pytest.mark.parametrize("lib", [torch, mf], ids=["torch", "meshflow"])
def test_a_parameter_reached_twice_is_one_object(lib):
    m = lib.nn.Linear(3, 2)
    assert m.weight is m.weight
    first = id(m.weight)
    junk = [object() for _ in range(1000)]  # reuse the freed addresses, if any were freed
    assert id(m.weight) == first
    del junk
    params = list(m.parameters())
    assert params[0] is m.weight and params[1] is m.bias
    assert dict(m.named_parameters())["weight"] is m.weight
    opt = lib.optim.SGD(m.parameters(), lr=0.1)
    assert opt.param_groups[0]["params"][0] is m.weight
    keyed = {id(p): name for name, p in m.named_parameters()}
    assert keyed[id(m.weight)] == "weight" and keyed[id(m.bias)] == "bias"


@pytest.mark.parametrize("lib", [torch, mf], ids=["torch", "meshflow"])
def test_buffers_grads_and_in_place_results_are_one_object(lib):
    bn = lib.nn.BatchNorm1d(3)
    assert bn.running_mean is bn.running_mean
    assert next(iter(bn.buffers())) is bn.running_mean
    w = lib.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    assert w.grad is w.grad
    g = id(w.grad)
    assert id(w.grad) == g
    t = lib.zeros(2)
    assert t.add_(1) is t and t.mul_(2) is t and t.zero_() is t


@pytest.mark.parametrize("lib", [torch, mf], ids=["torch", "meshflow"])
def test_a_submodule_reached_twice_is_one_object(lib):
    enc = lib.nn.TransformerEncoderLayer(8, 2, 16)
    assert enc.linear1 is enc.linear1 and enc.self_attn.out_proj is enc.self_attn.out_proj
    first = id(enc.norm1)
    junk = [object() for _ in range(1000)]
    assert id(enc.norm1) == first
    del junk
    seq = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.ReLU())
    assert seq[0] is seq[0] and list(seq.children())[0] is seq[0]
    mods = list(seq.modules())
    assert mods[0] is seq and mods[1] is seq[0] and mods[2] is seq[1]
    assert dict(enc.named_modules())["self_attn.out_proj"] is enc.self_attn.out_proj
    assert enc.linear1.weight is dict(enc.named_parameters())["linear1.weight"]


@pytest.mark.parametrize("lib", [torch, mf], ids=["torch", "meshflow"])
def test_named_modules_memo_and_duplicates_as_torch(lib):
    shared = lib.nn.Linear(2, 2)
    seq = lib.nn.Sequential(shared, lib.nn.ReLU(), shared)
    assert [n for n, _ in seq.named_modules()] == ["", "0", "1"]
    dup = list(seq.named_modules(remove_duplicate=False))
    assert [n for n, _ in dup] == ["", "0", "1", "2"] and dup[1][1] is dup[3][1]
    memo = {shared}
    assert [n for n, _ in seq.named_modules(memo=memo, prefix="m")] == ["m", "m.1"]
    assert seq in memo and seq[1] in memo


def test_objects_die_with_their_tensor():
    m = mf.nn.Linear(4, 4)
    w = weakref.ref(m.weight)
    child = mf.nn.Sequential(mf.nn.Linear(2, 2))
    c = weakref.ref(child[0])
    g = weakref.ref(child[0].weight)
    gc.collect()
    assert w() is not None and c() is not None and g() is not None
    del m, child
    gc.collect()
    assert w() is None and c() is None and g() is None
    t = mf.randn(10)
    r = weakref.ref(t)
    del t
    assert r() is None


def test_an_activation_saved_for_backward_keeps_its_object_until_backward():
    x = mf.randn(3, requires_grad=True)
    y = x * 2
    r = weakref.ref(y)
    z = (y * y).sum()
    del y
    assert r() is not None  # the graph holds y's tensor, and so its object
    z.backward()
    del z
    gc.collect()
    assert r() is None
    assert mf.allclose(x.grad, 8 * x.detach())


def test_a_tensor_released_on_another_thread():
    m = mf.nn.Linear(3, 3)
    w = weakref.ref(m.weight)
    holder = [m]
    del m
    t = threading.Thread(target=holder.clear)
    t.start()
    t.join()
    gc.collect()
    assert w() is None


def test_a_closure_result_keeps_its_identity():
    w = mf.tensor([1.0, -2.0], requires_grad=True)
    opt = mf.optim.SGD([w], lr=0.25)
    seen = []

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        seen.append(id(loss))
        return loss

    for _ in range(3):
        loss = opt.step(closure)
        assert id(loss) == seen[-1] and loss.item() > 0
    assert w.tolist() == [0.125, -0.25]
