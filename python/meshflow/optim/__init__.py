"""meshflow.optim: optimizers with torch.optim's semantics and signatures.

    opt = mf.optim.Adam(params, lr=1e-3)      # or a list of param-group dicts
    loss.backward(); opt.step(); opt.zero_grad()
    opt.param_groups[0]["lr"] = 1e-4           # groups are live, dict-like views
    mf.save(opt.state_dict(), "opt.safetensors")

Each step runs one fused C++ update op per parameter (see
include/meshflow/optim/optimizer.h).
"""
from meshflow._C import _optim
from meshflow.optim import lr_scheduler

Optimizer = _optim.Optimizer
SGD = _optim.SGD
Adam = _optim.Adam
AdamW = _optim.AdamW
RMSprop = _optim.RMSprop
Adagrad = _optim.Adagrad

for _cls in (Optimizer, SGD, Adam, AdamW, RMSprop, Adagrad):
    _cls.__module__ = __name__
del _cls

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
