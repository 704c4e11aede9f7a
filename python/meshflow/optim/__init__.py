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


def _with_sparse_updates(base):
    """The optimizer class whose step() and zero_grad() also update (and
    clear) the sparse gradients of the meshflow.one_embedding tables whose
    parameters it holds."""

    def step(self, closure=None):
        loss = base.step(self) if closure is None else base.step(self, closure)
        from meshflow import one_embedding
        one_embedding._optimizer_step(self)
        return loss

    def zero_grad(self, set_to_none=True):
        base.zero_grad(self, set_to_none)
        from meshflow import one_embedding
        one_embedding._optimizer_zero_grad(self)

    step.__doc__, zero_grad.__doc__ = base.step.__doc__, base.zero_grad.__doc__
    cls = type(base.__name__, (base,), {"step": step, "zero_grad": zero_grad, "__doc__": base.__doc__,
                                         "__module__": __name__})
    return cls


SGD = _with_sparse_updates(_optim.SGD)
Adam = _with_sparse_updates(_optim.Adam)
AdamW = _with_sparse_updates(_optim.AdamW)
RMSprop = _with_sparse_updates(_optim.RMSprop)
Adagrad = _with_sparse_updates(_optim.Adagrad)
Optimizer.__module__ = __name__

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
