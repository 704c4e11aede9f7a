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


def _tied_net(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = lib.nn.Embedding(5, 4)
            self.body = lib.nn.Sequential(lib.nn.Linear(4, 4), lib.nn.LayerNorm(4), lib.nn.GELU())
            self.again = self.body  # a shared child
            self.head = lib.nn.Linear(4, 5, bias=False)
            self.head.weight = self.emb.weight  # tied weights
            self.register_buffer("scale", lib.full((1,), 2.0))
            self.notes = {"steps": [1, 2]}

        def forward(self, ids):
            return self.head(self.again(self.emb(ids)) * self.scale)

    return Net()


def test_deepcopy_of_a_model_as_torch():
    nets = {}
    for lib in (torch, mf):
        lib.manual_seed(0)
        nets[lib] = _tied_net(lib).double()
    for (name, tp), (_, mp) in zip(nets[torch].state_dict().items(), nets[mf].state_dict().items()):
        mp.copy_(mf.tensor(tp.numpy()))
    ids = [[0, 1, 4], [3, 2, 2]]
    outs = {}
    for lib, net in nets.items():
        net.notes["steps"].append(3)
        (net(lib.tensor(ids)).sum()).backward()
        copy_ = __import__("copy").deepcopy(net)
        assert type(copy_) is type(net) and copy_.training
        assert copy_.head.weight is copy_.emb.weight and copy_.again is copy_.body
        assert copy_.emb.weight is not net.emb.weight and copy_.body is not net.body
        assert isinstance(copy_.emb.weight, lib.nn.Parameter) and copy_.emb.weight.requires_grad
        assert copy_.emb.weight.grad is None and net.emb.weight.grad is not None
        assert copy_.notes == {"steps": [1, 2, 3]} and copy_.notes is not net.notes
        assert len(list(copy_.parameters())) == len(list(net.parameters())) == 5
        with lib.no_grad():
            for p in net.parameters():
                p.mul_(0.5)  # the copy keeps the old values (an EMA's starting point)
        outs[lib] = copy_(lib.tensor(ids)).detach()
        assert not lib.equal(outs[lib], net(lib.tensor(ids)).detach())
    np_out = outs[mf].numpy()
    assert abs(np_out - outs[torch].numpy()).max() < 1e-12


def test_deepcopy_of_a_tensor_copies_its_grad_as_torch():
    import copy
    for lib in (torch, mf):
        t = lib.ones(2, requires_grad=True)
        (t * 3).sum().backward()
        c = copy.deepcopy(t)
        assert c.requires_grad and c.grad is not t.grad and c.grad.tolist() == [3.0, 3.0]
        pair = copy.deepcopy([t, t])
        assert pair[0] is pair[1]


def test_deepcopy_of_layers_keeps_their_configuration_and_hooks():
    import copy
    calls = []
    for lib in (torch, mf):
        conv = lib.nn.Conv2d(2, 3, 3, stride=2, padding=1)
        conv.register_forward_hook(lambda m, i, o: calls.append(lib))
        bn = lib.nn.BatchNorm2d(3, momentum=0.3).eval()
        attn = lib.nn.MultiheadAttention(8, 2, batch_first=True)
        for layer in (conv, bn, attn):
            c = copy.deepcopy(layer)
            assert repr(c) == repr(layer) and c.training == layer.training
            for (n1, p1), (n2, p2) in zip(layer.named_parameters(), c.named_parameters()):
                assert n1 == n2 and p1 is not p2 and lib.equal(p1, p2)
        copy.deepcopy(conv)(lib.ones(1, 2, 5, 5))
    assert calls == [torch, mf]

    class MyLinear(mf.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2

    lin = MyLinear(2, 3)
    c = copy.deepcopy(lin)
    assert type(c) is MyLinear and (c.in_features, c.out_features) == (2, 3)
    assert mf.equal(c(mf.ones(1, 2)), lin(mf.ones(1, 2)))
