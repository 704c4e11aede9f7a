"""meshflow.optim.lr_scheduler: learning-rate schedules with
torch.optim.lr_scheduler's semantics (PyTorch 1.13)."""
from meshflow._C import _optim

LRScheduler = _optim.LRScheduler


def _schedules_any_optimizer(cls):
    """cls, also taking an optimizer that keeps its options in a meshflow
    optimizer of its own (ZeroRedundancyOptimizer's _lr_target)."""

    class Scheduler(cls):
        def __init__(self, optimizer, *args, **kwargs):
            super().__init__(getattr(optimizer, "_lr_target", optimizer), *args, **kwargs)

    Scheduler.__name__ = Scheduler.__qualname__ = cls.__name__
    Scheduler.__doc__ = cls.__doc__
    return Scheduler


StepLR = _schedules_any_optimizer(_optim.StepLR)
MultiStepLR = _schedules_any_optimizer(_optim.MultiStepLR)
ExponentialLR = _schedules_any_optimizer(_optim.ExponentialLR)
CosineAnnealingLR = _schedules_any_optimizer(_optim.CosineAnnealingLR)
LambdaLR = _schedules_any_optimizer(_optim.LambdaLR)
LinearLR = _schedules_any_optimizer(_optim.LinearLR)
SequentialLR = _schedules_any_optimizer(_optim.SequentialLR)
OneCycleLR = _schedules_any_optimizer(_optim.OneCycleLR)
CosineAnnealingWarmRestarts = _schedules_any_optimizer(_optim.CosineAnnealingWarmRestarts)
CyclicLR = _schedules_any_optimizer(_optim.CyclicLR)
ReduceLROnPlateau = _schedules_any_optimizer(_optim.ReduceLROnPlateau)
ChainedScheduler = _optim.ChainedScheduler

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR", "LinearLR",
           "SequentialLR", "OneCycleLR", "CosineAnnealingWarmRestarts", "CyclicLR", "ReduceLROnPlateau",
           "ChainedScheduler"]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
