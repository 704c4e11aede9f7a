"""meshflow.nn.utils: gradient clipping (torch.nn.utils.clip_grad_norm_)."""
from meshflow._C import _optim

clip_grad_norm_ = _optim.clip_grad_norm_

__all__ = ["clip_grad_norm_"]
