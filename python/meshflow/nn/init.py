"""meshflow.nn.init: torch.nn.init's initialisers (in place, no autograd)."""
from meshflow._C._modules import init as _init

__all__ = [
    "calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_", "trunc_normal_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
]

for _name in __all__:
    globals()[_name] = getattr(_init, _name)
_calculate_fan_in_and_fan_out = _init.calculate_fan_in_and_fan_out
del _name
