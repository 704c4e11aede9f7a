"""Global module hooks (torch.nn.modules.module.register_module_forward_pre_hook,
register_module_forward_hook, register_module_full_backward_hook) against torch: which modules run
them, in what order relative to the modules' own hooks, replaced inputs and outputs, gradients seen,
and removal."""
import numpy as np
import pytest
import torch

import meshflow as mf


def _model(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.nn.Linear(3, 2)
            self.act = lib.nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x))

    net = Net()
    with lib.no_grad():
        net.fc.weight.copy_(lib.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]]))
        net.fc.bias.copy_(lib.tensor([0.1, 0.2]))
    return net


def _trace(lib, backward=False):
    events = []
    module_api = lib.nn.modules.module
    handles = [module_api.register_module_forward_pre_hook(lambda m, a: events.append(("pre", type(m).__name__))),
               module_api.register_module_forward_hook(lambda m, a, o: events.append(("post", type(m).__name__)))]
    if backward:
        handles.append(module_api.register_module_full_backward_hook(
            lambda m, gi, go: events.append(("bwd", type(m).__name__, [None if g is None else
                                                                        np.round(g.detach().numpy(), 6).tolist()
                                                                        for g in gi]))))
    net = _model(lib)
    net.fc.register_forward_pre_hook(lambda m, a: events.append(("own-pre", type(m).__name__)))
    x = lib.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    out = net(x)
    if backward:
        out.sum().backward()
    for h in handles:
        h.remove()
    net(x)  # nothing global runs any more
    return events, out.detach().numpy()


def test_forward_hooks_order_like_torch():
    t_events, t_out = _trace(torch)
    m_events, m_out = _trace(mf)
    assert m_events == t_events
    np.testing.assert_allclose(m_out, t_out, rtol=1e-6)


def test_backward_hooks_like_torch():
    t_events, _ = _trace(torch, backward=True)
    m_events, _ = _trace(mf, backward=True)
    assert m_events == t_events


def test_global_hooks_replace_inputs_and_outputs():
    for lib in (torch, mf):
        module_api = lib.nn.modules.module
        pre = module_api.register_module_forward_pre_hook(
            lambda m, a: (a[0] * 2,) if isinstance(m, lib.nn.Linear) else None)
        post = module_api.register_module_forward_hook(
            lambda m, a, o: o + 1 if isinstance(m, lib.nn.ReLU) else None)
        try:
            out = _model(lib)(lib.tensor([[1.0, 2.0, 3.0]]))
        finally:
            pre.remove()
            post.remove()
        if lib is torch:
            expected = out.detach().numpy()
        else:
            np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-6)


def test_hook_must_be_callable():
    with pytest.raises(TypeError):
        mf.nn.modules.module.register_module_forward_hook(3)
    assert mf.nn.modules.Linear is mf.nn.Linear and mf.nn.modules.module.Module is mf.nn.Module
