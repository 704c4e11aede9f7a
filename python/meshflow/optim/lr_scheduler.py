"""meshflow.optim.lr_scheduler: learning-rate schedules with
torch.optim.lr_scheduler's semantics (PyTorch 1.13)."""
from meshflow._C import _optim

LRScheduler = _optim.LRScheduler
StepLR = _optim.StepLR
MultiStepLR = _optim.MultiStepLR
ExponentialLR = _optim.ExponentialLR
CosineAnnealingLR = _optim.CosineAnnealingLR
LambdaLR = _optim.LambdaLR
LinearLR = _optim.LinearLR
SequentialLR = _optim.SequentialLR
OneCycleLR = _optim.OneCycleLR

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR", "LinearLR",
           "SequentialLR", "OneCycleLR"]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
